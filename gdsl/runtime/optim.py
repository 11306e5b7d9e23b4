"""The train block's optimizers: Adam, AdamW and SGD, step for step as torch's.

Why not `torch.optim`: its first use (`Optimizer.__init__` -> `add_param_group`,
and every `step`) imports `torch._dynamo` (torch 2.13: 0.6-0.9 s of a core),
and every `gdsl run` and every rank of `gdsl run --np N` paid that before its
first epoch; nothing here compiles, so nothing needs dynamo.  The update rules
are torch's single-tensor ones (what torch runs for CPU params, `foreach` off:
torch/optim/adam.py `_single_tensor_adam`, sgd.py `_single_tensor_sgd`), with the
same tensor ops in the same order, so a step gives the same bits as
`torch.optim.Adam` / `AdamW` / `SGD` on CPU (tests/test_optim.py compares them)
and the same float32 overflow error on an absurd `lr` (trainer.optimizer_step).

The modules gdsl builds are ordinary `nn.Module`s: a user's own training loop
takes any `torch.optim` optimizer; this one serves `gdsl run` and its ranks.
`state_dict()` / `load_state_dict()` have torch's layout (`state` keyed by
param index, `param_groups` with `params` as indices), so checkpoints hold
plain tensors and numbers.
"""
from __future__ import annotations

import copy
from typing import Iterable

import torch


class Optimizer:
    """One param group over `params`; subclasses define `defaults` and `_update`."""

    defaults: dict = {}

    def __init__(self, params: Iterable[torch.Tensor], **options) -> None:
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown option(s) {', '.join(sorted(unknown))}")
        group = {**self.defaults, **options}
        self._check(group)
        group["params"] = params
        self.param_groups = [group]
        self.state: dict[torch.Tensor, dict] = {}

    def _check(self, group: dict) -> None:
        for k in ("lr", "weight_decay", "eps", "momentum"):
            if k in group and not group[k] >= 0:   # (also NaN) torch's own messages: "Invalid learning rate: -1"
                raise ValueError(f"Invalid {'learning rate' if k == 'lr' else k + ' value'}: {group[k]}")

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        for p in group["params"]:
            if p.grad is not None:   # a param the loss does not reach keeps its value and its state, as in torch
                state = self.state.get(p, {})
                self._update(p, p.grad, state, group)
                if state:   # (plain SGD keeps none, and torch's state_dict then lists no entry for it)
                    self.state[p] = state

    def _update(self, p: torch.Tensor, grad: torch.Tensor, state: dict, group: dict) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """torch's layout: {"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}."""
        params = self.param_groups[0]["params"]
        index = {id(p): i for i, p in enumerate(params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(params)))
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items()}, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict) -> None:
        """The saved state onto these params, in order; tensors move to each
        param's dtype and device (the step count stays as saved), as in torch.
        ValueError / KeyError / TypeError when it does not fit."""
        groups = state_dict["param_groups"]
        params = self.param_groups[0]["params"]
        if len(groups) != 1:
            raise ValueError("loaded state dict has a different number of parameter groups")
        saved = groups[0]["params"]
        if len(saved) != len(params):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        by_id = dict(zip(saved, params))
        state = {}
        for k, s in state_dict["state"].items():
            if k in by_id:
                p = by_id[k]
                state[p] = {name: (v if name == "step" or not isinstance(v, torch.Tensor) else
                                   v.to(dtype=p.dtype, device=p.device) if p.is_floating_point() else
                                   v.to(device=p.device)) for name, v in s.items()}
        options = {k: copy.deepcopy(v) for k, v in groups[0].items() if k != "params"}
        self.state = state
        self.param_groups = [{**options, "params": params}]


class Adam(Optimizer):
    """Adam (Kingma & Ba); with `decoupled_weight_decay`, AdamW (Loshchilov &
    Hutter): torch/optim/adam.py `_single_tensor_adam`, amsgrad off, maximize off."""

    defaults = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                "decoupled_weight_decay": False}

    def _check(self, group: dict) -> None:
        super()._check(group)
        for i, b in enumerate(group["betas"]):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")

    def _update(self, p, grad, state, group) -> None:
        if not state:   # lazy, as torch: the step count a float32 scalar on the CPU
            state["step"] = torch.tensor(0.0, dtype=torch.float64 if torch.get_default_dtype() == torch.float64
                                         else torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
        step_t += 1
        if wd != 0:
            if group["decoupled_weight_decay"]:
                p.mul_(1 - lr * wd)
            else:
                grad = grad.add(p, alpha=wd)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = step_t.item()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(eps)
        p.addcdiv_(exp_avg, denom, value=-step_size)


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay, 0.01 unless given."""

    defaults = {**Adam.defaults, "weight_decay": 1e-2, "decoupled_weight_decay": True}


class SGD(Optimizer):
    """SGD with momentum, dampening and Nesterov: torch/optim/sgd.py
    `_single_tensor_sgd`, maximize off."""

    defaults = {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False}

    def _check(self, group: dict) -> None:
        super()._check(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _update(self, p, grad, state, group) -> None:
        lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
        if wd != 0:
            grad = grad.add(p, alpha=wd)
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.detach().clone()
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(grad, alpha=-lr)
