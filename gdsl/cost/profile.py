"""Machine profiles and the time model.

predicted time per epoch = SpMM bytes / gamma_spmm + GEMM flops / gamma_gemm
                           + alpha * messages + beta * words
(alpha-beta model of CAGNET §III-A; kernel rates per gdsl ARCHITECTURE "Cost
model"). A strategy whose communication overlaps computation (DistGNN cd-r,
§5.3) takes the larger of the two instead of their sum.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from gdsl.cost import symbols as sy
from gdsl.cost.record import Cost, _keys, _subs
from gdsl.cost.symbols import Expr, WORD_BYTES, is_num, smax


@dataclass(frozen=True)
class Profile:
    """alpha (s/message), beta (s/word), gamma_spmm (bytes/s), gamma_gemm (flop/s)."""

    name: str
    alpha: float
    beta: float
    gamma_spmm: float
    gamma_gemm: float
    source: str = ""

    def values(self) -> dict:
        return {sy.alpha: self.alpha, sy.beta: self.beta,
                sy.gamma_spmm: self.gamma_spmm, sy.gamma_gemm: self.gamma_gemm}

    @property
    def bandwidth(self) -> float:
        """Bytes per second implied by beta."""
        return WORD_BYTES / self.beta


# Kernel rates measured on the development machine (2-core AMD EPYC VM,
# torch 2.13 CPU, 2 threads): torch.mm on N x 128 @ 128 x 128 .. N x 256 @
# 256 x 256 with N = 200,000 ran at 22-28 GFLOP/s; torch.sparse.mm (CSR) on a
# random graph (N = 100,000-200,000, degree 16-50, width 16-128) at 1.9-3.2
# GB/s of the traffic the model counts (4 * (2 nnz + nnz f + N f) bytes).
# Network: Mellanox HDR InfiniBand (the interconnect of DistGNN §6.1's
# cluster), 200 Gb/s = 25 GB/s per direction, so beta = 4 B / 25 GB/s; alpha
# = 2 us is an assumed MPI small-message latency on such a fabric (none of the
# papers in shared/papers reports one). `gdsl calibrate` should replace all four.
DEFAULT_PROFILE = Profile(
    name="dev-cpu+hdr",
    alpha=2e-6,
    beta=WORD_BYTES / 25e9,
    gamma_spmm=2.5e9,
    gamma_gemm=25e9,
    source="kernel rates measured with torch on the 2-core dev VM; HDR InfiniBand 25 GB/s; alpha assumed",
)

# The machine of CAGNET's experiments (§V-B): V100 GPUs on Summit, each
# socket's 3 GPUs sharing 12.5 GB/s of InfiniBand injection bandwidth, so
# beta = 4 B / 12.5 GB/s. Kernel rates are taken from the V100 (SXM2)
# datasheet, not measured: 15.7 TFLOP/s FP32 peak, of which cuBLAS SGEMM
# reaches about 14; 900 GB/s HBM2, of which an SpMM's gathers are assumed to
# reach half. alpha = 10 us is an assumed NCCL collective start-up. Use it to
# reason about the GPU papers' regime, where communication dominates.
SUMMIT_V100_PROFILE = Profile(
    name="summit-v100",
    alpha=10e-6,
    beta=WORD_BYTES / 12.5e9,
    gamma_spmm=450e9,
    gamma_gemm=14e12,
    source="CAGNET §V-B network; V100 datasheet rates (derated); alpha assumed",
)

PROFILES = {p.name: p for p in (DEFAULT_PROFILE, SUMMIT_V100_PROFILE)}


def compute_time(cost: Cost) -> Expr:
    e = cost.epoch
    return e.sparse_bytes / sy.gamma_spmm + e.dense_flops / sy.gamma_gemm


def comm_time(cost: Cost) -> Expr:
    e = cost.epoch
    return sy.alpha * e.messages + sy.beta * e.words


def predict_time(cost: Cost, profile: Profile | None = DEFAULT_PROFILE) -> Expr:
    """Seconds per epoch; a float when the cost is numeric and a profile is given,
    otherwise an expression in alpha, beta, gamma_spmm, gamma_gemm and the sizes."""
    comp, comm = compute_time(cost), comm_time(cost)
    t = smax(comp, comm) if cost.overlap else comp + comm
    if profile is None:
        return t
    return _subs(t, profile.values())


def evaluate(x, values: dict):
    """Substitute numbers: a Cost gives a Cost of numbers, an expression a float
    (or what remains symbolic). Keys may be symbols or their names."""
    if isinstance(x, Cost):
        return x.subs(values)
    vals = _keys(values)
    if is_num(x) and not isinstance(x, sympy.Basic):
        return x
    return _subs(x, vals)
