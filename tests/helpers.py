"""Small graphs and hand-written torch models shared by tests."""
from __future__ import annotations

from pathlib import Path

import torch

import gdsl


def random_graph(n=40, e=160, f=12, c=4, seed=0, isolated=3, hub=True) -> "gdsl.Graph":
    """A random directed graph with isolated vertices, a hub with many
    in-edges, duplicate-free edges, features, labels and masks."""
    g = torch.Generator().manual_seed(seed)
    m = n - isolated
    src = torch.randint(0, m, (e,), generator=g)
    dst = torch.randint(0, m, (e,), generator=g)
    if hub:
        src = torch.cat([src, torch.arange(1, m)])
        dst = torch.cat([dst, torch.zeros(m - 1, dtype=torch.int64)])
    key = torch.unique(src * n + dst)
    src, dst = key // n, key % n
    x = torch.randn(n, f, generator=g)
    y = torch.randint(0, c, (n,), generator=g)
    y[:c] = torch.arange(c)
    perm = torch.randperm(n, generator=g)
    train = torch.zeros(n, dtype=torch.bool)
    train[perm[: n // 2]] = True
    val = torch.zeros(n, dtype=torch.bool)
    val[perm[n // 2: 3 * n // 4]] = True
    test = ~(train | val)
    return gdsl.Graph.from_edges(src, dst, n, features=x, labels=y, train_mask=train, val_mask=val, test_mask=test)


def edges_with(graph, self_loops=False, symmetric=False):
    g = graph.with_options(self_loops=self_loops, symmetric=symmetric)
    return g.src, g.dst, graph.num_nodes


def gcn_conv(x, W, b, src, dst, n):
    deg = torch.bincount(dst, minlength=n).float()
    w = deg[src].rsqrt() * deg[dst].rsqrt()
    agg = torch.zeros(n, x.shape[1]).index_add(0, dst, x[src] * w[:, None])
    return agg @ W + b


def sage_conv(x, Ws, Wn, b, src, dst, n):
    deg = torch.bincount(dst, minlength=n).clamp(min=1).float()
    agg = torch.zeros(n, x.shape[1]).index_add(0, dst, x[src]) / deg[:, None]
    return x @ Ws + agg @ Wn + b


def gat_conv(x, W, al, ar, b, src, dst, n):
    din, heads, dout = W.shape
    z = (x @ W.reshape(din, heads * dout)).reshape(n, heads, dout)
    el, er = (z * al).sum(-1), (z * ar).sum(-1)
    e = torch.nn.functional.leaky_relu(el[src] + er[dst], 0.2)
    mx = torch.full((n, heads), -float("inf")).index_reduce(0, dst, e, "amax")
    p = torch.exp(e - mx[dst])
    den = torch.zeros(n, heads).index_add(0, dst, p)
    alpha = p / den[dst]
    return torch.zeros(n, heads, dout).index_add(0, dst, alpha[:, :, None] * z[src]) + b


def check_double_module(backend: str) -> None:
    """`model.double()` converts the compiled constants and sparse matrices
    too (they are not buffers): the module then takes and returns float64, its
    gradients pass gradcheck, and a float32 input is refused with the dtype to
    use (was: float32 required whatever the params)."""
    import pytest
    import torch

    from gdsl.diagnostics import GdslError
    g = random_graph(n=12, e=40, f=3, c=2)
    src = (Path(__file__).parent.parent / "programs" / "gcn.gd").read_text()
    prog = gdsl.compile(src.replace("relu(", "elu("))   # smooth: gradcheck's finite differences
    torch.manual_seed(0)
    ref = prog.module(g, backend="reference").eval()
    m = prog.module(g, backend=backend).double().eval()
    m.load_state_dict(ref.state_dict())   # cast to the float64 params
    assert m.dtype == torch.float64 and all(p.dtype == torch.float64 for p in m.parameters())
    x = g.features.double().requires_grad_()
    out = m(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out.float(), ref(g.features), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m(), out)   # the graph's float32 features, cast
    assert torch.autograd.gradcheck(m, (x,))
    # The constants are computed in float64 from the graph (converted float32
    # edge weights would be off by ~1e-7): the whole GCN matches float64 by hand.
    s, d, n = m.gd.src, m.gd.dst, g.num_nodes
    deg = torch.bincount(d, minlength=n).double()
    a_hat = torch.zeros(n, n, dtype=torch.float64).index_put_((d, s), (deg[s] * deg[d]).rsqrt(), accumulate=True)
    p = {k: v.cpu() for k, v in m.named_parameters()}   # on the GPU for triton there
    h = torch.nn.functional.elu(a_hat @ x @ p["GCNConv_1.W"] + p["GCNConv_1.b"])
    torch.testing.assert_close(out, a_hat @ h @ p["GCNConv_2.W"] + p["GCNConv_2.b"], rtol=1e-12, atol=1e-12)
    with pytest.raises(GdslError, match=r"must be float64 .*got torch.float32; use x.to\(torch.float64\)"):
        m(g.features)
    assert m.float()(g.features).dtype == torch.float32   # and back


def gdsl_here(*args):
    """`gdsl ARGS` run in this process (a CompletedProcess), for a command
    refused before any rank starts: a subprocess would pay for importing
    torch again."""
    import subprocess

    from filecheck_runner import run_gdsl
    code, out, err = run_gdsl([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out, err)


def interrupt_in_evaluation(monkeypatch, epoch: int) -> None:
    """Ctrl-C during the evaluation of `epoch` of the next `gdsl run` in this
    process (the trainer evaluates 3 masks per epoch)."""
    import gdsl.runtime.trainer as trainer
    real, calls = trainer.accuracy, []

    def accuracy(*a, **k):
        calls.append(1)
        if len(calls) == 3 * (epoch - 1) + 1:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(trainer, "accuracy", accuracy)


FAKE_MPI = dict(FLOAT="f", DOUBLE="d", SUM="sum", MAX="max", MIN="min", IN_PLACE=None)


def fake_mpi(monkeypatch, **more) -> None:
    """mpi4py's constants as plain names, for tests of gdsl.dist with a fake
    communicator (no MPI in the test process); `more` adds attributes."""
    from types import SimpleNamespace

    import gdsl.dist.comm as comm_mod
    monkeypatch.setattr(comm_mod, "_MPI", SimpleNamespace(**FAKE_MPI, **more))


def traffic(c) -> dict:
    """A Comm's accounting since the last call: (collective, label) -> (sent, recv, calls)."""
    return {k: (t.sent, t.recv, t.calls) for k, t in c.stats.take().items()}


def vertex_target_npz(path: Path | None = None) -> Path:
    """Cora as an .npz file of a regression task: no `labels`, a target
    `node_T` [N, 2] (a smooth function of each vertex's features and degree),
    and a mask `labelled_mask` stored as 0/1 int8 (the train and val
    vertices). Written once (atomically) to `path` or a per-user temporary
    file, so that MPI ranks launched by a test can read it too."""
    import os
    import tempfile

    import numpy as np
    if path is None:
        path = Path(tempfile.gettempdir()) / f"gdsl-tests-{os.getuid()}" / "cora_vertex_target.npz"
    path = Path(path)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    z = dict(np.load(Path(gdsl.__file__).parent / "data" / "cora.npz"))
    n = z["features"].shape[0]
    deg = np.bincount(z["dst"], minlength=n).astype(np.float32)
    f = z["features"]
    target = np.stack([f[:, :40].sum(1) / 4, np.log1p(deg)], 1).astype(np.float32)
    z["node_T"] = target
    z["labelled_mask"] = (z.pop("train_mask") | z.pop("val_mask")).astype(np.int8)
    del z["labels"], z["test_mask"]
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    os.close(fd)
    np.savez(tmp, **z)
    os.replace(tmp, path)
    return path
