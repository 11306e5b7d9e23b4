"""The order pass: dense-first where a layer shrinks the width or a hint says so,
and the same numbers either way (an exact plan)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gdsl
from filecheck_runner import run_gdsl
from helpers import random_graph

ROOT = Path(__file__).resolve().parent.parent
GCN = (ROOT / "programs" / "gcn.gd").read_text()
SAGE = (ROOT / "programs" / "sage.gd").read_text()


def _with(src: str, schedule: str) -> str:
    return src + f"\nschedule {{\n{schedule}\n}}\n"


def test_width_decides_when_data_is_bound():
    code, out, err = run_gdsl(["compile", str(ROOT / "programs" / "gcn.gd"), "--data", "cora"])
    assert code == 0, err
    assert out.count("order=dense_first, order_by=width") == 2     # 1433 -> 16 and 16 -> 7 both shrink
    assert "%t_dense : vertex f32[N, 16] = matmul" in out          # X @ W first, then aggregate 16 columns


def test_delayed_plan_aggregates_param_free_inputs_sparse_first():
    """Under DistGNN cd-r (delay r > 0) the order pass aggregates sparse-first
    where the aggregated input depends on no param (layer 1: dropout of X), so
    the stale remote partials are not stale in W; layers after it keep the
    width rule; a hint still wins; cd-0 and 0c (delay 0 / none) keep the width
    rule everywhere."""
    from gdsl.compiler import compile_source
    from gdsl.ir.printer import print_module
    dims = {"N": 3327, "F": 3703, "C": 6, "E": 12431}

    def aggs(src, delay):
        mod = compile_source(src, dims=dims, delay=delay).module
        text = print_module(mod)
        return [(op.attrs["order"], op.attrs["order_by"]) for op in mod.main.ops if op.name == "aggregate"], text

    got, text = aggs(GCN, 5)
    assert got == [("sparse_first", "delay"), ("dense_first", "width")]
    assert "%a : vertex f32[N, 3703] = aggregate" in text
    for d in (0, "none"):
        assert aggs(GCN, d)[0] == [("dense_first", "width")] * 2
    hinted = _with(GCN, "    order GCNConv#1 = dense_first")
    assert aggs(hinted, 5)[0] == [("dense_first", "hint"), ("dense_first", "width")]
    # an input computed with a param is stale in it either way: the width rule decides
    lin = "layer Lin[dout](h: [din]) -> [dout] {\n    param W : f32[din, dout] = glorot\n" \
          "    transform t = h @ W\n    return t\n}\n\nmodel GCN"
    mlp_first = GCN.replace("h = dropout(X, p)", "h = Lin[64](dropout(X, p))").replace("model GCN", lin)
    got, _ = aggs(mlp_first, 5)
    assert got == [("dense_first", "width"), ("dense_first", "width")]


@pytest.mark.parametrize("hint,other", [("    order GCNConv#2 = sparse_first", True), ("    order = sparse_first", True),
                                         ("    order = dense_first", False), ("", False)])
def test_a_delayed_plan_keeps_autograds_backward_unless_a_hint_names_one(hint, other):
    """Under cd-r `auto` backward orders stay autograd's own (`order_grad_by=
    delay`): the delay pipeline carries those aggregations. Was: with a
    forward-only hint the cost chose another backward (hidden 64 -> C: a
    dense-first backward), gdsl compile and the compile-time checks accepted
    it, and every rank refused it after partitioning ("a chosen backward order
    is not implemented with delayed aggregation")."""
    from gdsl.compiler import compile_source
    from gdsl.dist.support import check_delay
    from gdsl.passes.order import linear_groups
    dims = {"N": 2708, "F": 1433, "C": 7, "E": 13264}
    src = _with(GCN, hint) if hint else GCN
    for delay in (2, 0):
        mod = compile_source(src, dims=dims, delay=delay).module
        groups = linear_groups(mod)
        by = {g.agg.attrs["order_grad_by"] for g in groups}
        if delay:
            assert by == {"delay"} and all(g.natural for g in groups), by
            check_delay(delay, mod)   # what the ranks check: nothing left to refuse
        else:
            assert by == {"cost"}, by
    # without a delay the cost takes another backward after a sparse-first forward that shrinks (16 -> C)
    assert all(g.natural for g in groups) != other
    bwd = _with(GCN, "    order GCNConv#2 = sparse_first(backward = sparse_first)")
    with pytest.raises(gdsl.GdslError, match="a chosen backward order is not implemented with delayed"):
        check_delay(2, compile_source(bwd, dims=dims, delay=2).module)   # a hint's backward: still refused


@pytest.mark.parametrize("plan", ["rows_replicated(2)", "features"])
def test_plans_that_run_autograds_backward_refuse_only_a_hinted_other_one(plan, tmp_path):
    """1.5D and P3's model-parallel layer 1 run autograd's backward order: a
    hint's `backward = ...` there is a compile error at the partition hint
    (was: compiled, and every rank refused it after partitioning); the same
    order chosen by the cost is accepted (the ranks fall back to autograd's)."""
    from gdsl.dist.support import check_supported
    from gdsl.passes.order import linear_groups
    from gdsl.compiler import compile_source
    dims = {"N": 2708, "F": 1433, "C": 7, "E": 13264}
    layer = 1 if plan == "features" else 2   # features: layer 1's product is the model-parallel one
    for bwd, refused in (("", False), ("(backward = sparse_first)", True)):
        src = _with(GCN, f"    order GCNConv#{layer} = sparse_first{bwd}")
        mod = compile_source(src, dims=dims).module
        if refused or layer == 2:   # (layer 1's input needs no gradient: there the cost takes autograd's)
            assert not all(g.natural for g in linear_groups(mod))   # not autograd's own
        if refused:
            with pytest.raises(gdsl.GdslError, match=rf"partition = {plan.split('(')[0]} cannot run .*"
                                                     "backward = sparse_first with memoize = false is not"):
                check_supported(plan.split("(")[0], mod)
            f = tmp_path / "hinted.gd"
            f.write_text(_with(GCN, f"    order GCNConv#{layer} = sparse_first{bwd}\n    partition = {plan}"))
            code, _, err = run_gdsl(["compile", str(f), "--data", "cora"])
            assert code == 1 and "hinted.gd:35:17: error: partition = " in err and "note: this is the op" in err, err
        else:
            check_supported(plan.split("(")[0], mod)


def test_undecided_without_data():
    ir = gdsl.compile(ROOT / "programs" / "gcn.gd").ir
    assert ir.count("order=sparse_first, order_by=undecided") == 2


@pytest.mark.parametrize("src,scopes", [(GCN, ("GCNConv#1", "GCNConv#2")), (SAGE, ("SAGEConv#1", "SAGEConv#2", "SAGEConv#3"))])
def test_every_order_gives_the_same_numbers(src, scopes):
    g = random_graph(n=40, e=200, f=12, c=3, seed=2)
    outs = []
    for order in ("sparse_first", "dense_first"):
        hinted = _with(src, "\n".join(f"    order {s} = {order}" for s in scopes))
        prog = gdsl.compile(hinted, hidden=8) if "SAGE" in src else gdsl.compile(hinted)
        ir = prog.bind(g).module
        assert sum(op.attrs.get("order") == order for op in ir.main.ops) == len(scopes)
        torch.manual_seed(0)
        model = prog.module(g)
        if outs:
            model.load_state_dict(outs[0][0].state_dict())
        model.eval()
        out = model()
        w = torch.randn_like(out, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad((out * w).sum(), list(model.parameters()))
        outs.append((model, out, grads))
    (_, a, ga), (_, b, gb) = outs
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_global_hint_applies_to_every_call():
    g = random_graph(n=20, e=60, f=5, c=3)
    ir = gdsl.compile(_with(GCN, "    order = sparse_first")).bind(g).module
    assert [op.attrs.get("order_by") for op in ir.main.ops if op.name == "aggregate"] == ["hint", "hint"]


SUM_OF_MESSAGES = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter m = MSG
    gather a = sum(m)
    transform t = a @ W
    return t
}

model M { return L[C](relu(L[16](X))) }

train t { model = M; loss = cross_entropy(Y, mask = train) }
"""


def test_a_dense_first_hint_names_the_other_reader_of_the_aggregation(tmp_path):
    """The message is one product (the handled form), but the aggregation is
    read besides its `@`: the error says so and where. Was: "this one's
    message does not fold to that form; write the message as one product"
    (found by helper-57's unseen programs)."""
    text = SUM_OF_MESSAGES.replace("MSG", "src.h * rsqrt(max(dst.degree, 1))").replace(
        "    return t\n", "    apply z = a * 2\n    return t + z @ W\n")
    f = tmp_path / "p.gd"
    f.write_text(text + "schedule {\n    order L#1 = dense_first\n}\n")
    code, _, err = run_gdsl(["compile", str(f)])
    assert code == 1 and "order L#1 = dense_first cannot be carried out: its aggregation (`A X`, before the `@`) " \
        "is also read at line 11, and dense-first computes A (X W) without it" in err, err
    assert "write the message as one product" not in err


@pytest.mark.parametrize("reader", ["apply     z = x1 * 2\n    scatter   m2 = src.z * c\n",
                                    "scatter   m2 = src.x1 * c\n"])
def test_a_dense_first_hint_on_a_layer_of_two_aggregations_is_carried_out_for_both_or_refused(reader, tmp_path):
    """`x1 @ W1 + x2 @ W2` where x1 is also read elsewhere: x2 is reordered,
    x1 cannot be. Was: accepted with no word, x1 left sparse-first and no
    order attribute on it, as the reordered x2 counted as the hint carried
    out (helper-5's TAGConv with `order TAGConv#1 = dense_first`)."""
    text = (
        "graph G (symmetric)\ninput X : vertex f32[F]\ninput Y : vertex label[C]\nmask train\n\n"
        "layer L[dout](h: [din]) -> [dout] {\n"
        "    param W1 : f32[din, dout] = glorot\n    param W2 : f32[din, dout] = glorot\n"
        "    scatter   m1 = src.h * rsqrt(max(src.degree, 1) * max(dst.degree, 1))\n"
        "    gather    x1 = sum(m1)\n"
        f"    {reader}"
        "    gather    x2 = sum(m2)\n"
        "    transform o = x1 @ W1 + x2 @ W2\n    return o\n}\n\n"
        "model M { return L[C](X) }\n\ntrain t { model = M; loss = cross_entropy(Y, mask = train) }\n"
        "schedule { order L#1 = dense_first }\n").replace(
        " * c\n", " * rsqrt(max(src.degree, 1) * max(dst.degree, 1))\n")
    f = tmp_path / "p.gd"
    f.write_text(text)
    code, _, err = run_gdsl(["compile", str(f), "--data", "cora"])
    # the apply's line; or the gather that fusion made of `scatter m2 = src.x1 ...`, said as such (was
    # "at line 12" alone, the line of `gather x2 = sum(m2)`, which reads no x1 as written; helper-15)
    where = "at line 11" if reader.startswith("apply") else "by the message of the gather at line 12"
    assert code == 1 and "order L#1 = dense_first cannot be carried out: its aggregation (`A X`, before the `@`) " \
        f"is also read {where}," in err, err
    # without the other reader both are reordered, by the hint
    f.write_text(text.replace(reader.replace(" * c\n", " * rsqrt(max(src.degree, 1) * max(dst.degree, 1))\n"),
                              "scatter   m2 = src.h * rsqrt(max(src.degree, 1) * max(dst.degree, 1))\n"))
    code, out, err = run_gdsl(["compile", str(f), "--data", "cora", "--emit", "ir-opt"])
    assert code == 0, err
    assert out.count("order=dense_first") == 2 and out.count("order_by=hint") == 2, out


