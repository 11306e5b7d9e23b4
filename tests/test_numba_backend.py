"""The Numba backend against the reference backend on every program."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("numba")

import gdsl  # noqa: E402
from filecheck_runner import run_gdsl  # noqa: E402
from helpers import random_graph  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted([*(ROOT / "programs").glob("*.gd"), *(ROOT / "programs" / "extra").glob("*.gd")])


def _graph_for(src: str, seed=11):
    g = random_graph(n=40, e=200, f=6, c=3, seed=seed)
    if "input w : edge" in src:
        g.edata["w"] = torch.rand(g.num_edges) + 0.5
    return g


def _eval_pair(path: Path, seed: int = 11):
    """The program on a small random graph, reference and numba modules with the same weights, in eval mode."""
    src = path.read_text()
    g = _graph_for(src, seed=seed)
    prog = gdsl.compile(src, **({"hidden": 8} if "hidden" in src else {}))
    ref = prog.module(g, backend="reference")
    nb = prog.module(g, backend="numba")
    nb.load_state_dict(ref.state_dict())
    ref.eval()
    nb.eval()
    return ref, nb


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_numba_equals_reference(path):
    ref, nb = _eval_pair(path)
    a, b = ref(), nb()
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    w = torch.randn_like(a)
    ga = torch.autograd.grad((a * w).sum(), list(ref.parameters()), allow_unused=True)
    gb = torch.autograd.grad((b * w).sum(), list(nb.parameters()), allow_unused=True)
    for (name, _), x, y in zip(ref.named_parameters(), ga, gb):
        if x is None or y is None:
            assert x is None and y is None, name
        else:
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-5, msg=lambda m: f"grad of {name}: {m}")


def test_example_programs_run_their_graph_ops_on_numba():
    g = _graph_for("")
    for name in ("gcn", "sage", "gat"):
        model = gdsl.compile(ROOT / "programs" / f"{name}.gd").module(g, backend="numba")
        plan = model.kernel_plan()
        assert plan and all(where.startswith("numba") for _, where in plan), plan


def test_no_gradient_for_the_input_features():
    g = _graph_for("")
    model = gdsl.compile(ROOT / "programs" / "gcn.gd").module(g, backend="numba")
    model.eval()
    x = g.features.clone().requires_grad_(False)
    out = model(x)
    out.sum().backward()
    assert x.grad is None
    assert all(p.grad is not None for p in model.parameters())


def test_schedule_target_cpu_picks_numba_and_emit_numba_prints_kernels(monkeypatch):
    src = (ROOT / "programs" / "gcn.gd").read_text() + "schedule { target = cpu }\n"
    assert gdsl.compile(src).default_backend == "numba"
    # numba is the CPU default; without the numba package, the reference backend
    assert gdsl.compile(ROOT / "programs" / "gcn.gd").default_backend == "numba"
    model = gdsl.compile(ROOT / "programs" / "gcn.gd").module(_graph_for(""))
    assert type(model).__name__ == "NumbaModule"
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real(name, *a))
    assert gdsl.compile(ROOT / "programs" / "gcn.gd").default_backend == "reference"
    assert gdsl.compile(src).default_backend == "numba"   # named by the schedule: its error, not a silent fallback
    monkeypatch.undo()
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "gat.gd"), "--emit", "numba"])
    assert code == 0, err
    assert "@njit(parallel=True, cache=True" in out and "prange" in out


def test_training_with_numba_matches_reference_loss_curve():
    from gdsl.runtime.trainer import train

    g = _graph_for("", seed=3)
    prog = gdsl.compile(ROOT / "programs" / "gcn.gd")
    r1 = train(prog, g, backend="reference", epochs=8, seed=5)
    r2 = train(prog, g, backend="numba", epochs=8, seed=5)
    l1 = [e.loss for e in r1.epochs]
    l2 = [e.loss for e in r2.epochs]
    assert l1 == pytest.approx(l2, rel=1e-4)


@pytest.mark.parametrize("name", ["gcn", "sage", "gat"])
def test_fused_chains_equal_reference_in_training_mode(name):
    """The fused chains (aggregation by a vertex-constant scale, bias +
    activation + dropout in one pass, constant edge data in CSR order) keep
    the reference's values in training mode, dropout masks included, over
    several steps (the masks change with the step), and its gradients."""
    g = _graph_for("", seed=4)
    prog = gdsl.compile(ROOT / "programs" / f"{name}.gd")
    ref = prog.module(g, backend="reference")
    nb = prog.module(g, backend="numba")
    nb.load_state_dict(ref.state_dict())
    nb.dropout_seed = ref.dropout_seed   # each module draws its own (as two nn.Dropout): the same masks
    plan = nb.fusion_plan()
    assert any("one epilogue pass" in line for line in plan), plan
    ref.train()
    nb.train()
    for _ in range(3):
        a, b = ref(), nb()
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
        w = torch.randn_like(a)
        la, lb = ref.loss(a) + (a * w).sum(), nb.loss(b) + (b * w).sum()
        torch.testing.assert_close(lb, la, rtol=1e-5, atol=1e-5)
        ga = torch.autograd.grad(la, list(ref.parameters()))
        gb = torch.autograd.grad(lb, list(nb.parameters()))
        for (pname, _), x, y in zip(ref.named_parameters(), ga, gb):
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-5, msg=lambda m, p=pname: f"grad of {p}: {m}")
    assert nb._exact and all(nb._exact.values())  # the kernels drew the reference's masks


def test_fusion_plan_and_unfused_module_agree():
    g = _graph_for("", seed=6)
    prog = gdsl.compile(ROOT / "programs" / "sage.gd")
    fused = prog.module(g, backend="numba")
    from gdsl.backends.numba.module import NumbaModule
    plain = NumbaModule(fused.ir, fused.graph, fuse=False)
    plain.load_state_dict(fused.state_dict())
    plain.dropout_seed = fused.dropout_seed
    assert not plain.fusion_plan()
    assert any("row scale in the aggregation epilogue" in line for line in fused.fusion_plan())
    fused.train()
    plain.train()
    for _ in range(2):
        torch.testing.assert_close(fused(), plain(), rtol=1e-5, atol=1e-6)


def test_dropout_falls_back_when_masks_differ(monkeypatch):
    """A module whose reference dropout draws masks differently (here: a
    changed dropout_keep) gets the reference's dropout, not the kernel's."""
    from gdsl.backends.numba.module import NumbaModule
    g = _graph_for("", seed=7)
    prog = gdsl.compile(ROOT / "programs" / "gcn.gd")
    ref = prog.module(g, backend="reference")
    nb = prog.module(g, backend="numba")
    nb.load_state_dict(ref.state_dict())
    nb.dropout_seed = ref.dropout_seed
    odd = lambda self, op, x, gen, p: torch.rand(x.shape, generator=gen) < 1 - p  # noqa: E731
    monkeypatch.setattr(type(ref), "dropout_keep", odd)
    monkeypatch.setattr(NumbaModule, "dropout_keep", odd)
    ref.train()
    nb.train()
    torch.testing.assert_close(nb(), ref(), rtol=1e-4, atol=1e-5)
    assert nb._exact and not any(nb._exact.values())


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_reused_output_mappings_hold_no_stale_values(path, monkeypatch):
    """Outputs in huge-page mappings are recycled (ops._FREE_MAPPINGS): a
    second forward and backward whose outputs land in the first one's freed
    mappings (filled with NaN here) must still equal the reference, so no
    kernel may count on fresh, zeroed memory."""
    from gdsl.backends.numba import ops
    monkeypatch.setattr(ops, "HUGE_ALLOC_BYTES", 1)
    monkeypatch.setattr(ops, "FREE_MAPPINGS_PER_SIZE", 10_000)
    monkeypatch.setattr(ops, "_FREE_MAPPINGS", {})
    release = ops._release_mapping

    def poisoned(nbytes, m):  # a recycled mapping reads as NaN wherever a kernel does not write
        m.seek(0)
        m.write(b"\xff" * len(m))
        release(nbytes, m)

    monkeypatch.setattr(ops, "_release_mapping", poisoned)
    ref, nb = _eval_pair(path, seed=5)
    a = ref()
    ga = torch.autograd.grad((a * a).sum(), list(ref.parameters()), allow_unused=True)
    for _ in range(2):
        b = nb()
        gb = torch.autograd.grad((b * b).sum(), list(nb.parameters()), allow_unused=True)
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
        for x, y in zip(ga, gb):
            if x is not None and y is not None:
                torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-5)
        del b, gb
    assert ops._FREE_MAPPINGS, "no output went through a recycled mapping"
