"""Full-batch training per a program's `train` block."""
from __future__ import annotations

import io
import math
import numbers
import os
import signal
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from gdsl.diagnostics import GdslError
from gdsl.graph.graph import Graph
from gdsl.runtime import optim
from gdsl.runtime.binding import check_masks, untrainable_error
from gdsl.runtime.files import check_json_path, write_atomic, write_json  # noqa: F401 (the trainer's API)
from gdsl.runtime.signals import Terminated, signals_held


@dataclass
class EpochStats:
    epoch: int
    loss: float
    metrics: dict[str, float]
    time: float


@dataclass
class TrainResult:
    epochs: list[EpochStats] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    signal: int | None = None   # what stopped it early: SIGINT (Ctrl-C), SIGTERM, SIGHUP
    diverged: str | None = None  # why training stopped on a non-finite loss or step (then `Diverged` is raised)
    model: torch.nn.Module | None = field(default=None, repr=False)   # the trained module (None: none was built)
    steps: int = 0   # optimizer steps taken: one more than len(epochs) when stopped between a step and its evaluation

    @property
    def interrupted(self) -> bool:
        return self.signal is not None

    def to_json(self, **meta) -> dict:
        return {**meta, "interrupted": self.interrupted, **({"diverged": self.diverged} if self.diverged else {}),
                "epochs": [{"epoch": e.epoch, "loss": e.loss, **e.metrics, "time": e.time} for e in self.epochs],
                "final": self.final}


class _Nonfinite(Exception):
    """Raised inside the epoch loop on a non-finite loss or step; `train`
    turns it into `Diverged` with the epochs completed."""


class Diverged(GdslError):
    """Training stopped on a non-finite loss or an optimizer step beyond
    float32; `result` has the epochs completed before it (`result.diverged`
    is the message), so `gdsl run --json` still writes them."""

    def __init__(self, message: str, result: TrainResult) -> None:
        super().__init__(message)
        self.result = result


def nonfinite_loss(epoch: int, loss_value: float) -> str:
    """The message for a NaN/inf loss: before the first step the weights are
    the initial ones, so the cause is the data or the program, not the lr."""
    if epoch == 1:
        return (f"epoch 1: the loss is {loss_value} before any optimizer step: the data or the program give "
                "non-finite values (features too large for float32, negative edge weights under a sqrt or log, "
                "rsqrt(0) or 1/x of the degree of a vertex with no in-edge, ...)")
    return f"epoch {epoch}: the loss is {loss_value}; training diverged (try a smaller lr)"


def nonfinite_grads(model) -> list[float]:
    """Flags for `nonfinite_grad`, in named_parameters' order: 1.0 for each
    parameter whose gradient holds an inf or NaN, then 1.0 for each whose
    holds a NaN. Sums over ranks keep their meaning (> 0: some rank's does)."""
    bad, nan = [], []
    for _, p in model.named_parameters():
        g = p.grad
        finite = g is None or bool(torch.isfinite(g).all())
        bad.append(0.0 if finite else 1.0)
        nan.append(0.0 if finite or not bool(torch.isnan(g).any()) else 1.0)
    return bad + nan


def nonfinite_grad(model, flags: list[float], epoch: int, loss_value: float) -> str | None:
    """The message for a finite loss whose gradient is not (was: the step
    made the params NaN, the run printed accuracies of NaN logits, saved
    them and exited 0; a later epoch said "try a smaller lr"). The usual
    cause is a non-finite forward value the loss does not read (rsqrt(0) or
    1/0 at a vertex with no in-edge, outside the loss's mask): the backward
    multiplies it by a zero gradient, inf * 0 = nan."""
    names = [n for n, _ in model.named_parameters()]
    bad = [i for i in range(len(names)) if flags[i] > 0]
    if not bad:
        return None
    what = "nan" if flags[len(names) + bad[0]] > 0 else "inf"
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return (f"epoch {epoch}: the gradient of {names[bad[0]]}{more} is {what} though the loss is finite "
            f"({loss_value:.4f}): the forward pass makes an inf or nan the loss does not read (rsqrt(0) or 1/0 at "
            "a vertex with no in-edge outside the loss's mask, ...) and the backward pass turns it into nan "
            "(inf * 0); the step is not taken, the params are the previous epoch's")


