"""gdsl/backends/maxmin.py called directly (helper audit 3): an edge weight
of one column ([E, 1], broadcast over the F features), which the
docstring accepts but the Numba and Triton backends never pass (they widen
w to [E, F] first), so the backend tests leave its gradient free."""
from __future__ import annotations

import pytest
import torch

from gdsl.backends.maxmin import maxmin_backward


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("msg", ["mul", "copy_edge", "add"])
def test_a_one_column_edge_weight_gets_the_sum_over_features(msg, reduce):
    gen = torch.Generator().manual_seed(0)
    N, rows_n, F = 5, 4, 3
    row = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    col = torch.tensor([1, 2, 3, 0, 4, 2, 1, 1])
    E = row.numel()
    # small integers: ties within rows
    x = torch.randint(-1, 2, (N, F), generator=gen).double().requires_grad_()
    w = torch.randint(1, 3, (E, 1), generator=gen).double().requires_grad_()
    m = {"mul": lambda: x[col] * w, "add": lambda: x[col] + w, "copy_edge": lambda: w.expand(E, F)}[msg]()
    idx = row[:, None].expand(E, F)
    # the initial value never ties with a message (torch counts a tying self even with include_self=False)
    init = float("-inf") if reduce == "max" else float("inf")
    out = torch.full((rows_n, F), init, dtype=torch.float64).scatter_reduce(
        0, idx, m, "amax" if reduce == "max" else "amin", include_self=False)
    G = torch.randn(rows_n, F, generator=gen, dtype=torch.float64)
    out.backward(G)   # torch's rule: ties share the gradient evenly (the reference backend's)
    # the forward kernels' winners: the first edge of each row attaining the result
    md = m.detach()
    arg = torch.full((rows_n, F), -1, dtype=torch.int64)
    for e in reversed(range(E)):
        hit = md[e] == out.detach()[row[e]]
        arg[row[e]] = torch.where(hit, torch.tensor(e), arg[row[e]])
    dx, dw = maxmin_backward(arg, G, row, col, x.detach() if msg != "copy_edge" else None, w.detach(), msg, "",
                             1, F, need_x=msg != "copy_edge", need_w=True)
    assert dw.shape == (E, 1)
    torch.testing.assert_close(dw, w.grad, rtol=0, atol=1e-12)
    if msg != "copy_edge":
        torch.testing.assert_close(dx, x.grad, rtol=0, atol=1e-12)
