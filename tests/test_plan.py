"""`gdsl plan` and `gdsl compile --np`: the cost model's choice for a program."""
from __future__ import annotations

import json
import re
from pathlib import Path

from filecheck_runner import run_gdsl

ROOT = Path(__file__).resolve().parent.parent
GCN = str(ROOT / "programs" / "gcn.gd")


def test_plan_on_cora_prints_table_choice_and_reason(tmp_path):
    code, out, err = run_gdsl(["plan", GCN, "--data", "cora", "--np", "4", "--json", str(tmp_path / "p.json")])
    assert code == 0, err
    assert "layer widths [1433, 16, 7], N=2708, E=13264" in out  # E after self loops
    assert "choice: " in out and "why: " in out
    for strategy in ("replicate", "rows(partition=hash)", "rows_replicated(c=2)", "grid2d", "features",
                     "redistribute(R_A=1", "vertex_cut(", "edge_cut("):
        assert strategy in out, strategy
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["P"] == 4 and data["widths"] == [1433, 16, 7]
    assert data["choice"] == data["candidates"][0]["plan"] or any(c["plan"] == data["choice"] for c in data["candidates"])
    assert sum(c["pareto"] for c in data["candidates"]) >= 1


def test_plan_symbolic_without_sizes():
    code, out, err = run_gdsl(["plan", GCN, "--np", "4"])
    assert code == 0, err
    assert "layer widths [F, 16, C]" in out and "sizes are symbolic" in out
    assert "flops=2*E*F" in out


def test_plan_warns_of_more_ranks_than_vertices():
    code, out, err = run_gdsl(["plan", GCN, "--dims", "N=3,E=4", "--np", "4"])
    assert code == 0, err
    assert "gdsl plan: warning: 4 ranks for 3 vertices: a plan that splits the vertices leaves at least 1 rank " \
           "with none" in err
    assert "P=4" in out
    assert "warning" not in run_gdsl(["plan", GCN, "--dims", "N=4,E=4", "--np", "4"])[2]


def test_plan_dims_and_memory_budget():
    code, out, err = run_gdsl(["plan", str(ROOT / "programs" / "sage.gd"), "--dims", "N=2400000,E=124000000,F=100,C=47",
                               "--np", "64", "--mem-per-rank", "8G"])
    assert code == 0, err
    assert "fits 8 GiB per rank" in out
    # the language's multiplier suffixes (decimal, as in a program; --mem-per-rank's are binary bytes)
    short = run_gdsl(["plan", str(ROOT / "programs" / "sage.gd"), "--dims", "N=2400K,E=124M,F=100,C=47",
                      "--np", "64", "--mem-per-rank", "8G"])
    assert short == (0, out, err)
    for bad in ("N=2.4M", "N=24k", "N=1MK"):
        code, _, e = run_gdsl(["plan", GCN, "--dims", bad, "--np", "4"])
        assert code == 2 and f"--dims expects NAME=INT pairs, got '{bad}'" in e, e
    code, out, err = run_gdsl(["plan", str(ROOT / "programs" / "sage.gd"), "--dims", "N=2400000,E=124000000,F=100,C=47",
                               "--np", "2", "--mem-per-rank", "1M"])
    assert code == 1 and "no plan fits in 1 MiB per rank" in err and "needs" in err
    # on Cora at 4 MiB the smallest plan is also the fastest (with pymetis): named once (was: twice)
    code, out, err = run_gdsl(["plan", GCN, "--data", "cora", "--np", "4", "--mem-per-rank", "4M"])
    assert code == 1 and "no plan fits in 4 MiB per rank" in err
    assert not re.search(r"the smallest, (\S+), .*the fastest, \1,", err), err


def test_compile_np_records_the_choice_in_the_ir():
    code, out, _ = run_gdsl(["plan", GCN, "--data", "cora", "--np", "4"])
    choice = next(line for line in out.splitlines() if line.startswith("choice: ")).split(": ", 1)[1]
    code, ir, err = run_gdsl(["compile", GCN, "--data", "cora", "--np", "4"])
    assert code == 0, err
    assert f'strategy="{choice}"' in ir and "plan={P=4" in ir
    code, _, err = run_gdsl(["compile", GCN, "--np", "4"])
    assert code == 2 and "--np needs" in err


