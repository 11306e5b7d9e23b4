"""What each distributed plan can run, decided on the optimised IR alone
(torch-free: `gdsl compile` and `gdsl plan` check a schedule's partition hint
with it, and `partition = auto` chooses among the plans it accepts; each rank
checks again before any communication, dist/module.py)."""
from __future__ import annotations

from gdsl.diagnostics import GdslError
from gdsl.ir.core import Module, Op, Value
from gdsl.ir.ops import LINEAR_UNARY, UNARY
from gdsl.ir.printer import _Namer


def _namer(module: Module) -> _Namer:
    """Values named as in the IR dump (`%1`, `%h`), for messages."""
    namer = _Namer()
    for op in module.main.ops:
        if op.result is not None:
            namer(op.result)
    return namer


def _what(op: Op, name) -> str:
    """An op as a message names it: `op %a (gather)`; an endpoint read as
    written, `the read src.h` (was: `op %1 (src)`, an IR temporary)."""
    if op.result is None:
        return f"op {op.name}"
    if op.name in ("src", "dst") and op.operands:
        x = op.operands[0]
        return f"the read {op.name}.{x.hint}" if x.hint else f"op {name(op.result)} (a read {op.name}.x)"
    if op.name == "sddmm":   # fuse.py's edge op on both endpoints (dot(src.a, dst.b), src.a * dst.b, ...)
        return f"op {name(op.result)} (sddmm: {op.attrs.get('op')} of src and dst values per edge)"
    return f"op {name(op.result)} ({op.name})"


def _learned(v: Value) -> bool:
    """Whether `v` is a param or computed from one."""
    seen, todo = set(), [v]
    while todo:
        x = todo.pop()
        if x in seen or x.owner is None:
            continue
        seen.add(x)
        if x.owner.name == "param":
            return True
        todo.extend(x.owner.operands)
    return False


def _check_factor(other: Value, where: str, name) -> None:
    """A factor of the features before layer 1's `@` under P3's feature split:
    a number, graph constant or input is the same on every rank's columns; a
    learned one would get one partial gradient per rank's columns, and one
    computed from the graph exists on this rank's rows only."""
    if other.type.domain == "param" or _learned(other):
        # (was, for an edge factor sigmoid(w @ A): "computed from the graph (sigmoid)"; helper-67)
        raise GdslError(f"{where}: a product with a learned factor ({name(other)}, a param or computed "
                        "from one) before layer 1's '@' cannot take a column slice; use rows")
    if other.type.domain in ("vertex", "edge") and other.owner is not None and \
            other.owner.name not in ("vertex_const", "edge_const", "degree", "input"):
        # the factor is computed on this rank's rows only (was: an internal shape error)
        raise GdslError(f"{where}: its factor {name(other)} is computed from the graph "
                        f"({other.owner.name}), but the feature split has only graph constants and inputs "
                        "on every vertex; use rows")
    if other.type.domain == "vertex" and other.owner is not None and other.owner.name == "input":
        # a vertex input after the first: each rank holds its own rows of it, P3's layer 1 runs on every vertex
        # (was: an internal shape error)
        raise GdslError(f"{where}: its factor {name(other)} is the vertex input '{other.owner.attrs['name']}', "
                        "which the feature split holds on each rank's own rows only (it splits the first vertex "
                        "input by columns); use rows")


def feature_input(module: Module) -> str | None:
    """The program's feature input: its first f32 vertex input (what the ranks split)."""
    return next((op.attrs["name"] for op in module.main.ops if op.name == "input"
                 and op.result.type.domain == "vertex" and op.result.type.dtype == "f32"), None)


