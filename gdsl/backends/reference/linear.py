"""A linear aggregation and its `@ W`, run in the order the order pass chose
for the forward **and** the backward (RDM §III-B/C, Table III, Fig. 3-4).

Autograd alone always gives the same backward for a forward order: after a
sparse-first forward (T = A X, Y = T W) it keeps T and runs dX = A^T (G W^T),
dW = T^T G (dense-first backward, T memoised); after a dense-first forward
(U = X W, Y = A U) it runs G' = A^T G, dX = G' W^T, dW = X^T G' (sparse-first
backward). The order pass may choose another backward (a hint, or the cost
model); such a group runs as one autograd Function, `OrderedLinear`, whose
backward does what was chosen:

  backward sparse_first   G' = A^T G (width f_out); dX = G' W^T; dW = X^T G'
  backward dense_first    dX = A^T (G W^T) (width f_in);
                          dW = T^T G with T memoised, otherwise one more SpMM
                          of width min(f_in, f_out): T = A X again, or
                          dW = X^T (A^T G)

`A` here includes the group's vertex scale c (mean's 1/deg): A X = c * (S X),
A^T G = S^T (c * G). The SpMMs come from the backend (`LinearRunner`): the
module's own aggregation for A and the same aggregation towards the sources
(`to = src`) for A^T, so every backend and every distributed plan supplies
its own kernels and collectives. A gradient nobody asks for (the input
features') is not computed.
"""
from __future__ import annotations

import math
import warnings
import weakref
from collections import deque

import torch

from gdsl.backends import gemm
from gdsl.ir.core import Op, Value
from gdsl.passes.order import LinearGroup


def sparse_mm(a: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """`a @ h` for a torch.sparse CSR matrix `a` (a constant) of the
    constants' dtype, differentiable in `h`.

    torch's CSR matmul has no bfloat16/float16 kernel, so under
    `torch.autocast` (where `h` may arrive in bf16 from a dense `@`) it runs,
    forward and backward, in the constants' dtype with autocast off, as
    autocast runs the ops it has no low-precision kernel for in float32."""
    return _SparseMM.apply(a, h)


class _SparseMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, h):
        ctx.a, ctx.h_dtype = a, h.dtype
        return _csr_mm(a, h)

    @staticmethod
    def backward(ctx, g):
        return None, _csr_mm(transposed(ctx.a), g).to(ctx.h_dtype)

    @staticmethod
    def jvp(ctx, a_t, h_t):
        """Forward-mode AD (torch.autograd.forward_ad): the product is linear
        in h and `a` is a constant, so the tangent is A h_t (was: torch's
        "You must implement the jvp function", helper-69)."""
        return _csr_mm(ctx.a, h_t)


# id(matrix) -> (weak reference to it, its transpose as CSR)
_TRANSPOSED: dict[int, tuple] = {}