def test_plan_with_data_measures_the_partitions():
    """With the graph at hand the vertex-cut replication factor and the
    edge-cut halo are measured on real partitions (Libra, METIS) of the graph
    as the program sees it (gcn.gd: symmetric, self loops), not estimated."""
    import gdsl
    from gdsl.graph import partition as gp
    from gdsl.planning import measure_partitions

    code, out, err = run_gdsl(["plan", str(ROOT / "programs" / "gcn.gd"), "--data", "cora", "--np", "4"])
    assert code == 0, err
    g = gdsl.load_graph("cora").with_options(self_loops=True, symmetric=True)
    src, dst = g.src.numpy(), g.dst.numpy()
    stats, how = measure_partitions(src, dst, g.num_nodes, 4)
    verts, _ = gp.replicas(src, dst, gp.libra(src, dst, g.num_nodes, 4), g.num_nodes, 4)
    assert stats["rho"] == gp.replication_factor(verts, g.num_nodes)
    owner = gp.edge_cut_metis(src, dst, g.num_nodes, 4)
    assert stats["halo"] == max(h.size for h in gp.halo(src, dst, owner, 4))
    assert 1.0 <= stats["rho"] < 2.0 and 0 < stats["halo"] < g.num_nodes / 4
    assert f"vertex_cut(delay=cd-0, rho={stats['rho']:.4g})" in out
    assert f"edge_cut(S={stats['halo']:.4g})" in out
    assert "measured (Libra vertex cut" in out or "measured (largest halo per rank, METIS" in out


def test_compile_np_records_the_plan_the_schedule_hints(tmp_path):
    """`gdsl compile --np P` prices and records the plan `gdsl run --np P`
    executes: the schedule's partition (and delay) hint, marked
    chosen_by=hint, with the order the ranks compile (cd-r: layer 1
    sparse-first, order_by=delay) and its predicted collectives; a hint the
    cost model does not price leaves the model's own choice."""
    base = (ROOT / "programs" / "gcn.gd").read_text()
    prog = tmp_path / "cd5.gd"
    prog.write_text(base + "\nschedule {\n    partition = vertex_cut\n    delay = 5\n}\n")
    code, out, err = run_gdsl(["compile", str(prog), "--data", "citeseer", "--np", "4"])
    assert code == 0, err
    head = out.splitlines()[0]
    assert "chosen_by=hint" in head and 'strategy="vertex_cut(delay=cd-5, rho=' in head
    agg1 = next(line for line in out.splitlines() if "= aggregate[" in line)
    assert "order=sparse_first, order_by=delay" in agg1 and "fwd partial_aggregates" in agg1
    assert "bwd partial_aggregates" not in agg1    # the features need no gradient
    # no hint: the model's fastest, dense-first by width
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "gcn.gd"), "--data", "citeseer", "--np", "4"])
    assert code == 0 and "chosen_by" not in out.splitlines()[0] and "order_by=delay" not in out
    # rows_replicated(3) on 4 ranks is not priced (c * c > P): the model's choice stands, unmarked
    prog.write_text(base + "\nschedule {\n    partition = rows_replicated(3)\n}\n")
    code, out, err = run_gdsl(["compile", str(prog), "--data", "cora", "--np", "4"])
    assert code == 0, err
    assert "chosen_by" not in out.splitlines()[0] and "rows_replicated" not in out.splitlines()[0].split("schedule=")[0]