@pytest.mark.parametrize("schedule,where,what", [
    ("    order L#1 = dense_first\n", "19:17", "order L#1 = dense_first cannot be carried out: the order pass"),
    ("    order L#2 = sparse_first(backward = sparse_first)\n", "19:17",
     "order L#2 = sparse_first(backward = sparse_first) cannot be carried out: the order pass"),
    ("    order = dense_first\n", "19:13", "order = dense_first cannot be carried out for L#1: the order pass"),
])
def test_a_reorder_the_order_pass_cannot_do_is_an_error(tmp_path, schedule, where, what):
    """The message is linear in h, so the hint can hold, but its terms read
    two vertex tensors, `h` and `h2 = h * 2`, not one endpoint tensor times
    a graph constant, the form the order pass rewrites. Was: accepted, and
    the layer ran sparse-first silently."""
    text = SUM_OF_MESSAGES.replace("    scatter m = MSG", "    apply h2 = h * 2\n    scatter m = MSG").replace(
        "MSG", "src.h + src.h2 / max(dst.degree, 1)")
    f = tmp_path / "p.gd"
    f.write_text(text + "schedule {\n" + schedule + "}\n")
    code, _, err = run_gdsl(["compile", str(f)])
    assert code == 1 and f"{f}:{where}: error: {what}" in err, err
    assert "write the message as one product" in err
    # the same message as one product: carried out
    f.write_text(SUM_OF_MESSAGES.replace("MSG", "src.h * (0.5 + 1 / max(dst.degree, 1))")
                 + "schedule {\n" + schedule + "}\n")
    code, out, err = run_gdsl(["compile", str(f), "--data", "cora"])
    assert code == 0, err
    assert "order_by=hint" in out
    # a sparse-first hint with autograd's backward is what runs anyway: accepted
    f.write_text(text + "schedule {\n    order L#1 = sparse_first\n}\n")
    assert run_gdsl(["compile", str(f)])[0] == 0


