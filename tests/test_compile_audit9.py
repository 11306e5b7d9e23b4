"""helper-9's `gdsl compile` findings (session 38): --dump-dir mixing two
programs' dumps, an exit status that depended on --emit, the emitted text
run into the per-pass dumps, usage errors found after the program was read,
and a vertex op computed twice after fuse."""
from __future__ import annotations

from pathlib import Path

import pytest

from gdsl.cli import main

ROOT = Path(__file__).resolve().parent.parent
GCN, GAT = (str(ROOT / "programs" / f"{p}.gd") for p in ("gcn", "gat"))

# an order hint the pass cannot carry out: the error comes after the pipeline
BAD_HINT = """graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    apply     h2 = h * 2
    scatter   m = src.h + src.h2 / max(dst.degree, 1)
    gather    a = sum(m)
    transform t = a @ W
    return t
}

model M { return L[C](X) }

train t { model = M; loss = cross_entropy(Y, mask = train) }

schedule { order L#1 = dense_first }
"""


def _run(capsys, *argv):
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def test_dump_dir_never_mixes_two_programs(tmp_path, capsys):
    d = tmp_path / "dumps"
    assert _run(capsys, "compile", GAT, "--dump-dir", str(d))[0] == 0
    (d / "10-stale.ir").write_text("old")
    (d / "notes.txt").write_text("mine")
    bad = tmp_path / "bad.gd"
    bad.write_text(BAD_HINT)
    rc, _, err = _run(capsys, "compile", str(bad), "--dump-dir", str(d))
    assert rc == 1 and "cannot be carried out" in err
    names = sorted(p.name for p in d.iterdir())
    assert "00-ast.txt" not in names and "notes.txt" in names and "10-stale.ir" in names, names   # not gdsl's name
    assert all("gat.gd" not in (d / n).read_text() for n in names if n.endswith(".ir") and n != "10-stale.ir")
    assert "dense_first" in (d / "01-lower.ir").read_text()   # this program's dumps up to the failure
    assert _run(capsys, "compile", GCN, "--dump-dir", str(d))[0] == 0
    assert "gcn.gd" in (d / "00-ast.txt").read_text()


def test_dump_dir_removes_only_the_names_it_writes(tmp_path, capsys):
    """helper-14: `10-notes.ir` and `42-my-experiment.ir` of the user's were removed (any NN-name.ir)."""
    d = tmp_path / "dumps"
    d.mkdir()
    for name in ("10-notes.ir", "42-my-experiment.ir", "06-fuse.ir"):
        (d / name).write_text("mine")
    assert _run(capsys, "compile", GCN, "--dump-dir", str(d), "--emit", "ast")[0] == 0
    assert (d / "10-notes.ir").read_text() == "mine" and (d / "42-my-experiment.ir").read_text() == "mine"
    assert (d / "06-fuse.ir").read_text() != "mine"


def test_an_order_hint_on_a_call_the_model_drops_says_so(tmp_path, capsys):
    prog = tmp_path / "dropped.gd"
    prog.write_text(Path(GCN).read_text().replace("    h = dropout(X, p)\n", "    u = GCNConv[hidden](X)\n    h = dropout(X, p)\n")
                    + "schedule { order GCNConv#1 = dense_first }\n")
    rc, _, err = _run(capsys, "compile", str(prog), "--data", "cora")
    assert rc == 1 and "or the model does not read the call's result" in err, err


@pytest.mark.parametrize("emit", ["ast", "ir", "ir-opt"])
def test_the_exit_status_does_not_depend_on_emit(tmp_path, capsys, emit):
    """(was: 0 with --emit ast or ir, 1 with ir-opt)"""
    bad = tmp_path / "bad.gd"
    bad.write_text(BAD_HINT)
    rc, _, err = _run(capsys, "compile", str(bad), "--emit", emit)
    assert rc == 1 and "order L#1 = dense_first cannot be carried out" in err


def test_the_emitted_text_is_marked_after_the_dumps(capsys):
    rc, out, _ = _run(capsys, "compile", GCN, "--print-ir-after", "fuse", "--emit", "ir-opt")
    assert rc == 0
    dumps, emitted = out.split("// ----- --emit ir-opt -----\n")
    assert dumps.startswith("// ----- IR after fuse -----") and emitted.startswith("module")


@pytest.mark.parametrize("argv, said", [
    (("--mem-per-rank", "1G"), "--mem-per-rank needs --np P"),
    (("--dump-dir", ""), "--dump-dir: empty"),
    (("--set", "foo"), "--set expects NAME=VALUE, got 'foo'"),   # helper-14: was "missing.gd: no such file", exit 1
])
def test_usage_errors_win_over_a_missing_program(tmp_path, capsys, argv, said):
    rc, _, err = _run(capsys, "compile", str(tmp_path / "missing.gd"), *argv)
    assert rc == 2 and said in err


def test_one_vertex_op_for_both_ends_of_a_shared_attention_vector(tmp_path, capsys):
    """`dot(src.zs, a) + dot(dst.zs, a)`: after sinking, one `dot(zs, a)` (was two)."""
    prog = tmp_path / "shared.gd"
    prog.write_text(Path(GAT).read_text().replace("dot(dst.zs, ar)", "dot(dst.zs, al)"))
    rc, out, _ = _run(capsys, "compile", str(prog), "--print-ir-after", "fuse")
    assert rc == 0
    assert out.count("= dot[") == 2, out   # one per GATConv call


@pytest.mark.parametrize("returns", ["h", "a + a"])
def test_an_order_hint_on_a_dead_matmul_says_so(tmp_path, capsys, returns):
    """helper-11: `t = a @ W` that nothing reads: the hint was refused as if
    `src.h / max(dst.degree, 1)` did not fold (it does)."""
    prog = tmp_path / "dead.gd"
    prog.write_text(BAD_HINT.replace("    apply     h2 = h * 2\n", "")
                    .replace("src.h + src.h2 / max(dst.degree, 1)", "src.h / max(dst.degree, 1)")
                    .replace("-> [dout]", "-> [din]").replace("return t\n", f"return {returns}\n")
                    .replace("train t { model = M; loss = cross_entropy(Y, mask = train) }\n", ""))
    rc, _, err = _run(capsys, "compile", str(prog))
    assert rc == 1 and "error: order L#1 = dense_first cannot be carried out: its `@ param` is not used" in err, err
    assert "does not fold" not in err
