"""Programs written to LANGUAGE.md that are not its examples (programs/extra/).

Each program compiles (through the `gdsl compile` CLI entry), trains a few
epochs on a small random graph with the loss going down, and returns [N, C].
For most of them the forward pass of `prog.module(graph)` is compared, in eval
mode and with random params copied in, against an independent plain-torch
implementation of the same model written with dense adjacency matrices.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gdsl
from gdsl.cli import main as cli_main
from gdsl.runtime.trainer import train

ROOT = Path(__file__).resolve().parents[1]
EXTRA = ROOT / "programs" / "extra"
PROGRAMS = sorted(p.name for p in EXTRA.glob("*.gd"))
EDGE_WEIGHTED = ("edge_weighted_gcn.gd",)

N, FEAT, C = 40, 8, 3


def small_graph(seed: int = 0, n: int = N, f: int = FEAT, c: int = C, e: int = 160, weights: bool = False) -> gdsl.Graph:
    """A random directed graph: unique edges, no self loops, vertices 0..2
    without incoming edges, 3..5 without outgoing ones; labels learnable
    from the features."""
    g = torch.Generator().manual_seed(seed)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < e:
        s, d = torch.randint(0, n, (2,), generator=g).tolist()
        if s != d and d >= 3 and s not in (3, 4, 5):
            pairs.add((s, d))
    order = torch.randperm(e, generator=g).tolist()
    pl = sorted(pairs)
    src = torch.tensor([pl[i][0] for i in order])
    dst = torch.tensor([pl[i][1] for i in order])
    x = torch.randn(n, f, generator=g)
    labels = (x @ torch.randn(f, c, generator=g)).argmax(1)
    labels[:c] = torch.arange(c)
    idx = torch.arange(n)
    edata = {"w": torch.rand(e, generator=g) + 0.5} if weights else None
    return gdsl.Graph.from_edges(src, dst, n, features=x, labels=labels, train_mask=idx < n // 2,
                                 val_mask=(idx >= n // 2) & (idx < 3 * n // 4), test_mask=idx >= 3 * n // 4,
                                 edata=edata)


def graph_for(name: str) -> gdsl.Graph:
    return small_graph(weights=name in EDGE_WEIGHTED)


# ---------------------------------------------------------------- compile + train

@pytest.mark.parametrize("name", PROGRAMS)
def test_compiles_with_cli(name, capsys):
    assert cli_main(["compile", str(EXTRA / name)]) == 0
    ir = capsys.readouterr().out
    assert "func @main()" in ir and "loss[" in ir


@pytest.mark.parametrize("name", PROGRAMS)
def test_trains_and_output_shape(name):
    graph = graph_for(name)
    prog = gdsl.compile(EXTRA / name)
    res = train(prog, graph, epochs=12, seed=0)
    losses = [e.loss for e in res.epochs]
    assert len(losses) == 12
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0], losses
    model = prog.module(graph).eval()
    with torch.no_grad():
        out = model()
    assert out.shape == (N, C)
    assert torch.isfinite(out).all()


def test_cli_inserts_sync():
    """`gdsl compile` on a program without `sync` shows the inserted ones."""
    r = subprocess.run([sys.executable, "-m", "gdsl", "compile", str(EXTRA / "gcn_nosync.gd")],
                       capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "= sync[" in ln]
    assert len(lines) == 2 and all("inserted=true" in ln for ln in lines), r.stdout
    # written syncs are not marked as inserted
    gcn = gdsl.compile(ROOT / "programs" / "gcn.gd").ir
    assert "= sync[" in gcn and "inserted" not in gcn


def test_mlp_sync_inserted_and_no_graph_ops():
    ir = gdsl.compile(EXTRA / "mlp.gd").ir
    assert ir.count("sync[inserted=true") == 2
    assert "gather[" not in ir and "src[" not in ir


def test_schedule_hints_kept():
    prog = gdsl.compile(EXTRA / "gcn_schedule.gd")
    attrs = prog.compiled.module.attrs
    assert attrs["order_hints"] == {"GCNConv#1": "dense_first", "GCNConv#2": "sparse_first"}
    assert attrs["schedule"]["partition"] == "rows(metis)"


def test_repeat_unrolls_to_distinct_params():
    prog = gdsl.compile(EXTRA / "deep_sage.gd")
    model = prog.module(small_graph())
    names = {n.split(".")[0] for n, _ in model.named_parameters()}
    assert names == {f"SAGEConv_{k}" for k in range(1, 5)}
    sgc = gdsl.compile(EXTRA / "sgc.gd", K=4)
    assert sgc.ir.count("aggregate[") == 4
    assert [n for n, _ in sgc.module(small_graph()).named_parameters()] == ["Linear_1.W", "Linear_1.b"]


def test_edge_weighted_needs_edge_data():
    with pytest.raises(gdsl.GdslError, match="edge data 'w'"):
        gdsl.compile(EXTRA / "edge_weighted_gcn.gd").module(small_graph())


# ---------------------------------------------------------------- exact forward

def dense_adj(g: gdsl.Graph, weight: torch.Tensor | None = None) -> torch.Tensor:
    """A[d, s] = (summed) weight of the edges s -> d."""
    a = torch.zeros(g.num_nodes, g.num_nodes)
    w = torch.ones(g.num_edges) if weight is None else weight
    return a.index_put((g.dst, g.src), w, accumulate=True)


def gcn_norm(a: torch.Tensor) -> torch.Tensor:
    """(self_loops, symmetric) then D^-1/2 A D^-1/2."""
    s = ((a + a.T) > 0).float()
    s.fill_diagonal_(1.0)
    d = s.sum(1).rsqrt()
    return d[:, None] * s * d[None, :]


def dense_reduce(a: torch.Tensor, x: torch.Tensor, fn: str) -> torch.Tensor:
    """max/min of x over each row's neighbours (a[v, u] > 0); 0 where none."""
    fill = float("-inf") if fn == "max" else float("inf")
    m = (a > 0)[:, :, None]
    v = torch.where(m, x[None, :, :], torch.full((), fill))
    out = v.amax(1) if fn == "max" else v.amin(1)
    return torch.where(m.any(1), out, torch.zeros(()))