def make_optimizer(name: str, args: dict[str, float], params) -> optim.Optimizer:
    """The train block's optimizer (runtime/optim.py: torch's update rules, without torch.optim's import of
    torch._dynamo)."""
    params = list(params)
    if not params:   # (was: torch's ValueError under `gdsl run --np`, reported as an internal error)
        raise GdslError("the model has no params to train (an optimizer needs at least one)")
    # the numbers as floats (was: an integer beyond int64, `momentum = 99999999999999999999`, reached
    # torch as an int: "int too big to convert" at the second step, exit 3)
    a = {k: v if k == "nesterov" or isinstance(v, bool) else float(v) for k, v in args.items()}
    if name in ("adam", "adamw"):
        betas = (a.pop("beta1", 0.9), a.pop("beta2", 0.999))
        cls = optim.Adam if name == "adam" else optim.AdamW
        return cls(params, betas=betas, **a)
    if name == "sgd":
        if "nesterov" in a:
            a["nesterov"] = bool(a["nesterov"])
        return optim.SGD(params, **a)
    raise GdslError(f"unknown optimizer '{name}'")


def optimizer_step(opt: optim.Optimizer, epoch: int, error=GdslError) -> None:
    """opt.step(), with torch's float32 overflow of an absurd step (an lr of
    1e38: Adam's step size lr / (1 - beta1) no longer fits) as a user error."""
    try:
        opt.step()
    except RuntimeError as e:
        if "without overflow" not in str(e):
            raise
        group = opt.param_groups[0]
        big = [k for k in ("weight_decay", "momentum", "eps") if abs(float(group.get(k) or 0)) > 1e30]
        said = ", ".join(f"{k} = {float(group[k]):g}" for k in ["lr"] + big)   # (was lr alone: a weight_decay of
        raise error(f"epoch {epoch}: the optimizer step overflows float32 ({said}); training diverged "   # 1e39 too)
                    f"(try a smaller {' or '.join(['lr'] + big)})") from None


def accuracy(out: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None, binary: bool = False) -> float:
    """Share of correct predictions: argmax over classes, or with `binary`
    (a bce model: output [] or [1]) the sign of the single logit. A
    cross_entropy model of one class (C = 1) is argmax: class 0."""
    if mask is not None:
        out, labels = out[mask], labels[mask]
    if labels.numel() == 0:
        return float("nan")
    return float(_hits(out, labels, binary).float().mean())


def correct_count(out: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None, binary: bool = False) -> int:
    """The number of correct predictions `accuracy` takes the share of."""
    if mask is not None:
        out, labels = out[mask], labels[mask]
    return int(_hits(out, labels, binary).sum()) if labels.numel() else 0


def share(correct: int, total: int) -> float:
    """correct / total as `accuracy` gives it: the float32 mean of 0/1 hits,
    so ranks that sum counts report the very number one process does (was:
    the float64 quotient, 0.7559999891519547 against 0.7559999823570251 for
    378 of 500; helper-5)."""
    if not total:
        return float("nan")
    return float(torch.tensor(float(correct), dtype=torch.float32) / torch.tensor(float(total), dtype=torch.float32))


def _hits(out: torch.Tensor, labels: torch.Tensor, binary: bool) -> torch.Tensor:
    if binary or out.dim() == 1:
        pred = (out.reshape(-1) > 0).long()
    else:
        pred = out.argmax(-1)
    return pred == labels


def accuracy_masks(cfg) -> list[str | None]:
    """The masks accuracy is reported on, each once: the loss's (its
    training rows; None: a loss over every vertex, reported as `all_acc`),
    then the eval block's."""
    evals = [m for _, m in cfg.eval]
    lead = [cfg.loss.mask] if cfg.loss is not None and cfg.loss.mask not in evals else []
    return list(dict.fromkeys(lead + evals))


def binary_logit(model) -> bool:
    """Whether accuracy is the sign of one logit (bce's rule: class 1 where
    the logit is > 0) rather than the argmax over classes."""
    op = model.loss_op
    return op is not None and op.attrs["fn"] == "bce"


def full_batch_warning(cfg) -> str | None:
    """A train block with batch_size/fanout (mini-batch training is a later
    issue) is trained full-batch: by one process and by `gdsl run --np`."""
    if cfg.batch_size is None and cfg.fanout is None:
        return None
    return (f"train block '{cfg.name}' sets batch_size/fanout, but mini-batch training is not implemented yet: "
            "training full-batch instead")


