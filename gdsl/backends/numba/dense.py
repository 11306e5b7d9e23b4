"""The Numba backend's dense ops, as torch.autograd.Functions: epilogue (a
layer's bias + activation + dropout in one pass, drawing the reference
backend's dropout masks bit for bit; DistGNN-MB's fused UPDATE epilogue),
linear (torch's GEMM into huge-page outputs) and head_dot (per-head dot
products of a vertex tensor with several parameters in one pass).  The
graph ops and the launch / allocation helpers they share are in ops.py."""
from __future__ import annotations

import math

import numpy as np
import torch

from gdsl.backends import gemm
from gdsl.backends.numba.codegen import get_kernel
from gdsl.backends.numba.codegen_dense import ACTS
from gdsl.backends.numba.ops import (
    _FLOATS,
    _NP,
    _dummy,
    _empty,
    _launch,
    _mat,
    _threads,
    _vec,
)
from gdsl.backends.once import KernelFunction, differentiable_once

# --------------------------------------------------------------------------
# fused layer epilogue: dropout(act(x + bias)) with the reference's masks
# --------------------------------------------------------------------------

_MT_SEG_WORDS = 1 << 17     # words of the generator stream per segment (512 KiB)
_ROW_CHUNKS: dict = {}


def _row_chunks(rows: int) -> np.ndarray:
    c = _ROW_CHUNKS.get(rows)
    if c is None:
        n = max(1, min(rows, 16 * _threads()))
        c = _ROW_CHUNKS[rows] = np.unique(np.linspace(0, rows, n + 1).astype(np.int64))
    return c


def mt_state(seed: int) -> tuple[np.ndarray, int]:
    """(the 624 mt19937 words, the position of the next word in a stream
    whose first 624 words are that block) of torch.Generator().manual_seed(seed),
    read from its state (torch's CPUGeneratorImplState layout)."""
    st = torch.Generator().manual_seed(int(seed)).get_state().numpy()
    left = int(st[8:12].view(np.int32)[0])
    return st[24:24 + 624 * 8].view(np.uint64).astype(np.uint32), 625 - left


def _epilogue_raw(x2: torch.Tensor, b: torch.Tensor | None, act: str, p: float, seed: int | None,
                  dt: torch.dtype):
    """(out, uint8 keep mask or None) of dropout(act(x2 + b)) (no dropout when
    seed is None)."""
    npdt = _NP[dt]
    R, F = x2.shape
    out = _empty((R, F), dt)
    drop = seed is not None
    k = get_kernel("epilogue", fn="epi_fwd", act=act, bias=b is not None, drop=drop)
    ba = b.numpy() if b is not None else _dummy(npdt, 1)
    q = npdt(1.0 - p)
    if not drop:
        _launch(k, R * F, x2.numpy(), ba, out.numpy(), _dummy(np.uint8), _dummy(np.uint32, 1), 0, 1,
                np.float32(p), q, npdt(1), npdt(0))
        return out, None
    mask = _empty((R, F), torch.uint8)
    words, pos = mt_state(seed)
    seg = max(1, _MT_SEG_WORDS // max(F, 1))
    buf = np.empty(624 + seg * F + 624, np.uint32)
    buf[:624] = words
    k(x2.numpy(), ba, out.numpy(), mask.numpy(), buf, pos, seg, np.float32(p), q, npdt(1), npdt(0))
    return out, mask


class _EpilogueFn(KernelFunction):
    @staticmethod
    def forward(ctx, x, bias, act, p, seed):
        dt = x.dtype
        N = x.shape[0]
        F = math.prod(x.shape[1:])
        x2 = _mat(x, dt, N, F)
        b = _vec(bias, dt) if bias is not None else None
        out, mask = _epilogue_raw(x2, b, act, p, seed, dt)
        ctx.act, ctx.p, ctx.dt, ctx.mask = act, p, dt, mask
        ctx.save_for_backward(x if act != "none" else None, bias)
        return out.reshape(x.shape)

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        need_x, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_x or need_b):
            return None, None, None, None, None
        x, bias = ctx.saved_tensors
        act, p, dt, mask = ctx.act, ctx.p, ctx.dt, ctx.mask
        npdt = _NP[dt]
        N = grad.shape[0]
        F = math.prod(grad.shape[1:])
        G = _mat(grad, dt, N, F)
        x2 = _mat(x, dt, N, F) if x is not None else torch.from_numpy(_dummy(npdt))
        b = _vec(bias, dt) if bias is not None else None
        chunks = _row_chunks(N)
        dx = _empty((N, F), dt)
        dbp = torch.empty((chunks.shape[0] - 1, F) if b is not None else (1, 1), dtype=dt)
        drop = mask is not None
        k = get_kernel("epilogue", fn="epi_bwd", act=act, bias=b is not None, drop=drop)
        _launch(k, N * F, G.numpy(), x2.numpy(), b.numpy() if b is not None else _dummy(npdt, 1),
                mask.numpy() if drop else _dummy(np.uint8), dx.numpy(), dbp.numpy(), chunks,
                npdt(1.0 - p), npdt(1), npdt(0))
        db = dbp.sum(0).reshape(bias.shape).to(bias.dtype) if (need_b and b is not None) else None
        return (dx.reshape(grad.shape) if need_x else None), db, None, None, None


