"""Synthetic graphs for tests and benchmarks: R-MAT (Chakrabarti et al.,
SDM'04) with the Graph500 parameters (a, b, c) = (0.57, 0.19, 0.19), and
random features, labels and masks, all deterministic per seed."""
from __future__ import annotations

import numpy as np

from gdsl.graph.graph import Graph

RMAT_ABC = (0.57, 0.19, 0.19)


def rmat_edges(n: int, num_edges: int, seed: int = 0, abc=RMAT_ABC) -> tuple[np.ndarray, np.ndarray]:
    """`num_edges` directed R-MAT edges over `n` vertices (ids folded into
    [0, n) when n is not a power of two; self loops and duplicates kept)."""
    rng = np.random.default_rng(seed)
    scale = max(1, int(np.ceil(np.log2(max(n, 2)))))
    a, b, c = abc
    src = np.zeros(num_edges, np.int64)
    dst = np.zeros(num_edges, np.int64)
    for _ in range(scale):
        r = rng.random(num_edges)
        down = r >= a + b                     # quadrants c, d: source bit set
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)   # quadrants b, d: destination bit set
        src = (src << 1) | down
        dst = (dst << 1) | right
    perm = rng.permutation(1 << scale)        # break the id/degree correlation
    return perm[src] % n, perm[dst] % n


def rmat_graph(n: int, avg_degree: int = 10, features: int = 32, classes: int = 8, seed: int = 0,
               name: str | None = None) -> Graph:
    """A symmetric, deduplicated R-MAT graph without self loops, with random
    features in [0, 1), labels correlated with the features (so models can
    learn), and 10% / 10% / 20% train / val / test masks."""
    src, dst = rmat_edges(n, n * avg_degree // 2, seed)
    keep = src != dst
    s, d = np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])
    key = np.unique(s * n + d)
    s, d = key // n, key % n
    rng = np.random.default_rng(seed + 1)
    x = rng.random((n, features), dtype=np.float32)
    proj = rng.standard_normal((features, classes)).astype(np.float32)
    y = (x @ proj).argmax(1)
    order = rng.permutation(n)
    masks = {}
    for k, lo, hi in (("train", 0.0, 0.1), ("val", 0.1, 0.2), ("test", 0.2, 0.4)):
        m = np.zeros(n, bool)
        m[order[int(lo * n): int(hi * n)]] = True
        masks[k] = m
    return Graph.from_edges(s, d, n, features=x, labels=y, masks=masks, name=name or f"rmat{n}")
