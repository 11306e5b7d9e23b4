"""The `gdsl` command: compile | run | plan | partition | calibrate | passes.

One boundary (`main`) turns every failure into a message: user errors
(`file:line:col: error: ...`, data problems) exit 1, usage errors exit 2,
and anything else is an internal error (exit 3) that says so; GDSL_DEBUG=1
re-raises it with the Python traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import sys
import warnings
from pathlib import Path

from gdsl.diagnostics import CompileError, GdslError, render_all
from gdsl.runtime import startup
from gdsl.runtime.files import broken_link, discard_stdout
from gdsl.runtime.signals import Terminated, stop_on_signals

STAGES = ("ast", "ir", "ir-opt")


def _int_arg(text: str, lo: int, hi: int | None, want: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if v < lo or (hi is not None and v >= hi):
        raise argparse.ArgumentTypeError(f"{want}, got {text}")
    return v


def _seed(text: str) -> int:
    """--seed: an integer in [0, 2**63) (what torch's generators take)."""
    return _int_arg(text, 0, 2 ** 63, "must be in [0, 2**63)")


def _positive(text: str) -> int:
    """A count of epochs (--log-every, --checkpoint-every): an integer >= 1."""
    return _int_arg(text, 1, None, "must be at least 1")


def _seconds(text: str) -> float:
    """--comm-timeout: seconds >= 0 (0: no limit)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0 (0: no limit), got {text}")
    return v


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), except that --help and
    --version, written to stdout, are flushed there and a failed write is an
    OSError for `main` to report (was: argparse swallowed it: `gdsl run --help
    > /dev/full` exited 0 having written nothing; helper-35)."""

    def _print_message(self, message, file=None):
        if message and file is not None and file is sys.stdout:
            file.write(message)
            file.flush()
        else:
            super()._print_message(message, file)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gdsl", description="gdsl: a compiler for graph neural network training")
    from gdsl import __version__
    p.add_argument("--version", action="version", version=f"gdsl {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    def common(sp):
        sp.add_argument("program", help="a .gd program")
        sp.add_argument("--data", help="graph .npz file or builtin name (cora, citeseer); `run` defaults to the "
                        "embedded Cora, `compile` binds dims (F, C) from it when given")
        sp.add_argument("--train", metavar="NAME", help="which train block to use (default: the first)")
        sp.add_argument("--set", metavar="K=V", action="append", default=[],
                        help="override a static argument of the model, e.g. --set hidden=64")

    c = sub.add_parser("compile", help="check a program and print its AST or IR")
    common(c)
    c.add_argument("--emit", choices=STAGES + ("numba", "triton"), help="what to print: a stage, or the generated "
                   "kernels of a backend (default: ir-opt, or nothing when --print-ir-after* or --dump-dir is given)")
    c.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass")
    c.add_argument("--print-ir-after", metavar="PASS", action="append", default=[], help="print the IR after PASS")
    c.add_argument("--dump-dir", metavar="DIR", help="write the AST and the IR after every pass into DIR")
    c.add_argument("--print-loc", action="store_true", help="show source locations in IR dumps")
    c.add_argument("--np", type=int, dest="np_", metavar="P", help="choose and record a plan for P ranks (needs --data)")
    c.add_argument("--mem-per-rank", metavar="BYTES", help="memory budget per rank for --np, e.g. 4G")

    r = sub.add_parser("run", help="train a program (full-batch) and report accuracy")
    common(r)
    r.add_argument("--epochs", type=int, help="override the train block's epochs")
    r.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    r.add_argument("--backend", choices=("reference", "numba", "triton"),
                   help="execution backend (default: triton if the schedule says target = gpu, else numba; "
                        "reference where numba is not installed; with --np the ranks' default is reference, "
                        "and the automatic plan is priced at the backend the ranks run)")
    r.add_argument("--json", metavar="FILE", help="write per-epoch and final metrics to FILE")
    r.add_argument("--save", metavar="FILE", help="write the trained params to FILE (a torch state dict: "
                   "model.load_state_dict(torch.load(FILE)))")
    r.add_argument("--split", type=int, default=0, help="which split of a multi-split dataset (default 0)")
    r.add_argument("--log-every", type=_positive, help="print every K epochs when not on a terminal")
    d = r.add_argument_group("distributed (MPI)")
    d.add_argument("--np", type=int, dest="np_", metavar="P",
                   help="train on P MPI ranks: starts `mpiexec -n P` itself, or, started by mpiexec/srun, "
                        "runs as the ranks it was given")
    _dist_args(d)
    d.add_argument("--parts", metavar="DIR", help="use (or write) the per-rank partition files in DIR")
    d.add_argument("--report", choices=("comm",), help="print the bytes each collective moved, per epoch and per op")
    d.add_argument("--checkpoint", metavar="DIR", help="save every rank's state to DIR (atomically)")
    d.add_argument("--checkpoint-every", type=_positive, metavar="K", help="with --checkpoint: every K epochs (default 10)")
    d.add_argument("--resume", metavar="DIR", help="continue from the checkpoint in DIR")
    from gdsl.dist.worker import COMM_TIMEOUT
    d.add_argument("--comm-timeout", type=_seconds, metavar="SECONDS",
                   help="stop the run with an error when a rank waits longer than this in one MPI call: another "
                        f"rank is stuck or out of step (default {COMM_TIMEOUT:g}; 0: no limit)")

    pa = sub.add_parser("partition", help="write per-rank partition files for `gdsl run --np P --parts DIR`")
    common(pa)
    pa.add_argument("--np", type=int, dest="np_", metavar="P", required=True, help="number of ranks")
    pa.add_argument("--out", metavar="DIR", required=True, help="directory for part-<rank>.npz files")
    pa.add_argument("--seed", type=_seed, default=0, help="seed for random partitions (default 0)")
    pa.add_argument("--split", type=int, default=0, help="which split of a multi-split dataset (default 0): "
                    "the masks the part files carry")
    _dist_args(pa)

    pl = sub.add_parser("plan", help="predict and choose a distributed plan with the cost model")
    common(pl)
    pl.add_argument("--np", type=int, default=1, dest="np_", metavar="P", help="number of ranks (default 1)")
    pl.add_argument("--dims", metavar="N=..,E=..,F=..,C=..", help="sizes instead of --data (any subset)")
    pl.add_argument("--mem-per-rank", metavar="BYTES", help="memory budget per rank, e.g. 4G")
    pl.add_argument("--approximate", action="store_true", help="also consider delayed (approximate) plans")
    pl.add_argument("--json", metavar="FILE", help="write the candidates and the choice to FILE")
    pl.add_argument("--profile", metavar="FILE", help="machine profile JSON (default: $GDSL_PROFILE, else "
                    "~/.config/gdsl/profile.json when `gdsl calibrate` wrote one, else the built-in default)")
    pl.add_argument("--backend", choices=("reference", "numba", "triton"), default=None,
                    help="price the kernels at this backend's rates from the profile, as `gdsl run --np P --backend B` "
                         "does (default: reference, the ranks' default)")

    ca = sub.add_parser("calibrate", help="measure this machine's alpha, beta and kernel rates into a profile")
    ca.add_argument("--out", metavar="FILE", help="where to write the profile (default: $GDSL_PROFILE, else "
                    "~/.config/gdsl/profile.json, which `gdsl plan` then uses)")
    ca.add_argument("--np", type=int, default=2, dest="np_", metavar="P", help="MPI ranks for the ping-pong and "
                    "allreduce (default 2)")
    ca.add_argument("--backend", choices=("reference", "numba", "all"), default="all",
                    help="whose SpMM rate to measure (default all)")
    ca.add_argument("--quick", action="store_true", help="fewer sizes and a smaller graph (seconds, not a minute)")
    ca.add_argument("--json", action="store_true", help="print the whole profile as JSON instead of the table")

    sub.add_parser("passes", help="list the compiler passes in pipeline order")
    for sp in sub.choices.values():   # usage errors found after parsing print the command's own usage
        sp.set_defaults(command_parser=sp)
    return p


def _dist_args(g) -> None:
    g.add_argument("--partition", metavar="SPEC",
                   help="replicate | rows(hash|random|block|metis) | edge_cut(metis) | rows_replicated(c) | "
                        "vertex_cut | features | redistribute | redistribute(R_A) | auto (default: the schedule's hint, else "
                        "the cost model's choice)")
    g.add_argument("--delay", type=_delay, help="vertex_cut only: 0 (cd-0, exact), r > 0 (cd-r) or none (0c)")
    g.add_argument("--halo", choices=("alltoallv", "bcast"), default=None,
                   help="1D halo exchange: all-to-all-v of the needed rows (default) or broadcast of whole blocks")
    g.add_argument("--mem-per-rank", metavar="BYTES", help="memory budget per rank for the automatic choice, e.g. 4G")


def _delay(text: str):
    if text == "none":
        return "none"
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a non-negative integer or none") from None
    if v < 0:
        raise argparse.ArgumentTypeError("expected a non-negative integer or none")
    from gdsl.frontend.checker import MAX_DELAY
    if v > MAX_DELAY:
        raise argparse.ArgumentTypeError(f"at most {MAX_DELAY} epochs")
    return v


def _overrides(pairs: list[str], parser) -> dict:
    out = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k.isidentifier():
            parser.error(f"--set expects NAME=VALUE, got '{kv}'")
        if k in out:   # as for --dims: a repeated name is a typo more often than an override
            parser.error(f"--set gives {k} twice")
        # a number as the language writes one, with its multiplier suffixes (`64K`, `1M`: docs/language.md);
        # ASCII digits only (was Python's int()/float(): `1_6`, `١٦`, ' 16 ', `inf` and `nan` were taken)
        m = re.fullmatch(r"([-+]?)((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?[KMG]?)", v)
        if m is None:
            parser.error(f"--set {k}: '{v}' is not a number (write it as in a program: 16, 0.5, 1e-3, 64K)")
        from gdsl.frontend.parser import parse_number
        out[k] = -parse_number(m.group(2)) if m.group(1) == "-" else parse_number(m.group(2))
    return out


def cmd_passes(args) -> int:
    from gdsl.passes.pipeline import DESCRIPTIONS, pass_names
    for name in pass_names():
        print(f"{name:<22} {DESCRIPTIONS[name]}")
    return 0


def _data_dims(source: str, args, want_graph: bool = False):
    """Dims bound from `--data`, and E as the program sees it (after its graph
    options); with `want_graph`, also that graph (for measured partitions)."""
    from gdsl.compiler import front
    from gdsl.graph.io import load_graph
    from gdsl.runtime.binding import bind_dims

    _, checked = front(source, args.program, args.train)
    g = load_graph(args.data)
    _warn_unread(checked, g)
    opts = checked.graph_options
    seen = g.with_options(self_loops=opts.get("self_loops", False), symmetric=opts.get("symmetric", False))
    try:
        dims = bind_dims(checked, g)
    except GdslError:
        _program_errors_first(source, args)
        raise
    return (dims, seen.num_edges, seen) if want_graph else (dims, seen.num_edges)


def _warn_unread(checked, graph) -> None:
    from gdsl.runtime.binding import unread_data
    for w in unread_data(checked, graph):
        print(f"gdsl: warning: {w}", file=sys.stderr)


def _program_errors_first(source: str, args) -> None:
    """Raise the program's own errors, those no data can fix, before a data
    file's mismatch with it (was: `--data` reported only "no edge data 'w'"
    for a program whose model misuses 'w', as `gdsl run` does not)."""
    from gdsl.compiler import compile_source
    try:
        compile_source(source, args.program, train=args.train)
    except CompileError as e:
        if not all(d.needs_data for d in e.diagnostics):
            raise CompileError([d for d in e.diagnostics if not d.needs_data], e.source) from None


def _dim_names(source: str, args) -> set[str]:
    """N, E and the symbolic dims the program's inputs declare (F, C, ...)."""
    from gdsl.compiler import front
    from gdsl.frontend.lower import _names_in

    _, checked = front(source, args.program, args.train)
    names = {"N", "E"}
    for d in checked.inputs.values():
        for x in d.type.shape or []:
            names |= {n.id for n in _names_in(x)}
    return names


def _mem_per_rank(args, parser) -> int | None:
    """--mem-per-rank as bytes; a malformed value is a usage error (exit 2), as for --dims."""
    from gdsl.planning import parse_bytes

    if args.mem_per_rank is None:
        return None
    try:
        return parse_bytes(args.mem_per_rank)
    except GdslError as e:
        parser.error(str(e))


def cmd_plan(args, parser) -> int:
    from gdsl.compiler import compile_source, read_source
    from gdsl.cost.choose import NoPlanFits
    from gdsl.planning import idle_ranks_warning, plan
    startup.release()

    if args.np_ < 1:
        parser.error("--np must be at least 1")
    if args.json:
        from gdsl.runtime.files import check_json_path
        data = None
        if args.data:
            from gdsl.graph.io import resolve_data   # imports torch: only with --data
            data = resolve_data(args.data)
        check_json_path(args.json, inputs=(args.program, data))   # before the planning, not after it
    source = read_source(args.program)
    dims: dict[str, int] = {}
    graph = None
    if args.data:
        dims, dims["E"], graph = _data_dims(source, args, want_graph=True)
    if args.dims is not None and not args.dims.replace(",", "").strip():
        parser.error("--dims: empty (give NAME=INT pairs, e.g. N=2708,E=13264)")
    given: set[str] = set()
    known = _dim_names(source, args) if args.dims else set()
    for kv in (args.dims or "").split(","):
        if kv.strip():
            k, sep, v = kv.partition("=")
            k = k.strip()
            if not sep or re.fullmatch(r"\d+[KMG]?", v.strip()) is None:   # 2708, or 100M as in a program
                parser.error(f"--dims expects NAME=INT pairs, got '{kv}'")
            from gdsl.frontend.parser import parse_number
            v = str(parse_number(v.strip()))
            if k in given:
                parser.error(f"--dims gives {k} twice")
            if args.data and k in ("N", "E"):
                # N=5 with Cora's E (and its graph's METIS partitions) would plan no graph at all
                parser.error(f"--dims {k}: the graph of --data has {k} = {dims[k]}; give N and E by --dims "
                             "without --data (feature dims may override the data's)")
            if k not in known:
                parser.error(f"--dims: the program has no dim {k} (its dims: {', '.join(sorted(known))})")
            if int(v) < (0 if k == "E" else 1):
                parser.error(f"--dims: {k} must be at least {0 if k == 'E' else 1}, got {v.strip()}")
            from gdsl.frontend.lower import MAX_DIM
            if k in ("N", "E") and int(v) > MAX_DIM:   # F, C: lower's own check (was: N of 400 digits, exit 3)
                parser.error(f"--dims: {k} is too large: {v} (at most 2**40)")
            given.add(k)
            dims[k] = int(v)
    row = {k: dims.pop(k) for k in ("N", "E") if k in dims}
    compiled = compile_source(source, args.program, dims=dims, overrides=_overrides(args.set, parser),
                              train=args.train, stop_after="lower")
    print_compile_warnings(compiled)
    lowered = compiled.module
    from gdsl.compiler import check_plannable
    check_plannable(compiled.checked, lowered)   # (was: "nothing to plan" for a train block's model; helper-33)
    if lowered.attrs.get("schedule", {}).get("partition") not in (None, "auto"):
        # the whole pipeline: a partition hint the ranks would refuse is its error
        # (`compiler._partition_hint_errors`; was: "`gdsl run --np P` executes ...")
        # (with the rank count: what redistribute(R_A < P) cannot run too; helper-75)
        compile_source(source, args.program, dims=dims, overrides=_overrides(args.set, parser), train=args.train,
                       ranks=args.np_)
    mem = _mem_per_rank(args, parser)
    from gdsl.cost.profile import describe_profile
    from gdsl.planning import RANKS_BACKEND, rank_profile
    backend = args.backend or RANKS_BACKEND
    profile = rank_profile(backend, args.profile)   # the ranks' backend's rates, as `gdsl run --np` prices them
    sched = lowered.attrs.get("schedule", {})
    # as `gdsl compile --np` and `gdsl run --np` do: a partition hint's delay
    # prices cd-r at that delay and admits the approximate plans
    hint_delay = sched.get("delay", 0) if sched.get("partition") not in (None, "auto") else 0
    try:
        result = plan(lowered, {**dims, **row}, args.np_, mem, args.approximate, profile=profile, graph=graph,
                      delay=hint_delay)
    except NoPlanFits as e:
        raise GdslError(str(e)) from None
    if "N" in row and (idle := idle_ranks_warning(args.np_, row["N"])):
        print(f"gdsl plan: warning: {idle}", file=sys.stderr)
    widths = ", ".join(str(w) for w in result.widths)
    head = (f"plan for {args.program}: P={args.np_}, layer widths [{widths}]"
            + (f", N={row['N']}, E={row['E']}" if "N" in row and "E" in row else ""))
    if result.choice is None:
        print(head)
        from gdsl.cost import strategies as st
        unbound = sorted(_dim_names(source, args) - given - set(dims) - set(row))
        print(f"sizes are symbolic (give --data, or --dims with {', '.join(unbound)}): per-epoch costs per "
              "strategy, in N, E, P")
        for name in ("replicate", "rows"):
            cost = getattr(st, name)(result.problem)
            print(f"\n{cost.describe()}")
        if args.json:
            print(f"gdsl plan: --json {args.json} not written: there is no choice with symbolic sizes", file=sys.stderr)
        return 0
    hinted = _plan_hint(sched, result, args.np_)
    runs: list = []   # the plan the ranks run, computed once: by the table, or by --json if stdout failed first

    def ran():
        if not runs:
            runs.append(None)
            if args.data and not (hinted and hinted["applies"]):
                # as `gdsl compile --np` records and `gdsl run --np` does: the fastest plan the
                # ranks can run (was: a choice they refuse, e.g. rows_replicated with `to = src`, unremarked);
                # with --data only, as those commands (the ranks' checks import torch)
                from gdsl.planning import runnable
                overrides = _overrides(args.set, parser)
                runs[0] = runnable(result, lambda d: compile_source(source, args.program, dims=dims,
                                                                    overrides=overrides, train=args.train,
                                                                    delay=d).module)
        return runs[0]

    def table():
        print(head)
        print(describe_profile(profile))
        print(result.choice.table())
        approx = any(not c.cost.exact for c in result.choice.candidates)
        print("\n* chosen  P Pareto (time vs memory)  ! over the memory per rank"
              + ("  ~ approximate (delayed updates: changes what is trained)" if approx else ""))
        print(f"choice: {result.choice.best.name}{'' if result.choice.best.cost.exact else ' (approximate)'}"
              f"\nwhy: {result.choice.reason}")
        if hinted:
            print(hinted["line"])
        if (r := ran()) is not None and r.skipped:
            from gdsl.cost.choose import fmt_time
            best = r.choice.best
            print(f"runs: the ranks cannot run {r.skipped} {r.skipped_why}, so `gdsl run --np {args.np_}` "
                  f"and `gdsl compile --np` take {best.name} ({fmt_time(best.time)} per epoch predicted)")

    def json_file():
        from gdsl.runtime.files import write_json
        r = ran()
        write_json(args.json, {
            "P": args.np_, "widths": [int(w) for w in result.widths], **row,
            "choice": result.choice.best.name, "reason": result.choice.reason,
            "profile": {"name": profile.name, "path": profile.path or None, "backend": backend, "alpha": profile.alpha,
                        "beta": profile.beta, "gamma_spmm": profile.gamma_spmm, "gamma_gemm": profile.gamma_gemm},
            "candidates": [{"plan": c.name, "time": c.time, "compute": c.compute, "comm": c.comm,
                            "words_per_rank": float(c.cost.words), "messages_per_rank": float(c.cost.messages),
                            "memory_per_rank": c.memory_bytes, "fits": c.fits, "exact": c.cost.exact,
                            "pareto": any(c is p for p in result.choice.pareto),
                            # the table's x mark and the reason under it (was: not in the file; helper-33);
                            # grid2d / grid3d carry theirs too (planning.mark_modelled_only; helper-35)
                            "runnable": c.runnable, "why_not": c.not_runnable or None}
                           for c in result.choice.candidates],
            **({"schedule_hint": {k: v for k, v in hinted.items() if k != "line"}} if hinted else {}),
            **({"executes": r.choice.best.name, "fastest_not_runnable": r.skipped} if r and r.skipped else {}),
        })

    # --json written even if stdout fails (`> /dev/full`, a reader that left), as `gdsl run` writes its
    # files (was: the table's failed print ended the command first, exit 1 and no file; helper-28)
    from gdsl.runtime.files import finish_run
    finish_run(table, [json_file] if args.json else [])
    return 0


def _run_refuses(hint: str, delay, P: int) -> str | None:
    """Why `gdsl run --np P` refuses the executable plan `hint` at P ranks
    (CAGNET's 1.5D grid: c and c*c must divide P), or None."""
    from gdsl.dist.part import parse_spec
    from gdsl.graph.partition import rows_replicated
    try:
        spec = parse_spec(hint, delay=delay)
    except GdslError:
        return None   # grid2d / grid3d: modelled only; run falls back to the model's choice
    if spec.strategy == "rows_replicated":
        try:
            rows_replicated(max(P, 1), P, spec.arg if spec.arg is not None else 2)
        except GdslError as e:
            return str(e)
    return None


def _plan_hint(schedule: dict, result, P: int) -> dict | None:
    """What `gdsl run --np P` does with the schedule's `partition` hint,
    which the table above (the cost model's own ranking) does not apply:
    the hint, the plan run executes, whether the hint applies, and a line."""
    hint = schedule.get("partition")
    if hint in (None, "auto"):
        return None
    from gdsl.cost.choose import fmt_time
    from gdsl.planning import hinted_choice
    delay = schedule.get("delay", 0)
    choice, ok = hinted_choice(result.choice, hint, delay, P)
    if not ok:
        if (refused := _run_refuses(hint, delay, P)) is not None:   # as `gdsl run --np P` would, at partitioning
            return {"partition": hint, "applies": False, "executes": None, "run_refuses": refused,
                    "line": f"schedule: partition = {hint}: not a plan for P={P}: `gdsl run --np {P}` refuses it "
                            f"({refused}); `gdsl compile --np` records the choice above"}
        from gdsl.planning import MODELLED_ONLY, MODELLED_WHY
        if hint.split("(")[0].strip() in MODELLED_ONLY:   # priced (its x row, at a square or cube P), never run
            # (was: "not a plan the cost model prices", beside its row in the table; helper-35)
            why = MODELLED_WHY + (" (its row is marked x above)" if any(
                c.cost.strategy == hint.split("(")[0].strip() for c in result.choice.candidates) else "")
        else:
            why = f"not a plan the cost model prices for P={P}"
        return {"partition": hint, "applies": False, "executes": result.choice.best.name,
                "exact": result.choice.best.cost.exact,
                "line": f"schedule: partition = {hint}: {why}, so "
                        f"`gdsl run --np {P}` and `gdsl compile --np` keep the choice above"}
    if choice.best is result.choice.best:
        line = f"schedule: partition = {hint} names the choice above"
    else:
        approx = "" if choice.best.cost.exact else ", approximate"
        line = (f"schedule: partition = {hint}: `gdsl run --np {P}` executes {choice.best.name} "
                f"({fmt_time(choice.best.time)} per epoch predicted{approx}) instead of the choice above, and "
                "`gdsl compile --np` records it (chosen_by=hint)")
    return {"partition": hint, "applies": True, "executes": choice.best.name, "exact": choice.best.cost.exact,
            "line": line}


def cmd_calibrate(args, parser) -> int:
    import json

    from gdsl.cost.calibrate import BACKENDS, calibrate, summary, write_profile
    startup.release()

    if args.np_ < 2:
        parser.error("--np must be at least 2 (the ping-pong needs two ranks)")
    if args.out is not None:
        if not args.out.strip():   # was: measured, then "cannot write the profile to ."
            parser.error("--out: empty (give a file to write)")
        from gdsl.runtime.files import check_json_path
        check_json_path(args.out, "--out")   # before measuring, not after
    backends = BACKENDS if args.backend == "all" else (args.backend,)
    if args.backend == "all":
        import importlib.util
        if importlib.util.find_spec("numba") is None:
            print("gdsl calibrate: numba is not installed; measuring the reference backend only", file=sys.stderr)
            backends = ("reference",)
    profile = calibrate(args.np_, backends, args.quick,
                        progress=lambda msg: print(f"gdsl calibrate: {msg}", file=sys.stderr))
    path = write_profile(profile, args.out)
    if args.json:
        print(json.dumps(profile, indent=2))
        print(f"wrote {path}", file=sys.stderr)
    else:
        print(summary(profile, path))
    return 0


def cmd_compile(args, parser) -> int:
    from gdsl.compiler import read_source
    from gdsl.passes.pipeline import pass_names

    names = pass_names()
    for p in args.print_ir_after:
        if p not in names:
            parser.error(f"--print-ir-after: unknown pass '{p}' (passes: {', '.join(names)})")
    dims, edges, graph = None, None, None
    if args.np_ is not None and (args.np_ < 1 or not args.data):
        parser.error("--np needs a positive P and --data (use `gdsl plan` for symbolic sizes)")
    if args.mem_per_rank is not None and args.np_ is None:
        parser.error("--mem-per-rank needs --np P (it is the budget of each rank of the plan --np chooses)")
    dumping = bool(args.dump_dir or args.print_ir_after_all or args.print_ir_after)
    if args.np_ is not None and args.emit in ("ast", "ir") and not dumping:
        parser.error(f"--np chooses a plan in the pass pipeline, and --emit {args.emit} shows the program before it; "
                     "use --emit ir-opt (or --print-ir-after PASS) to see it")
    if args.dump_dir is not None and not args.dump_dir.strip():
        parser.error("--dump-dir: empty (give a directory)")
    overrides, mem = _overrides(args.set, parser), _mem_per_rank(args, parser)   # usage errors, before the file
    source = read_source(args.program)   # after the usage errors (was: a missing file won over them, exit 1)
    if args.data:
        dims, edges, graph = _data_dims(source, args, want_graph=True)
    dump_dir = Path(args.dump_dir) if args.dump_dir else None
    made = []   # the folders mkdir creates, deepest first
    if dump_dir:
        d = dump_dir.absolute()
        while not d.exists():
            made.append(d)
            d = d.parent
        try:
            dump_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            if (link := broken_link(dump_dir)) is not None:   # (was: "exists and is not a directory")
                raise GdslError(f"--dump-dir {dump_dir}: {link}" + (", not a directory" if link.startswith("is a")
                                                                    else "")) from None
            raise GdslError(f"--dump-dir {dump_dir}: exists and is not a directory") from None
        except OSError as e:   # was: "/proc/x: no such file"
            why = (e.strerror or str(e)).lower()
            raise GdslError(f"--dump-dir {dump_dir}: cannot create the directory ({why})") from None
        ours = {"00-ast.txt"} | {f"{i:02d}-{name}.ir" for i, name in enumerate(names, 1)}   # what it writes
        for old in dump_dir.iterdir():   # an earlier compile's dumps (was: left beside this one's, helper-9)
            if old.name in ours and (old.is_file() or old.is_symlink()):
                old.unlink()
    try:
        return _compile_and_emit(args, source, dims, edges, graph, dumping, dump_dir, overrides, mem)
    except BaseException:
        for d in made:   # a program that does not parse: no empty folders left behind
            if any(d.iterdir()):
                break
            d.rmdir()
        raise


def _compile_and_emit(args, source, dims, edges, graph, dumping, dump_dir, overrides, mem) -> int:
    from gdsl.compiler import compile_source
    from gdsl.frontend.ast import dump
    from gdsl.ir.printer import print_module
    from gdsl.runtime.files import write_atomic

    step = [0]

    def after(name, module):
        text = print_module(module, args.print_loc)
        step[0] += 1
        if args.print_ir_after_all or name in args.print_ir_after:
            print(f"// ----- IR after {name} -----")
            print(text, end="")
        if dump_dir:
            write_atomic(dump_dir / f"{step[0]:02d}-{name}.ir", text)   # never through a symlink there

    emit = args.emit or (None if dumping else "ir-opt")
    lowered: list[str] = []

    def after_and_keep(name, module):
        if name == "lower" and emit == "ir":
            lowered.append(print_module(module, args.print_loc))
        after(name, module)

    # the whole pipeline whatever --emit shows: its checks (an order or partition hint that cannot be carried
    # out) decide the exit status (was: 0 with --emit ast or ir, 1 with ir-opt; helper-9)
    compiled = compile_source(source, args.program, dims=dims, overrides=overrides,
                              train=args.train, after_each=after_and_keep,
                              ranks=args.np_, edges=edges, graph=graph,
                              memory_per_rank=mem,
                              hoist=True)   # what `gdsl run` executes (without --np: the ranks do not hoist)
    print_compile_warnings(compiled)
    if dump_dir:
        write_atomic(dump_dir / "00-ast.txt", dump(compiled.ast, args.print_loc))
    if args.emit and (args.print_ir_after_all or args.print_ir_after):   # where the dumps end and it begins
        print(f"// ----- --emit {args.emit} -----")
    if emit == "ast":
        print(dump(compiled.ast, args.print_loc), end="")
    elif emit == "ir":
        print(lowered[0], end="")
    elif emit == "ir-opt":
        print(print_module(compiled.module, args.print_loc), end="")
    elif emit == "numba":
        try:
            from gdsl.backends.numba.module import module_kernel_sources
        except ImportError as e:
            raise GdslError(f"--emit numba: the Numba code generator could not be imported ({e})") from None
        print(module_kernel_sources(compiled.module), end="")
    elif emit == "triton":   # source text only: needs neither triton nor a GPU
        from gdsl.backends.triton.module import module_kernel_sources as triton_sources
        print(triton_sources(compiled.module), end="")
    return 0


def cmd_run(args, parser) -> int:
    import gdsl
    from gdsl.graph.io import load_graph, resolve_data
    from gdsl.runtime.files import finish_run, kept_instead, save_state_dict
    from gdsl.runtime.trainer import Diverged, Progress, check_json_path, epoch_time_text, loss_text, train, write_json
    startup.release()

    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.np_ is not None and args.np_ < 1:
        parser.error(f"--np must be at least 1, got {args.np_}")
    from gdsl.dist.launch import under_launcher
    if args.split < 0:   # a usage error (was: exit 1, after compiling the program)
        parser.error(f"--split must be at least 0, got {args.split}")
    if args.np_ is None and not under_launcher():
        for flag in ("parts", "report", "checkpoint", "resume", "partition", "delay", "halo", "mem_per_rank",
                     "comm_timeout"):
            if getattr(args, flag) is not None:   # before the program is compiled (was: after; helper-10)
                parser.error(f"--{flag.replace('_', '-')} needs --np P (a distributed run)")
    _mem_per_rank(args, parser)   # a malformed budget is a usage error (was: exit 1, after loading the data)
    for flag, path in (("--json", args.json), ("--save", args.save)):
        if path and not under_launcher():   # before training, not after (a rank: rank 0 checks, for all)
            check_json_path(path, flag, inputs=(args.program, resolve_data(args.data)))
    if args.json and args.save and Path(args.json).resolve() == Path(args.save).resolve():
        parser.error("--json and --save name the same file")
    prog = gdsl.compile(args.program, train=args.train, **_overrides(args.set, parser))
    cfg = prog.train
    if cfg is None:
        raise GdslError(f"{args.program}: the program has no train block; `gdsl run` needs one")
    data = resolve_data(args.data)
    graph = load_graph(args.data, split=args.split)   # as typed, for its errors (`./`, not `.`)
    if not under_launcher():
        _warn_unread(prog.checked, graph)
    if args.checkpoint_every is not None and args.checkpoint is None:
        parser.error("--checkpoint-every needs --checkpoint DIR")
    if args.np_ is not None or under_launcher():
        from gdsl.dist.cli_run import run_distributed
        return run_distributed(args, prog, graph, data)
    args.backend = args.backend or prog.default_backend
    epochs = args.epochs or cfg.epochs
    if _PROCESS["cap_memory"] and args.backend != "triton" and not os.environ.get("GDSL_NO_MEMORY_CAP"):
        # a shape too large for this machine fails at its allocation, with a message (was: the kernel's
        # OOM killer ended the run without one, having filled the machine's memory)
        from gdsl.runtime.memory import cap_data_to_available
        cap_data_to_available()
    opts = {k: bool(prog.checked.graph_options.get(k)) for k in ("self_loops", "symmetric")}
    edges = f"E={graph.num_edges}"
    if any(opts.values()):   # the edges trained on (was: the file's count only, where gdsl plan said the other)
        named = " and ".join(k for k, on in opts.items() if on)
        edges += f", {graph.with_options(**opts).num_edges} with the program's {named}"
    print(f"gdsl run {args.program}: train '{cfg.name}', model {cfg.model}, data {data} "
          f"(N={graph.num_nodes}, {edges}), backend {args.backend}, seed {args.seed}, "
          f"{epochs} epoch{'s' if epochs != 1 else ''}", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda msg, *a, **k: print(f"gdsl: warning: {msg}", file=sys.stderr)
        progress = Progress(epochs, every=args.log_every)
        try:
            result = train(prog, graph, backend=args.backend, epochs=epochs, seed=args.seed, on_epoch=progress)
        except Diverged as e:   # the epochs before it still go to --json (with "diverged"), then the error
            progress.close()   # (was: the message glued to the live line on a terminal)
            if args.save:
                print(f"gdsl: --save {args.save}: not written (training diverged)", file=sys.stderr)
            if args.json and not kept_instead(args.json, len(e.result.epochs)):
                write_json(args.json, e.result.to_json(program=args.program, data=str(data), backend=args.backend,
                                                       seed=args.seed, train=cfg.name, model=cfg.model,
                                                       split=args.split, set=dict(prog.overrides)))
                print(f"wrote {args.json}", file=sys.stderr)
            raise
    f = result.final
    sig = result.signal
    if sig is not None:
        what = "interrupted" if sig == signal.SIGINT else f"terminated ({signal.Signals(sig).name})"
        progress.close()   # a newline ends the live progress line (was: a blank line in a log file too)
        print(f"gdsl: {what} after {len(result.epochs)} epoch{'s' if len(result.epochs) != 1 else ''}",
              file=sys.stderr)

    def summary():
        if f:
            accs = "  ".join(f"{k} {v:.4f}" for k, v in f.items() if k.endswith("_acc") and "/" not in k)
            print(f"final (epoch {f['epoch']}): loss {loss_text(f['loss'])}  {accs + '  ' if accs else ''}"
                  + epoch_time_text(f["mean_epoch_time"], f.get("first_epoch_time"), f.get("later_epoch_time")))
            if "best_val_epoch" in f:
                print(f"best val epoch {f['best_val_epoch']}: val_acc {f['best_val/val_acc']:.4f}"
                      + (f"  test_acc {f['best_val/test_acc']:.4f}" if "best_val/test_acc" in f else ""))

    def json_file():
        if kept_instead(args.json, len(result.epochs)):
            return
        write_json(args.json, result.to_json(program=args.program, data=str(data), backend=args.backend,
                                             seed=args.seed, train=cfg.name, model=cfg.model,
                                             split=args.split, set=dict(prog.overrides)))
        print(f"wrote {args.json}", file=sys.stderr)

    def save_file():
        if result.steps:   # an interrupted run keeps what it trained
            save_state_dict(args.save, result.model.state_dict())
            done = result.epochs[-1].epoch if result.epochs else 0
            when = f"after epoch {done}"
            if result.steps > len(result.epochs):   # stopped between epoch done + 1's step and its evaluation
                when = f"when stopped: after epoch {done + 1}'s optimizer step, whose evaluation did not run"
            elif result.interrupted:
                when = f"when stopped, after epoch {done}"
            print(f"wrote {args.save} (the params {when}; "
                  f"model.load_state_dict(torch.load({str(args.save)!r})))", file=sys.stderr)
        else:
            print(f"gdsl: --save {args.save}: not written (no optimizer step was taken)", file=sys.stderr)

    # each file written even if stdout or the other file failed
    finish_run(summary, [w for w, want in ((json_file, args.json), (save_file, args.save)) if want])
    return 128 + int(sig) if sig is not None else 0


def cmd_partition(args, parser) -> int:
    import gdsl
    from gdsl.dist.cli_run import cmd_partition as run_partition
    startup.release()
    from gdsl.graph.io import load_graph

    if args.np_ < 1:
        parser.error("--np must be at least 1")
    if not args.out.strip():
        parser.error("--out: empty (give a directory)")   # was: the files went to the working directory
    if args.split < 0:   # a usage error, as for `run` (was: exit 1, after compiling the program)
        parser.error(f"--split must be at least 0, got {args.split}")
    _mem_per_rank(args, parser)   # a malformed budget is a usage error (was: exit 1, after loading the data)
    prog = gdsl.compile(args.program, train=args.train, **_overrides(args.set, parser))
    graph = load_graph(args.data, split=args.split)   # as typed, for its errors (was: always split 0; helper-70)
    _warn_unread(prog.checked, graph)
    return run_partition(args, prog, graph)


def _stdout_failed(e: OSError) -> int:
    """A write to stdout failed: a reader that left is not an error of ours
    (141, as SIGPIPE would give), anything else (a full disk) is said on
    stderr (exit 1); what stdout still holds then goes to /dev/null."""
    discard_stdout()
    if isinstance(e, BrokenPipeError):
        return 141
    try:
        print(f"gdsl: error: {(e.strerror or str(e)).lower()}", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return 1


def _dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--opt -VALUE` as `--opt=-VALUE` for the options that take one value,
    so a value that starts with '-' reaches gdsl's own check (a usage error
    that says what is wrong, exit 2): was argparse's "expected one argument"
    for `--mem-per-rank -4G`, `--comm-timeout -1e3` or `--partition -x`
    (it takes only what looks like a negative number, `-4`, as a value).
    A value that is itself an option of the command (`-h`, `--np`) stays one:
    `--json --save F` still says --json expects one argument."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return argv
    cmd_at = next((i for i, a in enumerate(argv) if a in sub.choices), None)
    if cmd_at is None:
        return argv
    sp = sub.choices[argv[cmd_at]]
    one = {o for a in sp._actions if a.option_strings and a.nargs is None
           and isinstance(a, (argparse._StoreAction, argparse._AppendAction)) for o in a.option_strings}
    out, i = argv[:cmd_at + 1], cmd_at + 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out += argv[i:]
            break
        name = a if a in one else None
        if name is None and a.startswith("--") and "=" not in a and a not in sp._option_string_actions:
            match = [o for o in sp._option_string_actions if o.startswith(a)]   # an abbreviation (--mem)
            name = match[0] if len(match) == 1 and match[0] in one else None
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if (name is not None and nxt is not None and len(nxt) > 1 and nxt[0] == "-" and nxt[1] != "-"
                and nxt not in sp._option_string_actions):
            out.append(f"{a}={nxt}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


MAX_RANKS = 10_000_000   # --np: more than any MPI job runs today; bounds the planner's and partitioner's loops


def main(argv: list[str] | None = None) -> int:
    for stream in ("stdout", "stderr"):
        if getattr(sys, stream) is None:
            # started with the descriptor closed (`gdsl run ... >&-`): Python's stream is None; what gdsl
            # prints goes nowhere (was: internal error at the first flush, and --json / --save not written)
            setattr(sys, stream, open(os.devnull, "w"))   # noqa: SIM115 - the process's stream, open to its end
    parser = _parser()
    argv = _dash_values(parser, sys.argv[1:] if argv is None else list(argv))
    try:
        args, extra = parser.parse_known_args(argv)
    except OSError as e:   # --help or --version to a full disk or a reader that left (was: exit 0)
        return _stdout_failed(e)
    if extra:   # the command's usage and `gdsl COMMAND: error:` (was: the top-level usage)
        (getattr(args, "command_parser", None) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "data", None) is not None and not args.data.strip():   # was: '.' read (run), ignored (compile, plan)
        args.command_parser.error("--data: empty (give a .npz file or a builtin name: cora, citeseer)")
    for flag in ("json", "save"):
        if isinstance(getattr(args, flag, None), str) and not getattr(args, flag).strip():   # was: ignored, nothing written
            args.command_parser.error(f"--{flag}: empty (give a file to write)")
    for flag in ("checkpoint", "resume", "parts"):
        # was (run --np): '' taken as "not given": trained with no checkpoint, from scratch, in a temporary
        # directory, without a word (helper-27)
        if isinstance(getattr(args, flag, None), str) and not getattr(args, flag).strip():
            args.command_parser.error(f"--{flag}: empty (give a directory)")
    if isinstance(getattr(args, "profile", None), str) and not args.profile.strip():
        # was (plan): '' read as the path '.': "gdsl: error: .: is a directory, not a profile file", exit 1
        args.command_parser.error("--profile: empty (give a profile file)")
    if (getattr(args, "np_", None) or 0) > MAX_RANKS:   # was: plan and partition ran for hours (O(P) loops)
        args.command_parser.error(f"--np {args.np_}: at most {MAX_RANKS:,} ranks")
    if isinstance(getattr(args, "program", None), str) and not args.program.strip():
        # was (run): '' read as program text ("the program is empty")
        args.command_parser.error("the program: empty (give a .gd file)")
    debug = os.environ.get("GDSL_DEBUG") == "1"
    # `gdsl run`: SIGTERM / SIGHUP stop it as Ctrl-C does (the trainer keeps what it
    # trained; --json is written); a rank under mpiexec has its own handling (gdsl/dist)
    from gdsl.dist.launch import under_launcher

    stopping = stop_on_signals() if args.cmd == "run" and not under_launcher() else contextlib.nullcontext()
    with stopping, warnings.catch_warnings(), _guarded_stderr() as stderr:
        from gdsl.diagnostics import GdslWarning
        warnings.simplefilter("default", GdslWarning)   # printed, never raised (PYTHONWARNINGS=error)
        warnings.showwarning = _show_warning
        rc = _dispatch(args, args.command_parser, debug)
        if rc == 0 and stderr.failed is not None:   # the work is done, its files written; its messages were cut
            return 141 if isinstance(stderr.failed, BrokenPipeError) else 1
        return rc


@contextlib.contextmanager
def _guarded_stderr():
    """sys.stderr as a GuardedStderr while the command runs (a reader that
    leaves does not stop it), given back after."""
    from gdsl.runtime.files import GuardedStderr
    guard = GuardedStderr(sys.stderr)
    sys.stderr = guard
    try:
        yield guard
    finally:
        if sys.stderr is guard:
            sys.stderr = guard.stream


def _show_warning(message, category, *rest, **kw) -> None:
    """Warnings on stderr as gdsl's own lines: a compile warning with its
    source line and caret (once: a rank under a launcher other than rank 0
    leaves it to rank 0), any other as `gdsl: warning: ...`."""
    from gdsl.diagnostics import GdslWarning
    from gdsl.dist.launch import launcher_rank
    if isinstance(message, GdslWarning):
        if launcher_rank() in (None, 0):
            print(message.rendered, file=sys.stderr)
    else:
        print(f"gdsl: warning: {message}", file=sys.stderr)


def print_compile_warnings(compiled) -> None:
    from gdsl.diagnostics import render
    for d in compiled.warnings:
        print(render(d, compiled.source), file=sys.stderr)


def _command(args, parser) -> int:
    if args.cmd == "passes":
        return cmd_passes(args)
    if args.cmd == "compile":
        return cmd_compile(args, parser)
    if args.cmd == "plan":
        return cmd_plan(args, parser)
    if args.cmd == "calibrate":
        return cmd_calibrate(args, parser)
    if args.cmd == "partition":
        return cmd_partition(args, parser)
    return cmd_run(args, parser)


def _dispatch(args, parser, debug: bool) -> int:
    try:
        rc = _command(args, parser)
        # what is still buffered is written here, where a full disk or a reader that left gets the
        # answers below (was: at exit, after main: exit 120 and Python's "Exception ignored" message)
        sys.stdout.flush()
        return rc
    except CompileError as e:
        print(render_all(e), file=sys.stderr)
        n = len(e.diagnostics)
        if n > 1:
            print(f"{n} errors generated.", file=sys.stderr)
        return 1
    except GdslError as e:
        print(f"gdsl: error: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:   # (a symlink to nothing: was "no such file", naming the link)
        link = broken_link(e.filename) if isinstance(e.filename, str) else None
        hint = " (a program is not read from stdin as '-': give /dev/stdin)" if e.filename == "-" else ""
        print(f"gdsl: error: {e.filename}: {link or 'no such file'}{hint}", file=sys.stderr)
        return 1
    except IsADirectoryError as e:
        print(f"gdsl: error: {e.filename}: is a directory", file=sys.stderr)
        return 1
    except PermissionError as e:
        print(f"gdsl: error: {e.filename}: permission denied", file=sys.stderr)
        return 1
    except FileExistsError as e:   # a directory wanted (--dump-dir, --out) where a file is
        link = broken_link(e.filename) if isinstance(e.filename, str) else None
        print(f"gdsl: error: {e.filename}: {link or 'exists and is not a directory'}", file=sys.stderr)
        return 1
    except NotADirectoryError as e:
        print(f"gdsl: error: {e.filename}: a part of this path is not a directory", file=sys.stderr)
        return 1
    except MemoryError:
        print("gdsl: error: out of memory", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gdsl: interrupted", file=sys.stderr)
        return 130
    except Terminated as e:   # before or after training (the trainer handles it during)
        print(f"gdsl: terminated ({e.name})", file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:  # `gdsl ... | head`: the reader left; not an error of ours
        discard_stdout()
        return 141
    except OSError as e:   # the file system's answer, not a bug: a name too long, a symlink loop, a full disk
        why = (e.strerror or str(e)).lower()
        if e.filename is not None:
            print(f"gdsl: error: {e.filename}: {why}", file=sys.stderr)
        else:   # (a print to a full disk names no file)
            print(f"gdsl: error: {why}", file=sys.stderr)
            discard_stdout()
        return 1
    except Exception as e:  # noqa: BLE001 - the one boundary
        from gdsl.runtime.memory import out_of_memory
        oom = out_of_memory(e) if isinstance(e, RuntimeError) else None
        if oom is not None:   # torch's allocation failure: a user error (a size far too large), not a bug
            print(f"gdsl: error: out of memory: {oom}", file=sys.stderr)
            return 1
        if debug:
            raise
        from gdsl.passes.pipeline import InternalCompilerError
        print(f"gdsl: internal compiler error: {e}", file=sys.stderr)
        if isinstance(e, InternalCompilerError):
            print(e.ir, file=sys.stderr)
        print("(this is a bug in gdsl; rerun with GDSL_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


_PROCESS = {"cap_memory": False}   # set by `entry` (gdsl/__main__.py): the process is gdsl's own, not a caller's (tests, notebooks)


def entry() -> None:
    """The `gdsl` process (kept for `python -m gdsl.cli` and scripts that call
    it): gdsl/__main__.py's entry, which the console script now names. It
    imports this module inside its `try` (a Ctrl-C while it imports says
    `gdsl: interrupted`, exit 130) and keeps the status at exit."""
    from gdsl.__main__ import entry as process_entry
    process_entry()


if __name__ == "__main__":
    entry()