@pytest.mark.parametrize("msg", ["src.h / max(dst.degree, 1) + src.h * 0.5",
                                 "src.h * 0.25 + src.h / max(dst.degree, 1) + 0.25 * src.h",
                                 "src.h + src.h / max(dst.degree, 1) - src.h * 0.5",
                                 # terms of src.h and -src.h (were refused: not factored)
                                 "src.h * 0.5 - (-src.h) / max(dst.degree, 1)",
                                 "-(-src.h / max(dst.degree, 1)) - (-src.h) * 0.5",
                                 # a number-only product and a negated quotient (were refused)
                                 "src.h * 0.25 * 2 - (-(src.h / max(dst.degree, 1) / 1))",
                                 # a product CSE shares between terms (was refused)
                                 "src.h * 2 - (src.h * 2 - src.h * 0.5) + src.h / max(dst.degree, 1)"])
@pytest.mark.parametrize("order", ["sparse_first", "dense_first"])
def test_a_sum_of_edge_factored_terms_folds_and_reorders(msg, order):
    """`x * c1 + x / c2 - x` with graph constants c is linear in x:
    fold-edge-constants factors it into `x * w` with one edge constant, so
    both orders run it and give the numbers of the message written as one
    product. Was: dense_first was refused (a sum of messages with different
    edge factors), and every term was an [E, F] product."""
    g = random_graph(n=40, e=200, f=12, c=3, seed=4)
    one = SUM_OF_MESSAGES.replace("MSG", "src.h * (0.5 + 1 / max(dst.degree, 1))")
    outs = []
    for src in (one, _with(SUM_OF_MESSAGES.replace("MSG", msg), f"    order = {order}")):
        prog = gdsl.compile(src)
        ops = prog.bind(g).module.main.ops
        assert [op.attrs.get("msg") for op in ops if op.name == "aggregate"] == ["mul", "mul"]
        assert sum(op.name == "edge_const" for op in ops) == 1
        torch.manual_seed(0)
        model = prog.module(g, backend="reference")
        if outs:
            model.load_state_dict(outs[0][0].state_dict())
            assert all(op.attrs["order"] == order for op in ops if op.name == "aggregate")
        outs.append((model, model.loss(model())))
        outs[-1][1].backward()
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-6)
    for p, q in zip(outs[0][0].parameters(), outs[1][0].parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("order", ["sparse_first", "dense_first"])
def test_a_chain_of_edge_factors_folds_and_computes_gcn(order):
    """`src.h * rsqrt(src.degree) * rsqrt(dst.degree)` is GCN's message
    written as two factors: folded into one edge constant it reorders like
    gcn.gd's and gives gcn.gd's numbers (was: the factors were multiplied
    into the [E, F] messages one by one, and dense_first was refused)."""
    g = random_graph(n=40, e=200, f=12, c=3, seed=3)
    text = (ROOT / "programs" / "gcn.gd").read_text()
    split = text.replace("src.h * rsqrt(src.degree * dst.degree)", "src.h * rsqrt(src.degree) * rsqrt(dst.degree)")
    assert split != text
    outs = []
    for src in (text, _with(split, f"    order = {order}")):
        prog = gdsl.compile(src)
        ops = prog.bind(g).module.main.ops
        assert [op.attrs.get("msg") for op in ops if op.name == "aggregate"] == ["mul", "mul"]
        torch.manual_seed(0)
        model = prog.module(g, backend="reference")
        if outs:
            model.load_state_dict(outs[0][0].state_dict())
            assert all(op.attrs["order"] == order for op in ops if op.name == "aggregate")
        model.eval()
        outs.append((model, model()))
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-6)


