"""Distributed runs: partition files, the per-rank training loop, checkpoints.

`write_partition` (behind `gdsl partition` and `gdsl run --np P`) loads the
whole graph once, applies the program's graph options, builds every rank's
part and writes one file per rank; `run_rank` is what each MPI rank runs: it
loads only its own file, compiles the program with the dims recorded there,
and trains with `DistModule`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from gdsl.diagnostics import GdslError
from gdsl.dist.part import read_header

# Every rank prints nothing but errors; rank 0 prints progress and results.


def program_key(source: str, overrides: dict, train: str | None) -> str:
    h = hashlib.sha256(source.encode())
    h.update(json.dumps({"overrides": overrides, "train": train}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def graph_key(graph) -> str:
    h = hashlib.sha256()
    for t in (graph.src, graph.dst):
        h.update(t.numpy().tobytes())
    if graph.features is not None:
        h.update(str(tuple(graph.features.shape)).encode())
        h.update(graph.features[: min(64, graph.num_nodes)].numpy().tobytes())
    return h.hexdigest()[:16]


def write_partition(prog, graph, spec, P: int, out: str | Path) -> dict:
    """Partition `graph` for `prog` (a gdsl.Program) over P ranks into `out`."""
    from gdsl.dist.part import build_parts, save_part
    from gdsl.runtime.binding import bind_dims, check_masks

    check_masks(prog.checked, graph)
    dims = bind_dims(prog.checked, graph)
    opts = prog.checked.graph_options
    g = graph.with_options(self_loops=opts.get("self_loops", False), symmetric=opts.get("symmetric", False))
    t0 = time.perf_counter()
    parts = build_parts(spec, g, P)
    meta = {"dims": dims, "program": program_key(prog.source, prog.overrides, prog.train_name),
            "graph": graph_key(graph), "strategy": spec.describe(), "graph_name": graph.name}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.npz"):
        if int(old.stem.split("-")[1]) >= P:
            old.unlink()  # a stale file of a larger earlier partition
    for pr in parts:
        save_part(pr, out, meta)
    info = {"P": P, "strategy": spec.describe(), "seconds": round(time.perf_counter() - t0, 3),
            "rows_per_rank": [int(p.n_own) for p in parts], "edges_per_rank": [int(p.src.size) for p in parts],
            "local_rows_per_rank": [int(p.n_local) for p in parts]}
    if spec.strategy in ("rows", "features", "redistribute"):
        info["halo_rows_per_rank"] = [int(p.n_local - p.n_own) for p in parts]
    if spec.strategy == "vertex_cut":
        info["replication_factor"] = round(float(parts[0].meta["replication_factor"]), 4)
    (out / "partition.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


# ------------------------------------------------------------------ per rank

def _metrics(model, out, names: list[str]) -> dict[str, float]:
    """Global accuracy per mask: correct and total counts summed over ranks."""
    from gdsl.runtime.trainer import accuracy
    vals = []
    labels = model.graph.labels
    for m in names:
        mask = model.graph.masks.get(m) if m else None
        rows = model.counted if mask is None else (mask & model.counted)
        cnt = int(rows.sum())
        acc = accuracy(out, labels, rows) if cnt else 0.0
        vals += [acc * cnt, cnt]
    tot = model.comm.allreduce_scalars(vals)
    return {f"{m or 'all'}_acc": (tot[2 * i] / tot[2 * i + 1] if tot[2 * i + 1] else float("nan"))
            for i, m in enumerate(names)}


def _save_checkpoint(directory: Path, comm, model, opt, epoch: int, history: list) -> None:
    """Each rank writes its state atomically (write, rename); rank 0 then
    writes the index naming the epoch, after every rank has finished."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict(), "step": model.step,
             "rank": comm.rank, "size": comm.size, "history": history, "delay": model.delay_state_dict()}
    path = directory / f"rank-{comm.rank}.pt"
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    comm.barrier()
    if comm.rank == 0:
        idx = directory / "checkpoint.json"
        tmp = idx.with_name(idx.name + ".tmp")
        tmp.write_text(json.dumps({"epoch": epoch, "size": comm.size}) + "\n")
        os.replace(tmp, idx)