def test_plan_says_what_the_schedule_hint_makes_run_execute(tmp_path):
    """`gdsl plan` ranks the cost model's own choice; a `partition` hint in
    the schedule gets a line naming the plan `gdsl run --np` executes (the
    one `gdsl compile --np` records as chosen_by=hint). Was: no word of it."""
    base = (ROOT / "programs" / "gcn.gd").read_text()
    prog = tmp_path / "h.gd"
    prog.write_text(base + "\nschedule {\n    partition = rows_replicated(2)\n}\n")
    code, out, err = run_gdsl(["plan", str(prog), "--data", "cora", "--np", "4", "--json", str(tmp_path / "p.json")])
    assert code == 0, err
    choice = next(line for line in out.splitlines() if line.startswith("choice: "))
    assert "rows_replicated" not in choice
    doc = json.loads((tmp_path / "p.json").read_text())   # --json carries the hint too
    assert doc["schedule_hint"] == {"partition": "rows_replicated(2)", "applies": True, "exact": True,
                                    "executes": "rows_replicated(c=2)"} and doc["choice"] == choice[8:], doc
    assert ("schedule: partition = rows_replicated(2): `gdsl run --np 4` executes rows_replicated(c=2) (" in out
            and "recorded" not in out and "(chosen_by=hint)" in out), out
    code, ir, err = run_gdsl(["compile", str(prog), "--data", "cora", "--np", "4"])
    assert code == 0 and 'chosen_by=hint' in ir.splitlines()[0] and 'strategy="rows_replicated(c=2)"' in ir, err
    prog.write_text(base + "\nschedule {\n    partition = rows_replicated(3)\n}\n")   # c * c > P: not priced
    code, out, err = run_gdsl(["plan", str(prog), "--data", "cora", "--np", "4", "--json", str(tmp_path / "r.json")])
    # and `gdsl run --np 4` refuses it at partitioning: said so (was: "run keeps the choice above"; helper-61)
    assert code == 0 and ("schedule: partition = rows_replicated(3): not a plan for P=4: `gdsl run --np 4` refuses "
                          "it (rows_replicated(3): 1.5D needs c*c = 9 to divide the number of ranks P = 4") in out, out
    hint = json.loads((tmp_path / "r.json").read_text())["schedule_hint"]
    assert hint["executes"] is None and hint["run_refuses"].startswith("rows_replicated(3): 1.5D needs"), hint
    prog.write_text(base + "\nschedule {\n    partition = grid2d\n}\n")   # modelled only: run falls back
    code, out, err = run_gdsl(["plan", str(prog), "--data", "cora", "--np", "4"])
    # priced (its row marked x), never run: said so (was: "not a plan the cost model prices", beside its row)
    assert code == 0 and ("schedule: partition = grid2d: modelled, not executed by the ranks (its row is marked x "
                          "above), so `gdsl run --np 4`") in out, out
    code, out, err = run_gdsl(["plan", GCN, "--data", "cora", "--np", "4", "--json", str(tmp_path / "q.json")])
    assert code == 0 and "schedule:" not in out and "schedule_hint" not in json.loads((tmp_path / "q.json").read_text())
    # rows(random) / rows(block): priced as rows(hash), named as run executes them (was: "executes
    # rows(partition=hash)", and compile --np recorded strategy="rows(partition=hash)")
    for arg in ("random", "block"):
        prog.write_text(base + f"\nschedule {{\n    partition = rows({arg})\n}}\n")
        code, out, err = run_gdsl(["plan", str(prog), "--data", "cora", "--np", "4"])
        assert code == 0 and f"executes rows(partition={arg}) (" in out and "priced as rows(hash)" not in out, out
        code, ir, err = run_gdsl(["compile", str(prog), "--data", "cora", "--np", "4"])
        assert code == 0 and f'strategy="rows(partition={arg})"' in ir.splitlines()[0], ir.splitlines()[0]


def test_auto_chooses_a_plan_the_ranks_can_run():
    """gat.gd over 16 ranks: the cost model's fastest is RDM, which cannot run
    an edge softmax; `auto` takes the fastest plan the ranks can run. Was: it
    chose RDM and every rank refused it."""
    import gdsl
    from gdsl.compiler import compile_source
    from gdsl.dist.cli_run import choose_spec
    from gdsl.dist.module import check_supported
    from gdsl.graph.io import load_graph, resolve_data
    from gdsl.runtime.binding import bind_dims

    prog = gdsl.compile(str(ROOT / "programs" / "gat.gd"))
    graph = load_graph(resolve_data(None))
    spec = choose_spec(prog, graph, 16, None, None, None, 0, quiet=True)
    assert spec.strategy != "redistribute"
    dims = bind_dims(prog.checked, graph)
    check_supported(spec.strategy, compile_source(prog.source, prog.file, dims=dims).module)
    # `gdsl compile --np 16` records that plan, and names the model's fastest it skipped.
    # Was: it recorded RDM, a plan `gdsl run --np 16` would not execute.
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "gat.gd"), "--data", "cora", "--np", "16"])
    assert code == 0, err
    plan_attr = re.search(r"plan=\{(.*?)\}", out.splitlines()[0]).group(1)
    assert 'fastest_not_runnable="redistribute(' in plan_attr
    assert 'runner_up="redistribute(' not in plan_attr   # nor is the runner-up a plan the ranks cannot run
    # `gdsl plan` says so too (was: its choice line named RDM without a word)
    fastest = re.search(r'fastest_not_runnable="([^"]+)"', plan_attr).group(1)
    recorded = re.search(r'strategy="([^"]+)"', plan_attr).group(1)
    code, out, err = run_gdsl(["plan", str(ROOT / "programs" / "gat.gd"), "--data", "cora", "--np", "16"])
    assert code == 0 and f"runs: the ranks cannot run {fastest} for this program yet, so `gdsl run --np 16` " \
        f"and `gdsl compile --np` take {recorded} (" in out, out
    assert re.search(r'strategy="(\w+)', plan_attr).group(1) == {"rows": "edge_cut"}.get(spec.strategy, spec.strategy) \
        or spec.strategy == "rows" and 'strategy="rows(' in plan_attr


