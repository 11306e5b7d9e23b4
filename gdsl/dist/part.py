"""Per-rank parts of a graph for each distributed strategy, and their files.

A :class:`RankPart` is everything one rank needs and nothing more (each rank
loads only its own file). A vertex value holds the ``n_own`` rows this rank
computes (owned, or replicas it keeps consistent), in the order of
``owned_rows``; ``dst`` indexes them. ``src`` indexes the local space of
``n_local`` rows: the computed rows plus copies of remote rows the edges read
(halo rows, or the blocks CAGNET 1.5D broadcasts); ``own_pos`` says where
the computed rows sit in it. Edges are local ids; ``eid`` are global edge
ids (of the graph after the program's `graph` options), used for the
partition-invariant dropout masks of edge tensors.

Strategies (the schedule's `partition` values, see LANGUAGE.md):

  replicate            every rank the whole graph (redundant); nothing moves but Y
  rows(hash|random|block|metis), edge_cut(metis)
                       1D: a vertex's incoming edges live with its owner
                       (CAGNET §IV-A); halo rows are fetched per SpMM
  rows_replicated(c)   1.5D on a (P/c) x c grid (CAGNET §IV-B, Algorithm 2)
  vertex_cut           Libra edge partition, split vertices (DistGNN §5.1-5.3)
  features             P3: layer 1 on feature slices of all vertices, then 1D rows (P3 §3.1-3.2)
  redistribute(R_A)    RDM (R_A = P without an argument: A on every rank; fewer
                       replicas: row panels of A, §III-E), all-to-all between
                       row and column slicing (RDM §III)
"""
from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gdsl.diagnostics import GdslError
from gdsl.graph import partition as gp
from gdsl.graph.graph import Graph

FORMAT = "gdsl-part-1"
STRATEGIES = ("replicate", "rows", "edge_cut", "rows_replicated", "vertex_cut", "features", "redistribute")
EXACT_HALO = ("alltoallv", "bcast")


@dataclass(frozen=True)
class Spec:
    """A distributed plan to execute: the strategy and its arguments."""

    strategy: str
    arg: str | int | None = None    # rows: hash|random|block|metis; rows_replicated: c
    delay: int | str = 0            # vertex_cut: 0 (cd-0), r (cd-r) or "none" (0c)
    halo: str = "alltoallv"         # rows: alltoallv of the needed rows, or bcast of whole blocks
    seed: int = 0

    @property
    def exact(self) -> bool:
        return not (self.strategy == "vertex_cut" and self.delay != 0)

    def describe(self) -> str:
        s = self.strategy + (f"({self.arg})" if self.arg is not None else "")
        if self.strategy in ("rows", "edge_cut"):
            s += f" halo={self.halo}"
        if self.strategy == "vertex_cut":
            s += {0: " delay=0 (cd-0)", "none": " delay=none (0c, approximate)"}.get(
                self.delay, f" delay={self.delay} (cd-{self.delay}, approximate)")
        return s

    def to_json(self) -> dict:
        return {"strategy": self.strategy, "arg": self.arg, "delay": self.delay, "halo": self.halo, "seed": self.seed}