def feature_region(module: Module, name=None) -> tuple[dict[Value, str], set[str]]:
    """P3 §3.1-3.2: the ops of layer 1 up to its sync run model-parallel on
    each rank's feature columns of all vertices. The region: every op that
    depends on the feature input and not on a sync result. Its values are
    either column slices ("cols", before the product with a weight) or partial
    sums over slices ("partial", after); only column-separable ops may take a
    slice and only linear ops a partial sum. Returns each value's kind ("cols",
    "partial" or "rows": after a sync) and the params the product uses (model-
    parallel: not all-reduced); a program P3 cannot run is refused (GdslError),
    by the ranks and by `partition = auto` alike (`check_supported`)."""
    name = name or _namer(module)
    ops = module.main.ops
    syncs = [op for op in ops if op.name == "sync"]
    x = feature_input(module)
    feat = next((op.result for op in ops if op.name == "input" and op.attrs.get("name") == x), None)
    if feat is None:
        raise GdslError("partition = features needs a feature input (an f32 vertex input) to split by columns")
    if not syncs:   # (was one message for both: "needs a feature input and a sync ...", for a program with one)
        raise GdslError("partition = features needs layer 1's product with a weight in a `transform`, which a sync "
                        "completes (P3 §3.2: the partial sums over column slices are reduced there); this program "
                        "has no transform (a `@` in an `apply` is not one)")
    kind: dict[Value, str] = {feat: "cols"}
    local_params: set[str] = set()
    elementwise = set(UNARY) | {"dropout"}
    linear_ok = set(LINEAR_UNARY) | {"dropout"}
    for op in ops:
        try:   # the op a refusal is about: where the program wrote it (the compiler's note)
            ins = [kind.get(v) for v in op.operands]
            if not any(ins) or op.result is None:
                continue
            n = op.name
            # (was "in layer 1", read as the program's first layer: P3's layer 1 is the ops up to the sync)
            where = f"partition = features: op {name(op.result)} ({n}) in P3's first layer (the ops up to its sync)"
            if n == "sync":
                if ins[0] == "cols":
                    raise GdslError(f"{where}: the sync must complete a product of the feature columns with a weight")
                kind[op.result] = "rows"
                continue
            if "rows" in ins:
                if "cols" in ins:
                    raise GdslError(f"partition = features: op {name(op.result)} ({n}) reads the feature input {x} "
                                    f"(or a value computed from it before layer 1's product with a weight) after the "
                                    f"sync; the feature split holds {x} as column slices only, use rows")
                if "partial" in ins:   # (was "... in layer 1 mixes layer-1 partial results with synced rows", for an
                    # op of the program's layer 2 that reads X again: `a @ W + X @ Wx`)
                    raise GdslError(f"partition = features: op {name(op.result)} ({n}) mixes a product of {x}'s "
                                    f"feature columns (a partial sum on each rank, P3's model-parallel layer 1) with "
                                    f"rows after a sync; the feature split runs only layer 1 on {x}'s column slices, "
                                    f"so {x} (or a value computed from it) cannot be read again after a sync; use rows")
                kind[op.result] = "rows"
                continue
            k = "partial" if "partial" in ins else "cols"
            if n == "matmul":
                if ins[0] != "cols" or ins[1] is not None:
                    raise GdslError(f"{where}: only one product with a weight is allowed before the sync")
                local_params.add(op.operands[1].owner.attrs["name"])
                kind[op.result] = "partial"
                continue
            if n in elementwise:
                if k == "partial" and n not in linear_ok:
                    raise GdslError(f"{where}: {n} of a partial sum is not linear; move it after the sync")
                kind[op.result] = k
                continue
            if n in ("add", "sub") and all(i == k for i in ins):
                kind[op.result] = k
                continue
            if n in ("add", "sub") and k == "cols" and ins.count(None) == 1:
                other = op.operands[ins.index(None)]
                if not other.type.shape and other.type.domain in (None, "scalar"):
                    kind[op.result] = k   # element-wise with a scalar: column-separable (was: "mixes feature columns")
                    continue
                what = "a learned value (a param or computed from one)" if other.type.domain == "param" else \
                    "a per-feature value" if other.type.shape else f"a per-{other.type.domain} value"
                raise GdslError(f"{where}: {'adding' if n == 'add' else 'subtracting'} {name(other)} ({what}) before "
                                "layer 1's '@' cannot take a column slice (the feature split adds scalars only there); "
                                "use rows")
            if n in ("add", "sub") and k == "partial" and ins.count(None) == 1:
                # (was: "not column-separable (it mixes feature columns)", for a bias `h @ W + b`)
                other = op.operands[ins.index(None)]
                verb = 'adding' if n == 'add' else 'subtracting'
                raise GdslError(f"{where}: {verb} {name(other)} (not a partial sum) "
                                f"to a partial sum is not linear: each rank's partial sum would carry it, so the sync "
                                f"would sum it P times; move it after the sync")
            if n in ("max", "min"):
                # element-wise, so column-separable; with a scalar, or two values of the region
                if k == "partial":
                    raise GdslError(f"{where}: element-wise {n} of a partial sum is not linear; move it after the sync")
                if all(i == k or (i is None and not v.type.shape and v.type.domain in (None, "scalar"))
                       for i, v in zip(ins, op.operands)):
                    kind[op.result] = k
                    continue
                raise GdslError(f"{where}: element-wise {n} with a per-vertex or per-feature value the feature split "
                                "does not slice; use rows")
            if n in ("mul", "div") and sum(1 for i in ins if i) == 1 and (
                    op.operands[1 if ins[0] else 0].type.domain in (None, "scalar", "param", "edge", "vertex") and
                    (n == "mul" or ins[0])):
                other = op.operands[1 if ins[0] else 0]
                if other.type.shape and other.type.domain not in ("edge", "param") and not _learned(other):
                    raise GdslError(f"{where}: a product with a per-feature factor cannot take a column slice")
                _check_factor(other, where, name)
                kind[op.result] = k
                continue
            if n in ("src", "dst"):
                kind[op.result] = k
                continue
            if n == "sddmm" and ins[0] == ins[1] and (op.attrs["op"] in ("add", "sub") or
                                                      (op.attrs["op"] == "mul" and k == "cols")):
                # fuse.py's src.a (+|-|*) dst.b: element-wise on two values sliced alike, so
                # column-separable (a product of two partial sums would not be linear)
                kind[op.result] = k
                continue
            if n == "gather" or n == "aggregate":
                if k == "partial" and op.attrs["reduce"] not in ("sum", "mean"):
                    raise GdslError(f"{where}: {op.attrs['reduce']} of a partial sum is not linear")
                if n == "aggregate" and len(op.operands) > 1 and ins[1] is not None:
                    raise GdslError(f"{where}: the edge factor may not depend on the features")
                if n == "aggregate" and len(op.operands) > 1:
                    # fuse.py's src.x * g: the same rule as the unfused product (was: an internal
                    # shape error on the ranks for g = sigmoid(dst.degree * s))
                    _check_factor(op.operands[1], where, name)
                kind[op.result] = k
                continue
            raise GdslError(f"{where} is not column-separable (it mixes feature columns); P3's feature split "
                            "cannot run this program's first layer, use rows")
        except GdslError as e:
            e.op = op
            raise
    return kind, local_params


