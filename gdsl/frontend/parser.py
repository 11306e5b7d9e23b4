"""Lark front end: source text -> `ast.Program`, or located diagnostics.

One boundary (`parse`) turns every failure of the lexer or parser into a
`CompileError` at the user's source position (STYLE.md, after Triton's
CompilationError and Preql): no Lark exception escapes.
"""
from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from gdsl.diagnostics import CompileError, Diagnostic, Span
from gdsl.frontend import ast

MAX_NESTING = 100  # ( and [, and expressions, deeper than this are refused before any recursion
_EXPR_RULES = frozenset({"binop", "neg", "call", "index", "attr", "list", "kwarg"})


class _PostLexer:
    """Drops newlines inside ( ) and [ ] and refuses absurd nesting depth."""

    always_accept = ("_NL",)

    def process(self, stream):
        depth = 0
        for tok in stream:
            if tok.type in ("LPAR", "LSQB"):
                depth += 1
                if depth > MAX_NESTING:
                    raise _TooDeep(tok)
            elif tok.type in ("RPAR", "RSQB"):
                depth = max(0, depth - 1)
            elif tok.type == "_NL" and depth > 0:
                continue
            yield tok


class _StaticParams(list):
    """A layer's or model's `[...]` static parameters, told apart from an
    equally empty result shape `[]` in `layer_decl`."""


class _TooDeep(Exception):
    def __init__(self, tok: Token) -> None:
        self.tok = tok


@functools.lru_cache(maxsize=None)
def _parser() -> Lark:
    """One parser for every file (spans get their file name in `parse`)."""
    grammar = (Path(__file__).with_name("grammar.lark")).read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", postlex=_PostLexer(),
                propagate_positions=True, maybe_placeholders=False)


_TOKEN_NAMES = {
    "_NL": "newline or ';'", "NAME": "name", "NUMBER": "number", "CALLREF": "call reference (Layer#k)",
    "STAGE": "stage keyword", "$END": "end of input", "PLUS": "'+'", "MINUS": "'-'",
    "MULOP": "operator", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "LBRACE": "'{'", "RBRACE": "'}'", "COMMA": "','", "COLON": "':'", "EQUAL": "'='",
    "DOT": "'.'", "__ANON_0": "'->'",
}


def _tok_name(t: str, parser: Lark) -> str:
    if t in _TOKEN_NAMES:
        return _TOKEN_NAMES[t]
    for term in parser.terminals:
        if term.name == t and term.pattern.type == "str":
            return f"'{term.pattern.value}'"
    return t.lower()


def _describe(tok: Token) -> str:
    if tok.type == "$END":
        return "end of input"
    if tok.type == "_NL":   # its first statement end: a ';' in a comment after it is none (was: "unexpected ';'")
        return "';'" if re.match(r"[ \t\f\r]*;", tok.value) else "end of line"
    return f"'{tok.value}'"


