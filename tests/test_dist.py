"""Distributed plans over real MPI ranks (mpiexec -n 2 and -n 4; the ranks
oversubscribe the 2 cores of the CI machine, which is fine for correctness).

Exact plans must reproduce the single-process reference loss curve (per
epoch, 1e-4 relative, 20 epochs; 5 for the edge-dropout program); approximate ones (DistGNN cd-r, 0c) must
train to within 1.5 points of the exact test accuracy. Each P runs every
configuration inside one MPI job (tests/dist_driver.py).
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.mpi

mpi4py = pytest.importorskip("mpi4py")
MPIEXEC = str(Path(sys.executable).parent / "mpiexec") if (Path(sys.executable).parent / "mpiexec").exists() \
    else shutil.which("mpiexec")
if MPIEXEC is None:
    pytest.skip("no mpiexec (pip install mpich)", allow_module_level=True)

DRIVER = ROOT / "tests" / "dist_driver.py"
EPOCHS = 20
GCN, SAGE, GAT = (str(ROOT / "programs" / f"{p}.gd") for p in ("gcn", "sage", "gat"))
SGC = str(ROOT / "programs" / "extra" / "sgc.gd")
MSE_AE, EDGE_DROPOUT, BCE_X, EW_MAX, SDDMM_X, SPARSE_HINT, TWIN, VTARGET = (
    str(ROOT / "tests" / "dist_programs" / f"{p}.gd")
    for p in ("mse_autoencoder", "edge_dropout", "bce_features", "elementwise_max", "sddmm_features",
              "gcn_sparse_first_hint", "twin_dropout", "vertex_target"))

# every exact plan; (plan, halo); rows_replicated(2) needs c^2 | P
EXACT = [("rows(hash)", "alltoallv"), ("rows(hash)", "bcast"), ("rows(random)", "alltoallv"),
         ("rows(metis)", "alltoallv"), ("rows_replicated(2)", "alltoallv"), ("redistribute", "alltoallv"),
         ("redistribute(1)", "alltoallv"), ("redistribute(2)", "alltoallv"),
         ("features", "alltoallv"), ("vertex_cut", "alltoallv"), ("replicate", "alltoallv")]
GAT_PLANS = [("rows(hash)", "alltoallv"), ("rows(hash)", "bcast"), ("replicate", "alltoallv"), ("features", "alltoallv")]


def _plans(P, plans):
    # rows_replicated(2) needs c^2 | P; redistribute(2) (R_A = 2 replicas of A) is R_A = P at P = 2
    return [(p, h) for p, h in plans if not ((p.startswith("rows_replicated") or p == "redistribute(2)") and P % 4)]


def _cfg(prog, data, plan, halo="alltoallv", epochs=EPOCHS):
    return {"program": prog, "data": data, "plan": plan, "halo": halo, "epochs": epochs}


def _configs(P: int) -> list[dict]:
    """The CI set; GDSL_DIST_FULL=1 runs the whole matrix the issue names
    (every exact plan x {Cora, CiteSeer} x {gcn, sage}, gat on its plans, and
    the 50k-vertex R-MAT graph for gcn and sage), which takes about 30 min here."""
    if os.environ.get("GDSL_DIST_FULL") == "1":
        out = [_cfg(prog, data, p, h) for data in ("cora", "citeseer", "rmat50k") for prog in (GCN, SAGE)
               for p, h in _plans(P, EXACT)]
        return out + [_cfg(GAT, "cora", p, h) for p, h in GAT_PLANS]
    out = [_cfg(GCN, "cora", p, h) for p, h in _plans(P, EXACT)]
    if P == 2:
        out += [_cfg(SAGE, "cora", p) for p in ("rows(hash)", "vertex_cut", "features", "redistribute")]
        out += [_cfg(GAT, "cora", p) for p in ("rows(hash)", "replicate")]
        out += [_cfg(GCN, "citeseer", p) for p in ("rows(hash)", "vertex_cut")]
        out += [_cfg(GCN, "rmat50k", "rows(hash)")]
        out += [_cfg(MSE_AE, "cora", p) for p in ("rows(hash)", "vertex_cut", "replicate")]   # target X, not labels
        out += [_cfg(BCE_X, "cora", p) for p in ("rows(hash)", "vertex_cut")]   # a [F] bce target: mean over F too
        # edge masks, P3's full layer 1; 5 epochs: its [E, F] messages on Cora take 0.5 s an epoch
        out += [_cfg(EDGE_DROPOUT, "cora", p, epochs=5) for p in ("features", "rows(hash)")]
        out += [_cfg(EW_MAX, "cora", "features")]   # element-wise max/min on P3's column slices
        out += [_cfg(SDDMM_X, "cora", "features", epochs=5)]   # src.a * dst.b, src.a - dst.b on them
        # a backward order the cost chose, which R_A < P cannot run: autograd's own instead
        out += [_cfg(SPARSE_HINT, "cora", "redistribute(1)", epochs=10)]
        # the ranks' compile orders the twin layers by width, `gdsl run`'s by `invariant`: the same masks
        out += [_cfg(TWIN, "cora", p, epochs=5) for p in ("rows(hash)", "replicate")]
        # a second vertex input from the file's node_T (target and src.T), masks of another name, no labels
        out += [_cfg(VTARGET, "vertex_target", p, epochs=10) for p in ("vertex_cut", "replicate", "redistribute")]
        # S^K X, invariant: computed by the first forward and kept (its halo exchanges once)
        out += [{**_cfg(SGC, "cora", p, epochs=4), "traffic": "all"} for p in ("rows(hash)", "vertex_cut")]
    else:
        out += [_cfg(SAGE, "cora", "rows_replicated(2)"), _cfg(SAGE, "cora", "rows(hash)", "bcast")]
        out += [_cfg(GAT, "cora", "rows(hash)", "bcast"), _cfg(GAT, "cora", "features")]
        out += [_cfg(GCN, "citeseer", p) for p in ("rows_replicated(2)", "redistribute", "features")]
        out += [_cfg(GCN, "rmat50k", "vertex_cut")]
        out += [_cfg(SPARSE_HINT, "cora", "rows_replicated(2)", epochs=10)]   # 1.5D: autograd's order too
    return out


def run_driver(P: int, configs: list[dict], timeout: int = 600, env: dict | None = None) -> list[dict]:
    # keep what the caller's PYTHONPATH adds (packages carried to a GPU machine)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **(env or {})}
    r = subprocess.run([MPIEXEC, "-n", str(P), sys.executable, str(DRIVER), json.dumps(configs)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == len(configs), r.stdout[-3000:] + r.stderr[-3000:]
    return lines


@functools.cache
def results(P: int) -> dict:
    from helpers import vertex_target_npz
    vertex_target_npz()   # written before the ranks read it
    out = {}
    for res in run_driver(P, _configs(P)):
        c = res["config"]
        out[(c["program"], c["data"], c["plan"], c["halo"])] = res
    return out


@functools.cache
def reference(program: str, data: str, epochs: int = EPOCHS, seed: int = 0):
    import gdsl
    from gdsl.runtime.trainer import train
    if data.startswith("rmat"):
        from gdsl.graph.synthetic import rmat_graph
        g = rmat_graph(int(data[4:].replace("k", "000")))
    elif data == "vertex_target":
        from helpers import vertex_target_npz
        g = gdsl.load_graph(vertex_target_npz())
    else:
        g = gdsl.load_graph(data)
    return train(gdsl.compile(program), g, epochs=epochs, seed=seed, backend="reference")


def _cases():
    for P in (2, 4):
        for c in _configs(P):
            name = f"P{P}-{Path(c['program']).stem}-{c['data']}-{c['plan']}-{c['halo']}"
            yield pytest.param(P, c, id=name)


@pytest.mark.parametrize("P,cfg", list(_cases()))
def test_exact_plan_matches_reference_loss_curve(P, cfg):
    res = results(P)[(cfg["program"], cfg["data"], cfg["plan"], cfg["halo"])]
    assert "error" not in res, res.get("error")
    ref = reference(cfg["program"], cfg["data"], cfg["epochs"])
    ref_losses = [e.loss for e in ref.epochs]
    assert len(res["losses"]) == len(ref_losses) == cfg["epochs"]
    for epoch, (a, b) in enumerate(zip(res["losses"], ref_losses), 1):
        # 1e-4 relative; once a model has fit its training set (loss < 1e-2:
        # sage.gd on Cora reaches 4e-4 by epoch 20) float32 rounding of the
        # partitioned weight-gradient sums (~1e-7) is amplified past that, so
        # there the bound is 1e-6 absolute
        tol = max(1e-4 * abs(b), 1e-6 if b < 1e-2 else 0.0)
        assert abs(a - b) <= tol, f"epoch {epoch}: distributed loss {a} vs reference {b}"


@pytest.mark.parametrize("plan", ["rows(hash)", "vertex_cut"])
def test_exact_plans_keep_the_invariant_values_of_their_first_forward(plan):
    """SGC's S^K X depends on no param and no dropout: the ranks compute it,
    with its halo exchanges of the 1433 feature columns, in the first
    forward only, as one process hoists it (was: every forward, at about
    ten times the epoch's time and traffic); the loss curve is the
    reference's (test_exact_plan_matches_reference_loss_curve)."""
    res = results(2)[(SGC, "cora", plan, "alltoallv")]
    assert "error" not in res, res.get("error")
    sent = [sum(sum(v["sent"]) for v in e.values()) for e in res["comm_epochs"]]
    assert len(sent) == 4 and sent[1] == sent[2] == sent[3] and sent[1] * 10 < sent[0], sent


# ---------------------------------------------------------------- GPU ranks (issue 6, item 3)
# --backend triton on a CUDA machine: every rank on a GPU, the collectives
# staged through host buffers. Skipped without a GPU (the CPU machine of CI);
# under TRITON_INTERPRET=1 the same kernels on ranks run in test_dist_cli.py.
GPU_EPOCHS = 5
GPU_CASES = [(GCN, p, h) for p, h in _plans(2, EXACT)] + \
    [(SAGE, "rows(hash)", "alltoallv"), (SAGE, "vertex_cut", "alltoallv"), (SAGE, "features", "alltoallv")] + \
    [(GAT, p, h) for p, h in GAT_PLANS]


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_triton_ranks_on_gpus_match_the_reference():
    pytest.importorskip("triton")
    configs = [{**_cfg(prog, "cora", p, h), "epochs": GPU_EPOCHS, "backend": "triton"} for prog, p, h in GPU_CASES]
    # cd-2 (approximate): the pipeline's non-blocking sends staged through host
    # buffers must give the CPU ranks' curve (the same computation)
    delayed = {**_cfg(GCN, "cora", "vertex_cut"), "epochs": GPU_EPOCHS + 4, "delay": 2}
    configs += [{**delayed, "backend": "reference"}, {**delayed, "backend": "triton"}]
    out = run_driver(2, configs, env={"TRITON_INTERPRET": "0"})
    for res in out[:-2]:
        c = res["config"]
        assert "error" not in res, (c, res.get("error"))
        assert res["device"].startswith("cuda"), res["device"]
        if not c["plan"].startswith("redistribute"):   # RDM aggregates the whole graph: torch ops (on the GPU)
            assert res["kernels"] and set(res["kernels"].values()) == {"triton"}, c
        ref = [e.loss for e in reference(c["program"], "cora", GPU_EPOCHS).epochs]
        # float32 sums in another order on the GPU than torch's on the CPU
        assert res["losses"] == pytest.approx(ref, rel=1e-3), c
    cpu, gpu = out[-2:]
    assert "error" not in gpu, gpu.get("error")
    assert cpu["device"] == "cpu" and gpu["device"].startswith("cuda")
    assert gpu["losses"] == pytest.approx(cpu["losses"], rel=1e-3)


def test_feature_split_refuses_a_layer_1_factor_computed_from_the_graph():
    """P3's layer 1 runs on every vertex (this rank's columns), but a factor
    computed by a gather (not a graph constant) exists on this rank's rows
    only. Was: an internal shape error on the ranks."""
    cfg = {"program": str(ROOT / "tests" / "dist_programs" / "computed_factor.gd"), "data": "cora",
           "plan": "features", "epochs": 1}
    [res] = run_driver(2, [cfg])
    assert "its factor %1 is computed from the graph (add), but the feature split has only graph constants " \
           "and inputs on every vertex; use rows" in res["error"], res
