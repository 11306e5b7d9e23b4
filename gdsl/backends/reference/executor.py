"""Execute an optimised IR module with plain torch ops (the oracle).

Rows come first in every tensor: a vertex value of feature shape [a, b] is a
torch tensor [N, a, b]; an edge value [E, a, b]; a param [a, b]; a scalar a
Python float. Broadcasting follows ir.ops.broadcast (leading alignment of
feature axes first), so operands are reshaped explicitly before torch's own
trailing broadcasting applies.
"""
from __future__ import annotations

import math
import operator
import warnings
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from gdsl.backends import capturing, compiling, eager_under_torch_compile, exporting, gemm
from gdsl.backends.reference.graphdata import GraphData
from gdsl.backends.reference.linear import fused_ops, plan_linear, run_linear, sparse_mm
from gdsl.diagnostics import GdslError
from gdsl.graph.graph import Graph
from gdsl.ir.core import Module, Op, Type, Value
from gdsl.ir.ops import ShapeError, broadcast_mode
from gdsl.passes.invariant import kept_invariants

_UNARY = {
    "relu": torch.relu, "elu": F.elu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp,
    "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "abs": torch.abs, "neg": torch.neg,
}
_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
           "max": torch.maximum, "min": torch.minimum}


def _draw_seed() -> int:
    """A module's default dropout seed: one number from torch's global generator."""
    return int(torch.randint(2 ** 62, (), dtype=torch.int64).item())


def init_param(shape: tuple[int, ...], init: str, gen: torch.Generator | None = None) -> torch.Tensor:
    """Initialise a param. glorot: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) with
    fan_in = shape[0] and fan_out = prod(shape[1:]) (PyG's convention for
    [heads, dout] attention vectors and [din, heads, dout] weights)."""
    t = torch.empty(shape)
    name, _, arg = init.partition("(")
    arg = float(arg.rstrip(")")) if arg else None
    if name == "zeros":
        return t.zero_()
    if name == "ones":
        return t.fill_(1.0)
    if name == "normal":
        return t.normal_(0.0, arg, generator=gen)
    if name == "uniform":
        return t.uniform_(-arg, arg, generator=gen)
    fan_in = shape[0] if shape else 1
    fan_out = math.prod(shape[1:]) if len(shape) > 1 else fan_in
    a = math.sqrt(6.0 / (fan_in + fan_out))
    return t.uniform_(-a, a, generator=gen)


def _rows(t: Type) -> int:
    return 1 if t.domain in ("vertex", "edge") else 0


def _align(x, t: Type, target_rank: int, lead: bool, row_axis: bool = True):
    """View `x` (of type t) with its feature axes padded to `target_rank` by 1s,
    behind a row axis (size 1 for a param) when the other operand has rows."""
    if not isinstance(x, torch.Tensor):
        return x
    fs = list(x.shape[_rows(t):])
    pad = [1] * (target_rank - len(fs))
    new = (fs + pad) if lead else (pad + fs)
    rows = list(x.shape[: _rows(t)]) if _rows(t) else [1] if row_axis else []
    return x.reshape(rows + new)


def _binary_operands(op: Op, vals: list, mode: str | None):
    # `scalar` pads trailing axes too: [N] against [N, F]
    return _align_pair(vals[0], op.operands[0].type, vals[1], op.operands[1].type, mode)


def _align_pair(xa, ta: Type, xb, tb: Type, mode: str | None):
    """Reshape two operands so torch's broadcasting does ours (see ir.ops)."""
    mode = mode or broadcast_mode(ta.shape, tb.shape)
    if mode == "same" and _rows(ta) == _rows(tb):
        return xa, xb
    rank = max(len(ta.shape), len(tb.shape))
    lead = mode != "trail"
    rows = bool(_rows(ta) or _rows(tb))   # param (op) const, param (op) param: no row axis (was: [1, ...])
    return _align(xa, ta, rank, lead, rows), _align(xb, tb, rank, lead, rows)


def scatter_extremum(m: torch.Tensor, idx: torch.Tensor, rows: int, reduce: str, empty: float = 0.0) -> torch.Tensor:
    """out[r] = max (min) of the rows m[e] with idx[e] = r; `empty` where no
    e has idx[e] = r. The gradient of each element is split evenly among
    the entries that tie for it (torch's rule).

    The accumulator starts at -inf (+inf), not 0: scatter_reduce's backward
    counts the initial value as a tie when it equals the result, even with
    include_self=False, so a zero start gave half the gradient of every
    element whose max is exactly 0 (common after a relu) to the start, which
    drops it (was: max over [0, -1] sent 0.5 to the 0)."""
    fill = float("-inf") if reduce == "max" else float("inf")
    index = idx.reshape((-1,) + (1,) * (m.dim() - 1)).expand_as(m)
    out = m.new_full((rows,) + tuple(m.shape[1:]), fill).scatter_reduce(
        0, index, m, "amax" if reduce == "max" else "amin", include_self=False)
    if empty != fill:
        # (index_put, not index_fill(.., True): torch.jit.trace has no schema for a bool fill value)
        has = torch.zeros(rows, dtype=torch.bool, device=m.device).index_put(
            (idx,), torch.ones((), dtype=torch.bool, device=m.device))
        out = torch.where(has.reshape((-1,) + (1,) * (m.dim() - 1)), out, out.new_full((), empty))
    return out


def _mode_shapes(op: Op) -> tuple[tuple, tuple] | None:
    """The two feature shapes whose broadcast mode an op's execution uses, if any."""
    if len(op.operands) < 2:
        return None
    a, b = op.operands[0].type.shape, op.operands[1].type.shape
    if op.name in _BINARY or op.name == "aggregate":
        return a, b
    if op.name == "dot" or (op.name == "sddmm" and op.attrs["op"] == "dot"):
        return a[:-1], b[:-1]
    return (a, b) if op.name == "sddmm" else None


def broadcast_modes(module: Module) -> dict[Op, str]:
    """Each op's broadcast mode (see ir.ops.broadcast_mode), decided once at bind:
    the lowering records `lead` / `trail` as an attribute and leaves `same` /
    `scalar` to the shapes. The forward then runs no sympy (under torch.compile,
    dynamo traced sympy's cached comparisons and warned about them)."""
    out = {}
    for op in module.main.ops:
        shapes = _mode_shapes(op)
        if shapes is not None:
            try:
                out[op] = op.attrs.get("broadcast") or broadcast_mode(*shapes)
            except ShapeError:   # not one the forward aligns (verified programs have none)
                pass
    return out


def reshape_targets(module: Module) -> dict[Op, tuple[int, ...]]:
    """Each `reshape` op's target shape as python ints (the IR's dims are sympy
    Integers, and torch < 2.13's dynamo cannot trace int() of one under strict
    torch.export)."""
    return {op: tuple(int(d) for d in op.result.type.shape) for op in module.main.ops if op.name == "reshape"}


