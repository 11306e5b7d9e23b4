"""Bind a program to a graph: symbolic dims from the data, data checks."""
from __future__ import annotations

from gdsl.diagnostics import CompileError, Diagnostic, GdslError
from gdsl.frontend import ast
from gdsl.compiler import untrainable_error   # (in compiler since helper-33: gdsl plan imports no torch)
from gdsl.frontend.checker import CheckedProgram
from gdsl.graph.graph import Graph


def unread_data(prog: CheckedProgram, graph: Graph) -> list[str]:
    """Warnings for data the program does not read: a file's `edge_NAME` and
    `node_NAME` arrays without an input of that name, and masks it does not
    declare (beyond the usual train/val/test), so that a misspelt
    `trian_mask` or an unread edge weight does not pass unnoticed (was:
    silence, so gcn.gd on a file with `edge_weight` trained unweighted
    without a word; helper-70)."""
    where = graph.source or graph.name
    out = []
    edge_inputs = {name for name, d in prog.inputs.items() if d.domain == "edge"}
    unread = [k for k in graph.edata if k not in edge_inputs]
    if unread and all(k in graph.edata for k in edge_inputs):   # else binding's error names them
        arrays = ", ".join(f"'edge_{k}'" for k in unread)
        decl = "; ".join(f"input {k} : edge f32" for k in unread)
        out.append(f"{where}: edge data {arrays} is not read: the program declares no edge input of that name "
                   f"({decl} reads it)")
    vertex_inputs = [name for name, d in prog.inputs.items() if d.domain == "vertex" and d.type.dtype != "label"]
    labels = [name for name, d in prog.inputs.items() if d.type.dtype == "label"]
    first = vertex_inputs[0] if vertex_inputs and graph.features is not None else None
    for k in graph.ndata:
        if k in labels:   # (was: "declares no vertex input of that name", for a label input Y; helper-3)
            out.append(f"{where}: vertex data 'node_{k}' is not read: '{k}' is the program's label input, which "
                       "reads the labels")
        elif k == first:
            out.append(f"{where}: vertex data 'node_{k}' is not read: '{k}' is the program's first vertex input, "
                       "which reads the features")
        elif k not in vertex_inputs:
            out.append(f"{where}: vertex data 'node_{k}' is not read: the program declares no vertex input of that "
                       f"name (input {k} : vertex f32[...] reads it)")
    masks = [m for m in graph.masks if m not in prog.masks and m not in ("train", "val", "test")]
    if masks:
        declared = ", ".join(prog.masks) or "none"
        out.append(f"{where}: mask{'s' if len(masks) > 1 else ''} {', '.join(repr(m + '_mask') for m in masks)} "
                   f"{'are' if len(masks) > 1 else 'is'} not read: the program declares no mask of "
                   f"{'those names' if len(masks) > 1 else 'that name'} (it declares: {declared})")
    return out


