"""gdsl's train-block optimizers (gdsl/runtime/optim.py) against torch.optim:
the same bits, step for step, and torch's state_dict layout."""
import copy
import subprocess
import sys

import pytest
import torch

from gdsl.runtime import optim
from gdsl.runtime.trainer import make_optimizer

CASES = [
    ("adam", {"lr": 0.01}),
    ("adam", {"lr": 0.005, "weight_decay": 5e-4}),
    ("adam", {"lr": 0.003, "beta1": 0.5, "beta2": 0.98, "eps": 1e-6, "weight_decay": 0.1}),
    ("adamw", {"lr": 0.01}),   # torch's AdamW decays by 0.01 unless told
    ("adamw", {"lr": 0.01, "weight_decay": 0.3, "beta2": 0.9}),
    ("sgd", {"lr": 0.1}),
    ("sgd", {"lr": 0.1, "weight_decay": 5e-4}),
    ("sgd", {"lr": 0.05, "momentum": 0.9}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": 1.0, "weight_decay": 1e-3}),
]


def torch_optimizer(name, args, params):
    a = dict(args)
    if name == "sgd":
        if "nesterov" in a:
            a["nesterov"] = bool(a["nesterov"])
        return torch.optim.SGD(params, foreach=False, **a)
    betas = (a.pop("beta1", 0.9), a.pop("beta2", 0.999))
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, betas=betas, foreach=False, **a)


def params(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=g, dtype=dtype)) for s in ((5, 3), (3,), (2, 4, 2))]


def run(opt, ps, steps, seed=1, skip=None):
    g = torch.Generator().manual_seed(seed)
    for t in range(steps):
        opt.zero_grad(set_to_none=True)
        for i, p in enumerate(ps):
            if skip is not None and i == skip and t % 2:
                continue   # a param the loss did not reach this step: no grad
            p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype) * (1 + t)
        opt.step()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,args", CASES)
def test_steps_give_torch_optims_bits(name, args, dtype):
    mine, theirs = params(dtype), params(dtype)
    run(make_optimizer(name, args, mine), mine, 25, skip=1)
    run(torch_optimizer(name, args, theirs), theirs, 25, skip=1)
    for a, b in zip(mine, theirs):
        assert torch.equal(a, b), (name, args, (a - b).abs().max())


@pytest.mark.parametrize("name,args", CASES)
def test_state_dict_has_torchs_layout_and_round_trips(name, args):
    mine, theirs = params(torch.float32), params(torch.float32)
    opt, ref = make_optimizer(name, args, mine), torch_optimizer(name, args, theirs)
    run(opt, mine, 3)
    run(ref, theirs, 3)
    sd, tsd = opt.state_dict(), ref.state_dict()
    assert sd["state"].keys() == tsd["state"].keys()
    for k in sd["state"]:
        assert sd["state"][k].keys() == tsd["state"][k].keys()
        for name_ in sd["state"][k]:
            assert torch.equal(sd["state"][k][name_], tsd["state"][k][name_])
    assert sd["param_groups"][0]["params"] == tsd["param_groups"][0]["params"]
    # a fresh optimizer loaded from either state dict continues as torch's does (loading keeps the
    # tensors it can, in torch as here: hence the copies)
    for source in (sd, tsd):
        again = [torch.nn.Parameter(p.detach().clone()) for p in mine]
        other = make_optimizer(name, args, again)
        other.load_state_dict(copy.deepcopy(source))
        cont = [torch.nn.Parameter(p.detach().clone()) for p in theirs]
        ref_cont = torch_optimizer(name, args, cont)
        ref_cont.load_state_dict(copy.deepcopy(tsd))
        run(other, again, 4, seed=7)
        run(ref_cont, cont, 4, seed=7)
        for a, b in zip(again, cont):
            assert torch.equal(a, b)


def test_load_state_dict_refuses_what_does_not_fit_and_casts_to_the_params():
    ps = params(torch.float32)
    opt = make_optimizer("adam", {"lr": 0.01}, ps)
    run(opt, ps, 2)
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="doesn't match the size"):
        make_optimizer("adam", {"lr": 0.01}, ps[:2]).load_state_dict(sd)
    with pytest.raises(KeyError):
        make_optimizer("adam", {"lr": 0.01}, ps).load_state_dict({"state": {}})
    double = [torch.nn.Parameter(p.detach().double()) for p in ps]
    other = make_optimizer("adam", {"lr": 0.01}, double)
    other.load_state_dict(sd)
    s = other.state[double[0]]
    assert s["exp_avg"].dtype == torch.float64 and s["step"].dtype == torch.float32 and s["step"].item() == 2


def test_an_absurd_lr_overflows_float32_as_torchs_does():
    # trainer.optimizer_step turns this RuntimeError into the user's error (the same text as torch's)
    for make in (lambda ps: make_optimizer("adam", {"lr": 1e38}, ps), lambda ps: torch_optimizer("adam", {"lr": 1e38},
                                                                                                ps)):
        ps = params(torch.float32)
        with pytest.raises(RuntimeError, match="without overflow"):
            run(make(ps), ps, 1)


def test_zero_grad_and_params_without_grad():
    ps = params(torch.float32)
    opt = make_optimizer("sgd", {"lr": 0.1, "momentum": 0.9}, ps)
    before = [p.detach().clone() for p in ps]
    opt.step()   # no grads yet: nothing moves, no state
    assert all(torch.equal(a, b) for a, b in zip(ps, before)) and opt.state_dict()["state"] == {}
    ps[0].grad = torch.ones_like(ps[0])
    opt.zero_grad(set_to_none=False)
    assert torch.equal(ps[0].grad, torch.zeros_like(ps[0]))
    opt.zero_grad()
    assert ps[0].grad is None
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam([])


def test_training_imports_no_torch_dynamo():
    # the reason gdsl has its own optimizers: torch.optim imports torch._dynamo (0.6-0.9 s) on first use,
    # in `gdsl run` and in every rank
    code = ("import sys, gdsl\n"
            "from gdsl.runtime.trainer import train\n"
            "m = [True, True, True]\n"
            "g = gdsl.Graph.from_edges([0, 1, 2], [1, 2, 0], 3, features=[[1.0], [0.0], [2.0]], labels=[0, 1, 0],\n"
            "                          train_mask=m, val_mask=m, test_mask=m)\n"
            "prog = gdsl.compile('programs/gcn.gd')\n"
            "r = train(prog, g, epochs=2, seed=0, backend='reference')\n"
            "assert len(r.epochs) == 2, r\n"
            "print('torch._dynamo' in sys.modules)\n")
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