def check_features(x, rows: int, shape, dtype: torch.dtype = torch.float32,
                   device: torch.device | None = None, convert: bool = True) -> torch.Tensor:
    """The features a caller passes to the module (`model(x)`): a tensor of the
    graph's rows and the declared feature shape, of the params' dtype (float32
    unless the module was converted, e.g. `model.double()`; an integer or bool
    tensor is converted; another float dtype is refused, as torch's own layers
    do). `convert=False`: only the checks (x is returned as it is)."""
    want = [rows] + [int(d) for d in shape]
    if not isinstance(x, torch.Tensor):
        # a graph object (gdsl's, PyG's Data, a DGLGraph), as a PyG model takes `model(data)`: say the module
        # has its graph already (was the bare "got Data"; helper-22)
        bound = (" (the module is bound to its graph: model() runs on the graph's features, model(x) on others; "
                 "for another graph, bind it: prog.module(gdsl.Graph.from_pyg(data)), from_dgl or from_edges)"
                 if isinstance(x, Graph) or hasattr(x, "edge_index") or hasattr(x, "ndata") else "")
        raise GdslError(f"the model's input must be a torch.Tensor of shape {want}, got {type(x).__name__}{bound}")
    if x.is_nested or x.layout != torch.strided:   # was: torch's "reshape is not implemented for sparse tensors"
        raise GdslError(f"the model's input must be a dense tensor, got a {'nested' if x.is_nested else x.layout} "
                        f"one; use x.to_dense()")
    if list(x.shape) != want:
        raise GdslError(f"the model's input must have shape {want} (the graph's {rows} vertices x the declared "
                        f"features), got {list(x.shape)}")
    if device is not None and x.device != device:
        raise GdslError(f"the model's input is on {x.device}, the module on {device}; use x.to('{device}')")
    if x.device.type == "meta":   # a module that takes any device (Triton's): was "Cannot copy out of meta tensor"
        raise GdslError("the model's input is on the meta device (no data); pass a tensor with data")
    if x.dtype.is_floating_point or x.dtype.is_complex:
        if x.dtype != dtype:
            name = str(dtype).removeprefix("torch.")
            raise GdslError(f"the model's input must be {name} (the params' dtype), got {x.dtype}; "
                            f"use x.to(torch.{name})")
        return x
    return x.to(dtype) if convert else x


def refuse_arguments(extra: tuple, named: dict | None = None) -> None:
    """A forward takes the features only: PyG-style `model(x, edge_index)` or
    `model(x, edge_index=ei)` is a GdslError saying to bind the other graph
    (the keyword form was Python's bare TypeError; helper-22)."""
    if extra or named:
        got = (f"{1 + len(extra)} arguments" if extra else "") + (" and " if extra and named else "") + \
            (f"the keyword argument{'s' if len(named) > 1 else ''} {', '.join(map(repr, named))}" if named else "")
        raise GdslError(f"a gdsl module is bound to its graph by prog.module(graph) and takes only the "
                        f"features: model(x) or model(); got {got} (for another graph "
                        "or edge_index, bind it: prog.module(gdsl.Graph.from_edges(...)))")


class LayerParams(nn.Module):
    """The params of one layer call (`model.GCNConv_1.W`). The program runs
    as a whole, not layer by layer, so this module is never called: the
    model's forward runs its forward pre-hooks first (what
    `torch.nn.utils.prune` and the old `weight_norm` register to recompute a
    weight); its forward hooks never fire (register them on the model)."""

    def __init__(self) -> None:
        super().__init__()
        self._gdsl_shapes: dict[str, tuple[int, ...]] = {}   # the params' declared shapes, in program order

    def forward(self, *args, **kwargs):
        raise GdslError("a layer's params are not a module to call: the model runs the whole program (call the model)")

    def extra_repr(self) -> str:   # print(model): `(GCNConv_1): LayerParams(W: [1433, 16], b: [16])`
        shapes = {n: p.shape for n, p in self.named_parameters(recurse=False)}
        # a param under torch.nn.utils.parametrize (spectral_norm, weight_norm) is no direct parameter: shown with
        # its declared shape, without running the parametrization (was: left out; helper-22)
        declared = getattr(self, "_gdsl_shapes", {})
        for n in getattr(self, "parametrizations", {}):
            shapes[n] = declared.get(n, "parametrized")
        order = {n: i for i, n in enumerate(declared)}
        return ", ".join(f"{n}: {list(shapes[n]) if not isinstance(shapes[n], str) else shapes[n]}"
                         for n in sorted(shapes, key=lambda n: order.get(n, len(order))))


def _apply_to(fn, t: torch.Tensor) -> torch.Tensor:
    """nn.Module._apply's `fn` on a constant; a torch.sparse CSR matrix that
    `fn` cannot take whole (`share_memory()`: no storage) takes it per part
    (was: NotImplementedError, with the params already shared)."""
    try:
        return fn(t)
    except (NotImplementedError, RuntimeError):
        if t.layout != torch.sparse_csr:
            raise
        return torch.sparse_csr_tensor(fn(t.crow_indices()), fn(t.col_indices()), fn(t.values()), t.shape)