def transposed(a: torch.Tensor) -> torch.Tensor:
    """A^T of a sparse CSR constant as a CSR matrix, built once per matrix
    and kept while the matrix lives. `torch.sparse.mm(a.t(), g)` multiplies
    by the CSC view and converts it to CSR (a sort of the E entries) on
    every call: on R-MAT 100k x 16 edges, F = 16, 98 ms against 3.9 ms with
    the kept transpose (Cora: 0.70 against 0.03 ms), the same numbers bit for
    bit (the kernel runs on the same CSR either way)."""
    hit = _TRANSPOSED.get(id(a))
    if hit is not None and hit[0]() is a:
        return hit[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch's beta-state notice for sparse CSR
        at = a.t().to_sparse_csr()
    key = id(a)
    _TRANSPOSED[key] = (weakref.ref(a, lambda ref, k=key: _forget(k, ref)), at)
    return at


def _forget(key: int, ref) -> None:
    hit = _TRANSPOSED.get(key)
    if hit is not None and hit[0] is ref:   # not a newer matrix's entry under a reused id
        del _TRANSPOSED[key]


def _csr_mm(a: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings(), torch.autocast(h.device.type, enabled=False):
        warnings.simplefilter("ignore")   # torch's beta-state notice for sparse CSR
        return torch.sparse.mm(a, h.to(a.dtype))


class LinearRunner:
    """The group's two SpMMs on a backend module (a ReferenceModule or subclass)."""

    def __init__(self, module, group: LinearGroup) -> None:
        self.m, self.g = module, group
        agg = group.agg
        # A^T: the same aggregation over outgoing edges (a fresh result value)
        self.agg_t = Op("aggregate", list(agg.operands), Value(agg.result.type, agg.result.hint),
                        {**agg.attrs, "to": "src" if agg.attrs["to"] == "dst" else "dst", "adjoint": True},
                        agg.span)
        # the dense widths of the last SpMMs run (bounded: a run calls them every epoch)
        self.spmm_widths: deque[int] = deque(maxlen=16)

    def _operands(self) -> list:
        m, agg = self.m, self.g.agg
        return [m.run_op(v.owner, [], None) for v in agg.operands[1:]]

    def _scale(self) -> torch.Tensor | None:
        s = self.g.scale
        if s is None:
            return None
        c = self.m.run_op(s.operands[1].owner, [], None)
        return c.reshape((-1, 1))

    def apply(self, h: torch.Tensor, transpose: bool) -> torch.Tensor:
        """A h (or A^T h) for h of shape [rows, width]."""
        m, agg = self.m, self.g.agg
        self.spmm_widths.append(int(h.shape[1]))
        c = self._scale()
        if transpose and c is not None:
            h = h * c
        cache = getattr(m, "_ext_cache", None)   # a distributed module caches fetched rows per value
        if cache is not None:
            cache.pop(agg.operands[0], None)
        spmm = m.linear_spmm(agg)
        if spmm is not None:
            out = sparse_mm(transposed(spmm) if transpose else spmm, h)
        else:
            out = m.run_op(self.agg_t if transpose else agg, [h, *self._operands()], None)
        if cache is not None:
            cache.pop(agg.operands[0], None)
        if not transpose and c is not None:
            out = out * c
        return out


class OrderedLinear(torch.autograd.Function):
    """Y = A X W with the group's forward and backward orders (module docstring).

    X may have leading feature axes ([rows, k.., din], `x @ W` contracting the
    last): A acts on each row's k * din values, W on each of its k vectors, so
    the products below run on [rows, k * width] for A and [rows * k, width]
    for W."""

    @staticmethod
    def forward(ctx, x, w, runner: LinearRunner):
        g = runner.g
        n, din = x.shape[0], w.shape[0]
        k, dout = math.prod(x.shape[1:-1]), math.prod(w.shape[1:])
        w2 = w.reshape(din, dout)
        t = None
        if g.fwd == "sparse_first":
            t = runner.apply(x.reshape(n, k * din), False)
            y = gemm.mm(t.reshape(-1, din), w2).reshape(t.shape[0], k * dout)
        else:
            y = runner.apply(gemm.mm(x.reshape(n * k, din), w2).reshape(n, k * dout), False)
        ctx.runner = runner
        ctx.save_for_backward(x, w, t if (g.memo and t is not None) else None)
        ctx.save_for_forward(x, w)
        return y.reshape((y.shape[0],) + tuple(x.shape[1:-1]) + tuple(w.shape[1:]))

    @staticmethod
    def jvp(ctx, x_t, w_t, _):
        """Forward-mode AD: (A X W)' = A (X' W + X W'), A linear and constant
        (was: torch's "You must implement the jvp function", helper-69)."""
        x, w = ctx.saved_tensors[:2]
        n, din = x.shape[0], w.shape[0]
        k, dout = math.prod(x.shape[1:-1]), math.prod(w.shape[1:])
        z = None
        if x_t is not None:
            z = x_t.reshape(n * k, din) @ w.reshape(din, dout)
        if w_t is not None:
            zw = x.reshape(n * k, din) @ w_t.reshape(din, dout)
            z = zw if z is None else z + zw
        y = ctx.runner.apply(z.reshape(n, k * dout), False)
        return y.reshape((y.shape[0],) + tuple(x.shape[1:-1]) + tuple(w.shape[1:]))

    @staticmethod
    def backward(ctx, grad):
        x, w, t = ctx.saved_tensors
        # under torch.autocast the forward's product came out in the low dtype, so its gradient does
        # too: the backward runs in the params' dtype (was: "expected m1 and m2 to have the same dtype")
        grad = grad.to(w.dtype)
        runner = ctx.runner
        g = runner.g
        n, din = x.shape[0], w.shape[0]
        k, dout = math.prod(x.shape[1:-1]), math.prod(w.shape[1:])
        x2, w2 = x.reshape(n * k, din), w.reshape(din, dout)
        rows = grad.shape[0]
        g2 = grad.reshape(rows, k * dout)   # explicit widths, not -1: a rank may hold no rows
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        by_vec = lambda m, width: m.reshape(m.shape[0] * k, width)  # noqa: E731 - [r, k*w] -> [r*k, w]
        dx = dw = None
        if g.bwd == "sparse_first":
            s = runner.apply(g2, True)                                  # A^T G: [n, k * dout]
            dx = by_vec(s, dout) @ w2.t() if need_x else None
            dw = gemm.wgrad(x2, by_vec(s, dout)) if need_w else None
        else:
            if need_x:
                dx = runner.apply((by_vec(g2, dout) @ w2.t()).reshape(rows, k * din), True)
            if need_w:
                if t is not None:
                    dw = gemm.wgrad(by_vec(t, din), by_vec(g2, dout))
                elif din <= dout:
                    dw = gemm.wgrad(by_vec(runner.apply(x.reshape(n, k * din), False), din), by_vec(g2, dout))
                else:
                    dw = gemm.wgrad(x2, by_vec(runner.apply(g2, True), dout))
        return (None if dx is None else dx.reshape(x.shape)), (None if dw is None else dw.reshape(w.shape)), None


def plan_linear(module, ir) -> tuple[dict[Op, LinearRunner], set[Op]]:
    """({anchor op: runner}, {ops the anchor computes}) for the groups whose
    chosen backward is not autograd's own (passes/order.py `linear_groups`)."""
    from gdsl.passes.order import linear_groups

    anchors: dict[Op, LinearRunner] = {}
    skip: set[Op] = set()
    for g in linear_groups(ir):
        if g.natural:
            continue
        anchors[g.ops[-1]] = LinearRunner(module, g)
        skip.update(g.ops[:-1])
    return anchors, skip


def run_linear(runner: LinearRunner, env: dict) -> torch.Tensor:
    g = runner.g
    return OrderedLinear.apply(env[g.x], env[g.w], runner)


def fused_ops(anchor: Op, spec: tuple) -> set[Op]:
    """The ops of a backend's fused group (anchor -> spec tuple listing its ops)."""
    ops = {anchor}
    for item in spec:
        if isinstance(item, Op):
            ops.add(item)
        elif isinstance(item, (list, tuple)):
            ops.update(o for o in item if isinstance(o, Op))
    return ops


def drop_fusions(fused: dict, skip: set, anchors: dict, inside: set) -> None:
    """Remove a backend's fused op groups (anchor -> spec tuple listing its ops)
    that share an op with a linear group: the linear group runs those ops."""
    taken = set(anchors) | set(inside)
    for anchor, spec in list(fused.items()):
        ops = fused_ops(anchor, spec)
        if ops & taken:
            del fused[anchor]
            skip.difference_update(ops)
