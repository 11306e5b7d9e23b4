"""Source spans and user-facing diagnostics.

Every user error in gdsl becomes a `Diagnostic` at a source position; the
CLI renders them as ``file:line:col: error: message`` followed by the source
line and a caret, sorted by position (STYLE.md, "Errors a user sees").
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Span:
    """A 1-based [line:col, end_line:end_col) range in one source file."""

    line: int = 0
    col: int = 0
    end_line: int = 0
    end_col: int = 0
    file: str = field(default="<input>", compare=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    @property
    def known(self) -> bool:
        return self.line > 0


NO_SPAN = Span()


@dataclass(frozen=True)
class Diagnostic:
    span: Span
    message: str
    severity: str = "error"  # error | warning | note
    notes: tuple["Diagnostic", ...] = ()
    # True where the error is about a symbolic dim that data would bind (a
    # `repeat C - 5` count, `reshape(X, [1433])` with F unbound): the API
    # defers such a program's compile until it is bound to a graph.
    needs_data: bool = False

    def sort_key(self):
        return (self.span.file, self.span.line, self.span.col, self.message)


class Error(Exception):
    """The base of the errors gdsl raises for the user's mistakes:
    `CompileError` (in a program, with source positions) and `GdslError`
    (data, arguments, files, runs). `except gdsl.Error` catches both; a bug
    of gdsl's own is neither."""


def _line(d: Diagnostic) -> str:
    """``file:line:col: severity: message``, marked as the CLI marks it."""
    return f"{d.span}: {d.severity}: {d.message}" + (" (needs data)" if d.needs_data else "")


class CompileError(Error):
    """One or more user errors; carries the collected diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic], source: str | None = None):
        self.diagnostics = sorted(diagnostics, key=Diagnostic.sort_key)
        self.source = source
        super().__init__("\n".join(_line(d) + "".join(f"\n  {_line(n)}" for n in d.notes) for d in self.diagnostics))

    @property
    def needs_data(self) -> bool:
        """Every error is one that binding the dims from data may resolve."""
        return bool(self.diagnostics) and all(d.needs_data for d in self.diagnostics)


class GdslError(Error):
    """A user error that is not tied to a source position (data files, CLI)."""


class GdslWarning(UserWarning):
    """A compile warning (`gdsl.compile` raises it with `warnings.warn`):
    `str()` is the one-line ``file:line:col: message``; `rendered`
    adds the source line and caret, as the CLI prints it."""

    def __init__(self, diag: Diagnostic, source: str | None = None):
        super().__init__(f"{diag.span}: {diag.message}")
        self.diagnostic, self.source = diag, source

    @property
    def rendered(self) -> str:
        return render(self.diagnostic, self.source)


class DiagnosticBag:
    """Collects diagnostics during a phase; deduplicates exact repeats."""

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []
        self._seen: set[tuple] = set()

    def error(self, span: Span, message: str, notes: tuple[Diagnostic, ...] = (), needs_data: bool = False) -> None:
        key = (span.line, span.col, message)
        if key not in self._seen:
            self._seen.add(key)
            self.items.append(Diagnostic(span, message, "error", notes, needs_data))

    def note(self, span: Span, message: str) -> Diagnostic:
        return Diagnostic(span, message, "note")

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self, source: str | None = None) -> None:
        if self.items:
            raise CompileError(self.items, source)


MAX_SHOWN = 120  # source characters shown around a caret
# characters that move a terminal's cursor off the line (or are line breaks to Unicode): one column each
_ONE_COLUMN = {ord(c): " " for c in "\f\v\r\x1c\x1d\x1e\x85\u2028\u2029"}
# the other control characters (an escape sequence would clear or recolour the terminal) and the
# bidirectional overrides (which reorder the line on screen): a visible U+FFFD, one column each
# (was: printed raw under a header that escapes them; helper-4)
_ONE_COLUMN.update({c: "\ufffd" for c in [*range(0x00, 0x09), *range(0x0e, 0x1c), 0x1f, *range(0x7f, 0x85),
                                          *range(0x86, 0xa0), 0x061c, 0x200e, 0x200f, *range(0x202a, 0x202f),
                                          *range(0x2066, 0x206a)]})


def render(diag: Diagnostic, source: str | None) -> str:
    """Render one diagnostic like clang: header, source line, caret."""
    out = [_line(diag)]
    # lines as the parser counts them, at "\n" only (was splitlines(), which also breaks at a form feed,
    # vertical tab, NEL, U+2028, ...: every later error showed the wrong line under a right line:col)
    lines = source.split("\n") if source else []
    sp = diag.span
    if sp.known and 1 <= sp.line <= len(lines):
        text = lines[sp.line - 1].removesuffix("\r").expandtabs(1).translate(_ONE_COLUMN)
        width = 1
        if sp.end_line == sp.line and sp.end_col > sp.col:
            width = sp.end_col - sp.col
        col = sp.col
        if len(text) > MAX_SHOWN:  # show a window around the caret, not a screenful
            start = max(0, min(col - 1 - MAX_SHOWN // 2, len(text) - MAX_SHOWN))
            lead = 3 if start else 0   # the leading "..."
            text = ("..." if start else "") + text[start:start + MAX_SHOWN] + ("..." if start + MAX_SHOWN < len(text) else "")
            col = col - start + lead
            width = min(width, lead + MAX_SHOWN - (col - 1))   # carets stop at the window's last character
        gutter = f"{sp.line:>4} | "
        out.append(gutter + text)
        out.append(" " * (len(gutter) - 2) + "| " + " " * (col - 1) + "^" * max(1, width))
    for n in diag.notes:
        out.append(render(n, source))
    return "\n".join(out)


NEEDS_DATA_NOTE = ("note: the checks marked (needs data) compare with a size the data binds (N, E, F or C); "
                   "with --data, or under `gdsl run`, they are checked against the data's values")


def render_all(err: CompileError) -> str:
    text = "\n".join(render(d, err.source) for d in err.diagnostics)
    if any(d.needs_data for d in err.diagnostics):
        text += "\n" + NEEDS_DATA_NOTE
    return text
