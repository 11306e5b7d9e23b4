"""helper-33: a train block's model whose only param layer is called in a `repeat` that runs 0 times
(`--set layers=1`): `gdsl run --np`, `gdsl plan` and `gdsl compile --np` give single-process
`gdsl run`'s located error; P3's all-reduce words count layer 1's bias; `gdsl plan --json` says
whether each plan is runnable."""
from __future__ import annotations

import json

import pytest

from filecheck_runner import run_gdsl

HEAD = """\
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}

layer Prop(h: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m)
    return a
}

"""
TRAIN = """
train t {
    model     = M
    loss      = mse(X, mask = train)
    optimizer = adam(lr = 0.01)
    epochs    = 2
}
"""
# (a) the repeat is the model's only call; (b) a param-free layer is called after it
ONLY_REPEAT = HEAD + """model M[layers = 2] {
    h = X
    repeat layers - 1 {
        h = Lin[F](h)
    }
    return h
}
""" + TRAIN
THEN_PROP = HEAD + """model M[layers = 2] {
    h = X
    repeat layers - 1 {
        h = Lin[F](h)
    }
    return Prop(h)
}
""" + TRAIN


def _model_line(text: str) -> int:
    return text.splitlines().index("    model     = M") + 1


@pytest.mark.parametrize("text", [ONLY_REPEAT, THEN_PROP], ids=["only-repeat", "then-prop"])
def test_np_refuses_a_model_with_no_params_once_built_at_its_model_line(tmp_path, text):
    """Was: (a) `gdsl: error: the model calls no layer: nothing to plan`, (b) the graph partitioned,
    the ranks started, then `the model has no params to train`, no line."""
    f = tmp_path / "m.gd"
    f.write_text(text)
    line = _model_line(text)
    want = f"{f}:{line}:5: error: model 'M' has no params to train"
    for how in (["--np", "2"], ["--np", "2", "--partition", "rows(hash)"]):
        code, _, err = run_gdsl(["run", str(f), "--set", "layers=1", "--backend", "reference", *how])
        assert code == 1 and want in err, err
        assert "nothing to plan" not in err and "partitioned" not in err and "cost model chose" not in err
    code, _, err = run_gdsl(["partition", str(f), "--set", "layers=1", "--np", "2", "--out", str(tmp_path / "p")])
    assert code == 1 and want in err, err
    assert not (tmp_path / "p").exists()


