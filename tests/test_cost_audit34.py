"""helper-34: the cost model prices what the MPI ranks run.

1. The weight gradients: CAGNET §IV-A-4 (§IV-B-4 for 1.5D) prices one
   all-reduce per layer, lg P (lg(P/c)) messages each; the ranks run ONE
   all-reduce of every parameter gradient per epoch over all P ranks
   (gdsl/dist/module.py sync_grads): the same words, lg P messages once.
2. rows(partition=hash): the ranks' default `--halo alltoallv` moves the
   hash partition's halo rows, S w words per SpMM (was priced as CAGNET's
   broadcast, (P-1)/P N w, which is what `--halo bcast` runs).
3. A layer with no aggregation (SGC's / APPNP's Linear) has no SpMM and no
   exchange; an invariant aggregation (SGC's propagation of X) is computed
   once by the first forward and kept (dist/module.py _rank_hoisted), so it
   has neither per epoch, and no backward.

Expected values are derived by hand in the comments.
"""
import functools
import math
import sys
from pathlib import Path

import pytest
import sympy as sp

from gdsl.cost import symbols as sy
from gdsl.cost.choose import candidates
from gdsl.cost.problem import OrderConfig, Problem
from gdsl.cost.strategies import (edge_cut, features, redistribute, rows, rows_replicated, vertex_cut)

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")


def _allreduces(cost):
    return [o for o in cost.ops if o.op == "allreduce"]


def _ar_messages(cost):
    return sum(o.messages * o.count for o in _allreduces(cost))


# ---------------------------------------------------------------- 1. one all-reduce per epoch

def test_rows_charges_one_gradient_all_reduce_per_epoch():
    # N = 100, E = 500, P = 8, widths 8 -> 8 -> 4, CAGNET's order (sparse-first both ways):
    # SpMMs fwd l1, fwd l2, bwd l2 (A G^2), bwd l1 (A G^1 for Y^1): 4 broadcasts of P-1 = 7
    # messages = 28, and ONE all-reduce of lg 8 = 3 messages: 31 (was 28 + 2 x 3 = 34).
    # the edge cut's halo exchanges start as many messages (P-1 each), its all-reduce the same
    assert edge_cut(Problem(N=100, E=500, P=8, widths=(8, 8, 4)), 10).messages == 31   # was 34
    cost = rows(Problem(N=100, E=500, P=8, widths=(8, 8, 4)), exchange="bcast")
    assert cost.messages == 31
    # the words are the same: W^1 (64) and W^2 (32), each layer's share listed on its layer
    assert sorted((o.layer, o.words) for o in _allreduces(cost)) == [(1, 64), (2, 32)]
    assert sum(1 for o in _allreduces(cost) if o.messages) == 1
    # broadcast words: (P-1)/P N (8 + 8 + 4 + 8) = 7/8 * 100 * 28 = 2450, plus 96
    assert cost.words == pytest.approx(2450 + 96)


def test_every_executed_strategy_has_one_all_reduce_of_lg_p_messages():
    # P = 8: lg 8 = 3 messages in all for the gradients, whatever the depth (L = 3 here; was 3 x 3 = 9)
    pb = Problem(N=1000, E=8000, P=8, widths=(32, 16, 16, 4))
    costs = [rows(pb), rows(pb, exchange="bcast"), edge_cut(pb, 10), vertex_cut(pb, rho=2.0),
             redistribute(pb, 2), redistribute(pb, 8), features(pb, halo=10)]
    for cost in costs:
        assert _ar_messages(cost) == 3, cost.name
        assert sum(1 for o in _allreduces(cost) if o.messages) == 1, cost.name
    # words: every layer's W (features: not W^1, model-parallel, P3 §3.2.2)
    for cost in costs[:-1]:
        assert sum(o.words for o in _allreduces(cost)) == 32 * 16 + 16 * 16 + 16 * 4
    assert sum(o.words for o in _allreduces(costs[-1])) == 16 * 16 + 16 * 4


def test_symbolic_depth_charges_lg_p_once():
    # symbolic L: the middle layer kind is counted L - 2 times; the messages are lg P once,
    # not L lg P (the all-reduce rides on layer 1's share, counted once)
    cost = rows(Problem(), exchange="bcast")
    assert sp.simplify(_ar_messages(cost) - sy.lg(sy.P)) == 0
    assert sp.simplify(cost.messages - (2 * sy.L * (sy.P - 1) + sy.lg(sy.P))) == 0


