"""CSR structures for the Triton kernels, built once per graph on its device.

The in-CSR has the destinations as rows (aggregation to dst, and the
backward of to=src), the out-CSR the sources (to=src, and the backward of
to=dst).  Within a row, slots are sorted by the other endpoint (as the
Numba backend's CSR), so both backends sum in the same order.

The balanced variant (``segments``) splits every row longer than
``seg_edges`` slots into segments of ``seg_edges`` slots, each one program;
a row of one segment writes its output directly, the segments of a long row
write partial results that a second kernel merges, row by row, in segment
order (no atomics, so the sums are deterministic run to run).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

_I32_MAX = 2**31 - 1


@dataclass
class Segments:
    """The balanced variant's work list over one CSR.

    table [S, 4] int64: (row, first slot, end slot, out) per segment, out =
    the row (the segment is the whole row) or -1 - its partial row;
    long_rows [L]: the rows split in several segments, long_ptr [L + 1]:
    their partial rows (long row i owns partial rows long_ptr[i] ..
    long_ptr[i + 1] - 1); num_parts: partial rows in all."""
    seg_edges: int
    table: torch.Tensor
    long_rows: torch.Tensor
    long_ptr: torch.Tensor
    num_parts: int

    @property
    def num_segments(self) -> int:
        return int(self.table.shape[0])


@dataclass
class CSR:
    nrows: int
    indptr: torch.Tensor
    indices: torch.Tensor
    eid: torch.Tensor
    degree: torch.Tensor            # [nrows] int64
    max_degree: int
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    @property
    def deg_key(self) -> int:
        """log2 of the mean degree, rounded: an autotune key (the best edge
        block depends on how long rows are)."""
        mean = self.num_edges / max(1, self.nrows)
        return round(math.log2(max(1.0, mean)))

    @property
    def row_of_edge(self) -> torch.Tensor:
        """[E] int64: the row each edge (by edge id) belongs to."""
        r = self._cache.get("row_of_edge")
        if r is None:
            rows = torch.repeat_interleave(torch.arange(self.nrows, device=self.device), self.degree)
            r = torch.empty_like(rows)
            r[self.eid.long()] = rows
            self._cache["row_of_edge"] = r
        return r

    def inv_degree(self, dtype: torch.dtype) -> torch.Tensor:
        """[nrows] 1 / max(1, degree) in `dtype` (mean's row scale)."""
        key = ("inv_degree", dtype)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = (1.0 / self.degree.clamp(min=1).to(torch.float64)).to(dtype)
        return t

    def segments(self, seg_edges: int) -> Segments:
        """The balanced variant's segments of at most `seg_edges` slots."""
        key = ("segments", int(seg_edges))
        s = self._cache.get(key)
        if s is None:
            s = self._cache[key] = _segments(self, int(seg_edges))
        return s


def _segments(csr: CSR, seg: int) -> Segments:
    if seg < 1:
        raise ValueError(f"segment length must be positive, got {seg}")
    dev = csr.device
    deg = csr.degree.cpu()
    n = csr.nrows
    nseg = ((deg + seg - 1) // seg).clamp(min=1)
    total = int(nseg.sum())
    row = torch.repeat_interleave(torch.arange(n), nseg)
    first = torch.cumsum(nseg, 0) - nseg
    k = torch.arange(total) - first[row]
    indptr = csr.indptr.cpu().long()
    start = indptr[row] + k * seg
    end = torch.minimum(start + seg, indptr[row + 1])
    long = nseg > 1
    is_part = long[row]
    part_idx = torch.cumsum(is_part.long(), 0) - 1
    out = torch.where(is_part, -1 - part_idx, row)
    table = torch.stack([row, start, end, out], 1).contiguous()
    long_rows = long.nonzero().squeeze(1)
    long_ptr = torch.zeros(long_rows.numel() + 1, dtype=torch.int64)
    long_ptr[1:] = torch.cumsum(nseg[long_rows], 0)
    return Segments(seg, table.to(dev), long_rows.to(dev), long_ptr.to(dev), int(is_part.sum()))


def _build_csr(rows: torch.Tensor, cols: torch.Tensor, n: int, idx_dt: torch.dtype, device) -> CSR:
    e = rows.numel()
    if e:
        order = torch.argsort(rows * n + cols, stable=True) if n < 3_000_000_000 else \
            torch.from_numpy(__import__("numpy").lexsort((cols.numpy(), rows.numpy())))
    else:
        order = torch.zeros(0, dtype=torch.int64)
    counts = torch.bincount(rows, minlength=n) if e else torch.zeros(n, dtype=torch.int64)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=indptr[1:])
    ptr_dt = idx_dt if e < _I32_MAX else torch.int64
    return CSR(
        nrows=n,
        indptr=indptr.to(ptr_dt).to(device),
        indices=cols[order].to(idx_dt).contiguous().to(device),
        eid=order.to(idx_dt).contiguous().to(device),
        degree=counts.to(device),
        max_degree=int(counts.max()) if n else 0,
    )


class TritonGraph:
    """A graph as the Triton kernels see it: in- and out-CSR and the edge
    list (for edge-parallel kernels), all on `device`, with int32 indices
    when N and E fit."""

    def __init__(self, num_nodes: int, src: torch.Tensor, dst: torch.Tensor, in_csr: CSR, out_csr: CSR) -> None:
        self.num_nodes = num_nodes
        self.src = src
        self.dst = dst
        self.in_csr = in_csr
        self.out_csr = out_csr

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @property
    def device(self) -> torch.device:
        return self.src.device

    @staticmethod
    def build(src: torch.Tensor, dst: torch.Tensor, num_nodes: int, device=None,
              index_dtype: torch.dtype | None = None) -> TritonGraph:
        """src, dst: [E] integer tensors (edge id = position), on any device;
        the structures are built on the CPU and moved to `device` (default:
        src's)."""
        device = torch.device(device) if device is not None else torch.as_tensor(src).device
        src = torch.as_tensor(src).reshape(-1).to("cpu", torch.int64)
        dst = torch.as_tensor(dst).reshape(-1).to("cpu", torch.int64)
        if src.shape != dst.shape:
            raise ValueError(f"src and dst differ in length ({src.numel()} vs {dst.numel()})")
        n = int(num_nodes)
        if src.numel():
            lo = min(int(src.min()), int(dst.min()))
            hi = max(int(src.max()), int(dst.max()))
            if lo < 0 or hi >= n:
                raise ValueError(f"edge endpoint out of range [0, {n}): saw {lo}..{hi}")
        if index_dtype is None:
            index_dtype = torch.int32 if max(n, src.numel()) < _I32_MAX else torch.int64
        return TritonGraph(n, src.to(index_dtype).to(device), dst.to(index_dtype).to(device),
                           _build_csr(dst, src, n, index_dtype, device),
                           _build_csr(src, dst, n, index_dtype, device))

    def csr(self, to: str) -> CSR:
        if to == "dst":
            return self.in_csr
        if to == "src":
            return self.out_csr
        raise ValueError(f"to must be 'dst' or 'src', got {to!r}")

    def reverse_of(self, to: str) -> CSR:
        return self.out_csr if to == "dst" else self.in_csr

    def __repr__(self) -> str:
        return (f"TritonGraph(N={self.num_nodes}, E={self.num_edges}, index={self.src.dtype}, "
                f"device={self.device}, max in-degree={self.in_csr.max_degree})")
