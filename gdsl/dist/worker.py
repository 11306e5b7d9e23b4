"""One MPI rank: `python -m gdsl.dist.worker '<json args>'` (started by gdsl.dist.launch).

Any failure becomes `gdsl: error: rank R: ...` on stderr followed by
MPI_Abort, so the process manager stops every rank at once (no rank is left
waiting in a collective).
"""
from __future__ import annotations

import json
import os
import sys
import traceback


def _message(e: BaseException) -> str:
    from gdsl.diagnostics import CompileError, GdslError, render_all
    if isinstance(e, CompileError):
        return render_all(e)
    if isinstance(e, GdslError):
        return str(e)
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    if isinstance(e, MemoryError):
        return "out of memory"
    return f"{type(e).__name__}: {e}"


def run(args: dict) -> int:
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    if args.get("run_dir"):
        try:
            with open(os.path.join(args["run_dir"], f"rank-{rank}.pid"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass
    try:
        from gdsl.dist.run import run_rank
        return run_rank(args)
    except BaseException as e:  # noqa: BLE001 - every failure must stop all ranks
        print(f"gdsl: error: rank {rank}: {_message(e)}", file=sys.stderr, flush=True)
        if os.environ.get("GDSL_DEBUG") == "1":
            traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
        return 1


def main() -> None:
    args = json.loads(sys.argv[1])
    sys.exit(run(args))


if __name__ == "__main__":
    main()
