"""`differentiable_once`: the backward of the Numba and Triton kernels is not
itself differentiable; differentiating it again must fail, never give 0.

torch's `once_differentiable` makes a second derivative through a backward
an error only when a *grad output* requires grad. A gradient penalty on a
loss whose gradient is constant (`out.sum()`, a linear loss) gives the
backward grad outputs that do not, while the gradients it computes still
depend on the forward's inputs (`grad_x = g @ W.T` on `W`): torch returned
them as constants, so `torch.autograd.grad(out.sum(), x, create_graph=True)`
gave a `grad_x` with no grad_fn and the penalty's gradient was silently 0
(a NumbaModule or TritonModule). Here the saved tensors count too: when
anything the backward read requires grad, the outputs carry an error node.
A backward whose saved tensors require no grad (a linear op of constants)
is exact as it is. Second derivatives: torch.func on every backend (the
modules run plain torch ops under it), autograd on the reference backend
(docs/cli.md)."""
from __future__ import annotations

import functools

import torch
from torch._C import _functions

MESSAGE = (b"gdsl: the Numba and Triton kernels are differentiable once (their backward is not itself "
           b"differentiable); for second derivatives use torch.func (grad(grad(f)), hessian) or "
           b"backend='reference'")


def differentiable_once(backward):
    """Decorate an autograd.Function's `backward` (see the module docstring)."""
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        if any(isinstance(g, torch.Tensor) and (torch._C._functorch.is_legacy_batchedtensor(g)
                                                or torch._C._functorch.is_batchedtensor(g)) for g in grads):
            # autograd.grad(..., is_grads_batched=True), jacobian(vectorize=True): vmap over the backward
            # (was: torch's "Batching rule not implemented for aten::detach"; helper-69)
            from gdsl.diagnostics import GdslError
            raise GdslError("batched gradients (autograd.grad(..., is_grads_batched=True), "
                            "jacobian(..., vectorize=True)) do not run through the Numba and Triton kernels' "
                            "backward; use torch.func (jacrev, vmap(vjp)) or backend='reference'")
        with torch.no_grad():
            outputs = backward(ctx, *grads)
        if not torch.is_grad_enabled():   # a plain backward: create_graph=False
            return outputs
        read = [t for t in (*grads, *ctx.saved_tensors) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not read:
            return outputs
        outs = outputs if isinstance(outputs, tuple) else (outputs,)

        def alias(t):
            if t is None:
                return t
            t = t.detach()
            t.requires_grad = True
            return t
        # one error node whose inputs are the outputs' aliases and what the backward read:
        # differentiating an output towards any of those (`autograd.grad(gx, W)`) runs it
        # and fails with MESSAGE (torch's node had the aliases only: "W appears to not have
        # been used in the graph")
        err = _functions.DelayedError(MESSAGE, len(outs) + len(read))
        res = err(*[alias(t) for t in outs], *read)
        return tuple(res[:len(outs)]) if isinstance(outputs, tuple) else res[0]
    return wrapper


class KernelFunction(torch.autograd.Function):
    """The autograd.Function of a Numba or Triton kernel: reverse mode only.
    Forward-mode AD (torch.autograd.forward_ad) through it is a clear error
    (was torch's "You must implement the jvp function for custom
    autograd.Function", helper-69); the reference backend supports it, and
    torch.func.jvp runs the modules' plain torch ops on every backend."""

    @staticmethod
    def jvp(ctx, *tangents):
        from gdsl.diagnostics import GdslError
        raise GdslError("forward-mode AD (torch.autograd.forward_ad) does not run through the Numba and Triton "
                        "kernels (their autograd is reverse mode only); use backend='reference', or torch.func.jvp")
