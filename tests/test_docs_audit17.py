"""helper-17's audit of docs/architecture.md, cost-model.md and distributed.md:
regressions for what the audit found in the code."""
from __future__ import annotations

from pathlib import Path

from gdsl.compiler import compile_source

ROOT = Path(__file__).resolve().parent.parent
CORA = {"F": 1433, "C": 7, "N": 2708}


def _compile_np4(path: str):
    src = (ROOT / path).read_text()
    return compile_source(src, path, dims=dict(CORA), ranks=4, edges=13264).module


def _aggregations(module):
    return [op for op in module.main.ops if op.name in ("aggregate", "gather", "gat_aggregate")]


def test_compile_np_puts_each_layers_collectives_on_its_own_aggregation():
    # dir_sage.gd has two aggregations per layer (in- and out-edges): layer 2's
    # predicted collectives (its f_1 x f_2 = 16 x 7 weight gradient) went on
    # layer 1's second aggregation, and layer 2's aggregations had none
    module = _compile_np4("programs/extra/dir_sage.gd")
    with_comm = [op for op in _aggregations(module) if "comm" in op.attrs]
    assert [op.attrs["scope"] for op in with_comm] == ["DirSAGEConv_1", "DirSAGEConv_2"]
    # helper-30: a layer's all-reduce is its own parameter words (Ws, Win, Wout and b), no longer
    # one f_{l-1} x f_l W
    assert "bwd allreduce 68.8K words" in with_comm[0].attrs["comm"]   # 3 x 1433 x 16 + 16
    assert "bwd allreduce 343 words" in with_comm[1].attrs["comm"]     # 3 x 16 x 7 + 7
    assert "comm" not in module.attrs["plan"]


def test_compile_np_names_the_layer_of_collectives_without_an_aggregation():
    # appnp.gd: two Linear layers (no aggregation), then five propagations;
    # the Linear layers' collectives went on the first two propagations and
    # the last two propagations' on the module, unnamed
    module = _compile_np4("programs/extra/appnp.gd")
    scopes = [op.attrs["scope"] for op in _aggregations(module) if "comm" in op.attrs]
    assert scopes == [f"PPR_{k}" for k in range(1, 6)]
    extra = module.attrs["plan"]["comm"]
    assert extra and all(item.startswith(("Linear_1: ", "Linear_2: ")) for item in extra)
    assert "Linear_1: bwd allreduce 91.8K words" in extra                # 1433 x 64 + 64 (W and b; helper-30)


def test_compile_np_gcn_collectives_unchanged():
    module = _compile_np4("programs/gcn.gd")
    comms = [op.attrs.get("comm") for op in _aggregations(module)]
    # W and b of each layer (helper-30): 1433 x 16 + 16 = 22944, 16 x 7 + 7 = 119
    assert comms[0].endswith("bwd allreduce 22.9K words") and comms[1].endswith("bwd allreduce 119 words")


def test_auto_plan_skips_rows_replicated_whose_c_squared_does_not_divide_P():
    # the cost model prices rows_replicated(c) for every c | P with c*c <= P, but
    # the ranks need c*c | P: at P = 24 `partition = auto` (and `gdsl compile
    # --np 24`) chose rows_replicated(3), which partitioning then refused
    src = (ROOT / "programs" / "gcn.gd").read_text()
    plan = compile_source(src, "gcn.gd", dims={"F": 16, "C": 4, "N": 10000}, ranks=24, edges=226784).module.attrs["plan"]
    # helper-30: the chooser itself no longer picks a plan the ranks refuse at P (was: chose
    # rows_replicated(3), which `runnable` then skipped): the choice is runnable as it stands
    assert plan.get("fastest_not_runnable") is None
    assert plan["strategy"] not in ("rows_replicated(c=3)", "rows_replicated(c=4)")   # 9, 16 do not divide 24
    assert plan["runner_up"] not in ("rows_replicated(c=3)", "rows_replicated(c=4)")


def test_rows_replicated_candidate_is_executable_only_when_c_squared_divides_P():
    from gdsl.cost import Problem, choose
    from gdsl.dist.cli_run import _from_candidate

    ch = choose(Problem(N=10000, E=226784, F=16, H=16, C=4, L=2, P=24), None)
    texts = {c.name: _from_candidate(c, 24, False) for c in ch.candidates if c.cost.strategy == "rows_replicated"}
    assert texts == {"rows_replicated(c=2)": "rows_replicated(2)", "rows_replicated(c=3)": None,
                     "rows_replicated(c=4)": None}


