"""Deterministic benchmark graphs, cached as .npy under bench/.cache/.

Runs under any Python with numpy (the main venv and the DGL venv both import
it): no torch, no gdsl.

- ``uniform(n, deg)``: ``n * deg`` distinct directed edges ``src -> dst``, no
  self loops, endpoints uniform over ``[0, n)``.
- ``rmat(n, deg)``: R-MAT with the Graph500 parameters a=0.57, b=0.19, c=0.19
  (d=0.05) on ``2**ceil(log2 n)`` vertex ids, ids scrambled by a fixed random
  permutation (as Graph500 does), edges with an endpoint ``>= n`` dropped,
  self loops and duplicates removed; drawn until exactly ``n * deg`` distinct
  edges remain. (Graph500's per-level noise on a, b, c is not applied.)

Both are sorted by (src, dst). Variants a program's ``graph G (...)`` options
ask for are derived here too, with gdsl's rule (Graph.with_options):
``sym``: reverse edges added, deduplicated; ``loops``: exactly one self loop
per vertex. Every peer (gdsl, PyG, DGL) gets the same edge arrays.

Features, labels and the train mask are deterministic too (``vertex_data``):
features N x F standard normal float32, labels uniform in [0, C), train mask
a random half of the vertices.

    python bench/graphs.py uniform100k rmat20k   # build (or reuse) and describe (names: FULL, QUICK)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache"
SEED = 20240601
RMAT_ABC = (0.57, 0.19, 0.19)

# The graphs of a full run and of `--quick`.
FULL = {"uniform100k": ("uniform", 100_000, 20), "rmat1m": ("rmat", 1_000_000, 20)}
QUICK = {"uniform20k": ("uniform", 20_000, 20), "rmat20k": ("rmat", 20_000, 20)}
ALL = {**FULL, **QUICK}
NUM_FEATURES = 128
NUM_CLASSES = 16


def _unique(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values (np.sort based: np.unique is far slower on
    tens of millions of int64 in numpy 2.4)."""
    a = np.sort(keys)
    if a.size == 0:
        return a
    keep = np.empty(a.size, bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _first_occurrences(keys: np.ndarray) -> np.ndarray:
    """The distinct values of `keys` in order of first occurrence."""
    order = np.argsort(keys, kind="stable")
    a = keys[order]
    keep = np.empty(a.size, bool)
    if a.size:
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
    return keys[np.sort(order[keep])]


def _not_in(k: np.ndarray, sorted_seen: np.ndarray) -> np.ndarray:
    if sorted_seen.size == 0:
        return k
    pos = np.searchsorted(sorted_seen, k)
    pos[pos == sorted_seen.size] = 0
    return k[sorted_seen[pos] != k]


def _fill(n: int, m: int, draw, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw batches of candidate edges until m distinct non-loop edges exist;
    keep the first m distinct ones in drawing order (deterministic)."""
    keys = np.empty(0, np.int64)
    seen = np.empty(0, np.int64)
    while keys.size < m:
        want = int((m - keys.size) * 1.15) + 1024
        s, d = draw(want, rng)
        ok = s != d
        k = s[ok] * n + d[ok]
        # first occurrence within the batch, in drawing order, not yet seen
        k = _not_in(_first_occurrences(k), seen)
        keys = np.concatenate([keys, k])
        seen = np.sort(keys)
    keys = np.sort(keys[:m])
    return (keys // n).astype(np.int64), (keys % n).astype(np.int64)


def uniform(n: int, deg: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 1, n, deg])

    def draw(k, rng):
        return rng.integers(0, n, k, dtype=np.int64), rng.integers(0, n, k, dtype=np.int64)

    return _fill(n, n * deg, draw, rng)


def rmat(n: int, deg: int, seed: int = SEED, abc: tuple[float, float, float] = RMAT_ABC) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 2, n, deg])
    scale = max(1, int(np.ceil(np.log2(n))))
    perm = rng.permutation(1 << scale).astype(np.int64)
    a, b, c = abc
    ab, abc_ = a + b, a + b + c

    def draw(k, rng):
        out_s, out_d = [], []
        chunk = 1 << 22
        for lo in range(0, k, chunk):
            m = min(chunk, k - lo)
            s = np.zeros(m, np.int64)
            d = np.zeros(m, np.int64)
            for _ in range(scale):
                r = rng.random(m, dtype=np.float32)
                sbit = r >= ab                       # quadrants c, d
                dbit = ((r >= a) & (r < ab)) | (r >= abc_)  # quadrants b, d
                s = (s << 1) | sbit
                d = (d << 1) | dbit
            s, d = perm[s], perm[d]
            keep = (s < n) & (d < n)
            out_s.append(s[keep])
            out_d.append(d[keep])
        return np.concatenate(out_s), np.concatenate(out_d)

    return _fill(n, n * deg, draw, rng)


def symmetrize(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    keys = _unique(np.concatenate([src * n + dst, dst * n + src]))
    return keys // n, keys % n


def add_self_loops(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    keep = src != dst
    loop = np.arange(n, dtype=np.int64)
    keys = np.sort(np.concatenate([src[keep] * n + dst[keep], loop * n + loop]))
    return keys // n, keys % n


VARIANTS = ("raw", "loops", "sym_loops")


def _path(name: str, variant: str, what: str) -> Path:
    return CACHE / f"{name}.{variant}.{what}.npy"


def load(name: str, variant: str = "raw") -> tuple[np.ndarray, np.ndarray, int]:
    """(src, dst, n) of a named graph ('uniform100k', 'rmat1m', ...) in a
    variant ('raw', 'loops', 'sym_loops'); built and cached on first use."""
    kind, n, deg = ALL[name]
    ps, pd = _path(name, variant, "src"), _path(name, variant, "dst")
    if ps.exists() and pd.exists():
        return np.load(ps), np.load(pd), n
    if variant == "raw":
        src, dst = (uniform if kind == "uniform" else rmat)(n, deg)
    else:
        src, dst, _ = load(name, "raw")
        if variant == "sym_loops":
            src, dst = symmetrize(src, dst, n)
        src, dst = add_self_loops(src, dst, n)
    CACHE.mkdir(parents=True, exist_ok=True)
    for p, a in ((ps, src), (pd, dst)):
        tmp = p.with_name(p.name + ".part.npy")
        np.save(tmp, np.ascontiguousarray(a, dtype=np.int64))
        tmp.replace(p)
    return src, dst, n


def vertex_data(n: int, f: int = NUM_FEATURES, c: int = NUM_CLASSES, seed: int = SEED):
    """(features float32 [n, f], labels int64 [n], train mask bool [n])."""
    rng = np.random.default_rng([seed, 3, n, f, c])
    x = rng.standard_normal((n, f), dtype=np.float32)
    y = rng.integers(0, c, n, dtype=np.int64)
    train = rng.random(n) < 0.5
    return x, y, train


def edge_weight(e: int, seed: int = SEED) -> np.ndarray:
    """A positive per-edge scalar (float32 [e]) for the src * edge benchmark."""
    return np.random.default_rng([seed, 4, e]).random(e, dtype=np.float32) + 0.5


def prepare(names) -> dict[str, dict]:
    """Build (or reuse) every variant of the named graphs; their sizes."""
    info = {}
    for name in names:
        kind, n, deg = ALL[name]
        row = {"kind": kind, "n": n, "avg_degree": deg}
        for v in VARIANTS:
            src, _, _ = load(name, v)
            row[f"e_{v}"] = int(src.size)
        info[name] = row
    return info


def degree_stats(name: str) -> dict:
    _src, dst, n = load(name)
    indeg = np.bincount(dst, minlength=n)
    return {"max_in_degree": int(indeg.max()), "zero_in_degree": int((indeg == 0).sum())}


if __name__ == "__main__":
    names = sys.argv[1:] or list(FULL)
    if unknown := [nm for nm in names if nm not in ALL]:   # (was: a KeyError traceback)
        sys.exit(f"graphs.py: unknown graph {', '.join(map(repr, unknown))} (choose from {', '.join(ALL)})")
    for nm in names:
        t = time.perf_counter()
        print(nm, prepare([nm])[nm], degree_stats(nm), f"{time.perf_counter() - t:.1f} s")