def epilogue_supported(x: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (x.dtype in _FLOATS and x.dim() >= 1 and x.numel() > 0
            and (bias is None or (tuple(bias.shape) == tuple(x.shape[1:]) and bias.dtype == x.dtype)))


def epilogue(x: torch.Tensor, bias: torch.Tensor | None = None, act: str = "none", p: float = 0.0,
             seed: int | None = None) -> torch.Tensor:
    """dropout(act(x + bias)) in one pass over x (act: none, relu, elu; bias:
    x's feature shape).  Dropout (when `seed` is given and p > 0) is the
    reference backend's: keep = torch.rand(x.shape,
    generator=torch.Generator().manual_seed(seed)) >= p, y = (v * keep) / (1 - p),
    bit for bit; a uint8 mask is kept for the backward (and x, for act)."""
    if act not in ACTS:
        raise ValueError(f"unknown activation {act!r} (one of {ACTS})")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p}")
    if p == 0.0:
        seed = None
    if not epilogue_supported(x, bias):
        raise ValueError("epilogue takes float32 / float64 x with rows and a bias of x's feature shape and dtype")
    return _EpilogueFn.apply(x, bias, act, float(p), seed)


# --------------------------------------------------------------------------
# dense: torch's GEMM, writing into huge-page outputs
# --------------------------------------------------------------------------

class _LinearFn(KernelFunction):
    """sum_k x_k @ W_k (x_k [N, d_k], W_k [d_k, m]): torch's GEMM (addmm for
    the second term onwards) into one output of _empty, and the same for the
    backward's input gradients (their fresh N x d pages are most of a GEMM's
    time on the bench VM, see HUGE_ALLOC_BYTES)."""

    @staticmethod
    def forward(ctx, *xw):
        xs, ws = xw[0::2], xw[1::2]
        out = _empty((xs[0].shape[0], ws[0].shape[1]), xs[0].dtype)
        gemm.mm(xs[0], ws[0], out=out)
        for x, w in zip(xs[1:], ws[1:]):
            gemm.addmm_(out, x, w)
        ctx.save_for_backward(*xw)
        return out

    @staticmethod
    @differentiable_once
    def backward(ctx, grad):
        xw = ctx.saved_tensors
        grads = []
        for i in range(0, len(xw), 2):
            x, w = xw[i], xw[i + 1]
            dx = dw = None
            if ctx.needs_input_grad[i]:
                dx = _empty(tuple(x.shape), grad.dtype)
                torch.mm(grad, w.t(), out=dx)
            if ctx.needs_input_grad[i + 1]:
                dw = gemm.wgrad(x, grad)
            grads += [dx, dw]
        return tuple(grads)