def test_rows_replicated_all_reduces_over_all_p_ranks_once():
    # P = 16, c = 2, L = 2: CAGNET §IV-B-4 prices lg(P/c) = lg 8 = 3 per layer (6 in all); the
    # ranks all-reduce over the world communicator once: lg 16 = 4
    cost = rows_replicated(Problem(N=256, E=2048, P=16, widths=(8, 8, 4)), 2)
    assert _ar_messages(cost) == 4
    # per SpMM (P/c^2) lg(P/c^2) = 4 lg 4 = 8 messages, 4 SpMMs: 32; + 4
    assert cost.messages == 36


def test_p3_bias_and_upper_layers_share_one_all_reduce():
    # features, P = 4, params (8*8 + 8, 8*4 + 4): W^1 stays local; layer 1's bias (8 words) and
    # layer 2's W and b (36) in one all-reduce: 44 words, lg 4 = 2 messages (was 2 + 2 = 4)
    pb = Problem(N=100, E=500, P=4, widths=(8, 8, 4), params=(72, 36))
    cost = features(pb, halo=10)
    assert sum(o.words for o in _allreduces(cost)) == 44
    assert _ar_messages(cost) == 2


# ---------------------------------------------------------------- 2. rows(hash) moves the halo

def test_rows_hash_moves_the_hash_partitions_halo():
    # Cora, P = 4, narrow orders (1433 -> 16 -> 7: both layers dense-first; backward of layer 2
    # sparse-first at 7, of layer 1 sparse-first at 16 to read A G^1 for Y^1): four exchanges of
    # S w words, S the expected halo of a random hash partition,
    # (N - N/P)(1 - (1 - 1/P)^(E/N)) = 2031 (1 - 0.75^4.898...) ~ 1534.69
    N, E, P = 2708, 13264, 4
    S = (N - N / P) * (1 - (1 - 1 / P) ** (E / N))
    assert S == pytest.approx(1534.69, abs=0.01)
    cost = rows(Problem(N=N, E=E, P=P, widths=(1433, 16, 7)), orders="narrow")
    ex = [o for o in cost.ops if o.op == "halo_exchange"]
    assert sorted((o.phase, o.layer, o.words) for o in ex) == sorted(
        [("forward", 1, S * 16), ("forward", 2, S * 7), ("backward", 2, S * 7), ("backward", 1, S * 16)])
    assert all(o.messages == P - 1 for o in ex)
    assert cost.words == pytest.approx(S * 46 + 1433 * 16 + 16 * 7)     # was 3/4 * 2708 * 46 + ... = 116k
    assert cost.messages == 4 * 3 + 2
    # the buffer holds the halo rows at the widest SpMM (16), not one broadcast block
    assert dict(cost.memory_terms)["buffers"] == pytest.approx(S * 16)
    # `--halo bcast` is still CAGNET's broadcast, named apart
    bc = rows(Problem(N=N, E=E, P=P, widths=(1433, 16, 7)), orders="narrow", exchange="bcast")
    assert bc.name == "rows(partition=hash, halo=bcast)"
    assert bc.words == pytest.approx(0.75 * 2708 * 46 + 1433 * 16 + 16 * 7)


def test_rows_takes_a_measured_halo():
    # symbolic S: S (F + H) forward for CAGNET's order, S (C + H) backward
    cost = rows(Problem(widths=(sy.F, sy.H, sy.C)), halo=sy.S)
    assert sp.simplify(cost.forward.words - sy.S * (sy.F + sy.H)) == 0
    assert sp.simplify(cost.backward.words - sy.S * (sy.C + sy.H) - sy.F * sy.H - sy.H * sy.C) == 0


def test_chooser_prices_rows_on_the_measured_hash_halo():
    # candidates(rows_halo=...) (what `planning.measure_partitions` can measure on a hash
    # partition): S = 500 on Cora's sizes, narrow orders: 500 x 46 + 1433 x 16 + 16 x 7 words
    pb = Problem(N=2708, E=13264, P=4, widths=(1433, 16, 7))
    cands = {cd.name: cd for cd in candidates(pb, strategies=("rows",), rows_halo=500.0,
                                               measured={"rows_halo": "measured (hash partition)"})}
    cd = cands["rows(partition=hash)"]
    assert float(cd.cost.words) == pytest.approx(500 * 46 + 1433 * 16 + 16 * 7)
    assert any("S=500 measured" in e for e in cd.estimates)
    # rows_exchange="bcast" prices `--halo bcast`: (P-1)/P N w
    bc = candidates(pb, strategies=("rows",), rows_exchange="bcast")[0]
    assert bc.name == "rows(partition=hash, halo=bcast)"
    assert float(bc.cost.words) == pytest.approx(0.75 * 2708 * 46 + 1433 * 16 + 16 * 7)


# ---------------------------------------------------------------- 3. no aggregation, invariant aggregation