def parse_spec(text: str, *, delay=0, halo: str = "alltoallv", seed: int = 0) -> Spec:
    """'rows', 'rows(random)', 'rows_replicated(2)', 'vertex_cut(libra)', ..."""
    t = text.strip().replace(" ", "")
    name, paren, rest = t.partition("(")
    if paren and (not rest.endswith(")") or ")" in rest[:-1] or "(" in rest):
        raise GdslError(f"partition '{text}': write NAME or NAME(ARG), e.g. rows(hash)")
    arg = rest[:-1] if paren else None
    if arg == "":   # was: rows() read as rows
        raise GdslError(f"partition '{text}': empty parentheses; write {name} or {name}(ARG)")
    if name not in STRATEGIES:
        raise GdslError(f"unknown partition '{text}' (executable: {', '.join(STRATEGIES)})")
    if halo not in EXACT_HALO:
        raise GdslError(f"unknown halo exchange '{halo}' (expected {' or '.join(EXACT_HALO)})")
    if name == "rows":
        arg = arg or "hash"
        if arg not in ("hash", "random", "block", "metis"):
            raise GdslError(f"rows({arg}): expected hash, random, block or metis")
    elif name == "edge_cut":
        if arg not in (None, "metis"):
            raise GdslError(f"edge_cut({arg}): an edge cut is METIS's (edge_cut or edge_cut(metis)); "
                            f"for another row split use rows({arg})")
        name, arg = "rows", "metis"
    elif name == "rows_replicated":
        try:
            arg = int(arg or 2)
        except ValueError:
            raise GdslError(f"rows_replicated({arg}): the replication factor c must be an integer") from None
    elif name == "vertex_cut":
        if arg not in (None, "libra"):
            raise GdslError(f"vertex_cut({arg}): only libra is implemented")
        arg = None
    elif name == "redistribute":
        arg = None if arg in (None, "P") else arg
        if arg is not None:
            try:
                arg = int(arg)
            except ValueError:
                raise GdslError(f"redistribute({arg}): the number of replicas of A, R_A, must be an integer "
                                "(or P)") from None
            if arg < 1:
                raise GdslError(f"redistribute({arg}): R_A must be at least 1")
    elif arg is not None:
        raise GdslError(f"partition '{name}' takes no argument")
    if delay not in (0, "none") and not (isinstance(delay, int) and delay > 0):
        raise GdslError(f"delay must be a non-negative integer or none, got {delay!r}")
    if delay != 0 and name != "vertex_cut":
        # name the partition as given (edge_cut is rows(metis) by now)
        raise GdslError(f"delay = {delay} applies to vertex_cut (DistGNN cd-r / 0c) only, not to {text.strip()}")
    return Spec(name, arg, delay, halo, seed)


@dataclass
class RankPart:
    spec: Spec
    rank: int
    size: int
    num_nodes: int                 # N of the whole graph
    num_edges: int                 # E of the whole graph (after the program's graph options)
    gid: np.ndarray                # [n_local] global vertex ids
    n_own: int
    src: np.ndarray                # [e_local] local ids
    dst: np.ndarray
    eid: np.ndarray                # [e_local] global edge ids
    in_degree: np.ndarray          # [n_local] float32, of the whole graph
    out_degree: np.ndarray
    counted: np.ndarray            # [n_own] bool: rows whose loss and metrics this rank counts
    features: np.ndarray | None    # [n_own, F] (features: [N, F_slice])
    labels: np.ndarray | None      # [n_own]
    masks: dict[str, np.ndarray]   # [n_own] bool
    edata: dict[str, np.ndarray]   # [e_local, ...]
    # peer tables (P arrays each; meaning per strategy, see the builders)
    send_idx: list[np.ndarray] = field(default_factory=list)
    recv_idx: list[np.ndarray] = field(default_factory=list)
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    ndata: dict[str, np.ndarray] = field(default_factory=dict)   # [n_own, ...]: vertex inputs after the first

    @property
    def n_local(self) -> int:
        return int(self.gid.size)

    @property
    def own_pos(self) -> np.ndarray:
        """Local ids of the rows this rank computes (1D plans interleave them
        with the halo in global order; elsewhere they come first)."""
        return self.extra["own_pos"] if "own_pos" in self.extra else np.arange(self.n_own)

    @property
    def owned_rows(self) -> np.ndarray:
        """Global ids of the rows this rank computes, in row order."""
        return self.gid[self.own_pos]


# ---------------------------------------------------------------- builders

def _np(t) -> np.ndarray:
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


