"""Comm.allreduce_'s max / min keep a NaN as torch's amax / amin do (over
real MPI ranks: MPICH's MAX / MIN are `a > b ? a : b`, which drops a NaN
partial whenever the other rank's value comes second). The vertex-cut and
replicated plans combine partial max / min aggregates with it
(functions.AllReduceExtremum), the reference takes torch's amax."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.mpi
pytest.importorskip("mpi4py")
sys.path.insert(0, str(Path(__file__).parent))

from test_dist import MPIEXEC, ROOT  # noqa: E402

if MPIEXEC is None:  # pragma: no cover
    pytest.skip("no mpiexec", allow_module_level=True)

NAN, INF = float("nan"), float("inf")
# rank r's partials; columns: NaN on rank 0 only, on rank 1 only, on both, none, NaN against an infinity
PARTS = [[NAN, 1.0, NAN, 2.0, NAN, -INF, 5.0],
         [1.0, NAN, NAN, 3.0, INF, NAN, -1.0]]

SCRIPT = """
import json, sys, torch
from mpi4py import MPI
from gdsl.dist.comm import Comm
parts = json.loads(sys.argv[1])
c = Comm(MPI.COMM_WORLD)
out = {}
for dt in ("float32", "float64"):
    for op in ("max", "min"):
        x = torch.tensor(parts[c.rank], dtype=getattr(torch, dt))
        out[f"{dt} {op}"] = [repr(v) for v in c.allreduce_(x, "t", op).tolist()]
    n = torch.tensor([c.rank + 1, 7 - c.rank], dtype=torch.int64)   # integers: MPI's own MAX
    out["int64 max"] = c.allreduce_(n, "n", "max").tolist()
if c.rank == 0:
    print(json.dumps(out))
"""


def test_max_and_min_over_ranks_keep_a_nan_as_torch_does():
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", SCRIPT, json.dumps(PARTS)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    stacked = torch.tensor(PARTS, dtype=torch.float64)
    for dt in ("float32", "float64"):
        for op, fn in (("max", torch.amax), ("min", torch.amin)):
            want = [repr(v) for v in fn(stacked.to(getattr(torch, dt)), 0).tolist()]
            assert got[f"{dt} {op}"] == want, (dt, op)
    assert got["int64 max"] == [2, 7]