def test_sgc_linear_and_hoisted_propagations():
    # SGC on Cora, P = 4: three invariant propagations (computed once, kept), then Linear (no
    # aggregation): per epoch only Linear's GEMMs (Z = H W and Y = H^T G, 2 (N/P) 1433 x 7
    # flops each) and one all-reduce of W and b (10038 words, lg 4 = 2 messages). Was: three
    # forward broadcasts of 1433 and Linear's SpMM each way: 3/4 N (3 x 1433 + 14) words.
    N, P = 2708, 4
    pb = Problem(N=N, E=13264, P=P, widths=(1433, 1433, 1433, 1433, 7), params=(0, 0, 0, 10038),
                 aggregates=(True, True, True, False), invariant=(True, True, True, False))
    for cost in (rows(pb, orders="narrow"), rows(pb, orders="narrow", exchange="bcast"),
                 edge_cut(pb, 140, orders="narrow"), vertex_cut(pb, rho=1.5, orders="narrow"),
                 rows_replicated(pb, 2, orders="narrow")):
        assert cost.words == 10038, cost.name
        assert cost.messages == 2, cost.name
        assert not [o for o in cost.ops if o.op == "spmm"], cost.name
    cost = rows(pb, orders="narrow")
    assert cost.epoch.dense_flops == pytest.approx(2 * 2 * N / P * 1433 * 7)
    for R_A in (1, 2, 4):
        rd = redistribute(pb, R_A, config=OrderConfig("SSSD", "DSSS"))
        assert rd.words == 10038 and not [o for o in rd.ops if o.op in ("spmm", "alltoall", "bcast")]


def test_a_linear_layer_has_no_exchange():
    # APPNP-like: Linear (8 -> 8, params 64) then an aggregating layer 8 -> 4 (params 32),
    # N = 100, P = 2, CAGNET's broadcast, narrow orders: layer 2 dense-first (SpMM at 4),
    # backward A G^2 at 4, then Y^2 and G^1 = (A G^2) W^2^T; layer 1: Y^1 = H^0^T G^1 only.
    # Exchanges: 2 x (P-1)/P N 4 = 400 words, 2 x (P-1) = 2 messages; all-reduce 96 words, 1 message.
    pb = Problem(N=100, E=500, P=2, widths=(8, 8, 4), params=(64, 32), aggregates=(False, True))
    cost = rows(pb, orders="narrow", exchange="bcast")
    assert cost.words == pytest.approx(400 + 96)
    assert cost.messages == 3
    assert [(o.phase, o.op) for o in cost.ops if o.layer == 1] == [
        ("forward", "gemm"), ("backward", "gemm"), ("backward", "allreduce")]
    # flops: layer 1 fwd + Y^1 (2 x 2 x 50 x 8 x 8 = 12800); layer 2 fwd, Y^2, G^1 (3 x 2 x 50 x 8 x 4 = 9600);
    # SpMMs 2 x 2 x 250 x 4 = 4000
    assert cost.flops == pytest.approx(12800 + 9600 + 4000)


def test_an_invariant_layer_with_params_reads_its_kept_aggregate():
    # one layer 8 -> 4 (params 36) over an invariant aggregation A^T X: aggregated once and kept
    # (the order pass makes it sparse-first, order_by=invariant), so an epoch runs Z = T W and
    # Y = T^T G (2 x 2 x 50 x 8 x 4 = 6400 flops) and the all-reduce (36 words, 1 message)
    pb = Problem(N=100, E=500, P=2, widths=(8, 4), params=(36,), invariant=(True,))
    cost = rows(pb, orders="narrow")
    assert cost.words == 36 and cost.messages == 1
    assert cost.flops == pytest.approx(6400)


def test_aggregation_flags_need_one_per_layer():
    with pytest.raises(ValueError, match="aggregates gives 1 layers"):
        Problem(N=10, E=20, P=2, widths=(8, 8, 4), aggregates=(True,))
    with pytest.raises(ValueError, match="numeric L"):
        Problem(invariant=(True, False))


# ---------------------------------------------------------------- against the ranks (MPI)

@functools.cache
def _measured4() -> dict:
    from test_dist import run_driver
    configs = [{"program": GCN, "data": "cora", "plan": p, "epochs": 2, "traffic": True}
               for p in ("rows(hash)", "rows_replicated(2)")]
    return {r["config"]["plan"]: r for r in run_driver(4, configs)}


def _mpi():
    pytest.importorskip("mpi4py")
    from test_dist import MPIEXEC
    if MPIEXEC is None:
        pytest.skip("no mpiexec")


