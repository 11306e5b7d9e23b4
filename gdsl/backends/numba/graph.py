"""CSR structures for the Numba kernels, built once per graph."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch

# A chunk is one unit of parallel work: contiguous rows whose summed cost
# (in-degree + 1 for the row's own write) is about total / nchunks.  Many
# more chunks than threads, so that equal-cost chunks handed out to threads
# balance even on power-law graphs (one huge row is still one chunk: a row is
# never split, as its owner thread is the only writer of its output).
CHUNKS_PER_THREAD = 16
MIN_CHUNK_WORK = 256
_I32_MAX = 2**31 - 1


def _num_threads() -> int:
    try:
        import numba
        return max(1, numba.get_num_threads())
    except ImportError:  # pragma: no cover
        return max(1, os.cpu_count() or 1)


def balanced_chunks(counts: np.ndarray, nthreads: int | None = None,
                    per_thread: int = CHUNKS_PER_THREAD, min_work: int = MIN_CHUNK_WORK) -> np.ndarray:
    """Row boundaries [0, ..., n] of degree-balanced chunks (int64)."""
    n = counts.shape[0]
    if n == 0:
        return np.zeros(1, np.int64)
    nthreads = nthreads or _num_threads()
    cum = np.cumsum(counts.astype(np.int64) + 1)
    total = int(cum[-1])
    nchunks = int(max(1, min(n, per_thread * nthreads, total // max(1, min_work))))
    targets = (np.arange(1, nchunks, dtype=np.float64) * (total / nchunks))
    cuts = np.searchsorted(cum, targets, side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, n), [n]])).astype(np.int64)
    return bounds


BLOCKED_CHUNK_EDGES = 1 << 21   # slots per run of rows in CSR.blocked


@dataclass
class CSR:
    """One direction of the graph. Row r's slots are indptr[r]:indptr[r+1];
    indices[j] is the other endpoint, eid[j] the edge id; within a row, slots
    are sorted by the other endpoint (needed by cache blocking).  The per-edge
    int64 tensors (row_of_edge, col_of_edge) are built on first use only:
    the sum kernels and their backward never need them."""
    nrows: int
    indptr: np.ndarray
    indices: np.ndarray
    eid: np.ndarray
    chunks: np.ndarray
    _blocked: dict = field(default_factory=dict, repr=False)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def degree(self) -> torch.Tensor:
        """[nrows] int64: slots per row."""
        d = self._blocked.get("degree")
        if d is None:
            d = self._blocked["degree"] = torch.from_numpy(np.diff(self.indptr.astype(np.int64)))
        return d

    @property
    def row_of_edge(self) -> torch.Tensor:
        """[E] int64: the row each edge (by edge id) belongs to."""
        r = self._blocked.get("row_of_edge")
        if r is None:
            rows = np.empty(self.num_edges, np.int64)
            rows[self.eid] = np.repeat(np.arange(self.nrows, dtype=np.int64), self.degree.numpy())
            r = self._blocked["row_of_edge"] = torch.from_numpy(rows)
        return r

    @property
    def col_of_edge(self) -> torch.Tensor:
        """[E] int64: the other endpoint of each edge (by edge id)."""
        c = self._blocked.get("col_of_edge")
        if c is None:
            cols = np.empty(self.num_edges, np.int64)
            cols[self.eid] = self.indices
            c = self._blocked["col_of_edge"] = torch.from_numpy(cols)
        return c

    def inv_degree(self, dtype: torch.dtype) -> torch.Tensor:
        """[nrows] 1 / max(1, degree) in `dtype` (mean's row scale)."""
        key = ("inv_degree", dtype)
        t = self._blocked.get(key)
        if t is None:
            t = self._blocked[key] = (1.0 / self.degree.clamp(min=1).to(torch.float64)).to(dtype)
        return t

    def max_col(self) -> int:
        """Largest endpoint in `indices` (-1 without edges)."""
        m = self._blocked.get("max_col")
        if m is None:
            m = self._blocked["max_col"] = int(self.indices.max()) if self.num_edges else -1
        return m

    def active_fraction(self) -> float:
        """Fraction of the endpoints (columns) that occur in some slot."""
        a = self._blocked.get("active")
        if a is None:
            if self.num_edges == 0:
                a = 0.0
            else:
                seen = np.zeros(self.max_col() + 1, dtype=bool)
                seen[self.indices] = True
                a = float(seen.mean())
            self._blocked["active"] = a
        return a

    def blocked(self, block: int) -> np.ndarray:
        """bptr[b, r]: first slot of row r whose endpoint is in source block b
        (blocks of `block` vertices); bptr[nb, r] = indptr[r + 1]."""
        bp = self._blocked.get(block)
        if bp is not None:
            return bp
        n = self.nrows
        ncols = self.max_col() + 1 if self.num_edges else 1
        nb = max(1, -(-ncols // block))
        ptr = self.indptr.astype(np.int64)
        bp = np.empty((nb + 1, n), dtype=self.indptr.dtype)
        bp[0] = self.indptr[:-1]
        # Rows in runs of about BLOCKED_CHUNK_EDGES slots: the per-slot
        # temporaries (row and block of each slot, int64) stay a few tens of
        # MiB; in one piece they were 3 x E x 8 bytes (480 MiB at E = 20M).
        r0 = 0
        while r0 < n:
            r1 = int(np.searchsorted(ptr, ptr[r0] + BLOCKED_CHUNK_EDGES, side="right")) - 1
            r1 = min(n, max(r1, r0 + 1))
            rows = np.repeat(np.arange(r1 - r0, dtype=np.int64), np.diff(ptr[r0:r1 + 1]))
            key = self.indices[ptr[r0]:ptr[r1]] // block
            key = key.astype(np.int64, copy=False) + rows * nb
            cnt = np.bincount(key, minlength=(r1 - r0) * nb).reshape(r1 - r0, nb)
            bp[1:, r0:r1] = ptr[r0:r1][None, :] + np.cumsum(cnt.T, axis=0)
            r0 = r1
        self._blocked[block] = bp
        return bp


def _build_csr(rows: np.ndarray, cols: np.ndarray, n: int, idx_dt, ptr_dt,
               nthreads: int | None) -> CSR:
    """The CSR with rows `rows`: a counting sort, then each row by endpoint
    (codegen.gen_csr_fill).  Its only E-long arrays are the results: a
    stable argsort of a (row * n + col) int64 key, as this was before
    2026-11-21, held three E x 8-byte temporaries (480 MiB at E = 20M) and
    took 2.4-2.8 s for rmat1m's in-CSR against 0.34 s now (kernels loaded)."""
    from gdsl.backends.numba.codegen import get_kernel

    e = int(rows.size)
    counts = np.bincount(rows, minlength=n) if e else np.zeros(n, np.int64)
    indptr = np.zeros(n + 1, dtype=ptr_dt)
    np.cumsum(counts, out=indptr[1:])
    chunks = balanced_chunks(counts, nthreads)
    indices = np.empty(e, dtype=idx_dt)
    eid = np.empty(e, dtype=idx_dt)
    if e:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        cols = np.ascontiguousarray(cols, dtype=np.int64)
        get_kernel("csr_fill", fn="csr_scatter")(rows, cols, indptr, indices, eid)
        get_kernel("csr_fill", fn="csr_sort_rows")(chunks, indptr, indices, eid)
    return CSR(nrows=n, indptr=indptr, indices=indices, eid=eid, chunks=chunks)


class CSRGraph:
    """A graph as the Numba kernels see it: the in-CSR (rows = destinations,
    indices = sources; aggregation to dst, and the backward of to=src) and
    the out-CSR (rows = sources; to=src, and the backward of to=dst), with
    int32 indices when they fit and degree-balanced row chunks.  Each CSR is
    built on first use: a forward-only aggregation to dst never needs the
    out-CSR (2 x E indices; 160 MiB at E = 20M)."""

    def __init__(self, num_nodes: int, src: torch.Tensor, dst: torch.Tensor, *, index_dtype=np.int32,
                 ptr_dtype=np.int32, nthreads: int | None = None) -> None:
        self.num_nodes = num_nodes
        self.src = src
        self.dst = dst
        self._in: CSR | None = None
        self._out: CSR | None = None
        self.index_dtype = np.dtype(index_dtype)
        self._ptr_dtype, self._nthreads = ptr_dtype, nthreads

    def _build(self, rows: torch.Tensor, cols: torch.Tensor) -> CSR:
        return _build_csr(rows.numpy(), cols.numpy(), self.num_nodes, self.index_dtype.type, self._ptr_dtype,
                          self._nthreads)

    @property
    def in_csr(self) -> CSR:
        if self._in is None:
            self._in = self._build(self.dst, self.src)
        return self._in

    @property
    def out_csr(self) -> CSR:
        if self._out is None:
            self._out = self._build(self.src, self.dst)
        return self._out

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @staticmethod
    def build(src: torch.Tensor, dst: torch.Tensor, num_nodes: int, index_dtype=None,
              nthreads: int | None = None) -> CSRGraph:
        """src, dst: [E] integer tensors of edge endpoints (edge id = position).
        index_dtype: force np.int32 / np.int64 (default: int32 when N and E fit).
        The CSRs themselves are built when first used (in_csr, out_csr)."""
        src = torch.as_tensor(src).reshape(-1).to(torch.int64)
        dst = torch.as_tensor(dst).reshape(-1).to(torch.int64)
        if src.shape != dst.shape:
            raise ValueError(f"src and dst differ in length ({src.numel()} vs {dst.numel()})")
        n = int(num_nodes)
        if src.numel():
            lo = min(int(src.min()), int(dst.min()))
            hi = max(int(src.max()), int(dst.max()))
            if lo < 0 or hi >= n:
                raise ValueError(f"edge endpoint out of range [0, {n}): saw {lo}..{hi}")
        e = int(src.numel())
        if index_dtype is None:
            fits = max(n, e) < _I32_MAX
            idx_dt = np.int32 if fits else np.int64
        else:
            idx_dt = np.dtype(index_dtype).type
        ptr_dt = np.int32 if (idx_dt == np.int32 and e < _I32_MAX) else np.int64
        return CSRGraph(n, src, dst, index_dtype=idx_dt, ptr_dtype=ptr_dt, nthreads=nthreads)

    def csr(self, to: str) -> CSR:
        if to == "dst":
            return self.in_csr
        if to == "src":
            return self.out_csr
        raise ValueError(f"to must be 'dst' or 'src', got {to!r}")

    def reverse_of(self, to: str) -> CSR:
        return self.out_csr if to == "dst" else self.in_csr

    def __repr__(self) -> str:
        built = [k for k, c in (("in", self._in), ("out", self._out)) if c is not None]
        return (f"CSRGraph(N={self.num_nodes}, E={self.num_edges}, index={np.dtype(self.index_dtype).name}, "
                f"built={'+'.join(built) or 'none'})")
