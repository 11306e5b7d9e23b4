"""The Python API: `gdsl.compile(...)` -> `Program`; `Program.module(graph)`."""
from __future__ import annotations

import importlib.util
import numbers
import os
import warnings
from pathlib import Path
from typing import Any

from torch import nn

from gdsl.backends import require_backend
from gdsl.compiler import Compiled, compile_source, front, normalize_text, read_source
from gdsl.diagnostics import CompileError, GdslError, GdslWarning
from gdsl.graph.graph import Graph
from gdsl.ir.printer import print_module
from gdsl.runtime.binding import bind_dims
from gdsl.runtime.memory import release_free_heap

BACKENDS = ("reference", "numba", "triton")


def default_backend(target: str | None = None) -> str:
    """The backend a program runs on when none is named: `schedule { target =
    gpu }` picks triton; otherwise (`target = cpu`, or no target) numba, the
    CPU backend, when the numba package is installed, else the reference
    backend (which stays selectable by name: it is the semantic oracle)."""
    if target == "gpu":
        return "triton"
    if target == "cpu" or importlib.util.find_spec("numba") is not None:
        return "numba"
    return "reference"


class Program:
    """A checked gdsl program; bind it to a graph with `module(graph)`.

    Static-argument overrides (`gdsl.compile("gcn.gd", hidden=64)`) apply to
    the model the train block selects, on top of the block's own arguments.
    """

    def __init__(self, source: str, file: str = "<input>", train: str | None = None, **overrides: Any) -> None:
        self.source, self.file, self.train_name, self.overrides = source, file, train, overrides
        self._compiled: Compiled | None = None
        self._unbound: CompileError | None = None
        self._warned = False
        try:
            self._compiled = compile_source(source, file, overrides=overrides, train=train)
            self.checked = self._compiled.checked
            self._warn(self._compiled)
        except CompileError as e:
            # A program whose only errors are about symbolic dims that data binds
            # (`repeat C - 5`, `dropout(h, 1 / N)`, `reshape(X, [1433])`) is
            # compiled when it is bound to a graph; `compiled` / `ir` raise the
            # error until then.
            if not e.needs_data:
                raise
            self._unbound = e
            self.checked = front(source, file, train)[1]

    def __repr__(self) -> str:
        """`Program('programs/gcn.gd', train='cora', model='GCN', hidden=64)` (was object's; helper-69)."""
        cfg = self.train
        parts = [repr(self.file)]
        if cfg is not None:
            parts += [f"train={cfg.name!r}", f"model={cfg.model!r}"]
        parts += [f"{k}={v!r}" for k, v in self.overrides.items()]
        return f"Program({', '.join(parts)})"

    def _warn(self, compiled: Compiled) -> None:
        """Raise the compile warnings once per program (at `gdsl.compile`, or
        at the first `bind` of a program that needs data to compile)."""
        if not self._warned:
            self._warned = True
            for d in compiled.warnings:
                warnings.warn(GdslWarning(d, compiled.source), stacklevel=4)

    @property
    def compiled(self) -> Compiled:
        """The program compiled with symbolic dims (CompileError if it needs
        data to compile: see `bind`)."""
        if self._compiled is None:
            raise self._unbound
        return self._compiled

    @property
    def train(self):
        """The selected train block as a `TrainConfig` (or None)."""
        return self.checked.train

    @property
    def default_backend(self) -> str:
        return default_backend(self.checked.schedule.get("target"))

    @property
    def ir(self) -> str:
        return print_module(self.compiled.module)

    def bind(self, graph: Graph, dims: dict[str, int] | None = None, hoist: bool = False) -> Compiled:
        """Compile again with the dims bound from `graph` (concrete shapes);
        `dims` gives some first (see `module`); `hoist` as in `module`."""
        if not isinstance(graph, Graph):
            raise TypeError(f"bind() takes a gdsl.Graph, got {type(graph).__name__}")
        # fields assigned or edited since it was built, too: the loader checked the file, so what fails
        # here is the graph as it is now (was: "cora.npz: features contain NaN", the file being fine; helper-69)
        graph.validate(f"the graph loaded from {graph.source}, as it is now" if graph.source else graph.name)
        dims = bind_dims(self.checked, graph, dims)
        bound = compile_source(self.source, self.file, dims=dims, overrides=self.overrides, train=self.train_name,
                               hoist=hoist)
        self._warn(bound)
        return bound

    def module(self, graph: Graph, backend: str | None = None, *, dims: dict[str, int] | None = None,
               hoist: bool = False) -> nn.Module:
        """The program bound to `graph` as a `torch.nn.Module` on `backend`
        (default: triton when the schedule says `target = gpu`, else numba,
        or reference where the numba package is not installed).

        `dims` gives symbolic dims instead of reading them from the data,
        e.g. `dims={"C": 7}` to apply a model trained on 7 classes to a
        graph whose labels lack some of them, or that has no labels.

        `hoist=True` computes the values that depend on no param and no
        dropout (the IR's `invariant=true` ops, e.g. SGC's S^K X) once per
        features tensor instead of in every forward, as PyG's
        `SGConv(cached=True)` does (see `model.hoist`); `gdsl.train` and
        `gdsl run` turn it on. The order pass then aggregates such values
        sparse-first (`order_by=invariant`), so setting `model.hoist` later
        keeps the order chosen here."""
        if not isinstance(graph, Graph):
            raise TypeError(f"module() takes a gdsl.Graph (gdsl.load_graph, Graph.from_edges, from_pyg, from_dgl), "
                            f"got {type(graph).__name__}")
        if not isinstance(hoist, bool):
            raise TypeError(f"module(): hoist must be True or False, got {hoist!r}")
        backend = self.default_backend if backend is None else backend
        if backend not in BACKENDS:
            raise GdslError(f"unknown backend '{backend}' (available: {', '.join(BACKENDS)})")
        require_backend(backend)   # GdslError without numba; without triton, or a GPU and TRITON_INTERPRET=1
        bound = self.bind(graph, dims, hoist)
        try:
            if backend == "numba":
                try:
                    from gdsl.backends.numba.module import NumbaModule
                except ImportError as e:   # installed but broken (e.g. a numpy it does not support)
                    raise GdslError(f"backend 'numba' could not be imported: {e}") from None
                m = NumbaModule(bound.module, graph)
            elif backend == "triton":
                from gdsl.backends.triton.module import TritonModule
                m = TritonModule(bound.module, graph)
            else:
                from gdsl.backends.reference import ReferenceModule
                m = ReferenceModule(bound.module, graph)
        except RuntimeError as e:   # the params of a huge static argument (hidden=2**31): was torch's error
            from gdsl.runtime.memory import out_of_memory
            if (oom := out_of_memory(e)) is None:
                raise
            raise GdslError(f"out of memory: {oom}") from None
        release_free_heap()   # the binding's temporaries (edge lists, keys): gdsl/runtime/memory.py
        m.hoist = hoist
        return m