@pytest.mark.mpi
def test_rows_hash_predicted_words_equal_the_alltoallv_bytes():
    """rows(hash) at P = 4 with the ranks' default --halo alltoallv: each forward
    exchange's largest receive is the model's S w words with S the partition's
    largest halo, each backward exchange's largest send is S w (the transpose;
    over the ranks the backward receives what the forward sent), and the one
    gradient all-reduce per epoch carries every param (W and b), lg P messages."""
    _mpi()
    from test_cost_vs_runtime import _program_orders

    from gdsl.dist.part import build_parts, parse_spec
    graph, dims, orders, fetched, _ = _program_orders()
    P = 4
    g = graph.with_options(self_loops=True, symmetric=True)
    parts = build_parts(parse_spec("rows(hash)"), g, P)
    S = max(pr.n_local - pr.n_own for pr in parts)
    res = _measured4()["rows(hash)"]
    assert "error" not in res, res
    measured = res["comm"]
    F, C = dims["F"], dims["C"]
    params = (F * 16 + 16, 16 * C + C)
    cost = rows(Problem(N=g.num_nodes, E=g.num_edges, P=P, widths=(F, 16, C), params=params), orders=orders,
                halo=S)
    ex = [o for o in cost.ops if o.op == "halo_exchange"]
    assert len(ex) == 4
    for op in ex:
        key = f"alltoallv {fetched[op.layer - 1]} src rows {'fwd' if op.phase == 'forward' else 'bwd'}"
        got = measured[key]
        if op.phase == "forward":
            assert max(got["recv"]) == 4 * op.words, (key, got, op.words)
        else:
            assert max(got["sent"]) == 4 * op.words, (key, got, op.words)
            assert sum(got["recv"]) == sum(got["sent"])
    assert len([k for k in measured if k.startswith("alltoallv") and "src rows" in k]) == 4
    ar = measured["allreduce param grads"]
    assert ar["calls"] == 1
    assert ar["recv"][0] == 4 * sum(o.words for o in _allreduces(cost)) == 4 * sum(params)
    assert _ar_messages(cost) == math.ceil(math.log2(P)) * ar["calls"]


@pytest.mark.mpi
def test_rows_replicated_all_reduces_every_gradient_once_over_all_ranks():
    """1.5D at P = 4, c = 2: the ranks all-reduce the gradients once per epoch
    on the world communicator (every param, W and b), as the model now prices it."""
    _mpi()
    res = _measured4()["rows_replicated(2)"]
    assert "error" not in res, res
    ar = res["comm"]["allreduce param grads"]
    assert ar["calls"] == 1
    F, C = 1433, 7
    params = (F * 16 + 16, 16 * C + C)
    cost = rows_replicated(Problem(N=2708, E=13264, P=4, widths=(F, 16, C), params=params), 2)
    assert ar["recv"] == [4 * sum(params)] * 4
    assert sum(o.words for o in _allreduces(cost)) == sum(params)
    assert _ar_messages(cost) == 2   # lg 4, once


def test_p3_first_layer_without_aggregation_has_no_spmm():
    # features, P = 4, N = 100, APPNP-like layer 1 (Linear 8 -> 8, params 72) then 8 -> 4 (params 36),
    # halo 10: layer 1_M multiplies its F/P = 2 feature columns (2 x 100 x 2 x 8 = 3200 flops each
    # way), the owners pull the partials ((P-1)/P N 8 = 600 words) and the backward pushes G^1
    # (600); no SpMM in layer 1. Layer 2 (CAGNET's order): halo 10 x 8 forward, 10 x 4 backward.
    # One all-reduce: b^1 (8) + layer 2 (36) = 44 words.
    pb = Problem(N=100, E=500, P=4, widths=(8, 8, 4), params=(72, 36), aggregates=(False, True))
    cost = features(pb, halo=10)
    assert not [o for o in cost.ops if o.layer == 1 and o.op == "spmm"]
    assert cost.words == pytest.approx(600 + 600 + 80 + 40 + 44)
    assert cost.messages == 3 + 3 + 3 + 3 + 2


def test_no_memoised_aggregate_without_an_aggregation():
    # a widening Linear first (8 -> 64, narrow: sparse-first forward, dense-first backward) keeps
    # no A^T H^0 (there is none); with an aggregation it keeps N/P x 8 = 50 x 8 = 400 words
    with_agg = rows(Problem(N=100, E=500, P=2, widths=(8, 64, 4)), orders="narrow")
    without = rows(Problem(N=100, E=500, P=2, widths=(8, 64, 4), aggregates=(False, True)), orders="narrow")
    assert dict(with_agg.memory_terms)["memoised A^T H"] == 400
    assert dict(without.memory_terms)["memoised A^T H"] == 0