def parse(source: str, file: str = "<input>") -> ast.Program:
    """Parse gdsl source into an AST; raises CompileError with located diagnostics."""
    if "\x00" in source:
        at = source.index("\x00")
        line, col = source.count("\n", 0, at) + 1, at - (source.rfind("\n", 0, at) + 1) + 1
        # no source echo: the line is binary data
        raise CompileError([Diagnostic(Span(line, col, line, col + 1, file), "input is not a text file (NUL byte)")])
    parser = _parser()
    try:
        tree = parser.parse(source + "\n")
        _check_depth(tree, file, source)
        return _ToAst(file).transform(tree)
    except _TooDeep as e:
        t = e.tok
        raise CompileError([Diagnostic(_tok_span(t, file), f"nesting deeper than {MAX_NESTING} levels")], source) from None
    except UnexpectedToken as e:
        tok = e.token
        if (typo := _misspelled_keyword(source, tok, file)) is not None:
            raise CompileError([typo], source) from None
        pos = len(source) if tok.type == "$END" else tok.start_pos
        accepted = _accepted(e)
        if not _in_schedule(source, pos):   # `order Layer#k = ...` is a schedule statement only
            accepted = set(accepted) - {"CALLREF"}
        expected = sorted({_tok_name(t, parser) for t in accepted if not t.startswith("__ANON") or t in _TOKEN_NAMES})
        # one grammar rule for every block's body: offer only the statements of the block it is in (was
        # 'apply', 'gather', 'param', ... for a train block missing its '}')
        not_here = {"train": _STATEMENT_WORDS, "schedule": _STATEMENT_WORDS,
                    "model": (*STAGES, "param")}.get(_top_keyword(source, pos), ())
        expected = [x for x in expected if x.strip("'") not in not_here]
        if (cut := _cut_by_comment(source, tok, accepted, expected, file)) is not None:
            raise CompileError([cut], source) from None
        if tok.type == "$END":
            lines = source.rstrip("\n").split("\n")
            span = Span(len(lines), len(lines[-1]) + 1, len(lines), len(lines[-1]) + 2, file)
        else:
            span = _tok_span(tok, file)
        msg = f"unexpected {_describe(tok)}{_expected_text(expected)}"
        raise CompileError([Diagnostic(span, msg, notes=_unclosed_note(source, pos, file))], source) from None
    except UnexpectedCharacters as e:
        ch = source[e.pos_in_stream] if e.pos_in_stream < len(source) else "?"
        span = Span(e.line, e.column, e.line, e.column + 1, file)
        msg = _backslash_message(source, e.pos_in_stream) if ch == "\\" else f"unexpected character {ch!r}"
        raise CompileError([Diagnostic(span, msg)], source) from None
    except UnexpectedEOF:
        lines = source.split("\n")
        raise CompileError([Diagnostic(Span(len(lines), 1, len(lines), 2, file), "unexpected end of input")], source) from None
    except UnexpectedInput as e:  # pragma: no cover - other Lark input errors
        raise CompileError([Diagnostic(Span(getattr(e, "line", 1), getattr(e, "column", 1), file=file), "syntax error")], source) from None
    except VisitError as e:
        if isinstance(e.orig_exc, CompileError):
            raise CompileError(e.orig_exc.diagnostics, source) from None
        raise
    except RecursionError:
        raise CompileError([Diagnostic(Span(1, 1, 1, 2, file), "program is nested too deeply")], source) from None


STAGES = ("scatter", "gather", "transform", "sync", "apply")
_STATEMENT_WORDS = (*STAGES, "param", "return", "repeat")


def _expected_text(expected: list[str]) -> str:
    if not expected:
        return ""
    shown = expected[:5]
    more = ", ..." if len(expected) > 5 else ""
    return ", expected " + (shown[0] if len(shown) == 1 else "one of " + ", ".join(shown) + more)


def _cut_by_comment(source: str, tok: Token, accepted, expected: list[str], file: str) -> Diagnostic | None:
    """A '#' that ends a statement before it is complete: `order Lin #1 = ...` (a call
    reference has no spaces; LANGUAGE.md: `#` starts a comment) or `order = # auto`.
    The error is at the '#' and says so (was: "unexpected 'Lin', expected one of '=',
    call reference (Layer#k)", or "unexpected end of line" at the space before it)."""
    rest = source[tok.end_pos:]
    if tok.type == "NAME" and "CALLREF" in accepted and (m := re.match(r"[ \t]*#[ \t]*(\d*)", rest)):
        at = tok.end_pos + m.group(0).index("#")
        taken = _taken(source, tok.start_pos, at)
        why = (f"'#' starts a comment here, so the hint stops at '{tok}' (a call reference is written "
               f"without spaces: {tok}#{m[1] or 'k'}{taken})")
    elif tok.type == "_NL" and (m := re.match(r"[ \t\f\r]*#", tok.value)):
        at = tok.start_pos + m.end() - 1
        taken = _taken(source, tok.start_pos, at)
        why = f"unexpected end of line ('#' starts a comment here{taken}){_expected_text(expected)}"
    else:
        return None
    line = source.count("\n", 0, at) + 1
    col = at - (source.rfind("\n", 0, at) + 1) + 1
    # the bracket the comment took needs no "never closed" note: the message says why
    notes = () if taken else _unclosed_note(source, tok.start_pos, file)
    return Diagnostic(Span(line, col, line, col + 1, file), why, notes=notes)


def _taken(source: str, pos: int, at: int) -> str:
    """Says so when the comment at `at` holds the closer of the innermost bracket
    open at `pos` (was: a note that the schedule's '{' is never closed, after
    `schedule { order L #1 = dense_first }`)."""
    opened, never = _brackets_at(source, pos)
    if not opened or opened[-1] not in never:
        return ""
    closer = {v: k for k, v in _CLOSER.items()}[source[opened[-1]]]
    eol = source.find("\n", at)
    comment = source[at:len(source) if eol < 0 else eol]
    return f"; the '{closer}' after the '#' is part of the comment" if closer in comment else ""