def bound(name: str, graph: gdsl.Graph, **overrides):
    model = gdsl.compile(EXTRA / name, **overrides).module(graph).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=gen) - 0.5)
    return model, dict(model.named_parameters())


def check(model, expected):
    with torch.no_grad():
        out = model()
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_gin_matches_torch():
    g = small_graph()
    model, P = bound("gin.gd", g)
    A = dense_adj(g)

    def layer(k, h, eps=0.1):
        z = (1 + eps) * h + A @ h
        return torch.relu(z @ P[f"GINConv_{k}.W1"] + P[f"GINConv_{k}.b1"]) @ P[f"GINConv_{k}.W2"] + P[f"GINConv_{k}.b2"]

    with torch.no_grad():
        check(model, layer(2, torch.relu(layer(1, g.features))))


def test_sage_max_matches_torch():
    g = small_graph()
    model, P = bound("sage_max.gd", g)
    A = dense_adj(g)

    def layer(k, h):
        p = lambda n: P[f"SAGEPool_{k}.{n}"]  # noqa: E731
        q = torch.relu(h @ p("Wp") + p("bp"))
        return h @ p("Ws") + dense_reduce(A, q, "max") @ p("Wn") + p("b")

    with torch.no_grad():
        check(model, layer(2, torch.relu(layer(1, g.features))))


def test_res_gcn_matches_torch():
    g = small_graph()
    model, P = bound("res_gcn.gd", g)
    A = gcn_norm(dense_adj(g))
    with torch.no_grad():
        h = torch.relu(g.features @ P["Linear_1.W"] + P["Linear_1.b"])
        for k in (1, 2, 3):
            h = h + torch.relu(A @ h @ P[f"GCNConv_{k}.W"] + P[f"GCNConv_{k}.b"])
        check(model, h @ P["Linear_2.W"] + P["Linear_2.b"])


