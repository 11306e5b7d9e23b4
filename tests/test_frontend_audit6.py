"""Front-end diagnostics and printing an outside user found wrong (session 36,
helper-77), each checked on the fixed side: a spaced call reference in an
order hint, a comment after a `\\` continuation, a directory given as data,
and `- - t` in `--emit ast`."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import gdsl
from gdsl.cli import main
from gdsl.diagnostics import Diagnostic
from gdsl.frontend import ast
from gdsl.frontend.parser import parse

ROOT = Path(__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()
GAT = (ROOT / "programs" / "gat.gd").read_text()


def _errors(src: str) -> list[Diagnostic]:
    with pytest.raises(gdsl.CompileError) as e:
        gdsl.compile(src)
    return e.value.diagnostics


def _one(src: str, old: str, new: str) -> str:
    assert src.count(old) == 1, old
    return src.replace(old, new)


# ---- 1. `order L #1`: '#' starts a comment (LANGUAGE.md), the error says so at the '#'
def test_a_spaced_call_reference_is_reported_at_its_hash():
    """Was: "unexpected 'GATConv', expected one of '=', call reference (Layer#k)"
    at the name, which says nothing of the comment that cut the hint short."""
    for hint, col, ref in (("order GATConv #1 = dense_first", 19, "GATConv#1"),
                           ("order GATConv# 1 = dense_first", 18, "GATConv#1"),
                           ("order GATConv #1", 19, "GATConv#1"),
                           ("order GATConv #x = dense_first", 19, "GATConv#k")):
        (d,) = _errors(_one(GAT, "    order     = auto\n", f"    {hint}\n"))
        assert (d.span.line, d.span.col) == (39, col), hint
        assert d.message == ("'#' starts a comment here, so the hint stops at 'GATConv' (a call reference is "
                             f"written without spaces: {ref})"), hint
        assert d.notes == (), hint


def test_a_comment_that_takes_the_schedules_brace_is_no_unclosed_brace_note(tmp_path, capsys):
    """`schedule { order L #1 = ... }` on one line: the comment takes the '}'.
    Was: the error at the name and a note "'{' opened here is never closed",
    which sent the user looking for a missing brace."""
    p = tmp_path / "p.gd"
    p.write_text(GCN + "\nschedule { order GCNConv #1 = dense_first }\n")
    assert main(["compile", str(p)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{p}:33:26: error: '#' starts a comment here, so the hint stops at 'GCNConv' (a call "
                          "reference is written without spaces: GCNConv#1; the '}' after the '#' is part of the "
                          "comment)\n"), err
    assert "never closed" not in err and err.count("error:") == 1, err
    p.write_text(GCN + "\nschedule { order GCNConv#1 = dense_first }\n")   # written as the contract shows it
    assert main(["compile", str(p)]) == 0


def test_a_statement_a_comment_cuts_short_is_reported_at_the_hash():
    """`order = #auto`: was "unexpected end of line" at the space before the '#'."""
    (d,) = _errors(_one(GAT, "    order     = auto\n", "    order     = #auto\n"))
    assert (d.span.line, d.span.col, d.message) == (
        39, 17, "unexpected end of line ('#' starts a comment here), expected one of '(', '-', '[', name, number")
    # a ';' inside the comment is no statement end (was: "unexpected ';'", read from the comment's text)
    (d,) = _errors(_one(GAT, "    order     = auto\n", "    order     = # auto; fast\n"))
    assert d.message.startswith("unexpected end of line ('#' starts a comment here)"), d.message
    (d,) = _errors(GCN + "\nschedule { order = #auto }\n")
    assert (d.span.line, d.span.col, d.notes) == (33, 20, ())
    assert d.message.startswith("unexpected end of line ('#' starts a comment here; the '}' after the '#' is part of "
                                "the comment), expected"), d.message


def test_a_bracket_the_comment_does_not_take_keeps_its_note():
    """The note stays where it is right: the train block's '{' is closed nowhere."""
    src = _one(GCN, "    epochs    = 200\n", "    epochs    = # 200\n").rstrip().removesuffix("}")
    (d,) = _errors(src)
    assert (d.span.line, d.span.col) == (29, 17)
    assert d.message.startswith("unexpected end of line ('#' starts a comment here), expected"), d.message
    assert [(n.span.line, n.span.col, n.message) for n in d.notes] == [(25, 12, "'{' opened here is never closed")]


def test_a_semicolon_in_a_comment_on_a_later_line_is_no_statement_end():
    """Was: "unexpected ';'" for a newline followed by a comment line holding a ';'."""
    (d,) = _errors(_one(GCN, "mask train, val, test\n", "mask train, val, test,\n# see: a; b\n"))
    assert (d.span.line, d.span.col, d.message) == (5, 23, "unexpected end of line, expected name")
    (d,) = _errors(_one(GCN, "mask train, val, test\n", "mask train, val, test,; graph H\n"))
    assert d.message == "unexpected ';', expected name"


# ---- 2. `\` continues a line only as its last character (docs/language.md, as in Python)
def test_a_comment_after_a_line_continuation_says_the_backslash_must_end_its_line():
    """Was: "unexpected character '\\\\'" and no word on why."""
    line = "    h = relu(GCNConv[hidden](h))\n"
    (d,) = _errors(_one(GCN, line, "    h = relu(GCNConv[hidden](h)) \\  # note\n"))
    assert (d.span.line, d.span.col) == (20, 34)
    assert d.message == "a '\\' line continuation must end its line: a comment may not follow it (as in Python)"
    (d,) = _errors(_one(GCN, line, "    h = relu(GCNConv[hidden](h)) \\ * 2\n"))
    assert d.message == ("unexpected character '\\': a '\\' continues a statement only as the last character "
                         "of its line")
    # at the end of its line (trailing spaces aside) it continues the statement
    ok = _one(GCN, line, "    h = relu( \\  \n        GCNConv[hidden](h))  # note\n")
    assert str(gdsl.compile(ok).ir) == str(gdsl.compile(GCN).ir)


# ---- 3. a directory as --data is named as typed
@pytest.mark.parametrize("command", [["run"], ["partition", "--np", "2", "--out", "parts"], ["compile"]])
def test_a_directory_as_data_is_named_as_typed(command, tmp_path, monkeypatch, capsys):
    """Was (run, partition): "gdsl: error: .: is a directory, not an .npz file"
    for `--data ./`: the path as pathlib normalises it, not as typed."""
    monkeypatch.chdir(tmp_path)
    rc = main([command[0], str(ROOT / "programs" / "gcn.gd"), *command[1:], "--data", "./"])
    err = capsys.readouterr().err
    assert rc == 1 and f"gdsl: error: ./: is a directory ({os.getcwd()}), not an .npz file\n" in err, err
    assert not (tmp_path / "parts").exists()


def test_an_absolute_directory_as_data_is_named_once():
    with pytest.raises(gdsl.GdslError, match=r"^/: is a directory, not an \.npz file$"):
        gdsl.load_graph("/")


# ---- 4. `- - t` in --emit ast
def _value(expr: str) -> ast.Expr:
    src = _one(GCN, "    apply     out = s + b\n", f"    apply     out = {expr}\n")
    (stmt,) = [s for s in parse(src).of(ast.LayerDecl)[0].body if isinstance(s, ast.StageStmt) and s.target == "out"]
    return stmt.value


@pytest.mark.parametrize("expr, shown", [("- - s", "-(-s)"), ("-(-s)", "-(-s)"), ("- - - s", "-(-(-s))"),
                                         ("b - - s", "(b - (-s))"), ("- - a @ W + b", "(((-(-a)) @ W) + b)")])
def test_a_double_negation_prints_apart_and_parses_back(expr, shown, tmp_path, capsys):
    """Was: `- - s` printed as `--s` (and `(--s)` as an operand), which reads as a decrement."""
    p = tmp_path / "p.gd"
    p.write_text(_one(GCN, "    apply     out = s + b\n", f"    apply     out = {expr}\n"))
    assert main(["compile", str(p), "--emit", "ast"]) == 0
    assert f"Stage apply out = {shown}\n" in capsys.readouterr().out
    assert _value(shown) == _value(expr)


def test_a_missing_directory_path_as_data_is_named_as_typed_without_the_builtin_hint(tmp_path):
    # helper-77: `--data nonexist/` was "nonexist: no such file (the built-in data sets are ...)"
    from gdsl.diagnostics import GdslError
    with pytest.raises(GdslError) as e:
        gdsl.load_graph(str(tmp_path / "nonexist") + "/")
    assert str(e.value) == f"{tmp_path / 'nonexist'}/: no such file"
    with pytest.raises(GdslError, match=r"^actor: no such file \(the built-in data sets are cora and citeseer"):
        gdsl.load_graph("actor")


def test_many_inputs_lower_in_linear_work(monkeypatch):
    """The data's dimension names are collected once per lowering (was: per
    shape, over every input: 20000 unused inputs took minutes; helper-4's fuzzing)."""
    from gdsl.frontend import lower
    calls = 0
    real = lower._names_in

    def counting(e):
        nonlocal calls
        calls += 1
        return real(e)
    monkeypatch.setattr(lower, "_names_in", counting)
    gcn = (Path(gdsl.__file__).resolve().parent.parent / "programs" / "gcn.gd").read_text()
    head, _, rest = gcn.partition("\nlayer ")
    n = 400
    extra = "".join(f"input I{i} : vertex f32[F{i}]\n" for i in range(n))
    gdsl.compile(head + "\n" + extra + "layer " + rest)
    assert calls < 20 * n, calls   # quadratic was > n * n = 160000