def test_auto_never_chooses_a_feature_split_the_ranks_refuse():
    """P3's region analysis (which layer-1 ops can run on column slices) is part
    of `check_supported`, so `partition = auto` skips `features` for a program
    the ranks would refuse. Was: only the ranks ran it, after auto had chosen."""
    import dataclasses

    import gdsl
    import pytest
    from gdsl.compiler import compile_source
    from gdsl.diagnostics import GdslError
    from gdsl.dist.module import check_supported
    from gdsl.graph.io import load_graph, resolve_data
    from gdsl.planning import first_runnable, plan
    from gdsl.runtime.binding import bind_dims

    graph = load_graph(resolve_data(None))
    progs = ROOT / "tests" / "dist_programs"

    def optimised(name, stop_after=None):
        prog = gdsl.compile(str(progs / name))
        return compile_source(prog.source, prog.file, dims=bind_dims(prog.checked, graph), stop_after=stop_after).module

    refused = {"computed_factor.gd": "its factor %1 is computed from the graph",
               "mse_autoencoder.gd": "reads the feature input X (or a value computed from it before layer 1's "
                                     "product with a weight) after the sync",
               "learned_factor.gd": "a product with a learned factor (%1, a param or computed from one) before "
                                    "layer 1's '@' cannot take a column slice",
               "transform_bias.gd": "adding %b (not a partial sum) to a partial sum is not linear: each rank's "
                                    "partial sum would carry it, so the sync would sum it P times"}
    for name, msg in refused.items():
        module = optimised(name)
        with pytest.raises(GdslError, match=re.escape(msg)):
            check_supported("features", module)
        result = plan(optimised(name, "lower"), {"N": graph.num_nodes, "E": int(graph.src.numel()), "F": 1433, "C": 7}, 2)
        feat = next(c for c in result.choice.candidates if c.name == "features")
        first = dataclasses.replace(result.choice, candidates=(feat, *(c for c in result.choice.candidates
                                                                       if c is not feat)))
        cand, spec = first_runnable(first, 2, lambda delay: module)
        assert spec.strategy != "features", name
    check_supported("features", optimised("elementwise_max.gd"))   # element-wise max/min: column-separable
    check_supported("features", optimised("edge_dropout.gd"))


def test_approximate_plans_are_marked_in_the_ir_and_the_plan_table(tmp_path):
    """LANGUAGE.md: plans that trade freshness for speed are marked
    approximate in the IR dump and the plan table. Was: neither said so,
    and `gdsl plan` said a delayed vertex-cut hint was not priced (it priced
    no approximate plan) while `gdsl compile --np` recorded it."""
    prog = tmp_path / "d.gd"
    prog.write_text((ROOT / "programs" / "gcn.gd").read_text()
                    + "\nschedule {\n    partition = vertex_cut(libra)\n    delay = 2\n}\n")
    code, ir, err = run_gdsl(["compile", str(prog), "--data", "cora", "--np", "4"])
    assert code == 0, err
    head = ir.splitlines()[0]
    assert 'strategy="vertex_cut(delay=cd-2' in head and "approximate=true" in head and "chosen_by=hint" in head
    aggs = [line for line in ir.splitlines() if "= aggregate[" in line]
    assert len(aggs) == 2 and all("approximate=cd-2" in line for line in aggs), aggs
    code, out, err = run_gdsl(["plan", str(prog), "--data", "cora", "--np", "4", "--json", str(tmp_path / "p.json")])
    assert code == 0, err
    rows = dict(m.group(2, 1) for line in out.splitlines()
                if (m := re.match(r"^(\S*)\s+vertex_cut\(delay=([^,]+),", line)))
    assert {k: "~" in v for k, v in rows.items()} == {"0c": True, "cd-0": False, "cd-2": True}, out
    assert "~ approximate (delayed updates: changes what is trained)" in out
    assert "executes vertex_cut(delay=cd-2, rho=" in out and "predicted, approximate) instead of" in out, out
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["schedule_hint"]["exact"] is False
    assert {c["plan"].split(",")[0]: c["exact"] for c in doc["candidates"] if c["plan"].startswith("vertex_cut")} == {
        "vertex_cut(delay=0c": False, "vertex_cut(delay=cd-0": True, "vertex_cut(delay=cd-2": False}
    code, ir, err = run_gdsl(["compile", GCN, "--data", "cora", "--np", "4"])   # an exact plan: no mark
    assert code == 0 and "approximate" not in ir, err