def _load_checkpoint(directory: Path, comm, model, opt) -> tuple[int, list]:
    idx = directory / "checkpoint.json"
    if not idx.exists():
        raise GdslError(f"{directory}: no checkpoint here (checkpoint.json missing)")
    info = json.loads(idx.read_text())
    if info["size"] != comm.size:
        raise GdslError(f"{directory}: checkpoint of {info['size']} ranks, this run has {comm.size}")
    path = directory / f"rank-{comm.rank}.pt"
    if not path.exists():
        raise GdslError(f"{path}: missing checkpoint file of rank {comm.rank}")
    state = torch.load(path, weights_only=True)
    if state["epoch"] != info["epoch"]:
        raise GdslError(f"{path}: holds epoch {state['epoch']}, the index says {info['epoch']}")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    model.step = state["step"]
    model.load_delay_state(state.get("delay", {}))   # cd-r's pipelines, with what was in flight
    return state["epoch"], state["history"]


def make_model(prog, part, comm, dims: dict, seed: int, backend: str = "reference"):
    """This rank's DistModule of `prog` (params drawn as a single process would;
    `backend` numba or triton runs the local sparse ops on its kernels)."""
    from gdsl.compiler import compile_source
    from gdsl.dist.module import DistModule
    from gdsl.runtime.memory import release_free_heap
    # the plan's delay reaches the order pass: cd-r aggregates param-free inputs sparse-first (passes/order.py)
    compiled = compile_source(prog.source, prog.file, dims=dims, overrides=prog.overrides, train=prog.train_name,
                              delay=part.spec.delay)
    torch.manual_seed(seed)
    model = DistModule(compiled.module, part, comm, backend=backend)
    model.dropout_seed = seed
    release_free_heap()   # the binding's temporaries, as Program.module does (gdsl/runtime/memory.py)
    return model


def train_loop(model, cfg, comm, epochs: int, *, opt=None, start: int = 0, history: list | None = None,
               on_epoch=None, checkpoint: Path | None = None, every: int = 10, traffic: bool = False) -> list[dict]:
    """Full-batch training of one rank's model; returns the per-epoch records
    (global loss and accuracies; with `traffic`, bytes per collective)."""
    from gdsl.runtime.trainer import make_optimizer
    opt = opt or make_optimizer(cfg.optimizer, cfg.optimizer_args, model.parameters())
    evals = [m for _, m in cfg.eval]
    loss_mask = cfg.loss.mask if cfg.loss else None
    names = ([loss_mask] if loss_mask and loss_mask not in evals else []) + evals
    history = history if history is not None else []
    fail_at = os.environ.get("GDSL_TEST_FAIL_AT")  # test hook: "rank:epoch" raises there
    comm.stats.take()
    for epoch in range(start + 1, epochs + 1):
        if fail_at and fail_at == f"{comm.rank}:{epoch}":
            raise RuntimeError(f"injected failure at epoch {epoch} (GDSL_TEST_FAIL_AT)")
        if os.environ.get("GDSL_TEST_KILL_AT") == f"{comm.rank}:{epoch}":  # test hook: die without a word
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.perf_counter()
        model.train()
        model.epoch = epoch - 1
        opt.zero_grad(set_to_none=True)
        out = model()
        loss = model.loss(out)
        loss.backward()
        model.sync_grads()
        opt.step()
        t_train = time.perf_counter() - t0
        train_traffic = comm.stats.take()
        loss_value = comm.allreduce_scalars([float(loss.detach())])[0]
        if not math.isfinite(loss_value):
            raise GdslError(f"epoch {epoch}: the loss is {loss_value}; training diverged (try a smaller lr)")
        model.eval()
        with torch.no_grad():
            out = model()
        metrics = _metrics(model, out, names) if model.graph.labels is not None and cfg.loss.fn != "mse" else {}
        eval_traffic = comm.stats.take()
        rec = {"epoch": epoch, "loss": loss_value, **metrics, "time": time.perf_counter() - t0, "train_time": t_train}
        if traffic:
            rec["comm"] = _gather_traffic(comm, train_traffic)
            rec["comm_eval"] = _gather_traffic(comm, eval_traffic)
        history.append(rec)
        if on_epoch is not None:
            on_epoch(rec)
        if checkpoint is not None and (epoch % every == 0 or epoch == epochs):
            model.finish()
            _save_checkpoint(checkpoint, comm, model, opt, epoch, history)
    model.finish()
    return history


