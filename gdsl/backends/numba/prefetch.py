"""Software prefetch for the generated Numba kernels.

Numba has no prefetch API; ``prefetch_row(a, i, off)`` is an intrinsic that
emits LLVM's ``llvm.prefetch`` (read, locality 3 = keep in all cache levels,
data cache) on the address ``a.data + i * a.strides[0] + off`` (bytes) of a
C-contiguous array ``a`` of any rank >= 1.  It never faults (a prefetch of
any address is a hint), so ``i`` may be any row index of ``a``.

Defined at module level in an importable module, so kernels that call it
are cacheable by Numba (``cache=True``).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch_row(typingctx, a, i, off):
    """prefetch_row(a, i, off): prefetch the cache line at byte `off` of row `i` of `a`."""
    if not isinstance(a, types.Array) or not isinstance(i, types.Integer) or not isinstance(off, types.Integer):
        return None
    sig = types.void(a, i, off)

    def codegen(context, builder, signature, args):
        aty, ity, oty = signature.args
        av, iv, ov = args
        arr = context.make_array(aty)(context, builder, av)
        stride0 = cgutils.unpack_tuple(builder, arr.strides, aty.ndim)[0]
        iv = context.cast(builder, iv, ity, types.intp)
        ov = context.cast(builder, ov, oty, types.intp)
        byte = builder.add(builder.mul(iv, stride0), ov)
        i8p = ir.IntType(8).as_pointer()
        base = builder.bitcast(arr.data, i8p)
        addr = builder.gep(base, [byte])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [addr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