def test_appnp_matches_torch():
    g = small_graph()
    model, P = bound("appnp.gd", g)
    A = gcn_norm(dense_adj(g))
    with torch.no_grad():
        h = torch.relu(g.features @ P["Linear_1.W"] + P["Linear_1.b"])
        h0 = h @ P["Linear_2.W"] + P["Linear_2.b"]
        h = h0
        for _ in range(5):  # train block: APPNP[K = 5], alpha = 0.1
            h = 0.1 * h0 + 0.9 * (A @ h)
        check(model, h)


def test_sgc_matches_torch():
    g = small_graph()
    model, P = bound("sgc.gd", g, K=4)
    A = gcn_norm(dense_adj(g))
    with torch.no_grad():
        check(model, torch.linalg.matrix_power(A, 4) @ g.features @ P["Linear_1.W"] + P["Linear_1.b"])


def test_deep_sage_matches_torch():
    g = small_graph()
    model, P = bound("deep_sage.gd", g)
    A = dense_adj(g)
    mean_a = A / A.sum(1, keepdim=True).clamp(min=1)
    with torch.no_grad():
        h = g.features
        for k in (1, 2, 3, 4):
            h = h @ P[f"SAGEConv_{k}.Ws"] + (mean_a @ h) @ P[f"SAGEConv_{k}.Wn"] + P[f"SAGEConv_{k}.b"]
            h = torch.relu(h) if k < 4 else h
        check(model, h)


def test_dir_sage_matches_torch():
    g = small_graph()
    model, P = bound("dir_sage.gd", g)
    A = dense_adj(g)
    a_in = A / A.sum(1, keepdim=True).clamp(min=1)
    a_out = A.T / A.T.sum(1, keepdim=True).clamp(min=1)

    def layer(k, h):
        p = lambda n: P[f"DirSAGEConv_{k}.{n}"]  # noqa: E731
        return h @ p("Ws") + (a_in @ h) @ p("Win") + (a_out @ h) @ p("Wout") + p("b")

    with torch.no_grad():
        check(model, layer(2, torch.relu(layer(1, g.features))))


def test_edge_weighted_gcn_matches_torch():
    g = small_graph(weights=True)
    model, P = bound("edge_weighted_gcn.gd", g)
    W = dense_adj(g, g.edata["w"])
    W.fill_diagonal_(1.0)  # self_loops: one loop per vertex, weight 1
    inv = W.sum(1).rsqrt()
    A = inv[:, None] * W * inv[None, :]

    def layer(k, h):
        return A @ h @ P[f"WGCNConv_{k}.W"] + P[f"WGCNConv_{k}.b"]

    with torch.no_grad():
        check(model, layer(2, torch.relu(layer(1, g.features))))


def test_pna_lite_matches_torch():
    g = small_graph()
    model, P = bound("pna_lite.gd", g)
    A = dense_adj(g)
    S = ((A + A.T) > 0).float()  # symmetric, no self loops
    deg = S.sum(1, keepdim=True).clamp(min=1)

    def layer(k, h):
        p = lambda n: P[f"MultiAgg_{k}.{n}"]  # noqa: E731
        z = h @ p("Wm")
        s1 = S @ z
        c = torch.cat([torch.tanh(s1), s1 / deg, dense_reduce(S, z, "max"), dense_reduce(S, z, "min"), z], -1)
        return c @ p("W") + p("b")

    with torch.no_grad():
        check(model, layer(2, F.elu(layer(1, g.features))))


def test_gatv2_matches_torch():
    g = small_graph()
    model, P = bound("gatv2.gd", g)
    A = dense_adj(g)
    A.fill_diagonal_(1.0)  # self_loops
    mask = (A > 0)[:, :, None]

    def layer(k, h, heads, d):
        p = lambda n: P[f"GATv2Conv_{k}.{n}"]  # noqa: E731
        xl = (h @ p("Wl")).reshape(-1, heads, d)
        xr = (h @ p("Wr")).reshape(-1, heads, d)
        e = (F.leaky_relu(xl[None, :] + xr[:, None], 0.2) * p("a")).sum(-1)  # [dst, src, heads]
        alpha = torch.softmax(e.masked_fill(~mask, float("-inf")), dim=1)
        return torch.einsum("dsh,shk->dhk", alpha, xl) + p("b")

    with torch.no_grad():
        h = F.elu(layer(1, g.features, 4, 8)).reshape(N, -1)
        check(model, layer(2, h, 2, C).mean(1))