def bind_dims(prog: CheckedProgram, graph: Graph, given: dict[str, int] | None = None) -> dict[str, int]:
    """Values of the symbolic dims (`F`, `C`, `N`, `E`, ...) from the graph.

    A vertex f32 input binds its dims from `graph.features` (the first such
    input) or `graph.ndata[name]`; a label input binds its class count from
    the labels (max + 1); an edge input from `graph.edata[name]`. `given`
    dims (`Program.module(graph, dims={"C": 7})`) bind first: the data must
    agree with them, except that a given class count only bounds the labels
    (a graph that lacks the top classes, or has no labels, binds with it).
    """
    # N binds (a param may be f32[N, d], or a static arg N); E does
    # not: it changes with the graph options, and the lowering refuses it.
    where = graph.source or graph.name
    given = _check_given(prog, given or {}, where)
    if given.get("N", graph.num_nodes) != graph.num_nodes:
        raise GdslError(f"{where}: dims gives N={given['N']}, but the graph has {graph.num_nodes} vertices")
    dims: dict[str, int] = {**given, "N": graph.num_nodes}
    first_feature = True
    for name, d in prog.inputs.items():
        if d.type.dtype == "label" and isinstance(d.type.shape[0], ast.Name) and d.type.shape[0].id in given:
            c = d.type.shape[0].id
            if graph.labels is not None and graph.num_classes > given[c]:
                raise GdslError(f"{where}: dims gives {c}={given[c]}, but the labels of input '{name}' go up to "
                                f"{graph.num_classes - 1}")
            continue
        if d.type.dtype == "label":
            if graph.labels is None:
                y = graph.ndata.get("y") if graph.name == "pyg" else None
                if y is not None:   # from_pyg keeps a float data.y as a vertex input 'y' (a regression target)
                    raise GdslError(f"{graph.source or graph.name}: the program's input '{name}' needs labels, but the "
                                    f"graph's data.y is floating point ({str(y.dtype).replace('torch.', '')}), kept as "
                                    "a vertex input 'y' (a regression target); for class labels convert it "
                                    "first: data.y = data.y.long()")
                raise GdslError(f"{graph.source or graph.name}: the program's input '{name}' needs labels, but the graph "
                                "has none (an .npz file gives them as the array 'labels')")
            declared = d.type.shape[0]
            if isinstance(declared, ast.Number):   # label[7]: labels must lie in [0, 7), not use every class
                if graph.num_classes > declared.value:
                    raise GdslError(f"{graph.source or graph.name}: input '{name}' is declared label[{declared.value}], "
                                    f"but the data has labels up to {graph.num_classes - 1}")
                continue
            if graph.num_classes == 0:   # not a dim of 0 further on, reported as the program's
                if graph.num_nodes == 0:   # (was: "... has 0 vertices and no label", labels given)
                    raise GdslError(f"{graph.source or graph.name}: the graph has no vertices: the program's input "
                                    f"'{name}' binds its class count from the labels, and there are none")
                raise GdslError(f"{graph.source or graph.name}: the program's input '{name}' needs labels, but the "
                                f"graph has {graph.num_nodes} vertices and no label")
            _bind(dims, declared, graph.num_classes, name, graph, given)
            continue
        if d.domain == "vertex":
            if first_feature:
                data = graph.features
                first_feature = False
                if data is None:
                    shape = d.type.shape or []
                    if shape and all(isinstance(x, ast.Number) or (isinstance(x, ast.Name) and x.id in given)
                                     for x in shape):
                        continue   # dims gives its widths: the features come at the forward, model(x)
                        # (a structure-only graph whose x is computed, e.g. by an nn.Embedding; helper-69)
                    raise GdslError(f"{graph.source or graph.name}: the program's input '{name}' needs vertex "
                                    "features, but the graph has none (or give its widths, "
                                    "module(graph, dims={...}), and pass them: model(x))")
            else:
                data = graph.ndata.get(name)
                if data is None:
                    # (was the bare first sentence, after the loader's "ignoring array 'T'": helper-70)
                    have = ", ".join(graph.ndata) or "none"
                    raise GdslError(f"{graph.source or graph.name}: no vertex data '{name}' for the program's input "
                                    f"'{name}' (have: {have}); the program's first vertex input reads the features, "
                                    f"a further one graph.ndata['{name}']: the array 'node_{name}' of an .npz file, "
                                    "or Graph.from_edges(..., ndata={...})")
        else:
            data = graph.edata.get(name)
            if data is None:
                have = ", ".join(graph.edata) or "none"
                raise GdslError(f"{graph.source or graph.name}: no edge data '{name}' for the program's edge input "
                                f"'{name}' (have: {have}; an .npz file gives it as the array 'edge_{name}')")
        shape = d.type.shape or []
        # where the program declares it (a data mismatch names the file and the line; helper-71)
        at = f" (at {d.span})" if getattr(d, "span", None) is not None and d.span.line else ""
        if len(shape) != data.dim() - 1:
            raise GdslError(f"{graph.source or graph.name}: input '{name}' is declared with {len(shape)} feature "
                            f"ax{'i' if len(shape) == 1 else 'e'}s{at}, the data has shape {list(data.shape)}")
        for axis, (dexpr, size) in enumerate(zip(shape, data.shape[1:]), 1):
            if int(size) == 0:
                raise GdslError(f"{graph.source or graph.name}: input '{name}' has an empty feature axis (its data "
                                f"has shape {list(data.shape)}; axis {axis} is 0)")
            _bind(dims, dexpr, int(size), name, graph, given, at)
    return dims