def _check_supported_op(s: str, op: Op, where: str) -> None:
    n = op.name
    if s in ("rows_replicated", "vertex_cut"):
        if n in ("edge_softmax", "gat_aggregate"):
            raise GdslError(f"partition = {s} cannot run {where}: an edge softmax needs all of a vertex's "
                            "incoming edges on one rank; use rows, features or replicate")
        if n in ("gather", "aggregate") and op.attrs.get("to") == "src" and s == "rows_replicated":
            raise GdslError(f"partition = {s} cannot run {where}: reductions over outgoing edges "
                            "(to = src) are not implemented for 1.5D; use rows")
        if n in ("gather", "aggregate") and op.attrs.get("reduce") not in ("sum", "mean", "max", "min"):
            raise GdslError(f"partition = {s} cannot run {where}")
    if s == "redistribute":
        if n in ("src", "dst", "gather", "edge_softmax", "sddmm", "gat_aggregate"):
            raise GdslError(f"partition = redistribute (RDM) cannot run {where}: RDM redistributes around "
                            "SpMM-like aggregations (a scatter of src.x, optionally times an edge "
                            "constant, then a gather) only; use rows")
        if n == "aggregate":
            if op.attrs["msg"] not in ("copy_src", "mul") or op.attrs["to"] != "dst":
                raise GdslError(f"partition = redistribute cannot run {where}: not an SpMM (its message is "
                                f"{op.attrs['msg']} over edges to {op.attrs['to']}; RDM runs a sum, max or min "
                                "of src.x, optionally times a graph constant, over in-edges); use rows")
            if op.attrs["msg"] == "mul" and (op.operands[1].owner is None
                                             or op.operands[1].owner.name != "edge_const"):
                raise GdslError(f"partition = redistribute cannot run {where}: the edge factor must be "
                                "a graph constant")