def loss_warning(model) -> str | None:
    """A loss that cannot train: cross_entropy / nll over a single class
    (C = 1: the data has one label) is 0 for every output."""
    op = model.loss_op
    if op is None or op.attrs["fn"] not in ("cross_entropy", "nll") or not op.operands[0].type.shape:
        return None
    if int(op.operands[0].type.shape[-1]) != 1:
        return None
    return (f"{op.attrs['fn']} over a single class (the model's output has 1 class: the labels hold one class id) "
            "is 0 for any output: the params get no gradient from it and do not train")


def reports_accuracy(model) -> bool:
    """Whether accuracy (argmax, or a single logit's sign, against the graph's
    labels) means anything: the graph has labels and the loss, if any, is
    not mse and takes the label input as its target (cross_entropy, nll, or
    bce of a `label[2]` input; not bce of float targets such as X)."""
    op = model.loss_op
    if model.graph.labels is None:
        return False
    return op is None or (op.attrs["fn"] != "mse" and op.operands[1].type.dtype == "i64")


def train(program, graph: Graph, *, backend: str | None = None, epochs: int | None = None, seed: int = 0,
          on_epoch: Callable[[EpochStats], None] | None = None) -> TrainResult:
    """Train `program` (a `gdsl.Program`) full-batch on `graph`; returns per-epoch stats.

    Deterministic for a given seed on the reference backend. A train block
    with `batch_size`/`fanout` is trained full-batch with a warning (mini-batch
    training is a later issue). A NaN or infinite loss, or an optimizer step
    beyond float32, raises `Diverged` (a `GdslError`) whose `result` holds
    the epochs completed before it.
    """
    from gdsl.api import Program
    if not isinstance(program, Program):
        raise TypeError(f"train() takes a gdsl.Program (gdsl.compile(...)), got {type(program).__name__}")
    if not isinstance(graph, Graph):
        raise TypeError(f"train() takes a gdsl.Graph, got {type(graph).__name__}")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral) or epochs < 1):
        raise GdslError(f"epochs must be an integer >= 1, got {epochs!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 63:
        raise GdslError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    epochs, seed = (None if epochs is None else int(epochs)), int(seed)
    if on_epoch is not None and not callable(on_epoch):
        raise TypeError(f"on_epoch must be callable, got {type(on_epoch).__name__}")
    cfg = program.train
    if cfg is None:
        raise GdslError(f"{program.file}: the program has no train block")
    if (warning := full_batch_warning(cfg)) is not None:
        warnings.warn(warning, stacklevel=2)
    check_masks(program.checked, graph)
    torch.manual_seed(seed)
    try:
        # (hoist: the features are the graph's and stay as they are, so the values the IR marks
        # invariant are computed once, not every epoch: passes/invariant.py)
        model = program.module(graph, backend=backend, hoist=True)   # compiles the kernels: seconds on a cold cache
        model.dropout_seed = seed
        if not any(p.requires_grad for p in model.parameters()):
            raise untrainable_error(program.checked)   # a param the layers declare but do not use
        opt = make_optimizer(cfg.optimizer, cfg.optimizer_args, model.parameters())
    except (KeyboardInterrupt, Terminated) as e:   # before any epoch: an empty result (`--json` with final {})
        result = TrainResult()
        result.signal = e.signum if isinstance(e, Terminated) else signal.SIGINT
        return result
    if (warning := loss_warning(model)) is not None:
        warnings.warn(warning, stacklevel=2)
    result = TrainResult(model=model)
    n_epochs = epochs if epochs is not None else cfg.epochs
    labels = graph.labels
    names = accuracy_masks(cfg)
    if not reports_accuracy(model):
        names = []  # accuracy needs class labels as the loss's target
    binary = binary_logit(model)
    try:
        for epoch in range(1, n_epochs + 1):
            t0 = time.perf_counter()
            model.train()
            opt.zero_grad(set_to_none=True)
            out = model()
            loss = model.loss(out)
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                raise _Nonfinite(nonfinite_loss(epoch, loss_value))
            loss.backward()
            if (why := nonfinite_grad(model, nonfinite_grads(model), epoch, loss_value)) is not None:
                raise _Nonfinite(why)
            with signals_held():   # a signal waits for the whole step: never some params a step ahead
                optimizer_step(opt, epoch, error=_Nonfinite)
                result.steps += 1
            model.eval()
            with torch.no_grad():
                out = model()
            metrics = {f"{m or 'all'}_acc": accuracy(out, labels, graph.masks.get(m) if m else None, binary)
                       for m in names}
            stats = EpochStats(epoch, loss_value, metrics, time.perf_counter() - t0)
            result.epochs.append(stats)
            if on_epoch:
                on_epoch(stats)
    except (KeyboardInterrupt, Terminated) as e:   # Ctrl-C, SIGTERM, SIGHUP: keep what was trained
        result.signal = e.signum if isinstance(e, Terminated) else signal.SIGINT
    except _Nonfinite as e:   # diverged: the epochs before it are kept (was: lost, and no --json)
        result.diverged = str(e)
    _summarise(result)
    if result.diverged:
        raise Diverged(result.diverged, result)
    return result


def split_epoch_times(times: list[float]) -> dict:
    """The first epoch's time and the mean of the later ones, when there are
    later ones: the first loads or compiles the kernels (numba's, triton's,
    torch.compile's) and warms the allocator, so the mean of a short run
    says little about an epoch's cost (benchmarks of DGL and PyG skip it the
    same way)."""
    if len(times) < 2:
        return {}
    return {"first_epoch_time": times[0], "later_epoch_time": sum(times[1:]) / (len(times) - 1)}


def epoch_time_text(mean: float, first: float | None = None, later: float | None = None) -> str:
    """`mean epoch 132.8 ms (first 379.1 ms, later 9.6 ms)` for the summary line."""
    text = f"mean epoch {mean * 1000:.1f} ms"
    if first is not None and later is not None:
        text += f" (first {first * 1000:.1f} ms, later {later * 1000:.1f} ms)"
    return text


def _summarise(result: TrainResult) -> None:
    """result.final from its epochs (the last one, and the best by val_acc)."""
    if result.epochs:
        last = result.epochs[-1]
        result.final = {"epoch": last.epoch, "loss": last.loss, **last.metrics,
                        "mean_epoch_time": sum(e.time for e in result.epochs) / len(result.epochs)}
        result.final.update(split_epoch_times([e.time for e in result.epochs]))
        if "val_acc" in last.metrics:
            best = max(result.epochs, key=lambda e: (e.metrics["val_acc"], -e.epoch))
            result.final["best_val_epoch"] = best.epoch
            result.final.update({f"best_val/{k}": v for k, v in best.metrics.items()})


class Progress:
    """Per-epoch progress: one live line on a terminal, periodic lines otherwise
    (a `TERM=dumb` terminal, which cannot erase a line, gets those too). The
    live line is cut to the terminal's width: a longer one wraps, and its
    wrapped rows stayed behind at every epoch (helper-10)."""

    def __init__(self, total: int, stream=None, every: int | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.live = self.stream.isatty() and os.environ.get("TERM") != "dumb"
        self.every = every or (1 if self.live else max(1, total // 20))
        self.open = False   # a live line is on the screen without its newline

    def __call__(self, s: EpochStats) -> None:
        if not self.live and s.epoch % self.every and s.epoch != self.total:
            return
        parts = [f"epoch {s.epoch:>{len(str(self.total))}}/{self.total}", f"loss {loss_text(s.loss)}"]
        parts += [f"{k.replace('_acc', '')} {v:.4f}" for k, v in s.metrics.items()]
        line = "  ".join(parts + [f"{s.time * 1000:.1f} ms"])
        if self.live:
            width = self._width()
            self.stream.write("\r\033[K" + line[:max(1, width - 1)])
            self.open = s.epoch != self.total
            if not self.open:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _width(self) -> int:
        """The terminal's width: $COLUMNS, else the stream's own terminal (stdout
        may be a file while stderr, the progress line's, is the terminal)."""
        try:
            if (cols := int(os.environ.get("COLUMNS", ""))) > 0:
                return cols
        except ValueError:   # unset, or not a number ("²" passes isdigit())
            pass
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
            return shutil.get_terminal_size().columns

    def close(self) -> None:
        """End the live line, if one is open (before an error or a stop message)."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False


def loss_text(x: float) -> str:
    """A loss as `0.0338`; far from 1 in scientific notation (was `0.0000` for a
    small MSE, `18091062853632.0000` for a blown-up one)."""
    return f"{x:.4f}" if x == 0 or 1e-3 <= abs(x) < 1e6 or not math.isfinite(x) else f"{x:.4e}"

