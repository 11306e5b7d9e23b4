"""The MPI side of `gdsl calibrate`: run under ``mpiexec -n P`` (P >= 2).

    mpiexec -n 2 python -m gdsl.cost.calibrate_worker [--sizes 8,64,...] [--reps 50] [--warmup 5]

Ranks 0 and 1 ping-pong numpy byte buffers (Send/Recv) of each size; rank 0
times every round trip and keeps the median half round trip. Then all ranks
Allreduce (SUM) float32 buffers of the same sizes, a barrier before each
call, and rank 0 keeps the median over calls of the slowest rank's time.
Rank 0 prints one JSON object on stdout; the fit to alpha + beta * bytes is
done by the caller (gdsl.cost.calibrate.fit_alpha_beta). Needs mpi4py.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

DEFAULT_SIZES = [8 << k for k in range(22)]  # 8 B .. 16 MiB


def _reps_for(size: int, reps: int) -> int:
    """Fewer repetitions for the big messages (each 16 MiB trip is milliseconds)."""
    if size >= 1 << 22:
        return max(5, reps // 8)
    if size >= 1 << 18:
        return max(5, reps // 4)
    return reps


def pingpong(comm, size: int, reps: int, warmup: int, np):
    """Median and minimum half round trip between ranks 0 and 1 (rank 0's clock)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    buf = np.zeros(size, dtype=np.uint8)
    times = []
    comm.Barrier()
    for i in range(warmup + reps):
        if rank == 0:
            t0 = MPI.Wtime()
            comm.Send([buf, MPI.BYTE], dest=1, tag=7)
            comm.Recv([buf, MPI.BYTE], source=1, tag=7)
            if i >= warmup:
                times.append((MPI.Wtime() - t0) / 2)
        elif rank == 1:
            comm.Recv([buf, MPI.BYTE], source=0, tag=7)
            comm.Send([buf, MPI.BYTE], dest=0, tag=7)
    comm.Barrier()
    return (statistics.median(times), min(times)) if rank == 0 else (None, None)


def allreduce(comm, size: int, reps: int, warmup: int, np):
    """Median over calls of the slowest rank's Allreduce time for `size` bytes of float32."""
    from mpi4py import MPI

    n = max(1, size // 4)
    send = np.ones(n, dtype=np.float32)
    recv = np.empty_like(send)
    times = []
    for i in range(warmup + reps):
        comm.Barrier()
        t0 = MPI.Wtime()
        comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
        if i >= warmup:
            times.append(MPI.Wtime() - t0)
    slowest = comm.reduce(times, op=lambda a, b: [max(x, y) for x, y in zip(a, b)], root=0)
    return (statistics.median(slowest), min(slowest)) if comm.Get_rank() == 0 else (None, None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gdsl.cost.calibrate_worker")
    ap.add_argument("--sizes", help="comma-separated message sizes in bytes (default 8 B .. 16 MiB, doubling)")
    ap.add_argument("--reps", type=int, default=50, help="timed repetitions per size (fewer above 256 KiB)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed repetitions per size")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")] if a.sizes else DEFAULT_SIZES

    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    if nranks < 2:
        if rank == 0:
            print(json.dumps({"error": f"needs at least 2 MPI ranks, got {nranks} (run under mpiexec -n 2)"}))
        return 2
    pp = {"sizes": sizes, "times": [], "min": [], "reps": []}
    ar = {"sizes": sizes, "times": [], "min": [], "reps": []}
    for size in sizes:
        r = _reps_for(size, a.reps)
        med, low = pingpong(comm, size, r, a.warmup, np)
        pp["times"].append(med)
        pp["min"].append(low)
        pp["reps"].append(r)
    for size in sizes:
        r = _reps_for(size, a.reps)
        med, low = allreduce(comm, size, r, a.warmup, np)
        ar["times"].append(med)
        ar["min"].append(low)
        ar["reps"].append(r)
    hosts = comm.gather(MPI.Get_processor_name(), root=0)
    if rank == 0:
        version = MPI.Get_library_version().strip().splitlines()
        print(json.dumps({
            "np": nranks,
            "hosts": hosts,
            "mpi_library": " ".join(version[0].split()) if version else "",
            "mpi4py": __import__("mpi4py").__version__,
            "warmup": a.warmup,
            "pingpong": pp,
            "allreduce": ar,
        }))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
