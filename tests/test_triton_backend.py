"""The Triton backend against the reference backend: every program (outputs
and parameter gradients), gcn / sage / gat trained end to end, selection
(`backend="triton"`, `--backend triton`, `schedule { target = gpu }`) and
its error without a GPU, `--emit triton`.

Runs the kernels under Triton's interpreter (TRITON_INTERPRET=1, set below
before anything imports triton; the backend reads it at the kernels' first
launch) on tiny graphs: the interpreter costs about a millisecond per tl
operation per program.  With TRITON_INTERPRET=0 and a GPU the same tests
run on the GPU.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

import gdsl  # noqa: E402
from filecheck_runner import run_gdsl  # noqa: E402
from gdsl.backends.triton import NO_GPU, interpret_mode  # noqa: E402
from gdsl.diagnostics import GdslError  # noqa: E402
from helpers import check_double_module, random_graph  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted([*(ROOT / "programs").glob("*.gd"), *(ROOT / "programs" / "extra").glob("*.gd")])
RUNNABLE = interpret_mode() or torch.cuda.is_available()
needs_kernels = pytest.mark.skipif(not RUNNABLE, reason="TRITON_INTERPRET=0 and no CUDA GPU")

# small models: the interpreter's cost grows with rows x heads x steps
SMALL = {"hidden": 4, "heads": 2}


def _graph_for(src: str, seed=11):
    g = random_graph(n=14, e=40, f=5, c=3, seed=seed, isolated=2)
    if "input w : edge" in src:
        g.edata["w"] = torch.rand(g.num_edges) + 0.5
    return g


def _compile(src_or_path, **kw):
    text = Path(src_or_path).read_text() if isinstance(src_or_path, Path) else src_or_path
    overrides = {k: v for k, v in SMALL.items() if f"{k} =" in text or f"{k}=" in text}
    try:
        return gdsl.compile(src_or_path, **overrides, **kw)
    except (gdsl.CompileError, GdslError):   # a model without one of the static arguments
        return gdsl.compile(src_or_path, **kw)


def _same_grads(ref, tr, a, b):
    w = torch.randn_like(a)
    ga = torch.autograd.grad((a * w).sum(), list(ref.parameters()), allow_unused=True)
    gb = torch.autograd.grad((b * w.to(b.device)).sum(), list(tr.parameters()), allow_unused=True)
    for (name, _), x, y in zip(ref.named_parameters(), ga, gb):
        if x is None or y is None:
            assert x is None and y is None, name
        else:
            torch.testing.assert_close(y.cpu(), x, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"grad of {name}: {m}")


@needs_kernels
@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_triton_equals_reference(path):
    src = path.read_text()
    g = _graph_for(src)
    prog = _compile(path)
    ref = prog.module(g, backend="reference")
    tr = prog.module(g, backend="triton")
    tr.load_state_dict(ref.state_dict())
    ref.eval()
    tr.eval()
    a, b = ref(), tr()
    torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)
    _same_grads(ref, tr, a, b)


@needs_kernels
def test_example_programs_run_their_graph_ops_on_triton():
    g = _graph_for("")
    for name in ("gcn", "sage", "gat"):
        model = _compile(ROOT / "programs" / f"{name}.gd").module(g, backend="triton")
        plan = model.kernel_plan()
        assert plan and all(where.startswith("triton") for _, where in plan), plan
    sage = _compile(ROOT / "programs" / "sage.gd").module(g, backend="triton")
    assert any("row scale in the aggregation epilogue" in line for line in sage.fusion_plan())


@needs_kernels
@pytest.mark.filterwarnings("ignore:train block")
@pytest.mark.parametrize("name", ["gcn", "sage", "gat"])
def test_training_matches_reference(name, monkeypatch):
    """Three epochs of full-batch training (dropout on: the backend draws the
    reference's masks; on a GPU because GDSL_TRITON_DROPOUT=reference asks
    for them) give the reference's losses and accuracies."""
    from gdsl.runtime.trainer import train

    monkeypatch.setenv("GDSL_TRITON_DROPOUT", "reference")
    g = _graph_for("", seed=3)
    prog = _compile(ROOT / "programs" / f"{name}.gd")
    r1 = train(prog, g, backend="reference", epochs=3, seed=5)
    r2 = train(prog, g, backend="triton", epochs=3, seed=5)
    assert [e.loss for e in r2.epochs] == pytest.approx([e.loss for e in r1.epochs], rel=1e-4)
    assert [e.metrics for e in r2.epochs] == [e.metrics for e in r1.epochs]