def test_a_plan_skipped_for_its_rank_count_is_not_blamed_on_the_program():
    # `gdsl plan` / `gdsl run --np 24` said the ranks "cannot run rows_replicated(c=3)
    # for this program yet"; the program is fine, 9 does not divide 24
    from gdsl.cost import Problem, choose
    from gdsl.dist.cli_run import why_not_runnable
    from gdsl.planning import plan, runnable

    src = (ROOT / "programs" / "gcn.gd").read_text()
    dims = {"F": 16, "C": 4, "N": 10000}
    lowered = compile_source(src, "gcn.gd", dims=dims, stop_after="lower").module
    ran = runnable(plan(lowered, {**dims, "E": 226784}, 24),
                   lambda d: compile_source(src, "gcn.gd", dims=dims, delay=d).module)
    # helper-30: the cost model's choice skips rows_replicated(3) itself and its reason says why
    # (was: chosen, then `runnable` named it skipped "on 24 ranks (1.5D needs c*c = 9 to divide P)")
    assert ran.skipped is None and ran.choice.best.name != "rows_replicated(c=3)"
    assert "faster but not runnable: rows_replicated(c=3) (" in ran.choice.reason
    assert "1.5D needs c*c = 9 to divide P = 24" in ran.choice.reason
    assert "for this program" not in ran.choice.reason
    ch = choose(Problem(N=10000, E=226784, F=16, H=16, C=4, L=2, P=24), None)
    whys = {c.name: why_not_runnable(c, 24) for c in ch.candidates}
    assert whys["rows_replicated(c=2)"] == whys["replicate"] == "for this program yet", whys
    assert whys["rows_replicated(c=3)"] == "on 24 ranks (1.5D needs c*c = 9 to divide P)"
    # docs/cli.md says the table marks it with its reason (was: only "for this program")
    cli_md = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert "x rows_replicated(c=3): not runnable: 1.5D needs c*c = 9 to divide P = 24" in cli_md


def test_compile_np_layer_scopes_follow_repeat_and_shared_aggregations():
    # the cost model's layer l is the l-th call after `repeat` is unrolled (sgc.gd: Prop_1..3,
    # parameter-free, then Linear_1); a call whose aggregation CSE merged into another's (two
    # `Prop(X)`) has its collectives on the plan, named by its scope, not on the other call's
    module = _compile_np4("programs/extra/sgc.gd")
    with_comm = {op.attrs["scope"]: op.attrs["comm"] for op in _aggregations(module) if "comm" in op.attrs}
    # helper-38: Prop_1 and Prop_2 aggregate X and S X, computed once and kept by the ranks (the
    # plan's `invariant`): no collective per epoch; Prop_3 runs after Linear's product (width 7)
    assert list(with_comm) == ["Prop_3"]
    assert module.attrs["plan"]["invariant"] == ["Prop_1", "Prop_2"]
    # helper-30: parameter-free, so no weight all-reduce (was a phantom 1433 x 1433 one, 2.05M words)
    # and no backward (no parameter below them for a gradient to reach)
    assert all("allreduce" not in c and "bwd" not in c for c in with_comm.values()), with_comm
    assert module.attrs["plan"]["comm"][-1] == "Linear_1: bwd allreduce 10K words"      # 1433 x 7 + 7
    src = (ROOT / "programs" / "extra" / "sgc.gd").read_text().replace(
        "    h = X\n    repeat K {\n        h = Prop(h)\n    }\n", "    h = Prop(X) + Prop(X)\n")
    module = compile_source(src, "two.gd", dims=dict(CORA), ranks=4, edges=13264).module
    assert [op.attrs["scope"] for op in _aggregations(module)] == ["Prop_1"]
    assert module.attrs["plan"]["invariant"] == ["Prop_1"]     # helper-38: Prop(X), computed once
    assert "comm" not in _aggregations(module)[0].attrs
    props = [i for i in module.attrs["plan"]["comm"] if i.startswith("Prop_")]
    assert props and all(i.startswith("Prop_2: fwd ") for i in props), props   # no phantom all-reduce