LINEAR_ONLY = """graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer L(h: [d]) -> [d] {
    scatter m = MSG
    gather a = sum(m)
    apply o = a
    return o
}

model M { return L(X) }

train t { model = M; loss = mse(X) }
"""


def _random_linear_message(rng, depth: int) -> str:
    """A random message linear in src.h: sums, differences, negations,
    products with and quotients by numbers and graph constants."""
    consts = ["0.5", "2", "max(dst.degree, 1)", "rsqrt(src.degree)", "(src.degree + 1)"]
    if depth == 0 or rng.random() < 0.25:
        return "src.h"
    r, sub = rng.random(), lambda: _random_linear_message(rng, depth - 1)
    if r < 0.3:
        return f"({sub()} + {sub()})"
    if r < 0.5:
        return f"({sub()} - {sub()})"
    if r < 0.6:
        return f"(-{sub()})"
    if r < 0.8:
        return f"({sub()} * {rng.choice(consts)})"
    if r < 0.9:
        return f"({rng.choice(consts)} * {sub()})"
    return f"({sub()} / {rng.choice(consts)})"


def test_random_linear_messages_fold_exactly():
    """fold-edge-constants rewrites sums, negations and products of one
    endpoint tensor into `src.h * w` (reassociate, collect):
    for random linear messages the folded program's output equals the
    message evaluated term by term in float64, and every one folds to a
    single product (so an order hint could reorder it)."""
    import random
    rng = random.Random(11)
    g = random_graph(n=30, e=120, f=4, c=2, seed=5)
    gl = g.with_options(self_loops=True)
    deg = gl.in_degree().double()
    env = {"SH": g.features.double()[gl.src], "DD": deg[gl.dst][:, None], "SD": deg[gl.src][:, None],
           "tmax": lambda a, b: torch.clamp(a, min=b), "trsqrt": torch.rsqrt}
    for _ in range(25):
        msg = _random_linear_message(rng, 4)
        prog = gdsl.compile(LINEAR_ONLY.replace("MSG", msg))
        ops = prog.bind(g).module.main.ops
        assert [op.attrs.get("msg") for op in ops if op.name == "aggregate"] in (["mul"], ["copy_src"]), msg
        out = prog.module(g, backend="reference").double()().detach()
        expr = (msg.replace("src.h", "SH").replace("dst.degree", "DD").replace("src.degree", "SD")
                .replace("max(", "tmax(").replace("rsqrt(", "trsqrt("))
        m = torch.broadcast_to(eval(expr, {}, dict(env)), (gl.num_edges, 4))
        want = torch.zeros_like(out).index_add_(0, gl.dst, m)
        torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-9, msg=msg)


