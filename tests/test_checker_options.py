"""Train-block settings the checker must refuse or default exactly
(mutation audit: these were not pinned by any test)."""
from __future__ import annotations

from pathlib import Path

import pytest

import gdsl
from gdsl.diagnostics import CompileError

ROOT = Path(gdsl.__file__).resolve().parent.parent   # the repository (tests/ lives beside gdsl/)
GCN = (ROOT / "programs" / "gcn.gd").read_text()
OPT = "optimizer = adam(lr = 0.01, weight_decay = 5e-4)"


def _errors(text: str) -> list[str]:
    with pytest.raises(CompileError) as e:
        gdsl.compile(text)
    return [d.message for d in e.value.diagnostics if d.severity == "error"]


@pytest.mark.parametrize("opt, message", [
    # beta = 1 is outside [0, 1): Adam's running averages would never forget (was not pinned: `v > 1` passed)
    ("adam(lr = 0.01, beta1 = 1)", "adam option 'beta1' must be in [0, 1), got 1"),
    ("adamw(lr = 0.01, beta2 = 1.0)", "adamw option 'beta2' must be in [0, 1), got 1"),
    # an explicit momentum of 0 is no momentum: torch.optim.SGD refuses nesterov then
    ("sgd(lr = 0.1, momentum = 0, nesterov = 1)", "sgd with nesterov = 1 needs a momentum > 0"),
])
def test_optimizer_option_out_of_range_is_an_error(opt, message):
    assert GCN.count(OPT) == 1
    assert _errors(GCN.replace(OPT, f"optimizer = {opt}")) == [message]


@pytest.mark.parametrize("opt", ["adam(lr = 0.01, beta1 = 0.999999, beta2 = 0)",
                                 "sgd(lr = 0.1, momentum = 0.9, nesterov = 1)"])
def test_optimizer_options_at_the_edge_are_accepted(opt):
    cfg = gdsl.compile(GCN.replace(OPT, f"optimizer = {opt}")).train
    assert cfg.optimizer == opt.split("(")[0]


def test_optimizer_without_lr_gets_the_default_lr():
    """`adam(weight_decay = ...)` trains with lr 0.01 (the documented default), and so does the optimizer torch builds."""
    from gdsl.runtime.trainer import make_optimizer
    cfg = gdsl.compile(GCN.replace(OPT, "optimizer = adam(weight_decay = 5e-4)")).train
    assert cfg.optimizer_args == {"lr": 0.01, "weight_decay": 5e-4}
    import torch
    opt = make_optimizer(cfg.optimizer, cfg.optimizer_args, [torch.nn.Parameter(torch.zeros(2))])
    assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["betas"] == (0.9, 0.999)


def test_first_train_block_is_the_default():
    """With several train blocks and no --train, the first one in the source is used."""
    two = GCN.replace("train cora {", "train first {").replace("epochs    = 200", "epochs    = 7") + """
train second {
    model     = GCN[hidden = 8]
    loss      = cross_entropy(Y, mask = train)
    epochs    = 3
}
"""
    cfg = gdsl.compile(two).train
    assert (cfg.name, cfg.epochs) == ("first", 7)
    cfg2 = gdsl.compile(two, train="second").train
    assert (cfg2.name, cfg2.epochs) == ("second", 3)


@pytest.mark.parametrize("loss", ["nll(X, mask = train)", "cross_entropy(X, mask = train)"])
def test_class_losses_need_a_label_target(loss):
    """nll, like cross_entropy, compares the output with class ids: an f32 target is a compile error at the
    target (was pinned for neither: nll of X compiled, then failed in torch at the first epoch)."""
    errs = _errors(GCN.replace("loss      = cross_entropy(Y, mask = train)", f"loss      = {loss}"))
    assert errs == [f"{loss.split('(')[0]} needs a label input; 'X' is f32"]


def test_cache_hint_defaults_are_recorded():
    """`cache = hec` and `hec(size = ...)`: the options not given take the documented defaults
    (docs/language.md: size = 1M, lifespan = 2, threshold = 2000, delay = 1), as the IR records them."""
    base = GCN + "schedule {\n    cache = hec\n}\n"
    sched = gdsl.compile(base).compiled.module.attrs["schedule"]
    assert sched["cache"] == {"kind": "hec", "size": 1_000_000, "lifespan": 2, "threshold": 2000, "delay": 1}
    sched = gdsl.compile(base.replace("cache = hec", "cache = hec(size = 5K, delay = 0)")).compiled.module.attrs["schedule"]
    assert sched["cache"] == {"kind": "hec", "size": 5000, "lifespan": 2, "threshold": 2000, "delay": 0}