def _backslash_message(source: str, at: int) -> str:
    """A `\\` that is not the last thing on its line (spaces aside): a line
    continuation must end its line, so a comment after it is refused, as
    Python refuses it (was: "unexpected character '\\\\'" and no why)."""
    eol = source.find("\n", at)
    rest = source[at + 1:len(source) if eol < 0 else eol].lstrip(" \t\f\r")
    if rest.startswith("#"):
        return "a '\\' line continuation must end its line: a comment may not follow it (as in Python)"
    return "unexpected character '\\': a '\\' continues a statement only as the last character of its line"


def _misspelled_keyword(source: str, tok: Token, file: str) -> Diagnostic | None:
    """`gahter a = sum(m)`, `Gather a = ...`: a line starting with two names can only
    be a keyword statement, so the first is a misspelt keyword (was: "unexpected 'a',
    expected one of '=', call reference (Layer#k)", at the second name)."""
    if tok.type != "NAME":
        return None
    start = source.rfind("\n", 0, tok.start_pos) + 1
    m = re.fullmatch(r"([ \t]*)([A-Za-z_]\w*)[ \t]+", source[start:tok.start_pos])
    if m is None or m.group(2) in _STATEMENT_WORDS:
        return None
    close = difflib.get_close_matches(m.group(2).lower(), _STATEMENT_WORDS, n=1, cutoff=0.6)
    if not close:
        return None
    col = len(m.group(1)) + 1
    return Diagnostic(Span(tok.line, col, tok.line, col + len(m.group(2)), file),
                      f"unknown statement keyword '{m.group(2)}' (did you mean '{close[0]}'?"
                      + (f" the stages are {', '.join(STAGES[:-1])} and {STAGES[-1]})" if close[0] in STAGES else ")"))


def _top_keyword(source: str, pos: int) -> str | None:
    """The last top-level keyword before `pos` (`layer`, `model`, `train`, ...): the declaration it is in."""
    words = re.findall(r"^[A-Za-z_]\w*", source[:pos], re.M)
    return words[-1] if words else None


def _in_schedule(source: str, pos: int) -> bool:
    """Whether `pos` follows a `schedule` declaration (the last top-level keyword before it)."""
    return _top_keyword(source, pos) == "schedule"


def _accepted(e: UnexpectedToken) -> set[str]:
    """The tokens the parser would take where it failed. LALR's `expected` is the
    failing state's lookahead set, which after a default reduction holds tokens of
    merged states (`f32[din d]` offered ')' and, inside brackets, a newline the
    post-lexer never passes); the interactive parser tries each one instead."""
    try:
        return e.interactive_parser.accepts() or e.expected
    except Exception:  # pragma: no cover - a Lark without accepts(): the state's set
        return e.expected


