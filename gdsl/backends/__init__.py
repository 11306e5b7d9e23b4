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