TWICE = """
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer GCNConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    return t
}

model M {
    return GCNConv[C](X) + GCNConv[C](X)
}

train t {
    model = M
    loss  = cross_entropy(Y, mask = train)
}
"""


@pytest.mark.parametrize("backend", ["reference", "numba"])
@pytest.mark.parametrize("schedule, dense", [
    ("", 2),                                                        # auto: 2 x 3 < 12 columns
    ("    order = dense_first", 2),
    ("    order GCNConv#2 = dense_first\n    order GCNConv#1 = sparse_first", 1),
    ("    order = sparse_first", 0),
])
def test_two_calls_on_one_input_share_an_aggregation_and_take_order_hints(backend, schedule, dense):
    """Two calls of a layer on one input: canonicalize's CSE merges their
    aggregations into one that both `@ W` read. Was: an order hint on them was
    refused with a false reason (the message "does not fold to that form"), and
    with data bound the merged aggregation ran sparse-first unordered. Now each
    `@` is reordered on its own (dense-first: A (X W_i)), the shared aggregation
    kept for the readers left sparse-first; numbers as without reordering."""
    if backend == "numba":
        pytest.importorskip("numba")
    g = random_graph(n=40, e=200, f=12, c=3, seed=2)
    base = gdsl.compile(_with(TWICE, "    order = sparse_first"))
    prog = gdsl.compile(_with(TWICE, schedule) if schedule else TWICE)
    ops = prog.bind(g).module.main.ops
    assert sum(op.name == "aggregate" and op.attrs.get("order") == "dense_first" for op in ops) == dense
    assert sum(op.name == "aggregate" for op in ops) == dense + (dense < 2)
    outs = []
    for p in (base, prog):
        model = p.module(g, backend=backend)
        if outs:
            model.load_state_dict(outs[0][0].state_dict())
        out = model.eval()()
        w = torch.randn_like(out, generator=torch.Generator().manual_seed(1))
        outs.append((model, out, torch.autograd.grad((out * w).sum(), list(model.parameters()))))
    (_, a, ga), (_, b, gb) = outs
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("option", ["backward = sparse_first", "backward = dense_first",
                                    "backward = dense_first, memoize = false"])
def test_a_backward_option_on_a_shared_aggregation_is_refused_with_the_reason(option):
    """Any backward option on a reader of a shared aggregation left sparse-first
    (was: `backward = dense_first`, autograd's own order, was accepted and the IR
    carried no order attributes for the call, while the others were refused)."""
    prog = _with(TWICE, f"    order GCNConv#1 = sparse_first({option})")
    with pytest.raises(gdsl.CompileError, match=f"GCNConv#1 = sparse_first\\({option}\\) cannot be "
                                                "carried out: its aggregation is shared with another transform"):
        gdsl.compile(prog).bind(random_graph(n=40, e=200, f=12, c=3, seed=2)).module
    with pytest.raises(gdsl.CompileError, match="order = sparse_first\\(backward = dense_first\\) cannot be "
                                                "carried out for GCNConv#1: its aggregation is shared"):
        gdsl.compile(_with(TWICE, "    order = sparse_first(backward = dense_first)"))