def linear(*xw: torch.Tensor) -> torch.Tensor:
    """x1 @ W1 + x2 @ W2 + ... for x_k [N, d_k] and W_k [d_k, *out] (the
    out axes flattened for the GEMM and restored), float32 / float64, the
    output and the backward's input gradients in huge pages."""
    if len(xw) % 2 or not xw:
        raise ValueError("linear takes pairs x, W")
    xs, ws = xw[0::2], xw[1::2]
    out_shape = tuple(ws[0].shape[1:])
    dt = xs[0].dtype
    ok = dt in _FLOATS and all(x.dim() == 2 and x.dtype == dt and x.shape[0] == xs[0].shape[0] for x in xs) \
        and all(w.dtype == dt and w.dim() >= 2 and tuple(w.shape[1:]) == out_shape for w in ws) \
        and all(x.shape[1] == w.shape[0] for x, w in zip(xs, ws))
    if not ok:
        out = None
        for x, w in zip(xs, ws):
            t = gemm.matmul(x, w)
            out = t if out is None else out + t
        return out
    m = math.prod(out_shape)
    args = []
    for x, w in zip(xs, ws):
        args += [x, w.reshape(w.shape[0], m)]
    y = _LinearFn.apply(*args)
    return y.reshape((y.shape[0],) + out_shape)



# --------------------------------------------------------------------------
# per-head dot products of a vertex tensor with parameters (GAT's scores)
# --------------------------------------------------------------------------

class _HeadDotFn(KernelFunction):
    @staticmethod
    def forward(ctx, z, *a):
        dt = z.dtype
        N = z.shape[0]
        H = z.shape[1] if z.dim() > 2 else 1
        D = z.shape[-1]
        K = len(a)
        z3 = _mat(z, dt, N, H * D).reshape(N, H, D)
        a3 = torch.stack([t.detach().to(dt).reshape(H, D) for t in a]).contiguous()
        out = torch.empty((K, N, H), dtype=dt)
        chunks = _row_chunks(N)
        _launch(get_kernel("head_dot", fn="head_dot_fwd"), N * H * D * K, chunks, z3.numpy(), a3.numpy(),
                out.numpy(), _NP[dt](0))
        ctx.save_for_backward(z, *a)
        ctx.dims = (N, H, D, K)
        return tuple(out[k].reshape(z.shape[:-1]) for k in range(K))

    @staticmethod
    @differentiable_once
    def backward(ctx, *grads):
        z, *a = ctx.saved_tensors
        N, H, D, K = ctx.dims
        need_z, need_a = ctx.needs_input_grad[0], any(ctx.needs_input_grad[1:])
        if not (need_z or need_a):
            return (None,) * (1 + K)
        dt = z.dtype
        npdt = _NP[dt]
        z3 = _mat(z, dt, N, H * D).reshape(N, H, D)
        a3 = torch.stack([t.detach().to(dt).reshape(H, D) for t in a]).contiguous()
        g = torch.stack([(gr if gr is not None else torch.zeros(z.shape[:-1], dtype=dt)).to(dt).reshape(N, H)
                         for gr in grads]).contiguous()
        chunks = _row_chunks(N)
        dz = _empty((N, H, D), dt) if need_z else None
        dap = torch.empty((chunks.shape[0] - 1, K, H, D) if need_a else (1, 1, 1, 1), dtype=dt)
        _launch(get_kernel("head_dot", fn="head_dot_bwd"), N * H * D * K, chunks, z3.numpy(), a3.numpy(),
                g.numpy(), dz.numpy() if need_z else _dummy(npdt, 3), dap.numpy(), npdt(0), bool(need_z),
                bool(need_a))
        da = dap.sum(0) if need_a else None
        out = [dz.reshape(z.shape).to(z.dtype) if need_z else None]
        for k, t in enumerate(a):
            out.append(da[k].reshape(t.shape).to(t.dtype) if (need_a and ctx.needs_input_grad[1 + k]) else None)
        return tuple(out)


def head_dot(z: torch.Tensor, *a: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(z * a_k).sum(-1) for each a_k of z's feature shape ([N, H, D] with
    a_k [H, D], or [N, D] with a_k [D]): one pass over z for all k, and one
    for the backward (dz and every a_k's gradient)."""
    if not a or z.dtype not in _FLOATS or z.dim() not in (2, 3) or z.shape[0] == 0:
        return tuple((z * t).sum(-1) for t in a)
    for t in a:
        if tuple(t.shape) != tuple(z.shape[1:]) or t.dtype != z.dtype:
            return tuple((z * t).sum(-1) for t in a)
    return _HeadDotFn.apply(z, *a)
