"""gdsl embedded as a PyTorch user embeds a module (helper-22): inside a
bigger nn.Module, state_dict and pickle round trips across backends,
train/eval, dtype conversion, frozen params, torch.optim (LBFGS, param
groups), gradient accumulation, no_grad / inference_mode, hooks, gradcheck,
bad inputs, graphs without edges, one program bound to two graphs, and
torch.compile. Every number is checked against hand-written torch: dense
adjacency matrices built here from the raw edge lists (no gdsl code: not
`Graph.with_options`), and the layers written out."""
from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gdsl
from gdsl.diagnostics import GdslError

ROOT = Path(__file__).resolve().parent.parent
GCN, SAGE, GAT = (str(ROOT / "programs" / f"{p}.gd") for p in ("gcn", "sage", "gat"))
BACKENDS = ["reference", "numba"]

# 7 vertices: a duplicate edge (1 -> 2 twice), a self loop (4 -> 4), vertex 6 isolated
SRC = torch.tensor([0, 1, 1, 2, 2, 3, 4, 0, 4, 1, 5])
DST = torch.tensor([1, 2, 2, 1, 3, 2, 0, 4, 4, 5, 3])
N, FEAT = 7, 4
LABELS = torch.tensor([0, 1, 2, 0, 1, 2, 1])


def graph(src=SRC, dst=DST, n=N, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEAT, generator=gen)
    train = torch.zeros(n, dtype=torch.bool)
    train[: n // 2 + 1] = True
    return gdsl.Graph.from_edges(src, dst, n, features=x, labels=LABELS[:n], train_mask=train,
                                 val_mask=~train, test_mask=~train)


# ---- the oracles: plain torch, from the raw edges
def gcn_adj(src, dst, n, dtype):
    """(symmetric, self_loops): A + A^T as a 0/1 set, one loop per vertex, D^-1/2 A D^-1/2."""
    a = torch.zeros(n, n, dtype=dtype)
    a[dst, src] = 1
    a[src, dst] = 1
    a.fill_diagonal_(1)
    d = a.sum(1)
    return a / torch.sqrt(d[:, None] * d[None, :])


def gcn(p, x, src=SRC, dst=DST, prefix=""):
    a = gcn_adj(src, dst, x.shape[0], x.dtype)
    h = torch.relu(a @ x @ p[prefix + "GCNConv_1.W"] + p[prefix + "GCNConv_1.b"])
    return a @ h @ p[prefix + "GCNConv_2.W"] + p[prefix + "GCNConv_2.b"]


def sage(p, x, src=SRC, dst=DST, layers=2):
    """No graph options: duplicates count, mean over no in-edge is 0."""
    n = x.shape[0]
    a = torch.zeros(n, n, dtype=x.dtype).index_put_((dst, src), torch.ones(len(src), dtype=x.dtype), accumulate=True)
    m = a / a.sum(1, keepdim=True).clamp(min=1)
    h = x
    for k in range(1, layers + 1):
        h = h @ p[f"SAGEConv_{k}.Ws"] + m @ h @ p[f"SAGEConv_{k}.Wn"] + p[f"SAGEConv_{k}.b"]
        if k < layers:
            h = torch.relu(h)
    return h


def gat_conv(x, w, al, ar, b, src, dst):
    z = torch.einsum("nf,fhd->nhd", x, w)
    s = F.leaky_relu((z * al).sum(-1)[src] + (z * ar).sum(-1)[dst], 0.2)   # [E, heads]
    out = torch.zeros_like(z)
    for v in range(x.shape[0]):
        into = dst == v
        if into.any():
            out[v] = (torch.softmax(s[into], 0)[..., None] * z[src[into]]).sum(0)
    return out + b


def gat(p, x, src=SRC, dst=DST):
    """(self_loops): every loop removed, one added per vertex; duplicates kept."""
    keep = src != dst
    n = x.shape[0]
    s, d = torch.cat([src[keep], torch.arange(n)]), torch.cat([dst[keep], torch.arange(n)])
    layer = [[p[f"GATConv_{k}.{q}"] for q in ("W", "al", "ar", "b")] for k in (1, 2)]
    h = F.elu(gat_conv(x, *layer[0], s, d)).flatten(1)
    return gat_conv(h, *layer[1], s, d).mean(1)


PROGRAMS = {"gcn": (GCN, dict(hidden=5), gcn), "sage": (SAGE, dict(hidden=5, layers=2), sage),
            "gat": (GAT, dict(hidden=3, heads=2), gat)}


def params(m):
    return dict(m.named_parameters())


def build(backend, name="gcn", g=None, seed=0, **kw):
    path, static, _ = PROGRAMS[name]
    torch.manual_seed(seed)
    return gdsl.compile(path, **{**static, **kw}).module(g if g is not None else graph(), backend=backend)


def grads(out, inputs, w):
    return torch.autograd.grad((out * w).sum(), inputs)


def assert_grads_close(a, b, tol):
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, atol=tol, rtol=tol)


