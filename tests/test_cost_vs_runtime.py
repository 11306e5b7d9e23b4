"""Predicted words per collective (gdsl.cost) against the bytes the MPI
runtime moved (gdsl.dist's accounting), divided by 4: they must be equal,
exactly. Runs real ranks (mpiexec -n 2 and -n 4)."""
import functools
import sys
from pathlib import Path

import pytest

from gdsl.cost import symbols as sy
from gdsl.cost.problem import OrderConfig, Problem
from gdsl.cost.strategies import features, rows

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")


def test_predicted_collectives_are_listed_with_words():
    cost = rows(Problem(N=2708, E=13264, F=1433, H=16, C=7, L=2, P=4))
    comm = [op for op in cost.ops if op.kind == "comm"]
    assert comm and all(float(op.words) > 0 for op in comm)
    assert sum(float(op.words) for op in comm) == pytest.approx(float(cost.words))


def _program_orders(delay=0):
    """gcn.gd bound to Cora as compiled (for a plan with this DistGNN delay):
    the order pass's choice per layer, the names of the values the aggregates'
    halo fetches carry and of the aggregates' results, and dims."""
    import gdsl
    from gdsl.compiler import compile_source
    from gdsl.ir.printer import _Namer
    from gdsl.runtime.binding import bind_dims
    prog = gdsl.compile(GCN)
    graph = gdsl.load_graph("cora")
    dims = bind_dims(prog.compiled.checked, graph)
    mod = compile_source(prog.source, prog.file, dims=dims, delay=delay).module
    name = _Namer()
    for op in mod.main.ops:
        name(op.result)
    aggs = [op for op in mod.main.ops if op.name == "aggregate"]
    fwd = "".join("D" if op.attrs["order"] == "dense_first" else "S" for op in aggs)
    # autograd runs each layer's backward in the transposed order of its forward
    bwd = "".join("S" if c == "D" else "D" for c in reversed(fwd))
    fetched = [name(op.operands[0]) for op in aggs]
    return graph, dims, OrderConfig(fwd, bwd, memoize=False), fetched, [name(op.result) for op in aggs]


def _measured_configs(P: int) -> list[dict]:
    base = {"program": GCN, "data": "cora"}
    out = [{**base, "plan": "rows(block)", "halo": "bcast", "epochs": 2, "traffic": True}]
    if P == 4:
        out.append({**base, "plan": "rows(hash)", "epochs": 2, "traffic": True})
    else:
        out += [{**base, "plan": "vertex_cut", "delay": d, "epochs": 6, "traffic": "all"} for d in (0, 2)]
        out.append({**base, "plan": "features", "epochs": 2, "traffic": True})
    return out


@functools.cache
def _measured(P: int) -> dict:
    """Every configuration this file measures at P ranks, in one MPI job
    (tests/dist_driver.py): (plan, delay) -> the driver's result."""
    from test_dist import run_driver
    return {(r["config"]["plan"], r["config"].get("delay", 0)): r for r in run_driver(P, _measured_configs(P))}


@pytest.mark.mpi
@pytest.mark.parametrize("P", [2, 4])
def test_predicted_words_equal_measured_bytes_over_4(P):
    """CAGNET 1D (§IV-A): every SpMM broadcasts its dense input, (P-1)/P N f
    words received per rank, in the forward and (transposed) in the backward;
    the weight gradients are all-reduced (f_in f_out words per layer, §IV-A-4;
    the runtime's single all-reduce also carries the biases, f_out words per
    layer, which the model leaves out: added here by hand). Cora's N = 2708
    splits into equal blocks for P = 2 and 4."""
    pytest.importorskip("mpi4py")
    from test_dist import MPIEXEC
    if MPIEXEC is None:
        pytest.skip("no mpiexec")
    graph, dims, orders, fetched, _ = _program_orders()
    res = _measured(P)[("rows(block)", 0)]
    measured = res["comm"]
    widths = (dims["F"], 16, dims["C"])
    cost = rows(Problem(N=graph.num_nodes, E=graph.num_edges, P=P, widths=widths), orders=orders,
                exchange="bcast")   # the ranks ran `--halo bcast`: CAGNET's broadcast
    bcasts = [op for op in cost.ops if op.op == "bcast"]
    for op in bcasts:
        coll = "allgatherv" if op.phase == "forward" else "reduce_scatter"
        tag = "fwd" if op.phase == "forward" else "bwd"
        key = f"{coll} {fetched[op.layer - 1]} src rows {tag}"
        assert key in measured, (key, sorted(measured))
        for r in range(P):
            assert measured[key]["recv"][r] == 4 * int(op.words) * int(op.count), (key, r, measured[key], op)
    # every measured SpMM collective was predicted
    spmm = [k for k in measured if k.startswith(("allgatherv", "reduce_scatter"))]
    assert len(spmm) == len(bcasts)
    ar = [op for op in cost.ops if op.op == "allreduce"]
    biases = 16 + dims["C"]
    assert measured["allreduce param grads"]["recv"][0] == 4 * (sum(int(op.words) for op in ar) + biases)