def _check_depth(tree, file: str, source: str) -> None:
    """Refuse expressions nested deeper than MAX_NESTING (`- - - x`, `a + a + ...`),
    walking without recursion, so later recursive phases cannot overflow."""
    stack = [(tree, 0, 0)]
    while stack:
        node, depth, run = stack.pop()   # run: how many levels up to here are binary operators in a row
        if node.data in _EXPR_RULES:
            depth += 1
            run = run + 1 if node.data == "binop" else 0
            if depth > MAX_NESTING:
                m = node.meta
                span = Span(m.line, m.column, m.line, m.column + 1, file)
                # `a + b + ...` nests one level per operator (was: said nothing of that)
                why = (" (a chain of binary operators nests one level per operator: split it over several "
                       "statements)" if run > MAX_NESTING // 2 else "")
                raise CompileError([Diagnostic(span, f"expression nested deeper than {MAX_NESTING} levels{why}")],
                                   source)
        stack.extend((c, depth, run) for c in node.children if isinstance(c, Tree))


_CLOSER = {")": "(", "]": "[", "}": "{"}


def _brackets_at(source: str, pos: int, callrefs: bool = True) -> tuple[list[int], set[int]]:
    """The brackets open at `pos` (offsets, innermost last) and those never
    closed. `callrefs`: `L#1` is a call reference (an order hint's), not a
    comment; else every `#` starts one (as the lexer reads it outside order hints)."""
    stack: list[int] = []
    never: set[int] = set()
    at_pos: list[int] | None = None
    i = 0
    while i < len(source):
        if at_pos is None and i >= pos:
            at_pos = list(stack)
        c = source[i]
        if c == "#" and not (callrefs and i and (source[i - 1].isalnum() or source[i - 1] == "_")
                             and source[i + 1:i + 2].isdigit()):
            nl = source.find("\n", i)
            i = len(source) if nl < 0 else nl
            continue
        if c in "([{":
            stack.append(i)
        elif c in _CLOSER and any(source[o] == _CLOSER[c] for o in stack):
            while source[stack[-1]] != _CLOSER[c]:  # openers a mismatched closer skips are never closed
                never.add(stack.pop())
            stack.pop()
        i += 1
    never.update(stack)
    return (stack if at_pos is None else at_pos), never


def _unclosed_note(source: str, pos: int, file: str) -> tuple[Diagnostic, ...]:
    """A note at the innermost bracket open at `pos` if it is never closed
    (a missing ')' makes the parser fail lines later, at the next statement)."""
    why = ""
    at_pos, never = _brackets_at(source, pos)
    if not at_pos or at_pos[-1] not in never:
        # `model M { return L#1[C](X) }`: outside an order hint `#` starts a comment, which
        # takes the `}` with it (was: an error at the next line and no note)
        at_pos, never = _brackets_at(source, pos, callrefs=False)
        if not at_pos or at_pos[-1] not in never or not _callref_outside_order(source, at_pos[-1], pos):
            return ()
        why = (" (a '#' starts a comment to the end of its line, the closing bracket after it included; "
               "`Layer#k` names a call only in a schedule's order hint)")
    o = at_pos[-1]
    line = source.count("\n", 0, o) + 1
    col = o - (source.rfind("\n", 0, o) + 1) + 1
    return (Diagnostic(Span(line, col, line, col + 1, file), f"'{source[o]}' opened here is never closed{why}",
                       "note"),)


def _callref_outside_order(source: str, start: int, end: int) -> bool:
    """Between `start` and `end` a `Name#k` that is not an order hint's call
    reference (`order L#1 = ...`), which the lexer reads as a comment."""
    for m in re.finditer(r"(\w+)#\d", source[start:end]):
        i = start + m.start()
        head = source[source.rfind("\n", 0, i) + 1:i]
        if not re.search(r"\border\s*$", head):
            return True
    return False


def _tok_span(t: Token, file: str) -> Span:
    return Span(t.line, t.column, t.end_line or t.line, t.end_column or t.column + 1, file)


def parse_number(text: str) -> int | float:
    mult = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(text[-1], 1)
    body = text[:-1] if mult != 1 else text
    if any(c in body for c in ".eE"):
        v = float(body) * mult
        return v
    return int(body) * mult


class _ToAst(Transformer):
    """Lark tree -> AST dataclasses, attaching spans from Lark's metadata."""

    def __init__(self, file: str) -> None:
        super().__init__(visit_tokens=False)
        self.file = file

    def _span(self, meta) -> Span:
        if getattr(meta, "empty", True):
            return Span(file=self.file)
        return Span(meta.line, meta.column, meta.end_line, meta.end_column, self.file)

    def _tspan(self, tok: Token) -> Span:
        return _tok_span(tok, self.file)

    @staticmethod
    def _split_args(items):
        args, kwargs = [], []
        for it in items:
            (kwargs if isinstance(it, ast.Kwarg) else args).append(it)
        return args, kwargs

    # -- expressions
    @v_args(meta=True)
    def name(self, meta, c):
        return ast.Name(str(c[0]), span=self._span(meta))

    @v_args(meta=True)
    def number(self, meta, c):
        return ast.Number(parse_number(str(c[0])), str(c[0]), span=self._span(meta))

    @v_args(meta=True)
    def binop(self, meta, c):
        return ast.BinOp(str(c[1]), c[0], c[2], span=self._span(meta))

    @v_args(meta=True)
    def neg(self, meta, c):
        return ast.Neg(c[1], span=self._span(meta))

    @v_args(meta=True)
    def attr(self, meta, c):
        return ast.Attr(c[0], str(c[1]), span=self._span(meta))

    @v_args(meta=True)
    def call(self, meta, c):
        args, kwargs = self._split_args(c[1:])
        return ast.Call(c[0], args, kwargs, span=self._span(meta))

    @v_args(meta=True)
    def index(self, meta, c):
        args, kwargs = self._split_args(c[1:])
        return ast.Index(c[0], args, kwargs, span=self._span(meta))

    @v_args(meta=True)
    def list(self, meta, c):
        return ast.ListExpr(list(c), span=self._span(meta))

    @v_args(meta=True)
    def kwarg(self, meta, c):
        return ast.Kwarg(str(c[0]), c[1], span=self._span(meta))

    # -- types and statements
    @v_args(meta=True)
    def shape(self, meta, c):
        return list(c)

    @v_args(meta=True)
    def type_spec(self, meta, c):
        return ast.TypeSpec(str(c[0]), c[1] if len(c) > 1 else None, span=self._span(meta))

    @v_args(meta=True)
    def param_stmt(self, meta, c):
        return ast.ParamStmt(str(c[0]), c[1], c[2] if len(c) > 2 else None, span=self._span(meta))

    @v_args(meta=True)
    def stage_stmt(self, meta, c):
        return ast.StageStmt(str(c[0]), str(c[1]), c[2], span=self._span(meta))

    @v_args(meta=True)
    def assign_stmt(self, meta, c):
        return ast.Assign(str(c[0]), list(c[1:]), span=self._span(meta))

    @v_args(meta=True)
    def repeat_stmt(self, meta, c):
        return ast.Repeat(c[0], c[1], span=self._span(meta))

    @v_args(meta=True)
    def return_stmt(self, meta, c):
        return ast.Return(c[0], span=self._span(meta))

    @v_args(meta=True)
    def order_stmt(self, meta, c):
        layer, k = str(c[1]).split("#")
        return ast.OrderHint(str(c[0]), layer, int(k), c[2], span=self._span(meta))

    @v_args(meta=True)
    def block(self, meta, c):
        return list(c)

    # -- declarations
    @v_args(meta=True)
    def graph_options(self, meta, c):
        return [(str(t), self._tspan(t)) for t in c]

    @v_args(meta=True)
    def graph_decl(self, meta, c):
        return ast.GraphDecl(str(c[0]), c[1] if len(c) > 1 else [], span=self._span(meta))

    @v_args(meta=True)
    def input_decl(self, meta, c):
        return ast.InputDecl(str(c[0]), str(c[1]), c[2], span=self._span(meta), name_span=self._tspan(c[0]),
                             domain_span=self._tspan(c[1]))

    @v_args(meta=True)
    def mask_decl(self, meta, c):
        return ast.MaskDecl([(str(t), self._tspan(t)) for t in c], span=self._span(meta))

    @v_args(meta=True)
    def static_param(self, meta, c):
        return ast.StaticParam(str(c[0]), c[1] if len(c) > 1 else None, span=self._span(meta))

    @v_args(meta=True)
    def static_params(self, meta, c):
        return _StaticParams(c)

    @v_args(meta=True)
    def layer_arg(self, meta, c):
        return ast.LayerArg(str(c[0]), c[1], span=self._span(meta))

    @v_args(meta=True)
    def layer_decl(self, meta, c):
        name = str(c[0])
        rest = list(c[1:])
        # tagged: an empty `[]` static list and an empty result shape `-> []` are both empty
        # lists (was: `layer L() -> []` took its shape for the static list and crashed; helper-71)
        static = list(rest.pop(0)) if rest and isinstance(rest[0], _StaticParams) else []
        body = rest.pop()
        result = rest.pop()
        args = rest
        return ast.LayerDecl(name, static, args, result, body, span=self._span(meta), name_span=self._tspan(c[0]))

    @v_args(meta=True)
    def model_decl(self, meta, c):
        static = list(c[1]) if len(c) > 2 else []
        return ast.ModelDecl(str(c[0]), static, c[-1], span=self._span(meta))

    @v_args(meta=True)
    def train_decl(self, meta, c):
        return ast.TrainDecl(str(c[0]), c[1], span=self._span(meta))

    @v_args(meta=True)
    def schedule_decl(self, meta, c):
        return ast.ScheduleDecl(c[0], span=self._span(meta))

    @v_args(meta=True)
    def start(self, meta, c):
        return ast.Program(self.file, list(c), span=Span(1, 1, 1, 1, self.file))
