"""How a diagnostic is rendered (gdsl/diagnostics.py), at the edges a
mutation audit found untested: the last source line, spans over several
lines, the 120-character window, tabs, and the bag's de-duplication."""
from __future__ import annotations

from gdsl.diagnostics import CompileError, Diagnostic, DiagnosticBag, Span, render, render_all


def test_an_error_on_the_last_line_shows_that_line():
    src = "graph G\nmodel M { return Y }"          # no newline at the end
    d = Diagnostic(Span(2, 18, 2, 19, "m.gd"), "undefined name 'Y'")
    assert render(d, src) == ("m.gd:2:18: error: undefined name 'Y'\n"
                              "   2 | model M { return Y }\n"
                              "     |                  ^")


def test_a_span_over_several_lines_gets_one_caret():
    """The caret underlines a range only when it ends on its own line."""
    src = "a = relu(\n  X + Y\n      )\n"
    d = Diagnostic(Span(1, 5, 3, 8, "m.gd"), "bad call")     # end column past the start column
    assert render(d, src).splitlines()[2] == "     |     ^"


def _long_line_error(line: str, col: int, end_col: int):
    return render(Diagnostic(Span(3, col, 3, end_col, "l.gd"), "unknown function 'gelu'"), "\n\n" + line + "\n")


def test_a_long_line_shows_a_window_with_the_caret_under_the_token():
    """docs/cli.md: a 318-character line, `gelu` at column 212: 120
    characters around the caret, `...` at both cuts, the carets under gelu."""
    line = " + ".join(["relu(X)"] * 26) + " + gelu(X) + " + " + ".join(["tanh(X)"] * 10)
    col = line.index("gelu") + 1
    _, shown, carets = _long_line_error(line, col, col + 4).splitlines()
    assert shown.startswith("   3 | ...") and shown.endswith("...")
    assert len(shown) == len("   3 | ") + 3 + 120 + 3
    assert carets.endswith("^^^^") and shown[carets.index("^"):carets.index("^") + 4] == "gelu"


def test_a_window_that_reaches_the_end_of_the_line_has_no_trailing_dots():
    line = "x" * 190 + "gelu(X)" + "yyy"            # 200 characters, the caret 10 from the end
    col = 191
    _, shown, carets = _long_line_error(line, col, col + 4).splitlines()
    assert shown.startswith("   3 | ...") and shown.endswith("yyy")
    assert shown[carets.index("^"):carets.index("^") + 4] == "gelu"


def test_carets_of_a_long_range_stop_at_the_window():
    """A range running past the shown window (a 300-character call) is
    underlined up to the window's end, not a screen further."""
    line = "h = f(" + "x" * 300 + ")"
    _, shown, carets = _long_line_error(line, 5, len(line) + 1).splitlines()
    assert carets.startswith("     |     ^") and len(carets) <= len(shown)
    # the carets end under the window's last source character, never under the trailing "..."
    assert shown.endswith("x...") and len(carets) == len(shown) - 3
    line = "h = " + "y" * 100 + "f(" + "x" * 300 + ")"   # a window that starts later, after a leading "..."
    _, shown, carets = _long_line_error(line, 105, len(line) + 1).splitlines()
    assert shown.split("| ", 1)[1].startswith("...") and shown.endswith("x...") and len(carets) == len(shown) - 3


def test_a_tab_counts_as_one_column():
    """Columns count characters (a tab is one): the source line is shown
    with each tab as one space, so the caret sits under the token."""
    src = "\tgather\ta = sum(m)\n"
    d = Diagnostic(Span(1, 13, 1, 16, "t.gd"), "unknown function 'sum'")
    _, shown, carets = render(d, src).splitlines()
    assert "\t" not in shown and shown[carets.index("^"):carets.index("^") + 3] == "sum"


def test_the_bag_drops_only_exact_repeats():
    bag = DiagnosticBag()
    at = Span(4, 7, 4, 9, "b.gd")
    bag.error(at, "undefined name 'h'")
    bag.error(at, "undefined name 'h'")
    bag.error(at, "shape mismatch in '@'")
    assert [d.message for d in bag.items] == ["undefined name 'h'", "shape mismatch in '@'"]


def test_needs_data_only_when_every_error_does():
    """A program is deferred until bound only when data may fix *all* its
    errors; the closing note is printed when any error is marked."""
    data = Diagnostic(Span(1, 1, 1, 2, "p.gd"), "left side has F features", needs_data=True)
    plain = Diagnostic(Span(2, 1, 2, 2, "p.gd"), "unknown function 'gelu'")
    mixed = CompileError([plain, data], "a\nb\n")
    assert not mixed.needs_data and CompileError([data]).needs_data and not CompileError([]).needs_data
    text = render_all(mixed)
    assert "(needs data)" in text and text.endswith("they are checked against the data's values")
    assert [d.span.line for d in mixed.diagnostics] == [1, 2]    # sorted by position


def test_lines_are_counted_at_newlines_only_as_the_parser_counts_them():
    """A form feed (whitespace to the grammar), vertical tab, NEL or U+2028
    is not a line break: was splitlines(), so every later error showed the
    line above its own, the caret past its end (helper-59). CRLF files show
    their lines without the CR."""
    import gdsl
    src = "graph G (self_loops)  # a@b\ninput X : vertex f32[F]\nmodel M {\n    return X%+ gelu(X)\n}\n"
    for sep, eol in (("\f", "\n"), ("\v", "\n"), ("\x85", "\n"), ("\u2028", "\n"), (" ", "\r\n")):
        try:   # in a comment; a form feed also between tokens, where the grammar takes it as a space
            gdsl.compile(src.replace("@", sep).replace("%", "\f" if sep == "\f" else " ").replace("\n", eol))
        except CompileError as e:
            lines = render_all(e).splitlines()
        else:
            raise AssertionError("compiled")
        assert lines == ["<input>:4:16: error: unknown function 'gelu'",
                         "   4 |     return X + gelu(X)",
                         "     |                ^^^^"], (repr(sep), lines)


def test_control_and_bidi_characters_are_not_printed_raw_under_the_header():
    """An escape sequence in the source line would clear or recolour the
    user's terminal, a right-to-left override reorder the line: each is shown
    as one U+FFFD, the caret still under its column (helper-4)."""
    import gdsl
    for bad in ("\x1b[2J\x1b[31m", "\u202e", "\x07", "\x9b"):
        src = f"graph G (self_loops)\ninput X : vertex f32[F]\nmodel M {{\n    {bad}return X\n}}\n"
        try:
            gdsl.compile(src)
        except CompileError as e:
            lines = render_all(e).splitlines()
        else:
            raise AssertionError("compiled")
        shown = bad.translate({ord(c): "\ufffd" for c in "\x1b\u202e\x07\x9b"})
        assert lines[1] == f"   4 |     {shown}return X", (repr(bad), lines)
        assert lines[2] == "     |     ^", (repr(bad), lines)
        assert not any(c in "\x1b\u202e\x07\x9b" for c in "\n".join(lines[1:])), lines