@pytest.mark.mpi
def test_p3_all_reduces_only_the_data_parallel_weight_gradients():
    """P3 (§3.2): layer 1 is model-parallel, each rank holds its F/P rows of
    W^1 and their gradient, so the one gradient all-reduce carries layer 2's
    weights (the model's f_h f_out words, CAGNET §IV-A-4) and the two biases,
    never the F x f_h layer-1 weights (a mutant that all-reduced them trained
    the same losses)."""
    pytest.importorskip("mpi4py")
    from test_dist import MPIEXEC
    if MPIEXEC is None:
        pytest.skip("no mpiexec")
    graph, dims, _, _, _ = _program_orders()
    measured = _measured(2)[("features", 0)]["comm"]
    cost = features(Problem(N=graph.num_nodes, E=graph.num_edges, P=2, widths=(dims["F"], 16, dims["C"])),
                    halo=sy.S)
    [ar] = [op for op in cost.ops if op.op == "allreduce"]
    assert int(ar.words) == 16 * dims["C"]
    for r in range(2):
        assert measured["allreduce param grads"]["recv"][r] == 4 * (int(ar.words) + 16 + dims["C"])


@pytest.mark.mpi
def test_halo_exchange_moves_exactly_the_halo_rows():
    """1D with all-to-all-v of only the needed rows: each rank receives, per
    SpMM, (its halo rows) x (the SpMM's width) words forward, and sends as
    many back in the backward: counted by hand from the partition."""
    pytest.importorskip("mpi4py")
    from test_dist import MPIEXEC
    if MPIEXEC is None:
        pytest.skip("no mpiexec")
    import gdsl
    from gdsl.dist.part import build_parts, parse_spec
    graph, dims, orders, fetched, _ = _program_orders()
    P = 4
    g = graph.with_options(self_loops=True, symmetric=True)
    parts = build_parts(parse_spec("rows(hash)"), g, P)
    res = _measured(P)[("rows(hash)", 0)]
    widths = [16, dims["C"]] if orders.fwd == "DD" else None
    assert widths is not None, "gcn.gd on Cora is dense-first in both layers (order pass)"
    for name, f in zip(fetched, widths):
        fwd = res["comm"][f"alltoallv {name} src rows fwd"]
        bwd = res["comm"][f"alltoallv {name} src rows bwd"]
        for r, pr in enumerate(parts):
            halo = pr.n_local - pr.n_own
            assert fwd["recv"][r] == 4 * halo * f
            assert bwd["sent"][r] == 4 * halo * f
    del gdsl



@pytest.mark.mpi
@pytest.mark.parametrize("delay", [0, 2])
def test_vertex_cut_words_equal_prediction(delay):
    """DistGNN's split-vertex exchange (§5.3): the cost model prices
    2 (rho - 1) N / P rows of the aggregated width per rank per epoch, leaves
    to roots and back; cd-r sends one of its r bins per epoch (1/r of that,
    forward only: the backward exchanges at once) and aggregates the
    features sparse-first (passes/order.py; the model's "delay_safe" orders:
    1433 words per row in layer 1 and no backward exchange there). Averaged
    over r epochs of a full pipeline and summed over the ranks, the bytes
    sent are the model's words x P x 4, rho measured on the ranks' partition."""
    pytest.importorskip("mpi4py")
    from test_dist import MPIEXEC
    if MPIEXEC is None:
        pytest.skip("no mpiexec")
    from gdsl.cost.strategies import vertex_cut
    graph, dims, _, _, aggregated = _program_orders(delay=delay)
    layer_of = {name: i + 1 for i, name in enumerate(aggregated)}
    P, epochs = 2, 6
    res = _measured(P)[("vertex_cut", delay)]
    assert res["config"]["epochs"] == epochs
    assert "error" not in res, res
    g = graph.with_options(self_loops=True, symmetric=True)
    cost = vertex_cut(Problem(N=g.num_nodes, E=g.num_edges, P=P, widths=(dims["F"], 16, dims["C"])),
                      delay=delay, rho=res["meta"]["replication_factor"], orders="delay_safe" if delay else "narrow")
    predicted = {(op.layer, op.phase): float(op.words) * float(op.count) * P
                 for op in cost.ops if op.op == "partial_aggregates"}
    window = range(epochs - max(delay, 2), epochs)   # every bin sent both ways once (epochs >= 2r)
    got: dict = {}
    for e in window:
        for key, v in res["comm_epochs"][e].items():
            if key.endswith(("leaf->root", "root->leaf", "leaf->root (delayed)", "root->leaf (delayed)")):
                k = (layer_of[key.split()[1]], "forward" if " fwd " in key else "backward")
                got[k] = got.get(k, 0) + sum(v["sent"]) / (4 * len(window))
    assert set(got) == set(predicted), (got, predicted)
    for k, words in predicted.items():
        assert got[k] == pytest.approx(words, rel=1e-9), (k, got[k], words)
    assert (1, "backward") not in predicted if delay else (1, "backward") in predicted