def _common(g: Graph):
    src, dst = _np(g.src).astype(np.int64), _np(g.dst).astype(np.int64)
    indeg = np.bincount(dst, minlength=g.num_nodes).astype(np.float32)
    outdeg = np.bincount(src, minlength=g.num_nodes).astype(np.float32)
    return src, dst, indeg, outdeg


def _vertex_data(g: Graph, rows: np.ndarray):
    feats = None if g.features is None else _np(g.features)[rows]
    labels = None if g.labels is None else _np(g.labels)[rows]
    masks = {k: _np(m)[rows] for k, m in g.masks.items()}
    return feats, labels, masks


def _local_ids(n: int, gids: np.ndarray) -> np.ndarray:
    lid = np.full(n, -1, dtype=np.int64)
    lid[gids] = np.arange(gids.size, dtype=np.int64)
    return lid


def owners(spec: Spec, g: Graph, P: int) -> np.ndarray:
    n = g.num_nodes
    if spec.arg == "hash" or spec.strategy != "rows":
        return gp.rows_hash(n, P) if spec.strategy == "rows" else gp.rows_block(n, P)
    if spec.arg == "random":
        return gp.rows_random(n, P, spec.seed)
    if spec.arg == "block":
        return gp.rows_block(n, P)
    return gp.edge_cut_metis(_np(g.src), _np(g.dst), n, P, spec.seed)


def build_parts(spec: Spec, g: Graph, P: int) -> list[RankPart]:
    """All P parts of `g` (the graph after the program's options) for `spec`."""
    if P < 1:
        raise GdslError(f"the number of ranks must be at least 1, got {P}")
    build = {"replicate": _replicate, "rows": _rows, "rows_replicated": _rows_replicated,
             "vertex_cut": _vertex_cut, "features": _features, "redistribute": _redistribute}[spec.strategy]
    parts = build(spec, g, P)
    for pr in parts:   # a further vertex input: the rows whose labels the rank holds, its owned rows
        pr.ndata = {k: _np(v)[pr.owned_rows] for k, v in g.ndata.items()}
    return parts


def _replicate(spec: Spec, g: Graph, P: int) -> list[RankPart]:
    src, dst, indeg, outdeg = _common(g)
    n = g.num_nodes
    allv = np.arange(n, dtype=np.int64)
    f, y, m = _vertex_data(g, allv)
    return [RankPart(spec, r, P, n, src.size, allv, n, src, dst, np.arange(src.size), indeg, outdeg,
                     np.full(n, r == 0), f, y, m, {k: _np(v) for k, v in g.edata.items()}) for r in range(P)]


def _rows_part(spec, g, P, r, owner, src, dst, indeg, outdeg, order_key) -> RankPart:
    """1D: rank r owns the rows with owner == r and every edge into them.
    Halo rows are ordered by (owning rank, global id), so the rows received
    from each peer land contiguously; `send_idx[q]` are the local rows peer q
    needs from r, in q's halo order; `recv_idx[q]` the local ids where r puts
    the rows from q."""
    n = g.num_nodes
    own = np.nonzero(owner == r)[0]
    emask = owner[dst] == r
    eid = np.nonzero(emask)[0]
    s, d = src[eid], dst[eid]
    halo = np.unique(s[owner[s] != r])
    # local ids follow global ids (own and halo rows interleaved), so each
    # row's edges are summed in the single-process order (bitwise-equal SpMM)
    gid = np.union1d(own, halo)
    lid = _local_ids(n, gid)
    recv_idx = [lid[halo[owner[halo] == q]] for q in range(P)]
    f, y, m = _vertex_data(g, own)
    return RankPart(spec, r, P, n, src.size, gid, own.size, lid[s], np.searchsorted(own, d), eid,
                    indeg[gid], outdeg[gid], np.ones(own.size, bool), f, y, m,
                    {k: _np(v)[eid] for k, v in g.edata.items()}, recv_idx=recv_idx, extra={"own_pos": lid[own]})


