"""The Triton GPU backend's fused graph ops.

Each op is Triton source generated per signature (message op, reduction,
broadcast kind, scales, balanced or row-parallel are constants of the text;
``kernel_source`` prints it, ``gdsl compile --emit triton`` prints a
program's), launched on the tensors' device, its block sizes chosen by
``triton.autotune`` over a small space (``tuning``).  Each op is a
torch.autograd.Function whose backward runs on Triton kernels too and
computes only the gradients asked for.

    g = TritonGraph.build(src, dst, num_nodes, device)
    aggregate(g, x, w, msg, reduce, to="dst", xscale=None, oscale=None)
    sddmm(g, a, b, op)
    edge_softmax(g, s)
    gat_aggregate(g, el, er, z, slope)

Without a CUDA GPU the kernels run only under Triton's interpreter
(``TRITON_INTERPRET=1``, on CPU tensors, slow: for testing).  Triton reads
that variable each time a function is decorated with ``@triton.jit``: this
backend decorates its generated kernels at their first launch, per mode,
but Triton decorates its own library (tl.sum, tl.max, ...) when triton is
imported, so the variable must be set before anything imports triton, and
the modes do not mix in one process (``check_triton_mode`` says so).

This module imports neither triton nor the kernels: ``require_backend``
says (as a GdslError) why the backend cannot run here, if it cannot.
"""
from __future__ import annotations

import importlib.util
import os

NO_GPU = ("no CUDA GPU: the triton backend needs one; set TRITON_INTERPRET=1 to run its kernels on the CPU "
          "(slow, for testing)")


def interpret_mode() -> bool:
    """Whether Triton runs kernels in its interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def default_device():
    """Where the backend keeps the graph, params and activations: the current
    CUDA device, or the CPU under the interpreter (which runs kernels on CPU
    tensors; it wins over a GPU when set)."""
    import torch

    if interpret_mode() or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def check_triton_mode() -> None:
    """Raise GdslError if triton was imported in the other mode than
    TRITON_INTERPRET says now.  Triton reads the variable each time a
    function is decorated with @triton.jit: this backend's kernels are
    decorated at their first launch, but Triton's own library (tl.sum,
    tl.max, tl.cdiv, ...) when triton is imported, and the two modes do not
    mix in one process."""
    import sys

    if "triton" not in sys.modules:
        return   # it will be imported in the current mode
    import triton.language.standard as std
    from triton.runtime.interpreter import InterpretedFunction

    was = isinstance(std.cdiv, InterpretedFunction)
    if was != interpret_mode():
        from gdsl.diagnostics import GdslError
        raise GdslError(f"TRITON_INTERPRET={'1' if interpret_mode() else '0'} now, but triton was imported with "
                        f"TRITON_INTERPRET={'1' if was else '0'}: set it in the environment before anything "
                        "imports triton (Triton decorates its own library at import)")


def require_backend() -> None:
    """Raise GdslError unless the triton backend can run here: the triton
    package, and a CUDA GPU or TRITON_INTERPRET=1 (set before triton is
    imported)."""
    from gdsl.diagnostics import GdslError

    if not triton_installed():
        raise GdslError("backend 'triton' needs the triton package; pip install 'gdsl[triton]'")
    if interpret_mode():
        check_triton_mode()
        return
    import torch

    if not torch.cuda.is_available():
        raise GdslError(NO_GPU)
    check_triton_mode()


def __getattr__(name):   # the ops, imported (with triton) on first use
    if name in ("aggregate", "sddmm", "edge_softmax", "gat_aggregate", "set_balance"):
        from gdsl.backends.triton import ops
        return getattr(ops, name)
    if name == "TritonGraph":
        from gdsl.backends.triton.graph import TritonGraph
        return TritonGraph
    if name in ("kernel_source", "get_kernel"):
        from gdsl.backends.triton import codegen
        return getattr(codegen, name)
    raise AttributeError(name)


__all__ = ["NO_GPU", "TritonGraph", "aggregate", "default_device", "edge_softmax", "gat_aggregate",
           "interpret_mode", "kernel_source", "require_backend", "sddmm", "set_balance", "triton_installed"]