def _override(name: str, value: Any) -> int | float:
    """A static-argument override as a number: int or float (numpy and 0-d
    torch scalars too). Anything else is refused: a string is never
    evaluated (sympy would run it as Python)."""
    if hasattr(value, "item") and tuple(getattr(value, "shape", (None,))) == ():   # a numpy or 0-d torch scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, numbers.Real)):
        raise TypeError(f"static override {name}={value!r}: a number (int or float) is needed, "
                        f"got {type(value).__name__}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _names_a_file(text: str) -> bool:
    """Path(text).exists(), False where the OS cannot even look the name up: a one-line
    program of over 255 characters was OSError 'File name too long' (helper-24)."""
    try:
        return Path(text).exists()
    except OSError:
        return False


def compile(program: str | os.PathLike, *, train: str | None = None, **overrides: Any) -> Program:  # noqa: A001
    """Compile a .gd file (a path) or gdsl source text."""
    if not isinstance(program, (str, os.PathLike)):
        raise TypeError(f"gdsl.compile takes source text (str) or a path (str or os.PathLike), "
                        f"got {type(program).__name__}")
    if train is not None and not isinstance(train, str):
        raise TypeError(f"train: the name of a train block (str), got {type(train).__name__}")
    overrides = {k: _override(k, v) for k, v in overrides.items()}
    text = os.fspath(program)
    if isinstance(text, bytes):
        raise TypeError("gdsl.compile takes source text (str) or a path; got a bytes path (decode it first)")
    # text without whitespace is a path even without .gd: no program is one word (it has `graph G`, `model M`),
    # so a missing one is FileNotFoundError (was: compiled as source, "unexpected 'programs'" for
    # gdsl.compile("programs/gcn"); helper-22)
    is_path = text != "" and "\n" not in text and (text.endswith(".gd") or _names_a_file(text)
                                                     or not any(c.isspace() for c in text))
    if isinstance(program, os.PathLike) or is_path:
        return Program(read_source(text), text, train, **overrides)
    return Program(normalize_text(text), "<input>", train, **overrides)   # as a file's (was: a BOM refused)
