"""The Numba CPU backend's fused graph ops (and its dense ops, dense.py).

Each op is specialised Numba source generated per signature (message op,
reduction, broadcast kind are constants of the text; ``kernel_source`` prints
it), parallel over destination rows of a CSR in degree-balanced chunks, with
int32 indices where they fit, compiled once per signature and cached on disk
(``cache=True``; compile seconds are in ``COMPILE_TIMES``, apart from run
time).  Each op is a torch.autograd.Function whose backward computes only the
gradients asked for.

    g = CSRGraph.build(src, dst, num_nodes)
    aggregate(g, x, w, msg, reduce, to="dst", xscale=None, oscale=None, w_perm=None)
    permute_edge_data(g, w, to="dst")
    sddmm(g, a, b, op)
    edge_softmax(g, s)
    gat_aggregate(g, el, er, z, slope)
    epilogue(x, bias, act, p, seed)      # dropout(act(x + bias)) in one pass
"""
from gdsl.backends.numba.codegen import (
    COMPILE_FROM_CACHE,
    COMPILE_TIMES,
    cache_dir,
    compile_report,
    kernel_source,
)
from gdsl.backends.numba.dense import epilogue
from gdsl.backends.numba.graph import CSRGraph
from gdsl.backends.numba.ops import (
    aggregate,
    edge_softmax,
    gat_aggregate,
    permute_edge_data,
    sddmm,
    set_cache_blocking,
)

__all__ = [
    "COMPILE_FROM_CACHE",
    "COMPILE_TIMES",
    "CSRGraph",
    "aggregate",
    "cache_dir",
    "compile_report",
    "edge_softmax",
    "epilogue",
    "gat_aggregate",
    "kernel_source",
    "permute_edge_data",
    "sddmm",
    "set_cache_blocking",
]
