"""The in-memory graph: a directed edge list plus vertex and edge data.

Edges run `src -> dst`; `gather` reduces each vertex's incoming edges. All
tensors are torch tensors: `src`, `dst` int64 [E]; `features` float32
[N, F]; `labels` int64 [N]; masks bool [N] by name (`train`, `val`, `test`);
`edata` holds per-edge inputs by name.
"""
from __future__ import annotations

import functools
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from gdsl.diagnostics import GdslError, GdslWarning


class DataWarning(GdslWarning):
    """A warning about the data (a loaded file, a graph built from arrays):
    legal input that is likely not what was meant, such as masks that share
    vertices. A `GdslWarning`, so the CLI prints it as one of its own
    (`gdsl: warning: ...`, never raised under PYTHONWARNINGS=error) and a
    filter on `gdsl.GdslWarning` covers it; `str()` is the message."""

    def __init__(self, message: str) -> None:
        UserWarning.__init__(self, message)
        self.diagnostic, self.source = None, None

    @property
    def rendered(self) -> str:
        return f"gdsl: warning: {self}"


# The class count C = max label + 1 sizes the model's [N, C] output; label ids
# beyond this are ids that were never made compact, not classes.
MAX_CLASSES = 2 ** 24


@dataclass(eq=False)   # a graph is equal to itself only (was: == raised on tensor fields; helper-73)
class Graph:
    src: torch.Tensor
    dst: torch.Tensor
    num_nodes: int
    features: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    edata: dict[str, torch.Tensor] = field(default_factory=dict)
    ndata: dict[str, torch.Tensor] = field(default_factory=dict)
    name: str = "graph"
    source: str | None = None  # the file it was loaded from, for messages

    # -- the masks under their usual attribute names
    # (assigning one sets `masks[name]`, as `data.train_mask = ...` does in PyG)
    @property
    def train_mask(self) -> torch.Tensor | None:
        return self.masks.get("train")

    @train_mask.setter
    def train_mask(self, mask) -> None:
        self._set_mask("train", mask)

    @property
    def val_mask(self) -> torch.Tensor | None:
        return self.masks.get("val")

    @val_mask.setter
    def val_mask(self, mask) -> None:
        self._set_mask("val", mask)

    @property
    def test_mask(self) -> torch.Tensor | None:
        return self.masks.get("test")

    @test_mask.setter
    def test_mask(self, mask) -> None:
        self._set_mask("test", mask)

    def _set_mask(self, name: str, mask) -> None:
        if mask is None:
            self.masks.pop(name, None)
        else:
            self.masks[name] = mask

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())

    @property
    def num_classes(self) -> int:
        return int(self.labels.max()) + 1 if self.labels is not None and self.labels.numel() else 0

    def __repr__(self) -> str:
        f = None if self.features is None else tuple(self.features.shape)
        return f"Graph({self.name}: N={self.num_nodes}, E={self.num_edges}, features={f}, masks={list(self.masks)})"

    # -- constructors
    @classmethod
    def from_edges(cls, src, dst, num_nodes: int | None = None, *, features=None, labels=None,
                   train_mask=None, val_mask=None, test_mask=None, masks: dict | None = None,
                   edata: dict | None = None, ndata: dict | None = None, name: str = "graph",
                   where: str = "graph", copy: bool = True) -> "Graph":
        """Build a graph from edge lists (numpy arrays, lists or tensors); validated.
        `edata` / `ndata`: per-edge / per-vertex data by name, read by the
        program's edge inputs and its vertex inputs after the first.
        The graph holds its own copies of the given arrays; `copy=False` lets
        it share those already of its dtype (as `torch.from_numpy` does): no
        second copy of a large feature matrix, but changes to one are seen
        by the other."""
        for what, x in (("src", src), ("dst", dst)):
            if x is None:   # (was: "dst: object arrays are not accepted", for PyG's from_edges(edge_index, None))
                raise GdslError(f"{where}: {what} is None: from_edges(src, dst, ...) takes the two endpoint arrays; "
                                "for a PyG edge_index [2, E] write from_edges(edge_index[0], edge_index[1], ...) "
                                "or use Graph.from_pyg(data)")
        own = functools.partial(_as_tensor, where=where, copy=copy)
        src_t = own(src, torch.int64, "src", ids=True)
        dst_t = own(dst, torch.int64, "dst", ids=True)
        feats = None if features is None else own(features, torch.float32, "features")
        inferred = num_nodes is None and feats is None   # N from the edges: the largest id + 1
        if num_nodes is None:
            num_nodes = feats.shape[0] if feats is not None else int(max(src_t.max(), dst_t.max())) + 1 if src_t.numel() else 0
        if isinstance(num_nodes, torch.Tensor) and num_nodes.ndim == 0 and num_nodes.dtype in _INT_DTYPES:
            num_nodes = int(num_nodes)   # a 0-d integer tensor
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, numbers.Integral) or num_nodes < 0:
            raise GdslError(f"{where}: num_nodes must be an integer >= 0, got {num_nodes!r}")
        if num_nodes >= 2 ** 63:   # (was: an id of 2**63 - 1 made max id + 1 wrap to a negative num_nodes)
            raise GdslError(f"{where}: num_nodes {num_nodes} (the largest vertex id + 1, when not given) does not "
                            "fit in int64")
        for what, d in (("masks", masks), ("edata", edata), ("ndata", ndata)):
            if d is not None and not isinstance(d, dict):
                raise GdslError(f"{where}: {what} must be a dict of name -> tensor, got {type(d).__name__}")
            if d is not None and any(not isinstance(k, str) for k in d):
                raise GdslError(f"{where}: the names in {what} must be strings, got {[k for k in d if not isinstance(k, str)]}")
        all_masks = {k: v for k, v in (masks or {}).items() if v is not None}   # None: not given, as train_mask=None
        for k, v in (("train", train_mask), ("val", val_mask), ("test", test_mask)):
            if v is not None:
                if k in all_masks:   # (was: {k}_mask kept, masks[k] dropped silently)
                    raise GdslError(f"{where}: the {k} mask is given twice, as masks['{k}'] and as {k}_mask")
                all_masks[k] = v
        g = cls(src_t, dst_t, int(num_nodes), feats,
                None if labels is None else own(labels, torch.int64, "labels"),
                {k: own(v, torch.bool, f"{k} mask") for k, v in all_masks.items()},
                {k: own(v, torch.float32, f"edge data '{k}'") for k, v in (edata or {}).items()},
                {k: own(v, torch.float32, f"vertex data '{k}'") for k, v in (ndata or {}).items()},
                name=name)
        try:
            g.validate(where)
        except GdslError as e:
            if inferred and "per vertex (" in str(e):   # vertices after the last edge's ids (helper-36)
                raise GdslError(f"{e} (without num_nodes or features, N is the largest vertex id in the edges "
                                "+ 1; pass num_nodes=N)") from None
            raise
        _warn_sparse_labels(g.labels, where)
        _warn_overlapping_masks(g.masks, where)
        return g

    @classmethod
    def from_dgl(cls, g, *, feature_key: str = "feat", label_key: str = "label") -> "Graph":
        """Convert a `dgl.DGLGraph` (homogeneous); masks from ndata `*_mask`."""
        if not all(hasattr(g, k) for k in ("edges", "ndata", "num_nodes")):   # was: AttributeError 'edges'
            raise GdslError(f"dgl graph: expected a dgl.DGLGraph, got {type(g).__name__} (use gdsl.Graph.from_edges "
                            "for arrays)")
        src, dst = g.edges()
        nd = g.ndata
        for what, key, default in (("feature_key", feature_key, "feat"), ("label_key", label_key, "label")):
            if key != default and key not in nd.keys():   # asked for by name: not silently None (helper-73)
                raise GdslError(f"dgl graph: {what}={key!r}, but g.ndata has no '{key}' (it has: "
                                f"{', '.join(sorted(nd.keys())) or 'nothing'})")
        masks = {k[: -len("_mask")]: nd[k] for k in nd.keys() if k.endswith("_mask")}
        return cls.from_edges(src, dst, g.num_nodes(), features=nd.get(feature_key), labels=nd.get(label_key),
                              masks=masks, name="dgl", where="dgl graph")

    @classmethod
    def from_pyg(cls, data, split: int = 0) -> "Graph":
        """Convert a `torch_geometric.data.Data` (edge_index row 0 = source).

        Masks of shape [N, S] (several splits, as PyG's geom-gcn Planetoid
        and WikiCS give them) use column `split`; labels of shape [N, 1]
        (OGB's) are read as [N]."""
        if hasattr(data, "edge_types") and hasattr(data, "node_types"):
            raise GdslError("pyg data: a HeteroData graph is not supported; convert it with data.to_homogeneous()")
        if isinstance(data, dict):   # (was: "edge_index must be a [2, E] tensor ..., got none" for a dict holding one)
            raise GdslError("pyg data: expected a torch_geometric.data.Data, got a dict (build one: "
                            "torch_geometric.data.Data(**d), or use gdsl.Graph.from_edges)")
        if isinstance(data, (torch.Tensor, np.ndarray)):   # (was: "..., got none"; helper-73)
            raise GdslError(f"pyg data: expected a torch_geometric.data.Data, got a {type(data).__name__} (for an "
                            "edge_index alone: gdsl.Graph.from_edges(edge_index[0], edge_index[1], num_nodes, ...))")
        ei = getattr(data, "edge_index", None)
        if isinstance(ei, np.ndarray) and ei.ndim == 2 and ei.shape[0] == 2:
            ei = torch.from_numpy(ei)   # (was: "must be a [2, E] tensor ..., got shape [2, E]")
        if ei is None or getattr(ei, "dim", lambda: 0)() != 2 or ei.shape[0] != 2:
            got = "none" if ei is None else f"shape {list(getattr(ei, 'shape', []))}"
            raise GdslError(f"pyg data: edge_index must be a [2, E] tensor (row 0 = source), got {got}")
        masks = {k: getattr(data, f"{k}_mask") for k in ("train", "val", "test")
                 if getattr(data, f"{k}_mask", None) is not None}
        masks.update(_other_vertex_masks(data, masks))
        if split and not any(isinstance(m, torch.Tensor) and m.dim() == 2 for m in masks.values()):
            raise GdslError(f"pyg data: split {split} asked for, but the masks have one split (no [N, S] mask)")
        masks = {k: _split_column(m, split, f"{k}_mask") for k, m in masks.items()}
        y = getattr(data, "y", None)
        ndata = {}
        if isinstance(y, torch.Tensor) and y.is_floating_point():   # a regression target: `input y : vertex f32[k]`
            ndata["y"], y = y, None   # as given (was: "labels: expected integer ids", with no way to read it)
        if isinstance(y, torch.Tensor) and y.dim() == 2 and y.shape[1] == 1:
            y = y.view(-1)   # OGB's [N, 1] class ids
        edata = {}
        if getattr(data, "edge_weight", None) is not None:
            edata["weight"] = data.edge_weight  # as a file's `edge_weight` array: `input weight : edge f32`
        if getattr(data, "edge_attr", None) is not None:
            edata["attr"] = data.edge_attr      # [E] or [E, k]: `input attr : edge f32` or `edge f32[k]` (was: dropped)
        return cls.from_edges(ei[0], ei[1], getattr(data, "num_nodes", None), features=getattr(data, "x", None),
                              labels=y, masks=masks, edata=edata, ndata=ndata, name="pyg", where="pyg data")

    # -- checks
    def validate(self, where: str = "graph") -> None:
        """Refuse inconsistent data with a message naming the problem: what
        `from_edges` builds, and what is assigned to the fields afterwards
        (`Program.module` validates the graph it binds)."""
        self._check_types(where)
        n, e = self.num_nodes, self.num_edges
        if self.src.shape != self.dst.shape or self.src.dim() != 1:
            raise GdslError(f"{where}: src and dst must be 1-d of the same length, got {tuple(self.src.shape)} and {tuple(self.dst.shape)}")
        if e:
            lo = int(min(self.src.min(), self.dst.min()))
            hi = int(max(self.src.max(), self.dst.max()))
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                # ids 1..N: numbered from 1 (MATLAB, some edge-list files); said so (helper-36)
                one = " (the ids run from 1 to N: numbered from 1? subtract 1)" if lo == 1 and hi == n else ""
                raise GdslError(f"{where}: edge endpoint {bad} is out of range for {n} vertices{one}")
        if self.features is not None:
            if self.features.dim() != 2 or self.features.shape[0] != n:
                hint = " (one feature per vertex is [N, 1]: features[:, None])" if self.features.shape == (n,) else ""
                raise GdslError(f"{where}: features must be [N={n}, F], got {list(self.features.shape)}{hint}")
            if not _all_finite(self.features):
                bad = int((~torch.isfinite(self.features)).any(1).nonzero()[0])
                raise GdslError(f"{where}: features contain NaN or inf (first at vertex {bad})")
        if self.labels is not None:
            if self.labels.shape != (n,):
                raise GdslError(f"{where}: labels must have one entry per vertex ({n}), got shape {list(self.labels.shape)}"
                                + _one_hot_hint(self.labels))
            if n and int(self.labels.min()) < 0:
                lo = int(self.labels.min())
                at = int((self.labels == lo).nonzero()[0, 0])
                raise GdslError(f"{where}: labels must be class ids >= 0, found {lo} (at vertex {at}); for vertices "
                                "without a label give any class id (0) and leave them out of the masks: the loss "
                                "and the scores read the masked vertices only")
            if n and int(self.labels.max()) >= MAX_CLASSES:
                raise GdslError(f"{where}: labels must be class ids 0..C-1 with C at most {MAX_CLASSES:,}; found "
                                f"{int(self.labels.max()):,} (relabel them compactly, e.g. np.unique(labels, "
                                "return_inverse=True))")
        for k, m in self.masks.items():
            if m.shape != (n,):
                raise GdslError(f"{where}: mask '{k}' must have one entry per vertex ({n}), got shape {list(m.shape)}")
        for k, v in self.ndata.items():
            if v.dim() < 1 or v.shape[0] != n:
                raise GdslError(f"{where}: vertex data '{k}' must have one row per vertex ({n}), got shape {list(v.shape)}")
            if v.is_floating_point() and not _all_finite(v):   # where, as for the features (helper-3)
                bad = int((~torch.isfinite(v.reshape(n, -1) if n else v)).any(1).nonzero()[0, 0])
                raise GdslError(f"{where}: vertex data '{k}' contains NaN or inf (first at vertex {bad})")
        for k, v in self.edata.items():
            if v.dim() < 1 or v.shape[0] != e:
                raise GdslError(f"{where}: edge data '{k}' must have one row per edge ({e}), got shape {list(v.shape)}")
            if not _all_finite(v):
                raise GdslError(f"{where}: edge data '{k}' contains NaN or inf")

    def _check_types(self, where: str) -> None:
        """The fields' types (the module docstring's): a field assigned after
        construction is not converted, so a wrong type is refused here rather
        than failing, or silently meaning something else, inside a backend
        (an integer mask would index rows)."""
        n = self.num_nodes
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise GdslError(f"{where}: num_nodes must be an integer >= 0, got {n!r}")

        def tensor(what: str, t, kind: str) -> None:
            ok = isinstance(t, torch.Tensor) and (
                t.dtype == torch.bool if kind == "bool" else
                (t.is_floating_point() or t.dtype in _INT_DTYPES or t.dtype == torch.bool) if kind == "real" else
                t.dtype in _INT_DTYPES)
            if not ok:
                want = {"bool": "a bool tensor (a 0/1 tensor: .bool())", "real": "a tensor of real numbers",
                        "ids": "an integer tensor of vertex ids", "classes": "an integer tensor of class ids"}[kind]
                got = f"a {t.dtype} tensor" if isinstance(t, torch.Tensor) else type(t).__name__
                raise GdslError(f"{where}: {what} must be {want}, got {got}")
            _check_dense(t, what, where)   # a field assigned after from_edges (was: torch's error from the checks)

        tensor("src", self.src, "ids")
        tensor("dst", self.dst, "ids")
        if self.features is not None:
            tensor("features", self.features, "real")
        if self.labels is not None:
            tensor("labels", self.labels, "classes")
        for what, d, kind in (("mask", self.masks, "bool"), ("edge data", self.edata, "real"),
                              ("vertex data", self.ndata, "real")):
            if not isinstance(d, dict):
                field_ = {"mask": "masks", "edge data": "edata", "vertex data": "ndata"}[what]
                raise GdslError(f"{where}: {field_} must be a dict of name -> tensor, got {type(d).__name__}")
            for k, v in d.items():
                tensor(f"{what} '{k}'", v, kind)

    # -- transformations used when a program binds the graph
    def snapshot(self) -> "Graph":
        """What a module keeps at `module(graph)`: the edge lists copied (int64),
        integer or bool features and vertex/edge data converted to float32, the
        other tensors shared in new dicts. Reassigning `graph.features`,
        `graph.masks[...]` or `graph.ndata[...]` later, or editing `graph.src`
        in place, does not reach it (in-place changes to the shared tensors do)."""
        def real(t):
            return t if t is None or t.is_floating_point() else t.to(torch.float32)
        return Graph(self.src.to(torch.int64, copy=True), self.dst.to(torch.int64, copy=True), self.num_nodes,
                     real(self.features), None if self.labels is None else self.labels.to(torch.int64),
                     dict(self.masks), {k: real(v) for k, v in self.edata.items()},
                     {k: real(v) for k, v in self.ndata.items()}, self.name, self.source)

    def with_options(self, self_loops: bool = False, symmetric: bool = False) -> "Graph":
        """Apply `graph G (symmetric, self_loops)`: add reverse edges (deduplicated),
        then replace any existing self loops by exactly one per vertex (edge data 1.0)."""
        src, dst, ed = self.src, self.dst, dict(self.edata)
        if symmetric:
            src, dst = torch.cat([src, dst]), torch.cat([dst, src])
            ed = {k: torch.cat([v, v]) for k, v in ed.items()}
            key = src * max(self.num_nodes, 1) + dst
            uniq, first = _first_occurrence(key)
            src, dst = src[first], dst[first]
            ed = {k: v[first] for k, v in ed.items()}
        if self_loops:
            keep = src != dst
            loop = torch.arange(self.num_nodes)
            src, dst = torch.cat([src[keep], loop]), torch.cat([dst[keep], loop])
            ed = {k: torch.cat([v[keep], torch.ones((self.num_nodes,) + tuple(v.shape[1:]), dtype=v.dtype)]) for k, v in ed.items()}
        if not (symmetric or self_loops):
            return self
        return Graph(src, dst, self.num_nodes, self.features, self.labels, self.masks, ed, self.ndata, self.name,
                     self.source)

    def in_degree(self) -> torch.Tensor:
        return torch.bincount(self.dst, minlength=self.num_nodes).to(torch.float32)

    def out_degree(self) -> torch.Tensor:
        return torch.bincount(self.src, minlength=self.num_nodes).to(torch.float32)