class ReferenceModule(nn.Module):
    """A compiled program bound to one graph, as a torch `nn.Module`.

    `forward(x=None)` returns the model output ([N, C] logits); `x` replaces
    the features input (the program's first f32 vertex input).
    """

    def __init__(self, module: Module, graph: Graph) -> None:
        super().__init__()
        self.ir = module
        for k, v in graph.edata.items():
            if v.requires_grad:   # (was: epoch 2 died in torch's "backward through the graph a second time", or
                # with retain_graph the loss stayed put while w changed; helper-69)
                raise GdslError(f"graph.edata['{k}'] requires grad: a module computes its edge constants from "
                                "the graph's edge data once, at module(), so they would not follow it as it "
                                "learns (and a second backward would fail); learn edge weights as a param of the "
                                f"program, or bind graph.edata['{k}'].detach()")
        self.graph = graph = graph.snapshot()   # later reassignments of the user's graph do not reach it
        self.gd = GraphData(graph, module.attrs.get("graph", {}))
        self.register_buffer("src_index", self.gd.src, persistent=False)
        self.register_buffer("dst_index", self.gd.dst, persistent=False)
        self._create_params(module)
        self._float = torch.float32      # the float dtype of the constants (model.double())
        self._consts = self._make_consts(torch.float32)
        self._spmm = self._plan_spmm(module)
        self._lin_anchor, self._lin_skip = plan_linear(self, module)
        # a kernel backend's fused op groups ({anchor: spec}, the ops folded into an anchor): none here
        self._fused: dict[Op, tuple] = {}
        self._skip: set[Op] = set()
        feat = next((op for op in module.main.ops if op.name == "input" and op.result.type.domain == "vertex"
                     and op.result.type.dtype == "f32"), None)
        self.feature_input = feat.attrs["name"] if feat else None
        # python ints, not sympy Integers: torch < 2.13's dynamo cannot trace int(sympy.Integer)
        # under strict torch.export
        self._feature_shape = tuple(int(d) for d in feat.result.type.shape) if feat else ()
        self._reshape_to = reshape_targets(module)
        self._modes = broadcast_modes(module)
        self.loss_op = next((op for op in module.main.ops if op.name == "loss"), None)
        self._scalars: dict[Op, float] = {}
        self._plain_ops(None, (), scalars_only=True)   # fill them now (see _scalar)
        self._hoist_plan: HoistPlan | None = None
        self._hoist_cache: _HoistCache | None = None
        self.hoist = False

    def _make_consts(self, dtype: torch.dtype) -> dict[Op, torch.Tensor]:
        """The folded graph constants (edge weights, degrees), computed from the
        graph in `dtype`."""
        consts: dict[Op, torch.Tensor] = {}
        for op in self.ir.main.ops:
            if op.name == "vertex_const":
                consts[op] = self.gd.vertex_const(op.attrs["expr"], dtype)
            elif op.name == "edge_const":
                consts[op] = self.gd.edge_const(op.attrs["expr"], dtype)
            elif op.name == "degree":
                consts[op] = self.gd.vertex_env["degree"].to(dtype)
        return consts

    def _create_params(self, module: Module) -> None:
        """One nn.Parameter per `param` op, initialised in op order from torch's
        global generator (so every backend and every rank draws the same values)."""
        self._param_names: list[str] = []
        self._param_shapes: dict[str, tuple[int, ...]] = {}
        # the masks' seed: drawn from torch's global generator after the params (below), so
        # `torch.manual_seed(s); m = prog.module(g)` varies the masks with s as it does the params (was 0 for
        # every module: a loop over seeds drew one set of masks; helper-69), and two modules built one after
        # the other draw different masks, as two nn.Dropout do (was torch.initial_seed(): an ensemble, a
        # deep copy re-initialised, two towers, even two programs shared every mask; helper-7).
        # gdsl.train / gdsl run set it to their seed.
        self.step, self._mask_step = 0, 0
        self._step_of_draw: dict[int, int] = {}   # count_step
        self._op_index = {op: i for i, op in enumerate(module.main.ops)}   # mask_seed's op keys
        drops = [op for op in module.main.ops if op.name == "dropout"]
        if module.mask_keys is not None and len(module.mask_keys) == len(drops):
            self._op_index.update(zip(drops, module.mask_keys))   # gdsl run's numbering (compiler.mask_keys)
        self._draws_masks = any(op.name == "dropout" and op.attrs["p"] > 0 for op in module.main.ops)
        for op in module.main.ops:
            if op.name == "param":
                scope, _, pname = op.attrs["name"].rpartition(".")
                holder = self if not scope else self._holder(scope)
                if hasattr(holder, pname) and pname not in holder._parameters:
                    # (was: torch's raw KeyError "attribute 'type' already exists"; helper-73)
                    at = f" (at {op.span})" if op.span.known else ""
                    raise GdslError(f"param '{pname}'{at} has the name of an attribute of the torch module that "
                                    f"holds it ({type(holder).__name__}.{pname}); rename the param")
                shape = tuple(int(d) for d in op.result.type.shape)
                p = nn.Parameter(init_param(shape, op.attrs["init"]))
                holder.register_parameter(pname, p)
                if isinstance(holder, LayerParams):
                    holder._gdsl_shapes[pname] = shape
                self._param_names.append(op.attrs["name"])
                self._param_shapes[op.attrs["name"]] = shape
        self._seed_value = _draw_seed()

    def reset_parameters(self) -> None:
        """Initialise every param again, in place, as the constructor did:
        each with its program init, in program order, from torch's global
        generator (`torch.manual_seed(s); model.reset_parameters()` gives
        the values a module built after `torch.manual_seed(s)` has). The
        dropout seed is drawn again from that generator, after the params, as
        the constructor draws it, and the step counter starts again too (see
        `count_step`)."""
        with torch.no_grad():
            for op in self.ir.main.ops:
                if op.name == "param":
                    p = self.param(op.attrs["name"])
                    p.copy_(init_param(tuple(p.shape), op.attrs["init"]))
        self._seed_value, self.step, self._mask_step = _draw_seed(), 0, 0
        self._step_of_draw.clear()

    def param(self, name: str) -> torch.Tensor:
        """The parameter registered now under `name` (e.g. `GCNConv_1.W`),
        looked up on its holder at each use, so what torch code puts there is
        used: `load_state_dict(assign=True)`, a new `nn.Parameter` assigned,
        `torch.func.functional_call`, `torch.nn.utils.parametrize`."""
        holder = self
        want = getattr(self, "_param_shapes", {}).get(name)
        try:
            for part in name.split("."):
                holder = getattr(holder, part)
        except AttributeError:
            raise GdslError(f"param {name} is no longer on the module, but the program uses it"
                            + ("" if want is None else f" (a tensor of shape {list(want)})")) from None
        # what torch code put there must fit the program (was: a backend dropped a None
        # bias silently while another raised torch's TypeError; a wrong shape: torch's
        # broadcast error without the param's name)
        if not isinstance(holder, torch.Tensor):
            raise GdslError(f"param {name} is {type(holder).__name__}, but the program uses it: it must be a tensor"
                            + ("" if want is None else f" of shape {list(want)}"))
        if want is not None and tuple(holder.shape) != want:
            raise GdslError(f"param {name} has shape {list(holder.shape)}, but the program declares {list(want)}")
        return holder

    @property
    def _params(self) -> dict[str, torch.Tensor]:
        """The program's parameters by name, as registered now (see `param`)."""
        return {k: self.param(k) for k in self._param_names}

    # Backends whose own kernels run the aggregations set this False: the
    # torch.sparse matrices below would be built and never used (for a graph
    # of 4M edges: 1 s and 200 MiB at their peak).
    uses_torch_sparse = True

    def _plan_spmm(self, module: Module) -> dict[Op, torch.Tensor]:
        """`aggregate[reduce=sum]` of `src.x` (times a constant per-edge scalar)
        runs as one torch.sparse CSR matmul; the matrix is built once here."""
        plan = {}
        if not self.uses_torch_sparse:
            return plan
        for op in module.main.ops:
            if op.name != "aggregate" or op.attrs["reduce"] != "sum" or op.attrs["msg"] not in ("copy_src", "mul"):
                continue
            w = None
            if op.attrs["msg"] == "mul":
                wv = op.operands[1]
                if wv.owner is None or wv.owner.name != "edge_const":
                    continue
                w = self._consts[wv.owner]
            row, col = (self.gd.dst, self.gd.src) if op.attrs["to"] == "dst" else (self.gd.src, self.gd.dst)
            vals = torch.ones(row.numel(), dtype=self._float, device=row.device) if w is None else w
            n = self.gd.num_nodes
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                plan[op] = torch.sparse_coo_tensor(torch.stack([row, col]), vals, (n, n)).coalesce().to_sparse_csr()
        return plan

    def __getstate__(self):
        """Pickle and `copy.deepcopy`: the torch.sparse CSR matrices travel as
        their index and value tensors (deepcopy cannot copy a sparse CSR tensor)."""
        state = self.__dict__.copy()
        state["_spmm"] = {k: (a.crow_indices(), a.col_indices(), a.values(), tuple(a.shape))
                          for k, a in self._spmm.items()}
        state["_hoist_cache"] = None   # weak references to the features: computed again after loading
        return state

    def __setstate__(self, state) -> None:
        state["_spmm"] = {k: torch.sparse_csr_tensor(*parts) for k, parts in state["_spmm"].items()}
        super().__setstate__(state)

    def linear_spmm(self, agg: Op):
        """The CSR matrix of aggregation `agg` when it runs as one torch.sparse
        product (linear.py takes A and A^T from it), else None."""
        return self._spmm.get(agg)

    def _holder(self, scope: str) -> nn.Module:
        if not hasattr(self, scope):
            self.add_module(scope, LayerParams())
        return getattr(self, scope)

    # ---- inputs
    def _input(self, op: Op, x: torch.Tensor | None):
        name, t = op.attrs["name"], op.result.type
        g = self.gd.graph
        if t.dtype == "i64":
            return g.labels   # None on a graph bound with dims={"C": ...} for inference: loss_target says so
        if t.domain == "edge":
            if name not in self.gd.edge_env:
                raise KeyError(f"the graph has no edge data '{name}' for input {name}")
            return self._as_dtype(self.gd.edge_env[name])
        if name == self.feature_input:
            return self._as_dtype(g.features) if x is None else \
                check_features(x, g.num_nodes, self._feature_shape, self.dtype, self.input_device)
        if name not in g.ndata:
            raise KeyError(f"the graph has no vertex data '{name}' for input {name}")
        return self._as_dtype(g.ndata[name])

    @property
    def input_device(self) -> torch.device | None:
        """Where `model(x)` wants x (None: anywhere, the module moves it)."""
        return self.src_index.device

    @property
    def dtype(self) -> torch.dtype:
        """The params' dtype: float32 unless the module was converted (`model.double()`)."""
        return self.param(self._param_names[0]).dtype if self._param_names else self._float

    def _as_dtype(self, v):
        """Float graph data in the params' dtype (as stored when that is float32)."""
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != self.dtype:
            return v.to(self.dtype)
        return v

    def _apply(self, fn, recurse=True):
        """`model.double()`, `model.to(dtype or device)`: the compiled constants
        (edge weights, degrees) and torch.sparse matrices, which are not
        buffers, follow the params, so a float64 module runs in float64
        throughout (torch.autograd.gradcheck)."""
        current = getattr(self, "_float", torch.float32)
        probe = fn(torch.zeros(0, dtype=current))
        dtype = probe.dtype
        if isinstance(probe, torch.Tensor) and probe.device.type == "meta":
            # was: accepted, then torch's "Could not run 'aten::addmm.out' ... SparseCsrMeta" at the call
            raise GdslError("a gdsl module cannot move to the meta device: it holds the graph's data "
                            "(edges, constants); the params are unchanged")
        if dtype not in (torch.float32, torch.float64):
            raise GdslError(f"a gdsl module runs in float32 or float64 (model.float(), model.double()), "
                            f"not {str(dtype).removeprefix('torch.')}; the params are unchanged")
        if (ints := fn(torch.zeros(0, dtype=torch.int64))).dtype != torch.int64:
            # Module.type(torch.float64) casts every tensor: the graph's index buffers stay integers, so it
            # is model.double() (was: float64 edge indices, then torch's index_select error; helper-73)
            cast = fn
            fn = lambda t: cast(t) if t.is_floating_point() else t.to(ints.device)  # noqa: E731
        super()._apply(fn, recurse)
        self._hoist_cache = None   # computed in the old dtype or on the old device
        if hasattr(self, "_consts"):
            if dtype != current:
                self._retype_consts(dtype)
            self._consts = {k: (_apply_to(fn, t) if isinstance(t, torch.Tensor) else t) for k, t in self._consts.items()}
            self._spmm = {k: _apply_to(fn, a) for k, a in getattr(self, "_spmm", {}).items()}
            self._converted()
        return self

    def to_empty(self, *, device, recurse: bool = True):
        """Refused: it would leave the graph's data uninitialised (the edge
        indices and compiled constants are not in the state_dict, so
        load_state_dict cannot restore them; was: wrong numbers or an
        IndexError at the next call; helper-73)."""
        raise GdslError("a gdsl module cannot take to_empty(): the graph's data it holds (edges, constants) is not "
                        "in the state_dict, so it would stay uninitialised; build the module with "
                        "prog.module(graph), move it with model.to(device), then load_state_dict; the module is "
                        "unchanged")

    def _converted(self) -> None:
        """Hook: drop caches derived from the constants after `_apply`."""

    def _features_given(self, x) -> None:
        """A graph bound without features (`dims` gave their widths) needs them at each call."""
        if x is None and self.feature_input is not None and self.graph.features is None:
            raise GdslError(f"the graph has no features for the input '{self.feature_input}' (it was bound with "
                            "dims giving their widths): pass them, model(x)")

    def forward(self, x: torch.Tensor | None = None, *extra, **named) -> torch.Tensor:
        refuse_arguments(extra, named)
        self._features_given(x)
        if capturing():
            return self.plain_forward(x, *extra)
        if compiling():   # dynamo takes no sparse CSR matrix (nor OrderedLinear's): the plain form, traced whole
            return self._plain_ops(x, extra)
        self.begin_forward(extra, x)
        return self.run_ops(x)

    def run_ops(self, x) -> torch.Tensor:
        """The forward's ops in program order, each by `exec_op` (a backend's
        fused groups by their anchor), the hoisted ones (`_hoisted`) skipped."""
        env, hoisted = self._hoisted(x)
        kept = list(env.values())
        skip = self.skipped_ops()
        for op in self.ir.main.ops:
            if op.name != "loss" and op not in skip and op not in hoisted:
                self.exec_op(op, env, x)
        out = env[self.ir.main.results[0]]
        # an output that is a kept value or a view of one (a dropout in eval mode returns its input) is
        # returned as a copy: an in-place edit of the output must not reach the next forward
        return out.clone() if _shares_memory(out, kept) else out

    def skipped_ops(self) -> set[Op]:
        """The ops another op's `exec_op` computes (the anchor of their group)."""
        return self._lin_skip | self._skip

    def op_groups(self) -> list[set[Op]]:
        """The op groups that run as one unit (their anchor's `exec_op`)."""
        return [set(r.g.ops) for r in self._lin_anchor.values()] + [fused_ops(a, s) for a, s in self._fused.items()]

    def exec_op(self, op: Op, env: dict, x) -> None:
        """Run `op` (with its group, for an anchor) on this backend: its
        value(s) into `env`."""
        if op in self._lin_anchor:
            env[op.result] = run_linear(self._lin_anchor[op], env)
        elif op in self._spmm:
            a = self._spmm[op]
            h = env[op.operands[0]]
            # (the columns named: a 0-vertex graph's [0, -1] was torch's "cannot reshape tensor of 0 elements")
            env[op.result] = sparse_mm(a, h.reshape(h.shape[0], math.prod(h.shape[1:]))).reshape(h.shape)
        else:
            env[op.result] = self.run_op(op, [env[v] for v in op.operands], x)

    # ---- the ops marked invariant, computed once per features tensor
    @property
    def hoist(self) -> bool:
        """Compute the values the IR marks invariant (no param, no dropout:
        passes/invariant.py) once per features tensor instead of in every
        forward (`_hoisted`); off by default, as PyG's `cached=False`."""
        return self._hoist

    @hoist.setter
    def hoist(self, on) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"model.hoist must be True or False, got {on!r}")
        self._hoist = on
        if not on:
            self._hoist_cache = None   # its memory back

    def _hoisted(self, x) -> tuple[dict, frozenset]:
        """(env holding the kept invariant values, the ops they spare) when
        `hoist` is on, else ({}, nothing): passes/invariant.py marks the ops
        whose value depends on no param and no dropout; the values of those
        that unmarked ops read are computed here by the backend's own ops
        (`exec_op`, so bit-identical to an unhoisted forward) and kept until
        an input they depend on is another tensor (identity), is edited in
        place (torch's version counter), or the module changes dtype or
        device. Not kept while an input requires grad (its gradient flows
        through them) or is an inference tensor (no version counter), and
        not made under torch.inference_mode() (a later training step could
        not save them for its backward): those forwards compute them."""
        if not self.hoist:
            return {}, frozenset()
        plan = self.hoist_plan()
        if not plan.keep:
            return {}, frozenset()
        sources = [self._input_source(op, x) for op in plan.inputs]
        if not all(isinstance(t, torch.Tensor) for t in sources) or any(t.is_inference() for t in sources) or (
                torch.is_grad_enabled() and any(t.requires_grad for t in sources)):
            return {}, frozenset()   # (an inference tensor has no version counter to key on)
        c = self._hoist_cache
        if c is None or not c.holds(sources, self._float):
            if torch.is_inference_mode_enabled():
                return {}, frozenset()   # values made here could never be saved for a later backward
            env: dict = {}
            with torch.no_grad():   # no param, no input requiring grad: nothing to differentiate
                for op in plan.run:
                    self.exec_op(op, env, x)
            c = self._hoist_cache = _HoistCache.of(sources, self._float, {v: env[v] for v in plan.keep})
        return dict(c.values), plan.ops

    def hoist_plan(self) -> "HoistPlan":
        """Which ops `hoist` spares, which values it keeps (computed once)."""
        if self._hoist_plan is None:
            self._hoist_plan = plan_hoist(self.ir, self.op_groups(), self.skipped_ops())
        return self._hoist_plan

    def _input_source(self, op: Op, x):
        """The tensor input op `op` reads (before any dtype or device copy)."""
        name, t = op.attrs["name"], op.result.type
        g = self.gd.graph
        if t.dtype == "i64":
            return g.labels
        if t.domain == "edge":
            return self.gd.edge_env.get(name)
        if name == self.feature_input:
            return g.features if x is None else x
        return g.ndata.get(name)

    def plain_forward(self, x: torch.Tensor | None = None, *extra) -> torch.Tensor:
        """The program's meaning op by op (`run_op`, the reference's), in plain
        torch ops: what every backend's forward runs while torch.export,
        torch.jit.trace or a torch.func transform captures it (backends
        `capturing`), as none of these takes a torch.sparse matrix, an
        autograd.Function with a Python object argument, or a kernel launch.
        The result equals `forward`'s up to float rounding; the order pass's
        backward choice is autograd's here."""
        if self.training and self._draws_masks and (exporting() or torch.jit.is_tracing()):
            raise GdslError("torch.export and torch.jit.trace capture a gdsl module with dropout in eval mode only "
                            "(call model.eval() first): its dropout masks are drawn per training step, outside "
                            "any graph")
        if torch.jit.is_tracing():
            with warnings.catch_warnings():
                # jit.trace warns at the checks of x's and the params' shapes against the bound
                # graph's: those shapes are fixed for the module, so the trace holds for them
                warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
                return self._plain_ops(x, extra)
        return self._plain_ops(x, extra)   # (no catch_warnings: strict torch.export cannot trace it)

    def _plain_ops(self, x, extra: tuple, scalars_only: bool = False) -> torch.Tensor | None:
        """The ops by `run_op` in order; `scalars_only`: only those whose operands are
        python numbers (constants), for `_scalar`, with no forward's bookkeeping."""
        if not scalars_only:
            self.begin_forward(extra, x)
        env: dict[Value, object] = {}
        for op in self.ir.main.ops:
            if scalars_only and (op.name not in _UNARY and op.name not in _BINARY and op.name != "const"
                                 or not all(isinstance(env.get(v), float) for v in op.operands)):
                continue
            if op.name != "loss":
                env[op.result] = ReferenceModule.run_op(self, op, [env[v] for v in op.operands], x)
        return None if scalars_only else env[self.ir.main.results[0]]

    def _mode(self, op: Op) -> str | None:
        """The op's broadcast mode from bind (`broadcast_modes`); an op made after
        bind (linear.py's transposed aggregate) by its attribute, else its shapes."""
        return self._modes.get(op) or op.attrs.get("broadcast")

    def _scalar(self, op: Op, vals: list) -> float:
        """An op of python numbers (`1 - alpha`): computed once, in the
        constants' float dtype as a tensor op would (the value is fixed for the
        module; was float32 after `model.double()` too, so `(1 - a) * t` kept
        float32's rounding of 0.9). torch.compile then reads a constant (was: a
        graph break at the `.item()` of every forward)."""
        hit = self._scalars.get(op)
        if hit is None:
            fn = _UNARY.get(op.name) or _BINARY[op.name]
            dt = getattr(self, "_float", torch.float32)
            hit = self._scalars[op] = float(fn(*(torch.tensor(v, dtype=dt) for v in vals)))
        return hit

    def check_loss_output(self, out) -> None:
        """`out` has the model output's shape, one row per vertex: else a GdslError, not
        torch's error (or silence) deep in the loss."""
        op = self.loss_op
        if op is None:
            raise GdslError("the program has no train block with a loss")
        want = tuple(int(d) for d in op.operands[0].type.shape)
        shape = f"[rows, {', '.join(map(str, want))}]"
        if not isinstance(out, torch.Tensor):   # was: "... is [rows, 7], got ndarray"
            raise GdslError(f"loss: the model's output must be a torch.Tensor of shape {shape}, got "
                            f"{type(out).__name__}")
        if out.layout != torch.strided or out.device.type == "meta":   # was torch's error deep in the loss
            what = "a tensor on the meta device (no data)" if out.device.type == "meta" else f"a {out.layout} tensor"
            raise GdslError(f"loss: the model's output must be a dense tensor with data, got {what}")
        if out.dim() < 1 or tuple(out.shape[1:]) != want:
            raise GdslError(f"loss: the model's output must be {shape}, got {list(out.shape)}")
        if not out.is_floating_point():   # was: torch's "... not implemented for 'Long'"
            raise GdslError(f"loss: the model's output must be a float tensor (the logits), got {out.dtype}")
        if out.shape[0] != self.graph.num_nodes:
            raise GdslError(f"loss: the model's output has {out.shape[0]} rows, but the graph bound to the module "
                            f"has {self.graph.num_nodes} vertices (the loss's target and mask have one row per vertex)")

    def loss_mask(self) -> torch.Tensor | None:
        """The loss's mask from the bound graph (None for `mask = all`); a
        graph without it is an error here, not a loss over every vertex (a
        module bound for inference needs no masks)."""
        name = self.loss_op.attrs["mask"]
        if name == "all":
            return None
        mask = self.graph.masks.get(name)
        if mask is None:
            have = ", ".join(self.graph.masks) or "none"
            raise GdslError(f"model.loss(): the train block's loss uses mask '{name}', but the graph bound to the "
                            f"module has masks: {have}")
        if not bool(mask.any()):   # else the mean over no row: a NaN loss
            raise GdslError(f"model.loss(): mask '{name}' selects no vertex")
        return mask

    def loss_target(self) -> torch.Tensor:
        """The loss's target input (the labels, or a data input for mse/bce)."""
        op = self.loss_op.operands[1].owner
        target = self._input(op, None)
        if target is None:
            raise GdslError(f"model.loss(): the graph bound to the module has no labels for input '{op.attrs['name']}'")
        return target

    def check_class_ids(self, target: torch.Tensor, out: torch.Tensor) -> None:
        """module() checked the labels; they may have been edited in place since
        (the module shares the tensor). An id out of [0, C) was torch's IndexError,
        and -100, cross_entropy's ignore_index, dropped the vertex silently."""
        fn = self.loss_op.attrs["fn"]
        if fn not in ("cross_entropy", "nll", "bce") or target.is_floating_point() or not target.numel():
            return
        c = 2 if fn == "bce" else out.shape[-1]   # bce's labels are 0 / 1 (was: not checked again; helper-60)
        lo, hi = int(target.min()), int(target.max())
        if lo < 0 or hi >= c:
            bad = lo if lo < 0 else hi
            at = int((target == bad).nonzero()[0])
            raise GdslError(f"model.loss(): label {bad} of vertex {at} is not a class id 0..{c - 1} (the graph's "
                            "labels were changed in place after module() checked them)")

    def loss(self, out: torch.Tensor) -> torch.Tensor:
        """The train block's loss of model output `out`."""
        op = self.loss_op
        self.check_loss_output(out)
        target = self.loss_target()
        self.check_class_ids(target, out)
        mask = self.loss_mask()
        if mask is not None:
            out, target = out[mask], target[mask]
        fn = op.attrs["fn"]
        if fn == "cross_entropy":
            return F.cross_entropy(out, target)
        if fn == "nll":
            return F.nll_loss(out, target)
        if fn == "bce" and target.is_floating_point():   # an f32 target of the output's shape ([] ~ [1])
            return F.binary_cross_entropy_with_logits(out, target.to(out.dtype).reshape(out.shape))
        if fn == "bce":
            flat = out.reshape(target.shape[0], math.prod(out.shape[1:]))
            return F.binary_cross_entropy_with_logits(flat.squeeze(-1),
                                                      target.to(out.dtype))
        return F.mse_loss(out, target.to(out.dtype).reshape(out.shape))

    # ---- one op
    def run_op(self, op: Op, vals: list, x):  # noqa: C901 - a dispatch table
        n = op.name
        t = op.result.type
        if n == "input":
            return self._input(op, x)
        if n == "param":
            return self.param(op.attrs["name"])
        if n == "const":
            return float(op.attrs["value"])
        if n in ("vertex_const", "edge_const", "degree"):
            return self._consts[op]
        if n in _UNARY:
            return _UNARY[n](vals[0]) if isinstance(vals[0], torch.Tensor) else self._scalar(op, vals)
        if n == "leaky_relu":
            return F.leaky_relu(vals[0], op.attrs["slope"])
        if n in _BINARY:
            if not isinstance(vals[0], torch.Tensor) and not isinstance(vals[1], torch.Tensor):
                return self._scalar(op, vals)
            a, b = _binary_operands(op, vals, self._mode(op))
            if n in ("max", "min"):
                a = a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=b.dtype)
                b = b if isinstance(b, torch.Tensor) else torch.tensor(b, dtype=a.dtype)
            return _BINARY[n](a, b)
        if n == "matmul":
            return gemm.matmul(vals[0], vals[1])
        if n == "dot":
            a, b = op.operands
            rank = max(len(a.type.shape), len(b.type.shape)) - 1
            lead = (self._mode(op) or broadcast_mode(a.type.shape[:-1], b.type.shape[:-1])) != "trail"
            xa = self._align_keep_last(vals[0], a.type, rank, lead)
            xb = self._align_keep_last(vals[1], b.type, rank, lead)
            return (xa * xb).sum(-1)
        if n == "reduce":
            d = op.attrs["axis"] % len(op.operands[0].type.shape) + _rows(op.operands[0].type)
            return vals[0].sum(d) if op.attrs["fn"] == "sum" else vals[0].mean(d)
        if n in ("softmax", "log_softmax"):
            d = op.attrs["axis"] % len(t.shape) + _rows(t)
            return (torch.softmax if n == "softmax" else torch.log_softmax)(vals[0], d)
        if n == "concat":
            if _rows(t):  # a param operand is repeated on every row
                rows = next(v.shape[0] for v, o in zip(vals, op.operands) if _rows(o.type))
                vals = [v if _rows(o.type) else v.expand(rows, *v.shape) for v, o in zip(vals, op.operands)]
            return torch.cat(vals, dim=-1)
        if n == "flatten":
            return vals[0].reshape(vals[0].shape[0], math.prod(vals[0].shape[1:])) if _rows(t) else vals[0].reshape(-1)
        if n == "reshape":
            shape = list(self._reshape_to[op])
            return vals[0].reshape([vals[0].shape[0]] + shape) if _rows(t) else vals[0].reshape(shape)
        if n == "dropout":
            return self.dropout(op, vals[0])
        if n == "sync":
            return vals[0]  # one process: the partial result is complete
        if n == "src":
            return vals[0].index_select(0, self.src_index)
        if n == "dst":
            return vals[0].index_select(0, self.dst_index)
        if n == "gather":
            return self.gather(vals[0], op.attrs["reduce"], op.attrs["to"])
        if n == "edge_softmax":
            return self.edge_softmax(vals[0])
        if n == "aggregate":
            return self.aggregate(op, vals)
        if n == "sddmm":
            return self.sddmm(op, vals)
        if n == "gat_aggregate":
            el, er, z = vals
            s = F.leaky_relu(el.index_select(0, self.src_index) + er.index_select(0, self.dst_index), op.attrs["slope"])
            alpha = self.edge_softmax(s)
            m = alpha.reshape(alpha.shape + (1,)) * z.index_select(0, self.src_index)
            return self.gather(m, "sum", "dst")
        raise NotImplementedError(f"reference backend cannot run op '{n}' (was the module optimised?)")

    def begin_forward(self, extra: tuple = (), x=None) -> None:
        """What every backend's forward does first: refuse PyG-style extra
        arguments, run the layers' forward pre-hooks (`LayerParams`), let the
        constants follow params loaded in another dtype, check the features
        `x` the caller passed, count the step. A forward refused here has
        counted no step, so it changes no later dropout mask (was: a refused
        `model(x)` advanced the step; helper-73)."""
        refuse_arguments(extra)
        for holder in self.children():
            if isinstance(holder, LayerParams):
                for hook in list(holder._forward_pre_hooks.values()):
                    hook(holder, ())   # was: never run, so a pruned weight was never recomputed
        self._follow_params()
        if x is not None and self.feature_input is not None:
            check_features(x, self.gd.graph.num_nodes, self._feature_shape, self.dtype, self.input_device,
                           convert=False)
        if self.training:   # (an eval forward calls nothing eager: torch.compile(fullgraph=True) takes it whole)
            self.count_step()

    def _follow_params(self) -> None:
        """`load_state_dict(sd, assign=True)` can bring params of the other float
        dtype: the compiled constants follow them (was: a dtype error in torch
        or, for some widths, a float64 module with float32 constants)."""
        dtypes = {p.dtype for p in self.parameters()}
        if len(dtypes) > 1:
            raise GdslError(f"the params have mixed dtypes ({', '.join(sorted(str(d).removeprefix('torch.') for d in dtypes))}); "
                            "convert the module with model.float() or model.double()")
        if dtypes and (d := dtypes.pop()) != self._float:
            if d not in (torch.float32, torch.float64):
                raise GdslError(f"a gdsl module runs in float32 or float64, but its params are "
                                f"{str(d).removeprefix('torch.')}; convert it with model.float() or model.double()")
            self._retype_consts(d)
            self._converted()

    def _retype_consts(self, dtype: torch.dtype) -> None:
        """Compute the constants again from the graph in a new float dtype
        (float32 values converted would keep float32 rounding)."""
        dev = {k: t.device for k, t in self._consts.items()}   # Triton keeps them on its device
        self._float = dtype
        self._scalars.clear()   # computed in the old dtype (`_scalar`)
        self._hoist_cache = None
        self._consts = {k: t.to(dev[k]) for k, t in self._make_consts(dtype).items()}
        self._spmm = self._plan_spmm(self.ir)

    # ---- dropout with partition-invariant masks
    @eager_under_torch_compile   # its counters are Python ints: traced, each step would be a recompile
    def count_step(self) -> None:
        """A forward in train mode is the next training step, whose number
        seeds the dropout masks. When the program has a dropout, the forward
        also draws one number from torch's global generator: the same number
        again means the generator was put back to where it stood at that
        step's forward, which is how `torch.utils.checkpoint` recomputes a
        forward in the backward, so the recompute runs with that step's masks
        (was: it counted as a new step and drew new masks: wrong gradients,
        silently). Re-seeding torch to the same state before forwards thus
        repeats masks, as with nn.Dropout."""
        if not self.training:
            return
        if self._draws_masks:
            try:
                draw = int(torch.randint(2 ** 62, (), dtype=torch.int64).item())
            except RuntimeError as e:
                if "vmap" not in str(e):
                    raise
                # (was torch's raw "vmap: It looks like you're calling .item()"; helper-7)
                raise GdslError("a train-mode forward under torch.func.vmap needs randomness='same' (a module's "
                                "dropout masks are one per training step, shared by the batch; "
                                "randomness='different' would draw one per element), or model.eval()") from None
            known = self._step_of_draw.get(draw)
            if known is not None:
                self._mask_step = known
                return
            self.step += 1
            self._step_of_draw[draw] = self.step
            if len(self._step_of_draw) > 256:   # the recent steps (a checkpointed forward is recomputed soon)
                del self._step_of_draw[next(iter(self._step_of_draw))]
        else:
            self.step += 1
        self._mask_step = self.step

    @property
    def dropout_seed(self) -> int:
        """The seed of the dropout masks (`gdsl run --seed`); set `model.dropout_seed = s`."""
        return self._seed_value

    @dropout_seed.setter
    def dropout_seed(self, s) -> None:
        # checked where it is set (was: a numpy int overflowed at the next training forward, "Python int
        # too large to convert to C long"; a float or a tensor failed there too)
        try:
            v = operator.index(s) if not isinstance(s, bool) else None
        except TypeError:
            v = None
        if v is None or not 0 <= v < 2 ** 63:
            raise GdslError(f"dropout_seed must be an integer in [0, 2**63), got {s!r}")
        self._seed_value = v

    def mask_seed(self, op: Op) -> int:
        """The seed of op's dropout mask at this step (the whole tensor's mask)."""
        return (self.dropout_seed * 1_000_003 + self._mask_step * 10_007 + self._op_index[op]) % (2 ** 63)

    def dropout(self, op: Op, x):
        """Inverted dropout whose mask depends only on (seed, the step's key, op,
        row, column): the mask of the whole [N or E, ...] tensor is drawn from a
        generator seeded with those, so a distributed run (which keeps some rows
        or columns) draws exactly the single-process mask."""
        p = op.attrs["p"]
        if not self.training or p == 0.0 or not isinstance(x, torch.Tensor):
            return x
        y = x * self._keep(op, x, p)
        # the scale in place: the same numbers as `x * keep / (1 - p)` without a second [N, F] tensor
        return y.div_(1.0 - p) if y.is_floating_point() else y / (1.0 - p)

    @eager_under_torch_compile   # the step's seed is read eagerly: no recompile per step under torch.compile
    def _keep(self, op: Op, x: torch.Tensor, p: float) -> torch.Tensor:
        return self.dropout_keep(op, x, torch.Generator().manual_seed(self.mask_seed(op)), p)

    def dropout_keep(self, op: Op, x: torch.Tensor, gen: torch.Generator, p: float) -> torch.Tensor:
        """The keep mask of `x`: u >= p for u = torch.rand(x.shape, generator=gen),
        as bools, or as 0/1 floats written over u (a float32 CPU tensor that
        autograd will not save: x * mask then converts no bool mask to
        floats; the same products bit for bit)."""
        u = torch.rand(x.shape, generator=gen)
        return u.ge_(p) if float_mask(x) else u >= p

    # ---- fused ops, by their unfused meaning (the oracle for every backend)
    def aggregate(self, op: Op, vals: list):
        return self.gather(self.messages(op, vals), op.attrs["reduce"], op.attrs["to"])

    def messages(self, op: Op, vals: list) -> torch.Tensor:
        """The [E, ...] messages of an aggregate op (what its gather reduces)."""
        msg, to = op.attrs["msg"], op.attrs["to"]
        if msg == "copy_edge":
            return vals[0]
        x = vals[0].index_select(0, self.src_index if to == "dst" else self.dst_index)
        if msg == "copy_src":
            return x
        xt, wt = op.operands[0].type.with_domain("edge"), op.operands[1].type
        a, b = _align_pair(x, xt, vals[1], wt, self._mode(op))
        return _BINARY[msg](a, b)

    def sddmm(self, op: Op, vals: list):
        a = vals[0].index_select(0, self.src_index)
        b = vals[1].index_select(0, self.dst_index)
        ta, tb = (v.type.with_domain("edge") for v in op.operands)
        if op.attrs["op"] == "dot":
            rank = max(len(ta.shape), len(tb.shape)) - 1
            lead = (self._mode(op) or broadcast_mode(ta.shape[:-1], tb.shape[:-1])) != "trail"
            return (self._align_keep_last(a, ta, rank, lead) * self._align_keep_last(b, tb, rank, lead)).sum(-1)
        xa, xb = _align_pair(a, ta, b, tb, self._mode(op))
        return _BINARY[op.attrs["op"]](xa, xb)

    @staticmethod
    def _align_keep_last(x, t: Type, rank: int, lead: bool):
        if not isinstance(x, torch.Tensor):
            return x
        r = _rows(t)
        fs = list(x.shape[r:-1])
        pad = [1] * (rank - len(fs))
        new = (fs + pad) if lead else (pad + fs)
        rows = list(x.shape[:r]) if r else [1]
        return x.reshape(rows + new + [x.shape[-1]])

    def gather(self, m: torch.Tensor, reduce: str, to: str) -> torch.Tensor:
        idx = self.dst_index if to == "dst" else self.src_index
        n = self.gd.num_nodes
        out_shape = (n,) + tuple(m.shape[1:])
        if reduce in ("sum", "mean"):
            out = m.new_zeros(out_shape).index_add(0, idx, m)
            if reduce == "mean":
                deg = torch.bincount(idx, minlength=n).clamp(min=1).to(m.dtype)
                out = out / deg.reshape((n,) + (1,) * (m.dim() - 1))
            return out
        return scatter_extremum(m, idx, n, reduce)

    def edge_softmax(self, s: torch.Tensor) -> torch.Tensor:
        """softmax of s over each destination's incoming edges (LANGUAGE.md):
        gather-max, scatter-exp, gather-sum, scatter-divide."""
        n = self.gd.num_nodes
        idx = self.dst_index.reshape((-1,) + (1,) * (s.dim() - 1)).expand_as(s)
        mx = s.new_full((n,) + tuple(s.shape[1:]), float("-inf")).scatter_reduce(0, idx, s.detach(), "amax", include_self=True)
        e = torch.exp(s - mx.index_select(0, self.dst_index))
        denom = e.new_zeros((n,) + tuple(s.shape[1:])).index_add(0, self.dst_index, e)
        return e / denom.index_select(0, self.dst_index)