def run_rank(args: dict) -> int:
    """One rank of `gdsl run --np P` (args: the launcher's JSON)."""
    from mpi4py import MPI

    import gdsl
    from gdsl.dist.comm import Comm
    from gdsl.dist.part import load_part, part_path
    from gdsl.runtime.trainer import EpochStats, Progress, make_optimizer, write_json

    comm = Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    prog = gdsl.compile(args["program"], train=args.get("train"), **args.get("overrides", {}))
    cfg = prog.train
    if cfg is None:
        raise GdslError(f"{args['program']}: the program has no train block")
    pdir = Path(args["parts"])
    part = load_part(pdir, rank, size, expect={"program": program_key(prog.source, prog.overrides, prog.train_name)})
    dims = read_header(part_path(pdir, rank))["dims"]
    seed = args.get("seed", 0)
    model = make_model(prog, part, comm, dims, seed, args.get("backend") or "reference")
    opt = make_optimizer(cfg.optimizer, cfg.optimizer_args, model.parameters())
    epochs = args.get("epochs") or cfg.epochs
    history: list[dict] = []
    start = 0
    if args.get("resume"):
        start, history = _load_checkpoint(Path(args["resume"]), comm, model, opt)
        if rank == 0:
            print(f"gdsl run: resuming after epoch {start} from {args['resume']}", file=sys.stderr)
    progress = Progress(epochs, every=args.get("log_every")) if rank == 0 else None

    def on_epoch(rec):
        if progress is not None:
            progress(EpochStats(rec["epoch"], rec["loss"], {k: v for k, v in rec.items() if k.endswith("_acc")},
                                rec["time"]))

    report = args.get("report") == "comm"
    ck = Path(args["checkpoint"]) if args.get("checkpoint") else None
    train_loop(model, cfg, comm, epochs, opt=opt, start=start, history=history, on_epoch=on_epoch,
               checkpoint=ck, every=int(args.get("checkpoint_every") or 10), traffic=bool(report or args.get("json")))
    kernels = {} if model.kernels is None else dict(model.kernels.used)
    if rank == 0:
        _print_summary(history, report, part, args, model.backend, kernels)
        if args.get("json"):
            last = history[-1] if history else {}
            write_json(args["json"], {"program": args["program"], "np": size, "plan": part.spec.describe(),
                                      "exact": part.spec.exact, "seed": seed, "backend": model.backend,
                                      "kernels": kernels, "epochs": history,
                                      "final": {k: v for k, v in last.items() if not k.startswith("comm")}})
            print(f"wrote {args['json']}", file=sys.stderr)
    return 0


def _gather_traffic(comm, traffic) -> dict:
    """Per op: bytes sent and received by each rank this epoch (gathered on every rank)."""
    local = {f"{coll} {label}": (t.sent, t.recv, t.calls, t.seconds) for (coll, label), t in traffic.items()}
    allr = comm.comm.allgather(local)
    keys = sorted({k for d in allr for k in d})
    z = (0, 0, 0, 0.0)
    return {k: {"sent": [d.get(k, z)[0] for d in allr], "recv": [d.get(k, z)[1] for d in allr],
                "calls": max(d.get(k, z)[2] for d in allr), "seconds": [d.get(k, z)[3] for d in allr]}
            for k in keys}


def _print_summary(history: list, report: bool, part, args, backend: str = "reference",
                   kernels: dict | None = None) -> None:
    if not history:
        return
    last = history[-1]
    accs = "  ".join(f"{k} {v:.4f}" for k, v in last.items() if k.endswith("_acc"))
    mean_t = sum(h["time"] for h in history) / len(history)
    print(f"final (epoch {last['epoch']}): loss {last['loss']:.4f}  {accs}  mean epoch {mean_t * 1000:.1f} ms  "
          f"[{part.spec.describe()}, {part.size} ranks{'' if part.spec.exact else ', approximate'}"
          f"{', ' + backend + ' kernels: ' + ', '.join(sorted(kernels)) if kernels else ''}]")
    if report:
        print("communication per epoch (bytes per rank: max over ranks; total = all ranks):")
        for h in history:
            tot = sum(sum(v["sent"]) for v in h["comm"].values())
            print(f"  epoch {h['epoch']}: {tot:,} bytes sent in total")
        ev = sum(sum(v["sent"]) for v in last["comm_eval"].values())
        print(f"  (evaluation passes, not included above: {ev:,} bytes per epoch)")
        print(f"  per op (training step of epoch {last['epoch']}):")
        width = max((len(k) for k in last["comm"]), default=10)
        print(f"    {'collective / op':<{width}}  {'calls':>5}  {'sent/rank (max)':>16}  {'recv/rank (max)':>16}  {'total sent':>14}")
        for k, v in last["comm"].items():
            print(f"    {k:<{width}}  {v['calls']:>5}  {max(v['sent']):>16,}  {max(v['recv']):>16,}  {sum(v['sent']):>14,}")