def test_mlp_matches_torch():
    g = small_graph()
    model, P = bound("mlp.gd", g)
    with torch.no_grad():
        h = torch.tanh(g.features @ P["Dense_1.W"] + P["Dense_1.b"])
        check(model, torch.log_softmax(h @ P["Dense_2.W"] + P["Dense_2.b"], -1))


def test_gated_gcn_matches_torch():
    g = small_graph()
    model, P = bound("gated_gcn.gd", g)
    A = gcn_norm(dense_adj(g))

    def layer(k, h, kk, d):
        p = lambda n: P[f"GatedConv_{k}.{n}"]  # noqa: E731
        gate = torch.sigmoid(h @ p("g"))[:, None]
        x = gate * (A @ h) + (1 - gate) * h
        r = (x @ p("W")).reshape(-1, kk, d)
        att = torch.softmax(r @ p("ws"), dim=1)
        return (att[:, :, None] * r).sum(1) + r.mean(1) + p("b")

    with torch.no_grad():
        h = F.elu(layer(1, g.features, 2, 16))
        check(model, layer(2, torch.cat([h, torch.tanh(h)], -1), 3, C))


def test_nosync_equals_written_sync():
    g = small_graph()
    a = gdsl.compile(EXTRA / "gcn_nosync.gd").module(g).eval()
    b = gdsl.compile(ROOT / "programs" / "gcn.gd").module(g).eval()
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(a(), b(), rtol=1e-6, atol=1e-6)


def test_gradients_match_torch():
    """Backward through the sparse fast path (GCN) and scatter-max (SAGE-pool)."""
    g = small_graph()
    model, P = bound("res_gcn.gd", g)
    A = gcn_norm(dense_adj(g))
    model.zero_grad()
    model().square().sum().backward()
    ref = {k: v.detach().clone().requires_grad_() for k, v in P.items()}
    h = torch.relu(g.features @ ref["Linear_1.W"] + ref["Linear_1.b"])
    for k in (1, 2, 3):
        h = h + torch.relu(A @ h @ ref[f"GCNConv_{k}.W"] + ref[f"GCNConv_{k}.b"])
    (h @ ref["Linear_2.W"] + ref["Linear_2.b"]).square().sum().backward()
    for k, p in P.items():
        torch.testing.assert_close(p.grad, ref[k].grad, rtol=1e-4, atol=1e-4, msg=k)


def test_trains_on_cora():
    cora = gdsl.load_graph("cora")
    res = train(gdsl.compile(EXTRA / "sgc.gd"), cora, epochs=5, seed=0)
    assert res.epochs[-1].loss < res.epochs[0].loss
    assert res.final["val_acc"] > 0.3  # 7 classes: well above chance after 5 epochs


# ---------------------------------------------------------------- bugs these programs found

HEAD = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train
"""
TRAIN = "train t { loss = cross_entropy(Y, mask = train) }\n"


def test_float_constant_folded_to_sympy_number():
    """nsimplify turns 2.718281828459045 into E: the backend must evaluate it."""
    src = HEAD + """
layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter m = src.h * (2.718281828459045 * rsqrt(src.degree))
    gather a = sum(m)
    transform t = a @ W
    return t
}
model M { return L[C](X) }
""" + TRAIN
    g = small_graph()
    model, P = bound_source(src, g)
    A = dense_adj(g)
    A.fill_diagonal_(1.0)
    with torch.no_grad():
        check(model, (A * (2.718281828459045 * A.sum(1).rsqrt())[None, :]) @ g.features @ P["L_1.W"])


def test_concat_with_param_repeats_it_per_row():
    src = HEAD + """