def check_supported(s: str, module: Module, name=None, *, replicas=None, P: int | None = None) -> None:
    """Refuse (GdslError) an op that strategy `s` cannot run exactly: checked by
    each rank before any communication, and by `partition = auto` so the cost
    model's choice is one the ranks can run. `replicas` (redistribute's R_A,
    None: P) and `P` (the rank count, when known) let it refuse what
    redistribute(R_A < P) cannot run."""
    name = name or _namer(module)
    for op in module.main.ops:
        try:
            _check_supported_op(s, op, _what(op, name))
        except GdslError as e:
            e.op = op   # where the program wrote it (the compiler's note)
            raise
    kind = feature_region(module, name)[0] if s == "features" else {}
    partial = s == "redistribute" and replicas is not None and P is not None and int(replicas) < P
    _check_hinted_backward(s, module, name, {v for v, k in kind.items() if k in ("cols", "partial")},
                           int(replicas) if partial else None)


def _check_hinted_backward(s: str, module: Module, name, cols: set, partial_rdm: int | None = None) -> None:
    """A backward order an order hint chose (`backward = ...`, linear.py) runs
    its SpMMs through the plan's ops in both directions; 1.5D, P3's
    model-parallel layer 1 and redistribute(R_A) with R_A < P (`partial_rdm`:
    R_A) run autograd's own order only (the ranks' `_check_linear_groups`;
    was: redistribute(R_A < P) was refused by the ranks only, after `auto`
    chose it or the graph was partitioned for it; helper-75). A backward
    order the order pass chose by cost falls back there instead."""
    if s not in ("rows_replicated", "features") and partial_rdm is None:
        return
    from gdsl.passes.order import linear_groups
    for g in linear_groups(module):
        if g.natural or g.agg.attrs.get("order_grad_by") != "hint":
            continue
        if s == "features" and not any(op.result in cols for op in g.ops):
            continue
        what = "rows_replicated (1.5D) plans, which run autograd's own backward order" if s == "rows_replicated" \
            else "P3's model-parallel first layer (partition = features)" if s == "features" \
            else f"redistribute({partial_rdm}) (R_A < P), which runs autograd's own backward order"
        scope = g.agg.attrs.get("scope", "")
        plan = f"{s}({partial_rdm})" if partial_rdm is not None else s
        e = GdslError(f"partition = {plan} cannot run {name(g.out)} ({scope}): backward = "
                      f"{g.bwd} with memoize = {str(g.memo).lower()} is not implemented for {what}; drop the "
                      f"backward/memoize options of the schedule's `order {_hint_name(scope)}` hint")
        e.op = g.agg
        raise e


def _hint_name(scope: str) -> str:
    """A layer call's scope (`GCNConv_1`) as an order hint names it (`GCNConv#1`): the error is
    located at the aggregation, the hint to change is in the schedule block."""
    layer, _, k = scope.rpartition("_")
    return f"{layer}#{k}" if layer and k.isdigit() else scope


def check_delay(delay, module: Module, name=None) -> None:
    """Refuse (GdslError) what DistGNN cd-r (delay r > 0, §5.3) cannot run, decided
    on the IR alone: a delayed max/min aggregation (the pipeline carries partial
    sums; `_delayed`), and a backward order the schedule chose by hint (linear.py
    runs it through run_op, outside the delay pipeline; `_check_linear_groups`)."""
    if not (isinstance(delay, int) and delay > 0):
        return
    from gdsl.passes.order import linear_groups
    name = name or _namer(module)
    for op in module.main.ops:
        reduce = op.attrs.get("reduce")
        if op.name in ("gather", "aggregate") and reduce in ("max", "min") and not op.attrs.get("adjoint"):
            e = GdslError(f"op {name(op.result)} ({op.name}): delayed aggregation (cd-r) is implemented for sum "
                          f"and mean reductions, not {reduce}; use delay = 0 or delay = none")
            e.op = op
            raise e
    for g in linear_groups(module):
        if g.agg.attrs.get("order_grad_by") == "hint" and not g.natural:
            scope = g.agg.attrs.get("scope", "")
            e = GdslError(f"{name(g.out)} ({scope}): a chosen backward order is not implemented with delayed "
                          f"aggregation (delay = {delay}); drop the backward/memoize options of the schedule's "
                          f"`order {_hint_name(scope)}` hint")
            e.op = g.agg
            raise e