def float_mask(x: torch.Tensor) -> bool:
    """Whether x's dropout mask is kept as 0/1 float32 rather than bools: a
    float32 CPU tensor whose mask autograd will not save (one it saves for
    x's gradient stays 1 byte an entry)."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and not (x.requires_grad and torch.is_grad_enabled())


class HoistPlan:
    """What `ReferenceModule._hoisted` does for one module on one backend.

    ops: the ops marked invariant that the forward skips while the kept
    values hold (a backend group with an unmarked op is not skipped: it runs
    whole, each forward); keep: the values of those ops that other ops read
    (or the result); run: the ops, in program order, that compute `keep`
    (their groups' anchors; leaves included); inputs: the `input` ops among
    them (what the kept values are keyed on)."""

    def __init__(self, ops: frozenset, keep: list, run: list, inputs: list) -> None:
        self.ops, self.keep, self.run, self.inputs = ops, keep, run, inputs


def plan_hoist(module: Module, groups: list[set[Op]], skipped: set[Op]) -> HoistPlan:
    f = module.main
    found = kept_invariants(module, groups, skipped)   # a group runs whole; never split a group
    if found is None:
        return HoistPlan(frozenset(), [], [], [])
    marked, keep = found
    need: set[Op] = set()
    todo = [v.owner for v in keep]
    while todo:
        op = todo.pop()
        if op is None or op in need:
            continue
        need.add(op)
        todo.extend(v.owner for v in op.operands)
    run = [op for op in f.ops if op in need and op not in skipped]
    return HoistPlan(frozenset(marked), keep, run, [op for op in run if op.name == "input"])


def _shares_memory(t: torch.Tensor, others: list) -> bool:
    """Whether tensor `t` lies in the memory of one of `others`."""
    if not others or not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.numel() == 0:
        return False
    p = t.untyped_storage().data_ptr()
    return any(isinstance(o, torch.Tensor) and o.layout == torch.strided and o.numel()
               and o.untyped_storage().data_ptr() == p for o in others)


class _HoistCache:
    """The kept values and what they were computed from: weak references to
    the input tensors (so a freed tensor's id reused by a new one is never
    taken for it) with their version counters, and the module's float dtype."""

    def __init__(self, refs: list, versions: list, dtype: torch.dtype, values: dict) -> None:
        self.refs, self.versions, self.dtype, self.values = refs, versions, dtype, values

    @classmethod
    def of(cls, sources: list, dtype: torch.dtype, values: dict) -> "_HoistCache":
        return cls([weakref.ref(t) for t in sources], [t._version for t in sources], dtype, values)

    def holds(self, sources: list, dtype: torch.dtype) -> bool:
        return dtype == self.dtype and all(r() is t and v == t._version
                                           for r, v, t in zip(self.refs, self.versions, sources))