def _row_blocks(t: torch.Tensor, chunk: int = 1 << 22):
    """(first row, block) over `t`, about `chunk` elements a block: checks of a
    large feature matrix make no [N, F] temporaries (helper-8: loading peaked
    at 4x the data)."""
    if t.dim() == 0 or t.numel() <= chunk:
        yield 0, t
        return
    rows = max(1, chunk // max(1, t[0].numel()))
    for i in range(0, t.shape[0], rows):
        yield i, t[i:i + rows]


def _all_finite(t: torch.Tensor) -> bool:
    """torch.isfinite(t).all(), a block of rows at a time."""
    if not t.is_floating_point() and not t.is_complex():
        return True
    return all(bool(torch.isfinite(b).all()) for _, b in _row_blocks(t))


def _warn_sparse_labels(labels: torch.Tensor | None, where: str) -> None:
    """C is the largest label + 1: one stray label (an id, a -1 written as
    2**20) gives the model that many outputs, and the first sign was an
    out-of-memory error naming neither the labels nor the file (helper-8)."""
    if labels is None or labels.numel() == 0:
        return
    c = int(labels.max()) + 1
    if c <= 2:
        return
    seen = int(torch.unique(labels).numel())
    if 2 * seen <= c:
        at = int((labels == c - 1).nonzero()[0])
        warnings.warn(f"{where}: labels: C = {c:,} classes (the largest label + 1, {c - 1:,} at vertex {at}), but "
                      f"only {seen:,} distinct labels occur: the model gets {c:,} outputs; relabel them compactly "
                      "(np.unique(labels, return_inverse=True))", DataWarning, stacklevel=3)


def _warn_overlapping_masks(masks: dict, where: str) -> None:
    """Masks train, val and test that share vertices: legal, but a score on
    one is then not held out from the other (test accuracy counting vertices
    the loss trained on), and PyG's and DGL's splits are disjoint, so it is
    said once, naming every pair that overlaps (helper-36). Two masks that
    both select every vertex are a graph without a split, as a smoke test
    writes one, and are not named."""
    names = [k for k in ("train", "val", "test") if isinstance(masks.get(k), torch.Tensor)]
    pairs, shares = [], set()
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = masks[a] & masks[b]
            shared = int(both.sum())
            if shared and shared < both.numel():   # both every vertex: no split, chosen (a smoke test), not a leak
                shares.add((a, b))
                first = int(both.nonzero()[0, 0])
                pairs.append(f"'{a}' and '{b}' share " + ("1 vertex" if shared == 1 else f"{shared:,} vertices")
                             + f" ({'the first is ' if shared > 1 else ''}vertex {first})")
    if pairs:
        trained = [b for b in ("test", "val") if ("train", b) in shares]
        held = [f"the {' and '.join(trained)} accurac{'y counts' if len(trained) == 1 else 'ies count'} vertices "
                "the model trained on"] * bool(trained) \
            + ["the best-val epoch is picked on test vertices"] * (("val", "test") in shares)
        warnings.warn(DataWarning(
            f"{where}: the masks overlap: {'; '.join(pairs)}. Allowed, but then {', and '.join(held)}: not a "
            "held-out score (the usual splits, as PyG's and DGL's, are disjoint)"),
            stacklevel=3)


def _other_vertex_masks(data, have: dict) -> dict:
    """The `NAME_mask` attributes of a PyG Data beyond train/val/test that are
    vertex masks, 1-d bool of one entry per vertex (as a file's and DGL's
    `*_mask` are kept; was: dropped). Others are not vertex masks (an
    `edge_mask` [E], an Explanation's `node_mask` [N, F]) and are left alone."""
    keys = getattr(data, "keys", None)   # Data.keys() in PyG 2.x, a property before
    try:
        keys = list(keys() if callable(keys) else keys or [])
    except TypeError:
        return {}
    x = getattr(data, "x", None)
    n = getattr(data, "num_nodes", None) or (x.shape[0] if isinstance(x, torch.Tensor) and x.dim() else None)
    out = {}
    for k in keys:
        if not (isinstance(k, str) and k.endswith("_mask") and k[:-5].isidentifier() and k[:-5] not in have):
            continue
        m = getattr(data, k, None)
        if isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.dim() == 1 and m.shape[0] == n:
            out[k[:-5]] = m
    return out


def _split_column(mask, split: int, what: str):
    """Column `split` of an [N, S] mask (PyG's layout of several splits)."""
    if isinstance(split, bool) or not isinstance(split, numbers.Integral) or split < 0:
        raise GdslError(f"pyg data: split must be an integer >= 0, got {split!r}")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return mask   # one mask for every split (WikiCS's test_mask)
    if split >= mask.shape[1]:
        raise GdslError(f"pyg data: split {split} is not available in {what} of shape {list(mask.shape)}")
    return mask[:, split]


def _first_occurrence(key: torch.Tensor):
    """Indices of the first occurrence of each distinct key, in original order."""
    uniq, inverse = torch.unique(key, return_inverse=True)
    first = torch.full((uniq.numel(),), key.numel(), dtype=torch.int64)
    first.scatter_reduce_(0, inverse, torch.arange(key.numel()), reduce="amin")
    return uniq, torch.sort(first).values


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _as_tensor(x, dtype: torch.dtype, what: str, ids: bool = False, where: str = "graph",
               copy: bool = True) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        _check_dense(x, what, where)
        t = x.detach().cpu()
        borrowed = t.data_ptr() == x.data_ptr()
    elif ids and isinstance(x, (list, tuple)) and any(isinstance(v, bool) for v in x):
        raise GdslError(f"{where}: {what}: expected integer ids, got booleans")
    else:
        try:
            arr = np.asarray(x)
        except ValueError as e:   # a ragged list (was numpy's raw ValueError)
            raise GdslError(f"{where}: {what}: not a rectangular array ({e})") from None
        if arr.dtype == object:
            raise GdslError(f"{where}: {what}: object arrays are not accepted")
        if arr.size == 0 and arr.dtype == np.float64 and dtype != torch.float32:
            arr = arr.astype(np.int64)  # an empty list
        if arr.dtype.kind not in "biuf":
            raise GdslError(f"{where}: {what}: expected numbers, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:   # longdouble: torch has none (was torch's TypeError)
            arr = arr.astype(np.float64)
        if not arr.dtype.isnative:   # big-endian data (HDF5, MATLAB, FITS): torch takes native order only
            arr = arr.astype(arr.dtype.newbyteorder("="))   # (was: a raw ValueError, an internal error in gdsl run)
        arr = np.asarray(arr, order="C")   # (ascontiguousarray makes a 0-d array [1])
        borrowed = isinstance(x, np.ndarray) and np.may_share_memory(arr, x)
        t = torch.from_numpy(arr)
    if dtype == torch.int64 and t.numel() == 0 and t.is_floating_point():
        t = t.long()   # torch.tensor([]) is float32: an empty edge list
    if t.dtype == torch.uint64 and bool((t.view(torch.int64) < 0).any()):   # would wrap to a negative id
        raise GdslError(f"{where}: {what}: value {int(t.numpy().max())} does not fit in int64")
    if t.is_complex() and dtype != torch.int64:
        # was: cast with torch's warning, dropping the imaginary part
        raise GdslError(f"{where}: {what} must be real numbers, got {t.dtype}")
    if dtype == torch.int64 and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
        hint = ""
        if not ids and t.is_floating_point() and _one_hot_hint(t):
            # float one-hot rows (np.eye(C)[y], F.one_hot(y).float()): the class ids, not .long() (helper-37)
            raise GdslError(f"{where}: {what}: expected integer class ids, one per vertex, got {t.dtype} of shape "
                            f"{list(t.shape)}{_one_hot_hint(t)}")
        if not ids and t.is_floating_point():   # labels (helper-36): whole numbers stored as float, or a target
            finite = torch.isfinite(t)
            whole = bool((t[finite] == t[finite].round()).all())
            hint = ("; a real-valued target is not a class label: pass it as ndata={'NAME': ...}, read by a "
                    "vertex input NAME (with a loss such as mse)" if not whole else
                    "; they are whole numbers: pass them as integers (labels.long(), labels.astype(np.int64))"
                    if bool(finite.all()) else
                    f"; they are whole numbers and NaN (first at vertex {int((~finite).nonzero()[0, 0])}: unlabelled?): "
                    "give unlabelled vertices any class id (0), leave them out of the masks, and pass the labels as "
                    "integers")
        raise GdslError(f"{where}: {what}: expected integer {'ids' if ids else 'class ids'}, got {t.dtype}{hint}")
    if dtype == torch.bool and t.dtype != torch.bool:
        if t.is_floating_point() or not bool(((t == 0) | (t == 1)).all()):
            # (an integer mask of 0s and 1s is taken; say so: was "got torch.int64" for [2, 0, 3, 0])
            ids_hint = ("; if these are vertex ids (an index array, as OGB's split_idx), make a mask: "
                        "mask = torch.zeros(N, dtype=torch.bool); mask[ids] = True"
                        if not t.is_floating_point() and t.dim() == 1 and bool((t >= 0).all()) else "")
            raise GdslError(f"{where}: {what}: expected a boolean mask (bool, or integers 0/1), got {t.dtype}"
                            + ("" if t.is_floating_point() else " with values other than 0 and 1") + ids_hint)
    if dtype == torch.float32 and t.dtype == torch.float64 and t.numel():
        _check_fits_float32(t, what, where)
    out = t.to(dtype)
    if copy and borrowed and out.data_ptr() == t.data_ptr() and out.numel():
        out = out.clone()   # the graph's own copy (docs/cli.md): `graph.features.mul_(2)` left the caller's array alone
    return out


def _one_hot_hint(t: torch.Tensor) -> str:
    """Labels given as one-hot rows [N, C] (helper-37: was told to pass them as integers, still one-hot)."""
    if t.dim() != 2 or t.shape[1] < 2 or not t.numel() or t.is_complex():
        return ""
    if bool(((t == 0) | (t == 1)).all() and (t.sum(1) == 1).all()):
        return " (one-hot rows: pass the class ids, labels.argmax(1))"
    return ""


def _check_dense(x: torch.Tensor, what: str, where: str) -> None:
    """A tensor the checks and backends can read: strided, with data."""
    if x.layout != torch.strided or x.is_nested:
        # was: a raw torch error ("Could not run 'aten::ne.Scalar' ... SparseCPU") from the checks
        raise GdslError(f"{where}: {what} must be a dense tensor, got a {'nested' if x.is_nested else x.layout} "
                        f"one; convert it with .to_dense()")
    if x.device.type == "meta":
        raise GdslError(f"{where}: {what} is on the meta device (no data)")


def _check_fits_float32(t: torch.Tensor, what: str, where: str) -> None:
    """A finite float64 value beyond float32's range would become inf in the
    conversion (and be reported as "NaN or inf", which the data is not)."""
    for start, block in _row_blocks(t):   # a block of rows at a time (no float64 [N, F] temporaries)
        big = torch.isfinite(block) & (block.abs() > torch.finfo(torch.float32).max)
        if not bool(big.any()):
            continue
        at = start + (big.reshape(block.shape[0], -1).any(1).nonzero()[0].item() if block.dim() else 0)
        v = float(block[big][0])
        raise GdslError(f"{where}: {what} value {v:g} (row {at}) does not fit in float32, whose largest is "
                        f"{torch.finfo(torch.float32).max:.4g}; scale the data")