@needs_kernels
def test_double_module_runs_in_float64_and_passes_gradcheck():
    check_double_module("triton")


@needs_kernels
def test_unfused_module_agrees_and_input_features_get_no_gradient():
    from gdsl.backends.triton.module import TritonModule

    g = _graph_for("", seed=6)
    fused = _compile(ROOT / "programs" / "sage.gd").module(g, backend="triton")
    plain = TritonModule(fused.ir, fused.graph, fuse=False)
    plain.load_state_dict(fused.state_dict())
    assert not plain.fusion_plan()
    fused.eval()
    plain.eval()
    x = g.features.clone()
    out = fused(x)
    torch.testing.assert_close(out, plain(x), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert x.grad is None and all(p.grad is not None for p in fused.parameters())


def test_no_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    g = _graph_for("")
    prog = gdsl.compile(ROOT / "programs" / "gcn.gd")
    with pytest.raises(GdslError, match="no CUDA GPU: the triton backend needs one; set TRITON_INTERPRET=1"):
        prog.module(g, backend="triton")
    code, _, err = run_gdsl(["run", str(ROOT / "programs" / "gcn.gd"), "--backend", "triton", "--epochs", "1"])
    assert code == 1 and f"gdsl: error: {NO_GPU}" in err, err
    # target = gpu picks triton, with the same error here
    src = (ROOT / "programs" / "gcn.gd").read_text() + "schedule { target = gpu }\n"
    prog = gdsl.compile(src)
    assert prog.default_backend == "triton"
    with pytest.raises(GdslError, match="no CUDA GPU"):
        prog.module(g)


@needs_kernels
def test_dropout_masks_setting(monkeypatch):
    """GDSL_TRITON_DROPOUT picks a new module's dropout masks; a wrong value is
    a clear error at the module, as is a wrong `dropout_masks` at the first
    dropout.  On the CPU (the interpreter) both are the reference's masks."""
    g = _graph_for("", seed=3)
    prog = _compile(ROOT / "programs" / "gcn.gd")
    monkeypatch.setenv("GDSL_TRITON_DROPOUT", "gpu")
    with pytest.raises(GdslError, match="GDSL_TRITON_DROPOUT must be one of device, reference, not 'gpu'"):
        prog.module(g, backend="triton")
    monkeypatch.setenv("GDSL_TRITON_DROPOUT", "reference")
    assert prog.module(g, backend="triton").dropout_masks == "reference"
    monkeypatch.delenv("GDSL_TRITON_DROPOUT")
    m = prog.module(g, backend="triton")
    assert m.dropout_masks == "device"
    if m.device.type == "cpu":
        ref = prog.module(g, backend="reference")
        ref.load_state_dict(m.state_dict())
        ref.dropout_seed = m.dropout_seed
        torch.manual_seed(0)
        a = m().detach()
        torch.manual_seed(0)
        torch.testing.assert_close(a, ref(), rtol=1e-4, atol=1e-5)   # training mode: the same masks
    m.dropout_masks = "host"
    with pytest.raises(GdslError, match="dropout_masks must be one of device, reference, not 'host'"):
        m()


def test_missing_triton_is_a_clear_error(monkeypatch):
    import gdsl.backends.triton as bt

    monkeypatch.setattr(bt, "triton_installed", lambda: False)
    with pytest.raises(GdslError, match=r"needs the triton package; pip install 'gdsl\[triton\]'"):
        gdsl.compile(ROOT / "programs" / "gcn.gd").module(_graph_for(""), backend="triton")


def test_emit_triton_prints_the_kernels():
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "gat.gd"), "--emit", "triton"])
    assert code == 0, err
    assert "@triton.jit" in out and "@triton.autotune" in out and "def gat_fwd(" in out
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "sage.gd"), "--emit", "triton"])
    assert code == 0, err
    assert "def agg_copy_src_sum_none_rs(" in out   # mean / 1 / degree as a row scale
    code, out, _ = run_gdsl(["compile", str(ROOT / "programs" / "extra" / "mlp.gd"), "--emit", "triton"])
    assert code == 0 and "nothing runs on Triton" in out


