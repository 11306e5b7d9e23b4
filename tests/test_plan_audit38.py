"""helper-38: `gdsl plan`, `gdsl compile --np` and `gdsl run --np`'s auto plan price an aggregation
the ranks compute once (Problem(invariant=...)) from the optimised module the ranks run
(planning.optimised_module / layer_invariant), and agree. Was: planning.plan passed no `invariant`
(`compile --np` plans before its passes run), so SGC's propagations of X were priced with an SpMM
and an exchange every epoch (sgc.gd on Cora at P = 4: 28.7 ms per epoch, now 10.3 ms)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from filecheck_runner import run_gdsl

ROOT = Path(__file__).resolve().parent.parent
SGC = str(ROOT / "programs" / "extra" / "sgc.gd")
CORA = {"F": 1433, "C": 7, "N": 2708}
AGGS = ("aggregate", "gather", "gat_aggregate")


def _lowered(path: str, source: str | None = None):
    from gdsl.compiler import compile_source
    src = Path(path).read_text() if source is None else source
    return compile_source(src, path, dims=dict(CORA), stop_after="lower").module


def _auto_plan(path: str, monkeypatch):
    """The plan `gdsl run --np 4` prices for partition = auto (cli_run.choose_spec), and its spec."""
    import gdsl
    import gdsl.planning as planning
    from gdsl.dist.cli_run import choose_spec
    from gdsl.graph.io import load_graph

    priced = []
    real = planning.plan
    monkeypatch.setattr(planning, "plan", lambda *a, **k: priced.append(real(*a, **k)) or priced[-1])
    prog = gdsl.compile(path)
    spec = choose_spec(prog, load_graph("cora"), 4, None, None, None, 0, quiet=True)
    assert len(priced) == 1
    return priced[0], spec


def test_sgc_propagations_are_priced_as_computed_once_by_all_three(tmp_path, monkeypatch):
    # the ranks' module: Prop_1 and Prop_2 aggregate X and S X once (invariant); the order pass puts
    # Prop_3 after Linear's product (dense-first at width 7: it reads the param W), so it runs every epoch
    want = (True, True, False, False)

    # gdsl plan --json
    out = tmp_path / "plan.json"
    code, text, err = run_gdsl(["plan", SGC, "--np", "4", "--data", "cora", "--json", str(out)])
    assert code == 0, err
    planned = json.loads(out.read_text())
    by_name = {c["plan"]: c for c in planned["candidates"]}

    # gdsl compile --np 4 --data cora: the recorded plan, and the IR it is recorded on
    code, ir, err = run_gdsl(["compile", SGC, "--np", "4", "--data", "cora"])
    assert code == 0, err
    head = ir.splitlines()[0]
    assert "invariant=[Prop_1, Prop_2]" in head, head          # (was: no such entry)
    strategy = re.search(r'strategy="([^"]+)"', head).group(1)
    time_s = float(re.search(r"time_s=([0-9.e-]+)", head).group(1))
    # the dump's own marks: the aggregations marked invariant are those of the layers priced so
    marked = {}
    scope = None
    for line in ir.splitlines():
        if line.strip().startswith("# "):
            scope = line.strip()[2:]
        elif re.search(r"= (aggregate|gather|gat_aggregate)\[", line):
            marked.setdefault(scope, []).append("invariant=true" in line)
    assert {s for s, m in marked.items() if all(m)} == {"Prop_1", "Prop_2"}, marked

    # gdsl run --np 4, partition = auto (no ranks started)
    auto, spec = _auto_plan(SGC, monkeypatch)
    assert auto.problem.invariant == want                       # (was: None)
    assert auto.problem.aggregates == (True, True, True, False)

    # the three agree: the same choice, priced the same
    assert planned["choice"] == strategy == auto.choice.best.name
    assert by_name[strategy]["time"] == pytest.approx(time_s, rel=1e-3)
    assert {c.name: c.time for c in auto.choice.candidates} == pytest.approx(
        {n: c["time"] for n, c in by_name.items()})
    assert spec.describe().split(" ")[0] in (strategy, "rows(metis)")

    # computed once: no SpMM, no exchange, no backward in Prop_1 and Prop_2 on any plan the ranks run
    for cand in auto.choice.candidates:
        if cand.cost.strategy in ("grid2d", "grid3d", "features"):   # (they ignore the flag / P3's layer 1)
            continue
        assert not [o for o in cand.cost.ops if int(o.layer) in (1, 2)], cand.name
    # and the epoch is cheaper than with the propagations priced every epoch (28.7 ms before)
    from gdsl.planning import plan
    every = plan(_lowered(SGC), {**CORA, "E": 13264}, 4, invariant=(False,) * 4)
    once = plan(_lowered(SGC), {**CORA, "E": 13264}, 4)
    assert once.problem.invariant == want
    assert once.choice.best.time < every.choice.best.time / 2


@pytest.mark.parametrize("program", ["programs/gcn.gd", "programs/extra/appnp.gd"])
def test_a_program_with_no_invariant_aggregation_prices_as_before(program, monkeypatch):
    """gcn.gd (dropout on X) and appnp.gd (its propagations read the MLP's output): no layer is
    priced as computed once, and every candidate is priced as with no `invariant` at all."""
    import gdsl.planning as planning
    from gdsl.graph.io import load_graph

    g = load_graph("cora").with_options(self_loops=True, symmetric=True)
    lowered = _lowered(str(ROOT / program))
    dims = {**CORA, "E": g.num_edges}
    now = planning.plan(lowered, dims, 4, graph=g)
    assert not any(now.problem.invariant or ())   # (passes before helper-38 too: None there)
    real = planning.Problem
    monkeypatch.setattr(planning, "Problem", lambda **k: real(**{**k, "invariant": None}))
    before = planning.plan(lowered, dims, 4, graph=g)
    assert before.problem.invariant is None
    key = lambda p: [(c.name, c.time, float(c.cost.words), c.memory_bytes) for c in p.choice.candidates]  # noqa: E731
    assert key(now) == key(before)
    monkeypatch.undo()
    code, ir, err = run_gdsl(["compile", str(ROOT / program), "--np", "4", "--data", "cora"])
    assert code == 0, err
    assert "invariant=[" not in ir.splitlines()[0]


def _program_sources():
    paths = sorted((ROOT / "programs").glob("*.gd")) + sorted((ROOT / "programs" / "extra").glob("*.gd"))
    return [pytest.param(p, id=p.name) for p in paths]


@pytest.mark.parametrize("path", _program_sources())
def test_rank_hoisted_ops_is_what_the_ranks_hoist(path):
    """planning.rank_hoisted_ops restates backends/reference/executor.py plan_hoist (the ranks'
    `_rank_hoisted`) without torch: the same ops on every program's optimised module."""
    from gdsl.backends.reference.executor import plan_hoist
    from gdsl.compiler import compile_source
    from gdsl.diagnostics import GdslError
    from gdsl.passes.order import linear_groups
    from gdsl.planning import optimised_module, rank_hoisted_ops
    try:
        lowered = compile_source(path.read_text(), str(path), dims=dict(CORA), stop_after="lower").module
        module = compile_source(path.read_text(), str(path), dims=dict(CORA)).module
    except GdslError:
        pytest.skip("not a Cora program")
    groups = [g for g in linear_groups(module) if not g.natural]
    want = plan_hoist(module, [set(g.ops) for g in groups], {op for g in groups for op in g.ops[:-1]}).ops
    assert rank_hoisted_ops(module) == set(want)
    # optimised_module is that compile (the ranks': no hoist), and leaves the lowered module alone
    from gdsl.ir.printer import print_module
    before = print_module(lowered)
    assert print_module(optimised_module(lowered)) == print_module(module)
    assert print_module(lowered) == before


def test_a_group_that_runs_whole_is_not_priced_as_computed_once():
    """An invariant aggregation in an order group with a backward other than autograd's runs with
    its product every epoch (plan_hoist): that layer is not priced as computed once."""
    from gdsl.planning import layer_invariant, optimised_module
    src = (ROOT / "programs" / "extra" / "gcn_schedule.gd").read_text().replace("h = dropout(X, p)", "h = X")
    hinted = src.replace("order GCNConv#1 = dense_first", "order GCNConv#1 = sparse_first")
    grouped = src.replace("order GCNConv#1 = dense_first",
                          "order GCNConv#1 = sparse_first(backward = sparse_first, memoize = false)")
    low = _lowered("hinted.gd", hinted)
    assert layer_invariant(low, optimised_module(low)) == [True, False]   # A X once, then (A X) W
    low = _lowered("grouped.gd", grouped)
    opt = optimised_module(low)
    agg = next(op for op in opt.main.ops if op.name == "aggregate")
    assert agg.attrs.get("invariant") and agg.attrs["order_grad"] == "sparse_first"
    assert layer_invariant(low, opt) == [False, False]


def test_compile_np_reads_the_flags_at_the_delay_its_passes_run():
    """A cd-r hint the cost model does not price (P = 1: no vertex cut) leaves the order pass at
    delay 0; the recorded plan's flags are those of the IR dumped, not of the delayed compile's."""
    from gdsl.compiler import compile_source
    src = Path(SGC).read_text() + "\nschedule {\n    partition = vertex_cut\n    delay = 2\n}\n"
    for P, once in ((4, ["Prop_1", "Prop_2", "Prop_3"]), (1, ["Prop_1", "Prop_2"])):
        m = compile_source(src, "sgc_cd2.gd", dims=dict(CORA), ranks=P, edges=13264).module
        assert m.attrs["plan"]["invariant"] == once, (P, m.attrs["plan"])
        assert [op.attrs["scope"] for op in m.main.ops if op.name in AGGS and op.attrs.get("invariant")] == once