# ---- forward and gradients against hand-written torch
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_forward_and_gradients_match_hand_written_torch_in_float64(backend, name):
    m = build(backend, name).double().eval()
    oracle = PROGRAMS[name][2]
    g = graph()
    x = g.features.double().requires_grad_()
    out, want = m(x), oracle(params(m), x)
    assert out.dtype == torch.float64 and out.shape == (N, 3)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-12)
    w = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    inputs = [x, *m.parameters()]
    assert_grads_close(grads(out, inputs, w), grads(want, inputs, w), 1e-10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_in_float64_on_a_tiny_graph(backend):
    """torch's finite differences, with respect to the features and every param at once."""
    m = build(backend, "gat").double().eval()
    names = [n for n, _ in m.named_parameters()]
    ps = tuple(p.detach().clone().requires_grad_() for p in m.parameters())
    x = graph().features.double().requires_grad_()

    def f(x, *p):
        return torch.func.functional_call(m, dict(zip(names, p)), (x,))
    assert torch.autograd.gradcheck(f, (x, *ps))


@pytest.mark.parametrize("name", PROGRAMS)
def test_numba_equals_reference_in_training_forward_and_gradients(name):
    """Same seed: same params and dropout masks; outputs and gradients to 1e-5."""
    ref, nb = build("reference", name), build("numba", name)
    assert ref.dropout_seed == nb.dropout_seed
    for _ in range(2):
        xr, xn = (graph().features.clone().requires_grad_() for _ in range(2))
        a, b = ref(xr), nb(xn)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        w = torch.randn_like(a)
        assert_grads_close(grads(a, [xr, *ref.parameters()], w), grads(b, [xn, *nb.parameters()], w), 1e-5)


# ---- inside a bigger model
class Net(nn.Module):
    """Two gdsl modules (one program on a computed input, another on the raw
    features) and torch layers around them."""

    def __init__(self, backend, g):
        super().__init__()
        self.pre = nn.Linear(FEAT, FEAT)
        self.gcn = build(backend, "gcn", g, seed=1, p=0.0)
        self.sage = build(backend, "sage", g, seed=2, p=0.0)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(torch.relu(torch.cat([self.gcn(self.pre(x)), self.sage(x)], 1)))


def net_oracle(p, x):
    gp = {k.removeprefix("gcn."): v for k, v in p.items() if k.startswith("gcn.")}
    sp = {k.removeprefix("sage."): v for k, v in p.items() if k.startswith("sage.")}
    h = torch.cat([gcn(gp, F.linear(x, p["pre.weight"], p["pre.bias"])), sage(sp, x)], 1)
    return F.linear(torch.relu(h), p["head.weight"], p["head.bias"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_gdsl_modules_inside_a_model_train_like_hand_written_torch(backend):
    """Names are prefixed as torch prefixes them; Adam with param groups (one
    frozen by lr=0) and weight decay follows the oracle's loss step for step."""
    g = graph()
    torch.manual_seed(0)
    net = Net(backend, g)
    assert [n for n, _ in net.named_parameters()] == [
        "pre.weight", "pre.bias", "gcn.GCNConv_1.W", "gcn.GCNConv_1.b", "gcn.GCNConv_2.W", "gcn.GCNConv_2.b",
        "sage.SAGEConv_1.Ws", "sage.SAGEConv_1.Wn", "sage.SAGEConv_1.b", "sage.SAGEConv_2.Ws",
        "sage.SAGEConv_2.Wn", "sage.SAGEConv_2.b", "head.weight", "head.bias"]
    assert net.gcn.GCNConv_1.W.shape == (FEAT, 5) and net.sage.SAGEConv_2.Wn.shape == (5, 3)
    theirs = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def groups(p):
        return [{"params": [p["gcn.GCNConv_1.W"]], "lr": 0.0},
                {"params": [v for k, v in p.items() if k != "gcn.GCNConv_1.W"]}]
    opt = torch.optim.Adam(groups(dict(net.named_parameters())), lr=0.05, weight_decay=1e-3)
    opt2 = torch.optim.Adam(groups(theirs), lr=0.05, weight_decay=1e-3)
    frozen = net.gcn.GCNConv_1.W.detach().clone()
    for _ in range(4):
        for o, out in ((opt, net(g.features)), (opt2, net_oracle(theirs, g.features))):
            o.zero_grad()
            loss = F.cross_entropy(out[g.train_mask], g.labels[g.train_mask])
            loss.backward()
            o.step()
        for k, v in net.named_parameters():
            torch.testing.assert_close(v, theirs[k], atol=1e-5, rtol=1e-5)
    assert torch.equal(net.gcn.GCNConv_1.W, frozen)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lbfgs_and_gradient_accumulation(backend):
    """LBFGS (a closure evaluated several times per step) reaches the
    oracle's params; three backward passes accumulate three gradients."""
    m = build(backend, "gcn", p=0.0)
    g = graph()
    theirs = {k: v.detach().clone().requires_grad_() for k, v in m.named_parameters()}
    mask = g.train_mask
    opt = torch.optim.LBFGS(m.parameters(), lr=0.5, max_iter=4)
    opt2 = torch.optim.LBFGS(theirs.values(), lr=0.5, max_iter=4)
    for o, f in ((opt, lambda: m()), (opt2, lambda: gcn(theirs, g.features))):
        def closure(o=o, f=f):
            o.zero_grad()
            loss = F.cross_entropy(f()[mask], g.labels[mask])
            loss.backward()
            return loss
        for _ in range(2):
            o.step(closure)
    for k, v in m.named_parameters():
        torch.testing.assert_close(v, theirs[k], atol=1e-4, rtol=1e-4)
    m.zero_grad()
    w = torch.randn(N, 3)
    for _ in range(3):
        (m() * w).sum().backward()
    want = torch.autograd.grad(3 * (gcn(params(m), g.features) * w).sum(), list(m.parameters()))
    assert_grads_close([p.grad for p in m.parameters()], want, 1e-5)
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


@pytest.mark.parametrize("backend", BACKENDS)
def test_frozen_params_get_no_gradient_and_the_others_the_oracles(backend):
    m = build(backend, "gcn").eval()
    m.GCNConv_1.W.requires_grad_(False)
    m.GCNConv_2.b.requires_grad_(False)
    g = graph()
    w = torch.randn(N, 3)
    (m() * w).sum().backward()
    assert m.GCNConv_1.W.grad is None and m.GCNConv_2.b.grad is None
    want = grads(gcn(params(m), g.features), [m.GCNConv_1.b, m.GCNConv_2.W], w)
    assert_grads_close([m.GCNConv_1.b.grad, m.GCNConv_2.W.grad], want, 1e-5)
    m.requires_grad_(False)   # only the input wants a gradient
    x = g.features.clone().requires_grad_()
    (m(x) * w).sum().backward()
    x2 = g.features.clone().requires_grad_()
    assert_grads_close([x.grad], grads(gcn(params(m), x2), [x2], w), 1e-5)


# ---- state_dict, pickle, deepcopy
@pytest.mark.parametrize("src_backend,dst_backend", [("reference", "numba"), ("numba", "reference")])
def test_state_dict_round_trips_between_backends_and_into_fresh_modules(src_backend, dst_backend):
    a = build(src_backend, "gat", seed=1).eval()
    b = build(dst_backend, "gat", seed=2).eval()
    assert not torch.equal(a.GATConv_1.W, b.GATConv_1.W)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)   # weights_only=True, torch's default, reads it
    assert list(sd) == [n for n, _ in a.named_parameters()]
    b.load_state_dict(sd)
    x = graph().features
    torch.testing.assert_close(b(x), gat(sd, x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b(x), a(x), atol=1e-5, rtol=1e-5)
    c = build(dst_backend, "gat", seed=3).double().eval()   # a float32 state dict into a float64 module
    c.load_state_dict(sd)
    assert c.dtype == torch.float64
    torch.testing.assert_close(c(x.double()), gat({k: v.double() for k, v in sd.items()}, x.double()))
    with pytest.raises(RuntimeError, match="size mismatch for GATConv_1.W"):
        build(dst_backend, "gat", hidden=4).load_state_dict(sd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_module_pickles_and_deepcopies_with_its_graph(backend):
    g = graph()
    net = Net(backend, g).eval()
    buf = io.BytesIO()
    torch.save(net, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    for other in (loaded, copy.deepcopy(net)):
        want = net_oracle(params(net), g.features)
        torch.testing.assert_close(other(g.features), want, atol=1e-5, rtol=1e-5)
        with torch.no_grad():
            other.gcn.GCNConv_2.b.add_(1)   # independent of the original
        torch.testing.assert_close(net(g.features), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deep_copy_repeats_the_masks_until_it_gets_its_own_seed(backend):
    """copy.deepcopy keeps dropout_seed and the step (documented: a copy
    continues the original's run); towers cloned by deepcopy draw their own
    masks once given a seed (here the original's + 1), as two nn.Dropout do."""
    a = build(backend, "gcn", p=0.5).train()
    c = copy.deepcopy(a)
    assert c.dropout_seed == a.dropout_seed and c.step == a.step
    assert torch.equal(a(), c())
    c.dropout_seed = a.dropout_seed + 1
    assert not torch.equal(a(), c())


# ---- modes and dtypes
@pytest.mark.parametrize("backend", BACKENDS)
def test_train_draws_masks_and_eval_is_the_deterministic_oracle(backend):
    m = build(backend, "gcn", p=0.5)
    g = graph()
    assert m.training
    t1, t2 = m(), m()
    assert not torch.equal(t1, t2)
    m.eval()
    e1, e2 = m(), m()
    assert torch.equal(e1, e2)
    torch.testing.assert_close(e1, gcn(params(m), g.features), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        a = m()
    with torch.inference_mode():
        b = m()
    assert a.grad_fn is None and not a.requires_grad and b.is_inference()
    torch.testing.assert_close(a, e1, atol=0, rtol=0)
    torch.testing.assert_close(b.clone(), e1, atol=0, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_conversions_follow_torch(backend):
    m = build(backend, "sage").eval()
    g = graph()
    assert m.double() is m and m.dtype == torch.float64 and m.SAGEConv_1.Ws.dtype == torch.float64
    torch.testing.assert_close(m(), sage(params(m), g.features.double()), atol=1e-12, rtol=1e-12)
    with pytest.raises(GdslError, match="must be float64 .* use x.to\\(torch.float64\\)"):
        m(g.features)
    m.to(torch.float32)
    assert m().dtype == torch.float32
    m.to("cpu", torch.float64)
    assert m().dtype == torch.float64
    m.float()
    with pytest.raises(GdslError, match="not float16; the params are unchanged"):
        m.half()
    assert m.dtype == torch.float32
    torch.testing.assert_close(m(), sage(params(m), g.features), atol=1e-5, rtol=1e-5)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        d = build(backend, "sage").eval()
    finally:
        torch.set_default_dtype(old)
    assert d.dtype == torch.float64 and d().dtype == torch.float64


# ---- hooks
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_hooks_see_and_replace_input_and_output(backend):
    m = build(backend, "gcn").eval()
    g = graph()
    seen = []
    h = m.register_forward_hook(lambda mod, args, out: seen.append((len(args), out.shape)))
    m(g.features)
    m()
    h.remove()
    assert seen == [(1, (N, 3)), (0, (N, 3))]
    x2 = torch.randn(N, FEAT)
    h = m.register_forward_pre_hook(lambda mod, args: (x2,))
    torch.testing.assert_close(m(g.features), gcn(params(m), x2), atol=1e-5, rtol=1e-5)
    h.remove()
    h = m.register_forward_hook(lambda mod, args, out: out * 2)
    torch.testing.assert_close(m(), 2 * gcn(params(m), g.features), atol=1e-5, rtol=1e-5)
    h.remove()


@pytest.mark.parametrize("backend", BACKENDS)
def test_print_shows_a_parametrized_weight(backend):
    """spectral_norm / weight_norm move W under `parametrizations`: print(model)
    still lists it with its shape (was: left out of the layer's line)."""
    m = build(backend, "gcn").eval()
    nn.utils.parametrizations.weight_norm(m.GCNConv_2, "W")
    assert "(GCNConv_2): ParametrizedLayerParams(\n    W: [5, 3], b: [3]" in str(m)
    w = m.GCNConv_2.W   # the forward uses the parametrized weight: scale g and see it
    with torch.no_grad():
        m.GCNConv_2.parametrizations.W.original0.mul_(2)
    torch.testing.assert_close(m.GCNConv_2.W, 2 * w)
    torch.testing.assert_close(m(), gcn(params(m) | {"GCNConv_2.W": 2 * w}, graph().features), atol=1e-5, rtol=1e-5)


# ---- bad inputs: a clear gdsl error, never a traceback from inside
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad,match", [
    (lambda x: x.numpy(), r"must be a torch.Tensor of shape \[7, 4\], got ndarray"),
    (lambda x: x.tolist(), r"must be a torch.Tensor of shape \[7, 4\], got list"),
    (lambda x: x[:5], r"must have shape \[7, 4\] .*got \[5, 4\]"),
    (lambda x: x[:, :3], r"got \[7, 3\]"),
    (lambda x: x[None], r"got \[1, 7, 4\]"),
    (lambda x: x.double(), r"must be float32 .*got torch.float64"),
    (lambda x: x.half(), r"must be float32 .*got torch.float16"),
    (lambda x: x.to_sparse(), r"must be a dense tensor"),
    (lambda x: x.to("meta"), r"on meta, the module on cpu"),
], ids=["numpy", "list", "rows", "cols", "3d", "float64", "float16", "sparse", "meta"])
def test_bad_features_are_gdsl_errors(backend, bad, match):
    m = build(backend, "gcn")
    step = m.step
    with pytest.raises(GdslError, match=match):
        m(bad(graph().features))
    assert m.step == step


@pytest.mark.parametrize("backend", BACKENDS)
def test_pyg_style_calls_say_the_module_is_bound(backend):
    """model(x, edge_index=ei) was Python's bare TypeError ('unexpected keyword
    argument'); model(data) with a graph object said only 'got Graph'."""
    m = build(backend, "gcn")
    g = graph()
    ei = torch.stack([SRC, DST])
    with pytest.raises(GdslError, match=r"takes only the features: .*got the keyword argument 'edge_index' .*bind it"):
        m(g.features, edge_index=ei)
    with pytest.raises(GdslError, match=r"got 2 arguments and the keyword arguments 'edge_weight', 'batch'"):
        m(g.features, ei, edge_weight=None, batch=None)
    with pytest.raises(GdslError, match=r"got Graph \(the module is bound to its graph: model\(\) runs on"):
        m(g)

    class Data:   # what a PyG model is handed: data.x, data.edge_index
        x, edge_index = g.features, ei
    with pytest.raises(GdslError, match=r"got Data \(the module is bound to its graph: .*Graph.from_pyg\(data\)"):
        m(Data())
    assert m(x=g.features).shape == (N, 3)


def test_a_one_word_string_is_a_path():
    """No program is one word, so gdsl.compile('programs/gcn') (the .gd left
    out) is FileNotFoundError naming it (was: compiled as source text,
    'unexpected 'programs'')."""
    with pytest.raises(FileNotFoundError, match="programs/gcn'"):
        gdsl.compile("programs/gcn")
    with pytest.raises(gdsl.CompileError, match="unexpected 'programs'"):
        gdsl.compile("programs / gcn")


# ---- graphs
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graph_without_edges(backend):
    """GCN sees only its self loops (A = I), SAGE's mean over no in-edge is 0."""
    empty = torch.zeros(0, dtype=torch.int64)
    g = graph(empty, empty)
    x = g.features
    m = build(backend, "gcn", g).eval()
    torch.testing.assert_close(m(), gcn(params(m), x, empty, empty), atol=1e-5, rtol=1e-5)
    s = build(backend, "sage", g).eval()
    p = params(s)
    h = torch.relu(x @ p["SAGEConv_1.Ws"] + p["SAGEConv_1.b"])
    torch.testing.assert_close(s(), h @ p["SAGEConv_2.Ws"] + p["SAGEConv_2.b"], atol=1e-5, rtol=1e-5)
    s().sum().backward()
    assert not s.SAGEConv_1.Wn.grad.any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_program_bound_to_two_graphs(backend):
    """Each module keeps its own graph; a state dict moves between them."""
    src2, dst2 = torch.tensor([0, 1, 2, 3, 4]), torch.tensor([1, 2, 3, 4, 0])
    g1, g2 = graph(), graph(src2, dst2, n=5, seed=1)
    prog = gdsl.compile(GCN, hidden=5)
    a, b = prog.module(g1, backend=backend).eval(), prog.module(g2, backend=backend).eval()
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a(), gcn(params(a), g1.features), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b(), gcn(params(a), g2.features, src2, dst2), atol=1e-5, rtol=1e-5)
    with pytest.raises(GdslError, match=r"must have shape \[5, 4\]"):
        b(g1.features)


def test_torch_compile_of_a_model_around_a_numba_module():
    """The Numba forward is a graph break; the torch layers around it compile."""
    g = graph()
    torch.manual_seed(0)
    net = Net("numba", g).eval()
    out = torch.compile(net)(g.features)
    torch.testing.assert_close(out, net_oracle(params(net), g.features), atol=1e-5, rtol=1e-5)
