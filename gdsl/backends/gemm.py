"""Dense products `x @ W` with a narrow output, in the operand layout torch's
CPU GEMM runs fast.

A GNN's last transform maps wide features to a few classes (Cora: 1433 -> 7
for SGC, the linear layer after a propagation). With W stored row-major
[din, dout] as gdsl's params are, torch's CPU GEMM (oneDNN / MKL) runs both
`x @ W` and the weight gradient `x^T @ G` of such a product slowly when dout
is small. bench/gemm_layout.py measures, on the 2-core bench machine, for
x of a million values or more and dout < 16: x^T @ G 1.3-10x slower than
(G^T @ x)^T, and x @ W up to 5.5x slower than x @ (W^T)^T with W^T
contiguous (W column-major, the layout of `nn.Linear.weight.t()`; for
dout <= 8 mostly, even at 15, 0.76x at worst); the pair of them together
1.1-8.5x slower. Below a million values the pair gains a few hundred
microseconds at most, and from dout = 16 on the two layouts are within
0.68-1.8x of each other either way (bench/RESULTS-gemm.md). So, for
those products only:

* `matmul(x, w)` (autograd): multiplies by a column-major copy of W; torch's
  mm backward then takes the gradient of a column-major operand as
  (G^T x)^T itself (`mm_mat2_backward`), as it does for nn.Linear;
* `mm(x, w)` / `addmm_(out, x, w)` and `wgrad(x, g)` are the same choices for
  the backends' own autograd Functions (numba's fused linear, the order
  pass's linear groups).

Products on a GPU are not changed (unmeasured there). Every other product
is computed as before (`torch.tensordot` / `x.t() @ g`),
so small models (gcn.gd, gat.gd on Cora: their narrow last layer reads a
[2708, 16] / [2708, 64] input) keep their numbers bit for bit. The two
layouts round differently (the sums run in another order): results agree to
float32 rounding, not bit for bit, with the row-major product.
"""
from __future__ import annotations

import math

import torch

NARROW = 16          # outputs narrower than this many columns ...
BIG = 1 << 20        # ... of an input of at least this many values


def narrow(rows: int, din: int, dout: int) -> bool:
    """Whether [rows, din] @ [din, dout] takes the column-major layout."""
    return 0 < dout < NARROW and rows * din >= BIG


def _take(x: torch.Tensor, rows: int, din: int, dout: int) -> bool:
    """narrow(), for a product on the CPU (the layouts were measured there;
    on a GPU every product keeps its row-major form)."""
    return x.device.type == "cpu" and narrow(rows, din, dout)


def _colmajor(w2: torch.Tensor) -> torch.Tensor:
    """w2 [din, dout], held column-major (a differentiable copy)."""
    return w2.t().contiguous().t()


def matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """torch.tensordot(x, w, dims=1) (x [..., din], w [din, ...]), through
    autograd, with the narrow-output layout (module docstring)."""
    if w.dim() < 2 or x.dim() < 1 or x.shape[-1] != w.shape[0]:
        return torch.tensordot(x, w, dims=1)
    din = w.shape[0]
    dout = math.prod(w.shape[1:])
    rows = math.prod(x.shape[:-1])
    w2 = w.reshape(din, dout)
    # the product as tensordot computes it (reshapes around one mm), spelled with `@`, which
    # torch.autocast casts (tensordot it does not: was "both inputs should have same dtype" under
    # autocast(bfloat16) for a product of a product; helper-73)
    y = x.reshape(rows, din) @ (_colmajor(w2) if _take(x, rows, din, dout) else w2)
    return y.reshape(tuple(x.shape[:-1]) + tuple(w.shape[1:]))


def mm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [rows, din] @ w [din, dout] for an autograd Function's forward."""
    if _take(x, x.shape[0], x.shape[1], w.shape[1]):
        w = _colmajor(w)
    return torch.mm(x, w) if out is None else torch.mm(x, w, out=out)


def addmm_(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """out += x @ w, with mm's layout choice."""
    if _take(x, x.shape[0], x.shape[1], w.shape[1]):
        w = _colmajor(w)
    return out.addmm_(x, w)


def wgrad(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """x^T @ g (x [rows, din], g [rows, dout]): the gradient of W in x @ W."""
    if _take(x, x.shape[0], x.shape[1], g.shape[1]):
        return (g.t() @ x).t()
    return x.t() @ g