@pytest.mark.mpi
def test_under_mpiexec_rank_0_prints_the_located_error(tmp_path):
    """`mpiexec -n 2 gdsl run ...`: rank 0's check (was: "internal error: CompileError ...")."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    pytest.importorskip("mpi4py")
    here = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(here) if here.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    f = tmp_path / "m.gd"
    f.write_text(THEN_PROP)
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "gdsl", "run", str(f), "--set", "layers=1",
                        "--backend", "reference"], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode != 0
    assert f"{f}:{_model_line(THEN_PROP)}:5: error: model 'M' has no params to train" in r.stderr, r.stderr
    assert "internal error" not in r.stderr and r.stderr.count("has no params") == 1


def test_plan_and_compile_np_say_the_located_error_not_nothing_to_plan(tmp_path):
    f = tmp_path / "m.gd"
    f.write_text(ONLY_REPEAT)
    want = f"{f}:{_model_line(ONLY_REPEAT)}:5: error: model 'M' has no params to train"
    code, _, err = run_gdsl(["plan", str(f), "--set", "layers=1", "--np", "2", "--dims", "N=100,E=300,F=8,C=3"])
    assert code == 1 and want in err and "nothing to plan" not in err, err
    code, _, err = run_gdsl(["compile", str(f), "--set", "layers=1", "--np", "2", "--data", "cora"])
    assert code == 1 and want in err and "nothing to plan" not in err, err
    # with the repeat run once the model trains and plans as before
    code, out, err = run_gdsl(["plan", str(f), "--np", "2", "--dims", "N=100,E=300,F=8,C=3"])
    assert code == 0, err
    # a model with no train block that calls no layer: still nothing to plan
    g = tmp_path / "n.gd"
    g.write_text(ONLY_REPEAT.split("\ntrain t")[0])
    code, _, err = run_gdsl(["plan", str(g), "--set", "layers=1", "--np", "2", "--dims", "N=100,E=300,F=8,C=3"])
    assert code == 1 and "nothing to plan" in err, err


def _features_words_vs_ranks(program: str):
    """(the features plan's predicted all-reduce words, the words of the params the ranks all-reduce:
    every param but the model-parallel weights of P3's layer 1, dist/support.feature_region)."""
    import sympy

    import gdsl
    from gdsl.compiler import compile_source
    from gdsl.cost.p3 import features
    from gdsl.cost.problem import Problem
    from gdsl.dist.support import feature_region
    from gdsl.planning import layer_params, layer_widths
    from gdsl.runtime.binding import bind_dims
    prog = gdsl.compile(program)
    graph = gdsl.load_graph("cora")
    dims = bind_dims(prog.compiled.checked, graph)
    lowered = compile_source(prog.source, prog.file, dims=dims, stop_after="lower").module
    optimised = compile_source(prog.source, prog.file, dims=dims).module
    _, local = feature_region(optimised)
    pb = Problem(N=graph.num_nodes, E=graph.num_edges, P=2, widths=tuple(int(w) for w in layer_widths(lowered)),
                 params=tuple(layer_params(lowered)))
    predicted = sum(int(op.words) * int(op.count) for op in features(pb).ops if op.op == "allreduce")
    ranks = sum(int(sympy.Mul(*op.result.type.shape)) for op in optimised.main.ops
                if op.name == "param" and op.attrs["name"] not in local)
    return predicted, ranks, local


def test_p3_all_reduce_words_are_every_gradient_but_layer_1s_weight():
    """Was: layer 1's bias left out (16 words fewer than the ranks' all-reduce for gcn.gd)."""
    from pathlib import Path
    predicted, ranks, local = _features_words_vs_ranks(str(Path(__file__).resolve().parent.parent / "programs"
                                                           / "gcn.gd"))
    assert local and predicted == ranks


def test_p3_all_reduce_words_for_a_layer_1_without_a_bias(tmp_path):
    """A first layer of W only: nothing of layer 1 is all-reduced, and no 0-word op is listed."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "programs" / "gcn.gd").read_text()
    nobias = """layer NoBias[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    sync      s = sum(t)
    return s
}

"""
    text = text.replace("model GCN", nobias + "model GCN").replace("relu(GCNConv[hidden](h))", "relu(NoBias[hidden](h))")
    f = tmp_path / "nobias.gd"
    f.write_text(text)
    predicted, ranks, local = _features_words_vs_ranks(str(f))
    assert local and predicted == ranks
    from gdsl.cost.p3 import features
    from gdsl.cost.problem import Problem
    ops = features(Problem(N=100, E=400, P=2, widths=(8, 4, 3), params=(32, 15))).ops
    assert [op.layer for op in ops if op.op == "allreduce"] == [2]


@pytest.mark.parametrize("P", [24, 4])
def test_plan_json_says_whether_each_plan_is_runnable_as_the_table_does(tmp_path, P):
    """Was: no field for it; the table's `x` marks (and their reasons) are now `runnable` and
    `why_not` per candidate; grid2d/grid3d, priced but never executed, are not runnable either."""
    from pathlib import Path
    gcn = str(Path(__file__).resolve().parent.parent / "programs" / "gcn.gd")
    out = tmp_path / "p.json"
    code, text, err = run_gdsl(["plan", gcn, "--np", str(P), "--dims", "N=100000,E=1000000,F=128,C=10",
                                "--json", str(out)])
    assert code == 0, err
    marked = {}
    for line in text.splitlines():
        if line.startswith("x  ") and ": not runnable: " in line:
            name, why = line[3:].split(": not runnable: ", 1)
            marked[name] = why
    cands = json.loads(out.read_text())["candidates"]
    assert cands and all(isinstance(c["runnable"], bool) for c in cands)
    for c in cands:
        if c["plan"] in marked:
            assert c["runnable"] is False and c["why_not"] == marked[c["plan"]]
        elif c["plan"].startswith(("grid2d", "grid3d")):
            assert c["runnable"] is False and "not executed" in c["why_not"]
        else:
            assert c["runnable"] is True and c["why_not"] is None
    if P == 24:
        assert marked   # rows_replicated(c=3), (c=4): c*c does not divide 24
    else:
        assert any(c["plan"].startswith("grid2d") for c in cands)
    # the choice is runnable
    choice = json.loads(out.read_text())["choice"]
    assert next(c for c in cands if c["plan"] == choice)["runnable"] is True