def _link_halos(parts: list[RankPart]) -> None:
    """send_idx[q] of rank r: r's local ids of the rows q receives from r."""
    P = len(parts)
    for r, pr in enumerate(parts):
        own = pr.owned_rows
        pr.send_idx = [np.searchsorted(own, parts[q].gid[parts[q].recv_idx[r]]) if q != r else np.zeros(0, np.int64)
                       for q in range(P)]


def _rows(spec: Spec, g: Graph, P: int) -> list[RankPart]:
    src, dst, indeg, outdeg = _common(g)
    owner = owners(spec, g, P)
    parts = [_rows_part(spec, g, P, r, owner, src, dst, indeg, outdeg, None) for r in range(P)]
    _link_halos(parts)
    return parts


def _rows_replicated(spec: Spec, g: Graph, P: int) -> list[RankPart]:
    """CAGNET 1.5D (§IV-B, Algorithm 2): rank = i*c + j on a (P/c) x c grid.
    Process row i (a "team") holds block row i of H and of A (all c members);
    member j keeps the edges of block row i whose source is in one of the
    blocks col_blocks[j] it handles in its P/c^2 broadcast stages. Local ids:
    [block i | the blocks col_blocks[j] other than i, in stage order]: in the
    stage where it is the root (q = i) a rank reads its own block in place, as
    Algorithm 2's BCAST root does (was: a second copy of block i after the
    first, so that at c = 1 every rank held N + N/P rows where 1D holds N/P
    and its halo). `extra` records all the stage blocks (the rank takes part
    in every broadcast of its column) and the block starts."""
    c = int(spec.arg)
    src, dst, indeg, outdeg = _common(g)
    n = g.num_nodes
    team, col_blocks = gp.rows_replicated(n, P, c)
    starts = np.concatenate([[0], np.cumsum(np.bincount(team, minlength=P // c))])
    parts = []
    for r in range(P):
        i, j = divmod(r, c)
        own = np.arange(starts[i], starts[i + 1])
        stage = col_blocks[j]
        others = stage[stage != i]
        fetched = np.concatenate([np.arange(starts[q], starts[q + 1]) for q in others]) if others.size \
            else np.zeros(0, np.int64)
        eid = np.nonzero((team[dst] == i) & np.isin(team[src], stage))[0]
        lid_dst = _local_ids(n, own)
        lid_src = np.full(n, -1, np.int64)
        lid_src[own] = np.arange(own.size)   # (used when i is one of the stage blocks)
        lid_src[fetched] = own.size + np.arange(fetched.size)
        gid = np.concatenate([own, fetched])
        f, y, m = _vertex_data(g, own)
        parts.append(RankPart(spec, r, P, n, src.size, gid, own.size, lid_src[src[eid]], lid_dst[dst[eid]], eid,
                              indeg[gid], outdeg[gid], np.full(own.size, j == 0), f, y, m,
                              {k: _np(v)[eid] for k, v in g.edata.items()},
                              extra={"grid": np.array([P // c, c, i, j]), "stage_blocks": stage,
                                     "block_starts": starts}))
    return parts


def _vertex_cut(spec: Spec, g: Graph, P: int) -> list[RankPart]:
    """DistGNN §5.1-5.2: Libra assigns edges to partitions; a vertex is
    replicated on every partition holding one of its edges, one replica is
    its root. Local ids: all replicas this rank holds (sorted by global id).
    `send_idx[q]`: my replicas whose root is q (I am a leaf); `recv_idx[q]`:
    my root vertices that q replicates, in q's order (so the leaf->root and
    root->leaf all-to-alls of DistGNN's split-vertex tree line up)."""
    src, dst, indeg, outdeg = _common(g)
    n = g.num_nodes
    epart = gp.libra(src, dst, n, P, spec.seed)
    verts, root = gp.replicas(src, dst, epart, n, P)
    rf = gp.replication_factor(verts, n)
    parts = []
    for r in range(P):
        gid = verts[r]
        lid = _local_ids(n, gid)
        eid = np.nonzero(epart == r)[0]
        f, y, m = _vertex_data(g, gid)
        parts.append(RankPart(spec, r, P, n, src.size, gid, gid.size, lid[src[eid]], lid[dst[eid]], eid,
                              indeg[gid], outdeg[gid], root[gid] == r, f, y, m,
                              {k: _np(v)[eid] for k, v in g.edata.items()}, meta={"replication_factor": rf}))
    for r, pr in enumerate(parts):
        lid = _local_ids(n, pr.gid)
        pr.send_idx = [lid[pr.gid[root[pr.gid] == q]] if q != r else np.zeros(0, np.int64) for q in range(P)]
        pr.recv_idx = [lid[parts[q].gid[root[parts[q].gid] == r]] if q != r else np.zeros(0, np.int64)
                       for q in range(P)]
    return parts


def _with_full_graph(parts: list[RankPart], g: Graph, cols: bool) -> None:
    """P3 and RDM keep the whole structure on every rank (P3 §3.2: every
    machine computes layer 1 for all vertices on its feature slice; RDM
    §III with R_A = P: A replicated). `extra` gains the whole edge list and
    degrees; with `cols`, `features` becomes this rank's column slice of all rows."""
    src, dst, indeg, outdeg = _common(g)
    P = len(parts)
    slices = gp.feature_slices(0 if g.features is None else g.features.shape[1], P)
    for pr in parts:
        pr.extra.update({"full_src": src, "full_dst": dst, "full_in_degree": indeg, "full_out_degree": outdeg})
        for k, v in g.edata.items():
            pr.extra[f"full_edata.{k}"] = _np(v)
        if cols and g.features is not None:
            lo, hi = slices[pr.rank]
            pr.features = _np(g.features)[:, lo:hi]
            pr.extra["feature_cols"] = np.array([lo, hi])


def _block_rows_with_full_graph(spec: Spec, g: Graph, P: int, cols: bool) -> list[RankPart]:
    """P3 (`cols`: layer-1 feature columns) and RDM: block rows, plus the whole graph."""
    parts = _rows(Spec("rows", "block", 0, spec.halo, spec.seed), g, P)
    for pr in parts:
        pr.spec = spec
    _with_full_graph(parts, g, cols=cols)
    return parts


def _features(spec: Spec, g: Graph, P: int) -> list[RankPart]:
    return _block_rows_with_full_graph(spec, g, P, cols=True)


def _redistribute(spec: Spec, g: Graph, P: int) -> list[RankPart]:
    """RDM §III-E, Fig. 6: the P ranks form a P/R_A x R_A grid; grid row i
    (ranks i R_A .. i R_A + R_A - 1, consecutive row blocks) holds row panel i
    of A, i.e. the in-edges of its rows: R_A replicas of A in all. R_A = P
    (no argument) keeps all of A on every rank."""
    R_A = P if spec.arg is None else int(spec.arg)
    if R_A > P or P % R_A:
        raise GdslError(f"redistribute({R_A}): R_A must divide the number of ranks P = {P}")
    parts = _block_rows_with_full_graph(spec, g, P, cols=False)
    if R_A == P:
        return parts
    starts = np.concatenate([[0], np.cumsum([pr.n_own for pr in parts])]).astype(np.int64)
    for pr in parts:
        i = pr.rank // R_A
        lo, hi = int(starts[i * R_A]), int(starts[(i + 1) * R_A])
        ex = pr.extra
        keep = (ex["full_dst"] >= lo) & (ex["full_dst"] < hi)
        ex["full_src"] = ex["full_src"][keep]
        ex["full_dst"] = ex["full_dst"][keep] - lo   # rows of the panel
        for k in [k for k in ex if k.startswith("full_edata.")]:
            ex[k] = ex[k][keep]
        ex["panel"] = np.array([lo, hi], np.int64)
    return parts


# ---------------------------------------------------------------- files

def part_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"part-{rank}.npz"


def partition_key(parts: list[RankPart]) -> str:
    """Which partition a set of rank files belongs to: a digest of every
    rank's rows (owned first) and edges. Written into each file's header, so
    the ranks can tell that their files were written together (a directory
    refreshed in part, or a stale copy on one node, is refused before the
    halo tables disagree), and recorded in a checkpoint, whose delayed
    pipelines hold one partition's partial sums."""
    import hashlib
    h = hashlib.sha256()
    for pr in parts:
        h.update(np.array([pr.rank, pr.size, pr.n_own], np.int64).tobytes())
        for a in (pr.gid, pr.eid):
            h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def content_digest(arrays: dict) -> str:
    """A digest of a rank file's arrays (names, dtypes, shapes and bytes; not
    the header, which holds it): a file edited after `gdsl partition` wrote it
    is refused at load (helper-13: features scaled in place trained silently
    on them; edge ids moved out of range were an internal error in a rank)."""
    import hashlib
    h = hashlib.blake2b(digest_size=16)
    for k in sorted(arrays):
        if k == "header":
            continue
        v = np.ascontiguousarray(arrays[k])
        h.update(f"{k}:{v.dtype.str}:{v.shape};".encode())
        if v.size:   # (a [0, k] array: memoryview cannot cast a view with a zero in its shape)
            h.update(memoryview(v.reshape(-1)).cast("B"))
    return h.hexdigest()


def save_part(pr: RankPart, directory: str | Path, meta: dict) -> Path:
    """Write one rank's file atomically (write, then rename); plain arrays only."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {"gid": pr.gid, "src": pr.src, "dst": pr.dst, "eid": pr.eid, "in_degree": pr.in_degree,
              "out_degree": pr.out_degree, "counted": pr.counted}
    if pr.features is not None:
        arrays["features"] = pr.features
    if pr.labels is not None:
        arrays["labels"] = pr.labels
    for k, v in pr.masks.items():
        arrays[f"mask.{k}"] = v
    for k, v in pr.edata.items():
        arrays[f"edata.{k}"] = v
    for k, v in pr.ndata.items():
        arrays[f"ndata.{k}"] = v
    for name, lst in (("send_idx", pr.send_idx), ("recv_idx", pr.recv_idx)):
        if lst:
            arrays[f"{name}.counts"] = np.array([a.size for a in lst], np.int64)
            arrays[f"{name}.data"] = np.concatenate(lst).astype(np.int64) if lst else np.zeros(0, np.int64)
    for k, v in pr.extra.items():
        arrays[f"extra.{k}"] = np.asarray(v)
    header = {"format": FORMAT, "rank": pr.rank, "size": pr.size, "num_nodes": pr.num_nodes,
              "num_edges": pr.num_edges, "n_own": pr.n_own, "spec": pr.spec.to_json(), "meta": pr.meta,
              "content": content_digest(arrays), **meta}
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    path = part_path(directory, pr.rank)
    tmp = path.with_name(path.name + ".tmp.npz")   # (write_partition removes what a killed gdsl left)
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    except BaseException:   # a full disk, Ctrl-C, SIGTERM: no half-written file left behind (was: kept)
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_header(path: Path) -> dict:
    try:
        if not zipfile.is_zipfile(path):   # np.load would call any other file "pickled data"
            with open(path, "rb") as f:
                cut = f.read(4) == b"PK\x03\x04"   # a zip's start without its directory: cut short
            raise GdslError(f"{path}: not a gdsl partition file ("
                            + ("an .npz archive cut short or damaged: its zip directory is missing" if cut
                               else "not an .npz archive") + "; write them with `gdsl partition`)")
        with np.load(path, allow_pickle=False) as z:
            h = json.loads(bytes(z["header"]).decode())
    except RecursionError:   # a header nested thousands deep
        raise GdslError(f"{path}: not a gdsl partition file (its header nests too deeply)") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as e:
        raise GdslError(f"{path}: not a gdsl partition file ({e})") from None
    if not isinstance(h, dict) or not all(isinstance(h.get(k), int) for k in ("rank", "size")):
        # was: "'list' object has no attribute 'get'" (an internal error)
        raise GdslError(f"{path}: not a gdsl partition file (its header is not an object with an integer rank "
                        f"and size)")
    return h


def load_part(directory: str | Path, rank: int, size: int, expect: dict | None = None) -> RankPart:
    """Load rank `rank`'s file of a partition written for `size` ranks; a
    missing file or one written for another run (rank count, strategy,
    program or graph in `expect`) is refused, naming the file."""
    path = part_path(directory, rank)
    if not path.exists():
        raise GdslError(f"{path}: missing partition file for rank {rank} (write them with `gdsl partition`)")
    h = read_header(path)
    if h.get("format") != FORMAT:
        raise GdslError(f"{path}: unknown partition format {h.get('format')!r} (expected {FORMAT})")
    if h["rank"] != rank or h["size"] != size:
        raise GdslError(f"{path}: written for rank {h['rank']} of {h['size']}, but this is rank {rank} of {size} "
                        f"(partition again with --np {size})")
    for k, v in (expect or {}).items():
        if h.get(k) != v:
            raise GdslError(f"{path}: partition mismatch: {k} is {h.get(k)!r} in the file, {v!r} for this run "
                            "(partition again with `gdsl partition`)")
    try:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise GdslError(f"{path}: cannot read partition file ({e})") from None

    def lst(name):
        if f"{name}.counts" not in a:
            return []
        return np.split(a[f"{name}.data"], np.cumsum(a[f"{name}.counts"])[:-1])

    try:
        sj = h["spec"]
        spec = Spec(sj["strategy"], sj["arg"], sj["delay"], sj["halo"], sj["seed"])
        part = RankPart(spec, rank, size, h["num_nodes"], h["num_edges"], a["gid"], h["n_own"], a["src"], a["dst"],
                        a["eid"], a["in_degree"], a["out_degree"], a["counted"], a.get("features"), a.get("labels"),
                        {k[5:]: v for k, v in a.items() if k.startswith("mask.")},
                        {k[6:]: v for k, v in a.items() if k.startswith("edata.")},
                        lst("send_idx"), lst("recv_idx"),
                        {k[6:]: v for k, v in a.items() if k.startswith("extra.")}, h.get("meta", {}),
                        {k[6:]: v for k, v in a.items() if k.startswith("ndata.")})
    except (KeyError, TypeError) as e:   # a file of the right format with an entry missing
        raise GdslError(f"{path}: not a complete gdsl partition file (no {e})") from None
    if "content" not in h:   # (files of gdsl before the digest)
        raise GdslError(f"{path}: written by an earlier gdsl, without the digest of its arrays; partition again")
    if h["content"] != content_digest(a):
        raise GdslError(f"{path}: its arrays are not the ones `gdsl partition` wrote (edited or damaged after it "
                        "was written: the digest in its header does not match); partition again")
    if spec.strategy == "rows_replicated" and _rr_local_rows(part) != part.n_local:
        # the 1.5D layout of an earlier gdsl held the rank's own block twice
        raise GdslError(f"{path}: written by an earlier gdsl (its 1.5D layout holds {part.n_local} local rows, "
                        f"this one {_rr_local_rows(part)}); partition again")
    return part


def _rr_local_rows(part: RankPart) -> int:
    """Local rows of a 1.5D part: its block, then the stage blocks but its own."""
    try:
        starts, stage, team = part.extra["block_starts"], part.extra["stage_blocks"], int(part.extra["grid"][2])
        return int(part.n_own + sum(int(starts[q + 1] - starts[q]) for q in stage if int(q) != team))
    except (KeyError, IndexError, TypeError, ValueError):
        return -1