def test_a_first_layer_of_no_arguments_is_planned_from_the_features(tmp_path):
    """A first layer that reads X itself (`layer Embed[dout]() -> [dout]`) has no
    operand to take f_0 from. Was: IndexError, an internal error of `gdsl plan`
    and of `gdsl run --np P`'s auto plan."""
    src = (ROOT / "programs" / "gcn.gd").read_text()
    p = tmp_path / "embed.gd"
    layer = "layer Embed[dout]() -> [dout] {\n    param W : f32[F, dout] = glorot\n    transform t = X @ W\n" \
            "    return t\n}\n\n"
    p.write_text(src.replace("layer GCNConv", layer + "layer GCNConv", 1)
                    .replace("h = dropout(X, p)\n    h = relu(GCNConv[hidden](h))", "h = relu(Embed[hidden]())"))
    assert "Embed[hidden]()" in p.read_text()
    code, out, err = run_gdsl(["plan", str(p), "--data", "cora", "--np", "2"])
    assert code == 0, err
    assert "layer widths [1433, 16, 7]" in out


def test_the_recorded_runner_up_fits_the_memory_per_rank():
    """`gdsl compile --np P --mem-per-rank M` records as runner-up the next
    plan that fits M, never one over it: with M = the chosen plan's own
    memory, nothing else on Cora at P = 4 fits (the others hold more)."""
    gcn = str(ROOT / "programs" / "gcn.gd")

    def plan_attr(*extra):
        code, out, err = run_gdsl(["compile", gcn, "--data", "cora", "--np", "4", *extra])
        assert code == 0, err
        return re.search(r"plan=\{(.*?)\}", out.splitlines()[0]).group(1)

    free = plan_attr()
    assert re.search(r'runner_up="[^"]+"', free), free            # without a limit there is one
    mem = re.search(r"memory_per_rank_bytes=(\d+)", free).group(1)
    tight = plan_attr("--mem-per-rank", mem)
    assert re.search(r'strategy="([^"]+)"', tight).group(1) == re.search(r'strategy="([^"]+)"', free).group(1)
    assert "runner_up=none" in tight, tight


def test_recorded_only_hints_are_named_when_a_distributed_run_plans(capsys):
    """`cache = hec(...)` and `pipeline = push_pull(...)` are checked and
    recorded, not executed: choosing the plan says so (was: silent, and the
    run was the exact plan as if they were not there)."""
    import gdsl
    from gdsl.dist.cli_run import choose_spec
    from helpers import random_graph

    src = (ROOT / "programs" / "gcn.gd").read_text()
    graph = random_graph(30, 90, 4, 3)
    for sched, want in (("", []), ("    cache = hec(size = 10)\n", ["cache = hec(...)"]),
                        ("    pipeline = push_pull(depth = 2)\n    cache = none\n", ["pipeline = push_pull(...)"])):
        prog = gdsl.compile(src + f"schedule {{\n{sched}}}\n")
        spec = choose_spec(prog, graph, 2, "rows", None, None, 0)
        assert spec.strategy == "rows" and spec.delay == 0     # the exact plan asked for
        lines = [ln for ln in capsys.readouterr().err.splitlines() if "recorded, not executed" in ln]
        assert [ln.split(" (the")[0] for ln in lines] == [f"gdsl: {w}" for w in want], lines
        assert all(ln.endswith("is not built yet, so the run is exact without it") for ln in lines)
        choose_spec(prog, graph, 2, "rows", None, None, 0, quiet=True)
        assert capsys.readouterr().err == ""
