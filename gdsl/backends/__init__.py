"""Backends execute the IR; `reference` (plain torch) is the semantic oracle."""


def require_backend(backend: str | None) -> None:
    """Raise GdslError unless `backend` can run here: numba needs the numba
    package; triton needs the triton package and a GPU or TRITON_INTERPRET=1.
    One check for `prog.module()` and for `gdsl run --np` (before the graph
    is partitioned, not found out by every rank)."""
    if backend == "numba":
        import importlib.util

        from gdsl.diagnostics import GdslError
        if importlib.util.find_spec("numba") is None:
            raise GdslError("backend 'numba' needs the numba package; pip install 'gdsl[numba]'")
    elif backend == "triton":
        from gdsl.backends.triton import require_backend as require_triton
        require_triton()


def eager_under_torch_compile(forward):
    """Decorator for a module's forward that launches its own kernels
    (Numba, Triton): inside `torch.compile`, dynamo does not trace into the
    launch code but runs the forward eagerly (a graph break), so the code
    around it still compiles.  `torch.compiler.disable` is applied on the
    first compiled call, not at import: it imports torch._dynamo (3 s).
    Under `torch.export` (which must capture one graph) the forward is
    traced: every module's forward then runs its plain-torch form
    (`capturing()`)."""
    import functools
    eager: dict = {}

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        import torch
        if compiling() and not exporting():
            if "fn" not in eager:
                eager["fn"] = torch.compiler.disable(forward)
            return eager["fn"](self, *args, **kwargs)
        return forward(self, *args, **kwargs)
    return run


def capturing() -> bool:
    """Whether the module's forward is being captured as a graph of torch
    ops rather than run: `torch.export`, `torch.jit.trace`, or a
    `torch.func` transform (`grad`, `vmap`, `jacrev`).  Then every backend
    runs the program's reference meaning op by op in plain torch ops
    (ReferenceModule.plain_forward): no torch.sparse matrix, no
    autograd.Function, no Numba or Triton kernel, none of which these
    capture."""
    import torch
    if compiling():   # dynamo: only its export; the checks below would break the graph
        return exporting()
    if exporting() or torch.jit.is_tracing():
        return True
    functorch = getattr(torch._C, "_functorch", None)   # no public query for an active torch.func transform
    peek = getattr(functorch, "peek_interpreter_stack", None)
    return peek is not None and peek() is not None


def compiling() -> bool:
    """torch.compiler.is_compiling(), False on a torch without it (the
    dependency range starts before it was added)."""
    import torch
    fn = getattr(torch.compiler, "is_compiling", None)
    return bool(fn()) if fn is not None else False


def exporting() -> bool:
    """torch.compiler.is_exporting(), False on a torch without it."""
    import torch
    fn = getattr(torch.compiler, "is_exporting", None)
    return bool(fn()) if fn is not None else False
