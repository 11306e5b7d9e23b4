"""Runs many distributed configurations inside one MPI job (launched by
tests/test_dist.py with `mpiexec -n P`), so the suite pays MPI start-up once.

argv[1]: JSON list of {"program", "data", "plan", "delay", "halo", "epochs",
"seed", "backend" (the ranks' kernels, default reference; triton on a GPU
machine without TRITON_INTERPRET places every rank on a GPU), "traffic" (true:
the last epoch's bytes; "all": every epoch's)};
rank 0 prints one JSON line per configuration:
{"config": ..., "losses": [...], "final": {...}, "comm": {...} | null} or
{"config": ..., "error": "..."}.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mpi4py import MPI  # noqa: E402

import gdsl  # noqa: E402
from gdsl.diagnostics import GdslError  # noqa: E402
from gdsl.dist.comm import Comm  # noqa: E402
from gdsl.dist.part import build_parts, parse_spec  # noqa: E402
from gdsl.dist.run import make_model, train_loop  # noqa: E402
from gdsl.runtime.binding import bind_dims  # noqa: E402

_GRAPHS: dict = {}


def graph(name: str):
    if name not in _GRAPHS:
        if name.startswith("rmat"):
            from gdsl.graph.synthetic import rmat_graph
            _GRAPHS[name] = rmat_graph(int(name[4:].replace("k", "000")))
        elif name == "vertex_target":   # Cora with a regression target node_T and no labels (an .npz file)
            from helpers import vertex_target_npz
            _GRAPHS[name] = gdsl.load_graph(vertex_target_npz())
        else:
            _GRAPHS[name] = gdsl.load_graph(name)
    return _GRAPHS[name]


def main() -> None:
    comm = Comm(MPI.COMM_WORLD)
    for cfg in json.loads(sys.argv[1]):
        try:
            prog = gdsl.compile(cfg["program"], **cfg.get("set", {}))
            g = graph(cfg["data"])
            spec = parse_spec(cfg["plan"], delay=cfg.get("delay", 0), halo=cfg.get("halo", "alltoallv"))
            opts = prog.compiled.checked.graph_options
            gopt = g.with_options(self_loops=opts.get("self_loops", False), symmetric=opts.get("symmetric", False))
            part = build_parts(spec, gopt, comm.size)[comm.rank]
            model = make_model(prog, part, comm, bind_dims(prog.compiled.checked, g), cfg.get("seed", 0),
                               cfg.get("backend", "reference"))
            hist = train_loop(model, prog.train, comm, cfg["epochs"], traffic=cfg.get("traffic", False))
            res = {"config": cfg, "losses": [h["loss"] for h in hist],
                   "final": {k: v for k, v in hist[-1].items() if k.endswith("_acc")},
                   "comm": hist[-1].get("comm"), "meta": part.meta, "device": str(model.device),
                   "kernels": {} if model.kernels is None else dict(model.kernels.used)}
            if cfg.get("traffic") == "all":   # every epoch's traffic, not only the last one's
                res["comm_epochs"] = [h.get("comm") for h in hist]
        except GdslError as e:
            res = {"config": cfg, "error": str(e)}
        comm.barrier()
        if comm.rank == 0:
            print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