layer L[dout](h: [din]) -> [dout] {
    param emb : f32[4] = normal(1.0)
    param W : f32[din + 4, dout] = glorot
    scatter m = concat(src.h, emb)
    gather a = max(m)
    apply c = concat(h, emb) + a
    transform t = c @ W
    return t
}
model M { return L[C](X) }
""" + TRAIN
    g = small_graph()
    model, P = bound_source(src, g)
    A = dense_adj(g)
    A.fill_diagonal_(1.0)
    with torch.no_grad():
        xe = torch.cat([g.features, P["L_1.emb"].expand(N, 4)], -1)
        check(model, (xe + dense_reduce(A, xe, "max")) @ P["L_1.W"])


def test_unused_first_input_still_binds_features():
    """The first vertex f32 input binds graph.features even when the model does
    not read it; the one it reads comes from ndata."""
    src = """graph G
input X : vertex f32[F]
input P : vertex f32[K]
input Y : vertex label[C]
mask train
layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}
model M { return L[C](P) }
""" + TRAIN
    g = small_graph()
    g.ndata["P"] = torch.randn(N, 5)
    model, P = bound_source(src, g)
    with torch.no_grad():
        check(model, g.ndata["P"] @ P["L_1.W"])


def test_cse_keeps_partial_and_complete_products_apart():
    """`h @ W` in a transform is partial; the same product in apply is not:
    merging them would make apply read a partial value (no sync)."""
    src = HEAD + """
layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    sync s = sum(t)
    apply u = relu(h @ W) + s
    return u
}
model M { return L[C](X) }
""" + TRAIN
    module = gdsl.compile(src).compiled.module
    partial = {op.result for op in module.main.ops if op.attrs.get("partial")}
    for op in module.main.ops:
        if op.name != "sync":
            assert not partial & set(op.operands), op


def bound_source(src: str, graph: gdsl.Graph):
    model = gdsl.compile(src).module(graph).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=gen) - 0.5)
    return model, dict(model.named_parameters())


@pytest.mark.parametrize("expr, shown", [("-h @ W", "((-h) @ W)"), ("2 * h @ W * 3", "(((2 * h) @ W) * 3)"),
                                         ("-(h @ W)", "-(h @ W)"), ("h @ W - -h @ W", "((h @ W) - ((-h) @ W))")])
def test_ast_dump_shows_the_grouping(expr, shown, tmp_path, capsys):
    """`--emit ast` prints expressions fully parenthesised (language.md's
    precedence). Was: `-h @ W` printed as `(-h @ W)`, hiding that unary minus binds first."""
    p = tmp_path / "p.gd"
    p.write_text(f"""graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer L[dout](h: [din]) -> [dout] {{
    param W : f32[din, dout] = glorot
    apply p = {expr}
    return p
}}
model M {{ return L[C](X) }}
train t {{ model = M
    loss = cross_entropy(Y, mask = train) }}
""")
    assert cli_main(["compile", str(p), "--emit", "ast"]) == 0
    assert f"apply p = {shown}\n" in capsys.readouterr().out


def test_a_layer_without_static_args_or_args_and_a_scalar_result():
    """`layer Deg() -> []`: no brackets, no arguments and an empty result
    shape (was: the shape `[]` was taken for the static list, and the parser
    stopped with an internal error, exit 3; helper-71). It reads the graph
    alone: the in-degree, as a vertex scalar that scales the logits."""
    src = """graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer Deg() -> [] {
    scatter one = src.degree * 0 + 1
    gather  a = sum(one)
    return a
}

layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    apply o = h @ W
    return o
}

model M { return Lin[C](X) * Deg() }
train t { model = M; loss = cross_entropy(Y, mask = train) }
"""
    g = small_graph()
    model, P = bound_source(src, g)
    deg = dense_adj(g).sum(1, keepdim=True)
    check(model, (g.features @ P["Lin_1.W"]) * deg)
    assert gdsl.compile(src.replace("layer Deg()", "layer Deg[]()")).module(g).eval()().shape == (N, C)