def _bind(dims: dict[str, int], dexpr: ast.Expr, size: int, name: str, graph: Graph, given=(), at: str = "") -> None:
    if isinstance(dexpr, ast.Number):
        if dexpr.value != size:
            raise GdslError(f"{graph.source or graph.name}: input '{name}' is declared with {dexpr.value}{at} but "
                            f"the data has {size}")
        return
    if not isinstance(dexpr, ast.Name):
        return  # an expression dim: checked by shape inference once the names are bound
    if dexpr.id in given and dims[dexpr.id] != size:
        raise GdslError(f"{graph.source or graph.name}: dims gives {dexpr.id}={dims[dexpr.id]}, but input '{name}' "
                        f"has {size}")
    if dexpr.id in dims and dims[dexpr.id] != size:
        raise GdslError(f"{graph.source or graph.name}: dimension {dexpr.id} is {dims[dexpr.id]} from one input and {size} from '{name}'")
    dims[dexpr.id] = size


def _calls_a_param(prog: CheckedProgram) -> bool:
    """Whether the train block's model names a layer that declares a param (as written: a call in a
    `repeat 0`, or a param its layer does not use, is found when the module is built)."""
    model = prog.models.get(prog.train.model)
    if model is None:
        return True
    names: set[str] = set()

    def walk(x) -> None:
        if isinstance(x, ast.Name):
            names.add(x.id)
        elif isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, ast.Node):
            for k in getattr(x, "__dataclass_fields__", ()):
                if k != "span":
                    walk(getattr(x, k))
    walk(model.body)
    return any(isinstance(st, ast.ParamStmt) for n in names if n in prog.layers for st in prog.layers[n].body)


def check_masks(prog: CheckedProgram, graph: Graph) -> None:
    """Before training (gdsl.train, gdsl run, and its partitioning under --np): the model has
    something to train, and every mask the train block uses is in the graph."""
    cfg = prog.train
    if cfg is None:
        return
    if not _calls_a_param(prog):   # (was: under --np, torch's ValueError from the ranks: an internal error)
        raise untrainable_error(prog)
    # the fields' types first: a mask assigned as a list (`g.train_mask = [...]`) was a raw AttributeError
    graph._check_types(graph.source or graph.name)
    used = ([cfg.loss.mask] if cfg.loss and cfg.loss.mask else []) + [m for _, m in cfg.eval if m]
    missing = list(dict.fromkeys(m for m in used if m not in graph.masks))   # the loss's first, each once
    if missing:
        have = ", ".join(graph.masks) or "none"
        names = ", ".join(f"'{m}'" for m in missing)
        raise GdslError(f"{graph.source or graph.name}: the train block uses mask{'s' if len(missing) > 1 else ''} "
                        f"{names}, but the graph has masks: {have}")
    for m in used:
        if not bool(graph.masks[m].any()):
            raise GdslError(f"{graph.source or graph.name}: mask '{m}' selects no vertex")


def _check_given(prog: CheckedProgram, given: dict, where: str) -> dict[str, int]:
    """`dims=` of `Program.module`: names of the program's symbolic dims
    (or N), each an integer >= 1."""
    import numbers
    if not isinstance(given, dict):
        raise TypeError(f"dims must be a dict of dim name -> int, got {type(given).__name__}")
    known = {"N"} | {e.id for d in prog.inputs.values() for e in (d.type.shape or []) if isinstance(e, ast.Name)}
    out = {}
    for k, v in given.items():
        if k not in known:
            raise GdslError(f"{where}: dims gives '{k}', which is not a dim of the program's inputs "
                            f"(they have: {', '.join(sorted(known))})")
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise GdslError(f"{where}: dims gives {k}={v!r}: a dim is an integer >= 1")
        out[k] = int(v)
    return out