def test_emit_triton_does_not_import_triton():
    """The sources are text: printing them needs neither triton nor a GPU."""
    import subprocess
    import sys

    code = ("import sys; from gdsl.cli import main; "
            f"rc = main(['compile', {str(ROOT / 'programs' / 'gcn.gd')!r}, '--emit', 'triton']); "
            "assert rc == 0 and 'triton' not in sys.modules, sorted(m for m in sys.modules if 'triton' in m)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert "def agg_mul_sum_s(" in r.stdout


@needs_kernels
def test_cli_run_backend_triton(tmp_path):
    import json

    import numpy as np

    g = _graph_for("", seed=2)
    path = tmp_path / "g.npz"
    np.savez(path, src=g.src.numpy(), dst=g.dst.numpy(), features=g.features.numpy(), labels=g.labels.numpy(),
             train_mask=g.train_mask.numpy(), val_mask=g.val_mask.numpy(), test_mask=g.test_mask.numpy())
    out = tmp_path / "r.json"
    code, text, err = run_gdsl(["run", str(ROOT / "programs" / "gcn.gd"), "--data", str(path), "--backend", "triton",
                                "--epochs", "2", "--set", "hidden=4", "--json", str(out)])
    assert code == 0, err
    assert "backend triton" in err and "final (epoch 2)" in text
    assert json.loads(out.read_text())["backend"] == "triton"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.filterwarnings("ignore:train block")
@pytest.mark.parametrize("name", ["gcn", "sage", "gat"])
def test_on_the_gpu(name, monkeypatch):
    """With a GPU (and the interpreter off): the module keeps the graph,
    params and activations on the GPU, returns its output beside the graph's
    features (so the trainer's accuracy works), and equals the reference."""
    from gdsl.runtime.trainer import train

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    g = _graph_for("", seed=9)
    prog = _compile(ROOT / "programs" / f"{name}.gd")
    ref = prog.module(g, backend="reference")
    tr = prog.module(g, backend="triton")
    assert tr.device.type == "cuda" and tr.tg.device.type == "cuda"
    assert all(p.is_cuda for p in tr.parameters())
    tr.load_state_dict(ref.state_dict())
    ref.eval()
    tr.eval()
    a, b = ref(), tr()
    assert b.device.type == "cpu"
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    _same_grads(ref, tr, a, b)
    tr.output_device = None
    assert tr().is_cuda
    r1 = train(prog, g, backend="reference", epochs=3, seed=5)
    monkeypatch.setenv("GDSL_TRITON_DROPOUT", "reference")   # the reference's masks, drawn on the host
    r2 = train(prog, g, backend="triton", epochs=3, seed=5)
    assert [e.loss for e in r2.epochs] == pytest.approx([e.loss for e in r1.epochs], rel=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_output_where_the_input_is(monkeypatch):
    """model(x) returns where x is (as torch modules do; was: always where the
    graph's features are), model() where the graph's features are; an
    output_device set by the caller wins."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    g = _graph_for("", seed=9)
    tr = _compile(ROOT / "programs" / "gcn.gd").module(g, backend="triton").eval()
    assert tr().device.type == "cpu" and tr(g.features).device.type == "cpu"
    out = tr(g.features.cuda())
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), tr())
    tr.output_device = torch.device("cpu")
    assert tr(g.features.cuda()).device.type == "cpu"
    tr.output_device = None
    assert tr().is_cuda


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dropout_masks_on_the_gpu(monkeypatch):
    """On a GPU the default draws dropout masks there (a CUDA generator seeded
    per seed, step and op as the reference seeds its CPU one): the same seed
    and step give the same mask, the next step another, about 1 - p of the
    entries kept, and not the reference's mask (that is what "reference"
    gives, bit for bit)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    g = _graph_for("", seed=9)
    prog = _compile(ROOT / "programs" / "gcn.gd")
    ref = prog.module(g, backend="reference")
    tr = prog.module(g, backend="triton")
    assert tr.dropout_masks == "device"
    x = torch.ones(2000, 64, device="cuda")

    def mask(m, step):   # the first dropout's mask (each module has its own IR's ops)
        drop = next(op for op in m.ir.main.ops if op.name == "dropout")
        m.dropout_seed, m._mask_step = 5, step
        return m._keep(drop, x if m is tr else x.cpu(), drop.attrs["p"]).cpu()

    a, b, c = mask(tr, 1), mask(tr, 1), mask(tr, 2)
    assert a.device.type == "cpu" and torch.equal(a, b) and not torch.equal(a, c)
    assert abs(a.float().mean().item() - 0.5) < 0.01   # gcn.gd's p = 0.5
    want = mask(ref, 1)
    assert not torch.equal(a, want)
    tr.dropout_masks = "reference"
    assert torch.equal(mask(tr, 1), want)
    tr.dropout_masks = "Device"
    with pytest.raises(GdslError, match="dropout_masks must be one of device, reference, not 'Device'"):
        mask(tr, 1)
    # a training run on device masks is reproducible
    from gdsl.runtime.trainer import train
    monkeypatch.delenv("GDSL_TRITON_DROPOUT", raising=False)
    r1, r2 = (train(prog, g, backend="triton", epochs=3, seed=5) for _ in range(2))
    assert [e.loss for e in r1.epochs] == [e.loss for e in r2.epochs]


@needs_kernels
def test_torch_export_jit_trace_and_func_grad_capture_the_plain_torch_form():
    """The Triton module under torch.export (strict and not), jit.trace and
    torch.func.grad runs the reference's plain torch ops (as on the other
    backends: test_torch_module). Was: a FakeTensor data-pointer error."""
    from torch.func import functional_call, grad
    g = _graph_for("")
    torch.manual_seed(0)
    m = _compile(ROOT / "programs" / "gat.gd").module(g, backend="triton").eval()
    x2 = torch.randn_like(g.features)
    for strict in (False, True):
        ep = torch.export.export(m, (g.features,), strict=strict)
        torch.testing.assert_close(ep.module()(x2), m(x2))
    torch.testing.assert_close(torch.jit.trace(m, (g.features,))(x2), m(x2))
    params = {k: p.detach() for k, p in m.named_parameters()}
    got = grad(lambda ps: m.loss(functional_call(m, ps, (g.features,))))(params)
    m.loss(m(g.features)).backward()
    for k, p in m.named_parameters():
        torch.testing.assert_close(got[k], p.grad, msg=k)


@needs_kernels
def test_gat_on_a_graph_without_vertices_runs():
    """The fused GAT kernel's scores were reshaped [0, -1] (torch: "cannot
    reshape tensor of 0 elements"), as on numba (helper-1)."""
    g0 = gdsl.Graph.from_edges([], [], 0, features=torch.zeros(0, 3), labels=torch.zeros(0, dtype=torch.long))
    m = _compile(ROOT / "programs" / "gat.gd").module(g0, backend="triton", dims={"C": 2})
    out = m()
    assert tuple(out.shape) == (0, 2)
    out.sum().backward()


@needs_kernels
def test_pyg_style_calls_are_refused_as_on_the_other_backends():
    """model(x, edge_index=ei): the gdsl error reference and numba give (was:
    Python's bare TypeError 'unexpected keyword argument'; helper-22's note)."""
    g = _graph_for("")
    m = _compile(ROOT / "programs" / "gcn.gd").module(g, backend="triton")
    ei = torch.stack([g.src, g.dst])
    with pytest.raises(GdslError, match=r"takes only the features: .*got the keyword argument 'edge_index'"):
        m(g.features, edge_index=ei)
    with pytest.raises(GdslError, match=r"got 2 arguments"):
        m(g.features, ei)
