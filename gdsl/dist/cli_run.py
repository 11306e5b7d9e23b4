"""`gdsl run --np P` and `gdsl partition`: choosing the plan, partitioning,
launching (or joining a launcher's ranks)."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gdsl.backends import require_backend
from gdsl.diagnostics import CompileError, GdslError, render_all
from gdsl.dist.part import Spec, parse_spec, part_path, read_header
from gdsl.graph.io import resolve_data
from gdsl.planning import MODELLED_ONLY   # priced by the cost model (gdsl plan), not executed


def _from_candidate(cand, P: int, approximate: bool) -> str | None:
    """The executable spec text of a cost-model candidate, or None."""
    c = cand.cost
    params = dict(c.params)
    name = c.strategy
    if name == "rows":
        return f"rows({params.get('partition', 'hash')})"
    if name == "edge_cut":
        return "rows(metis)"
    if name == "rows_replicated":
        reps = int(params["c"])
        # the ranks run whole broadcast stages only, c*c | P (graph/partition.py); the model prices
        # every c with c | P, c*c <= P (was: auto chose rows_replicated(3) at P = 24, refused at partitioning)
        return f"rows_replicated({reps})" if P % (reps * reps) == 0 else None
    if name == "redistribute":
        ra = params.get("R_A")
        return "redistribute" if ra is None or int(ra) == P else f"redistribute({int(ra)})"
    if name == "vertex_cut":
        return "vertex_cut" if params.get("delay", 0) in (0, "0") or approximate else None
    if name in ("features", "replicate"):
        return name
    return None  # grid2d / grid3d: modelled, not executed




def why_not_runnable(cand, P: int) -> str:
    """Why the ranks skip `cand`, as the words after "cannot run PLAN": its
    rank count for a 1.5D plan whose c*c does not divide P (was: "for this
    program yet" there too, which blamed the program)."""
    params = dict(cand.cost.params)
    if cand.cost.strategy in MODELLED_ONLY:
        return "(they are modelled, not executed)"
    if cand.cost.strategy == "rows_replicated" and P % (int(params["c"]) ** 2):
        c = int(params["c"])
        return f"on {P} ranks (1.5D needs c*c = {c * c} to divide P)"
    return "for this program yet"


def refuse_modelled_only(partition: str | None) -> None:
    if partition is not None and partition.split("(")[0].strip() in MODELLED_ONLY:
        raise GdslError(f"--partition {partition}: grid2d and grid3d are modelled by the cost model (gdsl plan) "
                        "but not executed; name an executable plan or auto")


RECORDED_ONLY = {"cache": "HEC caching", "pipeline": "push-pull pipelining"}   # checked and recorded, not built


def note_recorded_only(prog) -> None:
    """The schedule's `cache` and `pipeline` hints are checked and recorded in
    the IR but not executed (docs/language.md): say so, rather than run an
    exact plan silently in their place."""
    sched = prog.checked.schedule
    for key, what in RECORDED_ONLY.items():
        v = sched.get(key)
        if isinstance(v, dict):
            print(f"gdsl: {key} = {v.get('kind')}(...) (the schedule's hint) is recorded, not executed: {what} is "
                  "not built yet, so the run is exact without it", file=sys.stderr)


def choose_spec(prog, graph, P: int, partition: str | None, delay, halo: str, seed: int,
                mem_per_rank: str | None = None, quiet: bool = False, backend: str | None = None) -> Spec:
    """--partition, else the schedule's `partition` hint, else the cost model's
    fastest executable plan (`auto`), priced at the rates of `backend`, the
    ranks' backend (None: theirs by default, reference; planning.rank_profile)."""
    check_trainable(prog, graph)   # before the plan is chosen (was: "nothing to plan", or the ranks' error)
    sched = prog.checked.schedule
    if not quiet:
        note_recorded_only(prog)
    halo_given = halo is not None
    halo = halo or "alltoallv"   # --halo's default (None: not given)
    # `--partition auto` is what an absent flag means: the cost model over the schedule's hint
    if partition is not None and not partition.strip():
        raise GdslError("--partition: empty (give a plan such as rows(metis), or auto)")
    partition = None if partition is not None and partition.strip() == "auto" else partition
    hint = sched.get("partition") if sched.get("partition") not in (None, "auto") else None
    refuse_modelled_only(partition)
    if partition is None and hint is not None and hint.split("(")[0].strip() in MODELLED_ONLY:
        if not quiet:
            print(f"gdsl: partition = {hint} (the schedule's hint) is modelled, not executed: the cost model "
                  "chooses the plan", file=sys.stderr)
        hint = None
    text = partition or hint
    delay_from_hint = delay is None and sched.get("delay", 0) != 0
    if delay is None:
        delay = sched.get("delay", 0)
    if text is None:
        if P == 1:
            text = "replicate"
        else:
            from gdsl.compiler import compile_source
            from gdsl.planning import first_runnable, parse_bytes, plan
            dims, g, ir = _ranks_ir(prog, graph)
            lowered = compile_source(prog.source, prog.file, dims=dims, overrides=prog.overrides,
                                     train=prog.train_name, stop_after="lower").module
            pl = plan(lowered, dims, P, parse_bytes(mem_per_rank) if mem_per_rank else None,
                      allow_approximate=delay != 0, graph=g, backend=backend, halo=halo)
            found = first_runnable(pl.choice, P, ir, approximate=delay != 0, delay=delay, halo=halo, seed=seed)
            if found is not None:
                cand, spec = found
                halo_note = ""
                if spec.strategy != "rows" and spec.halo != "alltoallv":
                    # --halo is how the row plans exchange (what the model priced them at); a non-row
                    # choice runs what it was priced as, as `--partition features --halo bcast` is
                    # refused (was: P3's data-parallel layers ran the broadcast, priced as alltoallv;
                    # helper-37)
                    from dataclasses import replace as _replace
                    spec = _replace(spec, halo="alltoallv")
                    halo_note = f"; --halo {halo} applies to the row plans (rows, edge_cut) only, not to this one"
                if not quiet:
                    note = "" if cand is pl.choice.best else \
                        f" (the ranks cannot run the model's fastest, {pl.choice.best.name}, " \
                        f"{why_not_runnable(pl.choice.best, P)})"
                    if delay != 0 and spec.strategy != "vertex_cut":
                        note += f"; delay = {delay} applies to vertex_cut only, so this plan is exact"
                    # the model's name (edge_cut(S=145): S halo rows) and the plan the ranks run under it (was:
                    # two names of one plan on two lines; helper-5)
                    ran = spec.describe()
                    runs = "" if ran.split(" ")[0] == cand.name else f", run as {ran}"
                    print(f"gdsl: partition = auto: the cost model chose {cand.name}{runs}{note}{halo_note}",
                          file=sys.stderr)
                return spec
            raise GdslError("partition = auto: no executable plan fits; name one with --partition")
    try:
        spec = parse_spec(text, delay=delay, halo=halo, seed=seed)
    except GdslError as e:
        if delay_from_hint and "applies to vertex_cut" in str(e):
            # (was: no word of where the delay came from; helper-72)
            raise GdslError(f"{e} (delay = {delay} is the schedule's hint; --delay 0 runs {text.strip()} "
                            "exactly)") from None
        raise
    if halo_given and spec.strategy != "rows":
        # as --delay on a rows plan is (was: ignored without a word; helper-72)
        raise GdslError(f"--halo {halo} applies to the row plans (rows, edge_cut: how they exchange halo rows) "
                        f"only, not to {text.strip()}")
    if spec.strategy != "replicate":
        _refuse_unrunnable(spec, f"--partition {partition}" if partition else f"partition = {text} (the schedule's "
                           "hint)", _ranks_ir(prog, graph)[2], prog.file, P)
    return spec


def check_trainable(prog, graph) -> None:
    """What single-process `gdsl run` checks before training (binding.check_masks: the program as
    written; the built module: a param layer called only in a `repeat` that runs 0 times), made
    before a plan is chosen, the graph partitioned or a rank started, with the same located error
    at the train block's `model =` line (helper-33)."""
    from gdsl.compiler import check_built_trainable, compile_source
    from gdsl.runtime.binding import bind_dims, check_masks
    check_masks(prog.checked, graph)
    if prog.checked.train is None:
        return
    lowered = compile_source(prog.source, prog.file, dims=bind_dims(prog.checked, graph), overrides=prog.overrides,
                             train=prog.train_name, stop_after="lower").module
    check_built_trainable(prog.checked, lowered)


def _ranks_ir(prog, graph):
    """(dims, graph with the program's graph options, ir): `ir(delay)` is the
    optimised IR each rank compiles for a plan with that delay (run.make_model;
    the order pass reads the delay), compiled once per delay."""
    from gdsl.compiler import compile_source
    from gdsl.runtime.binding import bind_dims
    dims = bind_dims(prog.checked, graph)
    opts = prog.checked.graph_options
    g = graph.with_options(self_loops=opts.get("self_loops", False), symmetric=opts.get("symmetric", False))
    dims["E"] = g.num_edges
    optimised = {}

    def ir(d):
        if d not in optimised:
            optimised[d] = compile_source(prog.source, prog.file, dims=dims, overrides=prog.overrides,
                                          train=prog.train_name, delay=d).module
        return optimised[d]
    return dims, g, ir


def _refuse_unrunnable(spec: Spec, named: str, ir, file: str, P: int) -> None:
    """The ranks' own check (DistModule._check_supported) of a named plan, made
    before partitioning (was: the graph was partitioned and the ranks started,
    then they refused it, with no place in the program)."""
    from gdsl.dist.support import check_delay, check_supported
    from gdsl.planning import _replicas
    module = ir(spec.delay)
    try:
        check_supported(spec.strategy, module, replicas=_replicas(spec, P), P=P)
        check_delay(spec.delay if spec.strategy == "vertex_cut" else 0, module)
    except GdslError as e:
        op = getattr(e, "op", None)
        at = f" ({file}:{op.span.line}:{op.span.col})" if op is not None and op.span.line > 0 else ""
        raise GdslError(f"{named}: {e}{at}") from None


def ranks_backend(args) -> str:
    """The backend the ranks run: --backend, else reference (not the single
    process's default, numba); the auto plan is priced at its rates."""
    from gdsl.planning import RANKS_BACKEND
    return getattr(args, "backend", None) or RANKS_BACKEND


def worker_args(args, prog, parts: str) -> dict:
    return {"program": args.program, "train": args.train, "overrides": prog.overrides, "parts": parts,
            "data": str(resolve_data(getattr(args, "data", None))), "split": getattr(args, "split", 0),
            "epochs": args.epochs, "seed": args.seed, "json": args.json, "save": getattr(args, "save", None),
            "report": args.report,
            "checkpoint": args.checkpoint, "checkpoint_every": args.checkpoint_every, "resume": args.resume,
            "log_every": args.log_every, "backend": ranks_backend(args),
            "comm_timeout": getattr(args, "comm_timeout", None)}


def _check_existing(parts: Path, P: int, prog, graph, partition: str | None, delay=None,
                    halo: str | None = None, ranks: str | None = None) -> dict:
    """The header of rank 0's file of a partition already in --parts, checked
    for this run: rank count, program, graph and (when given) --partition,
    --delay and --halo. `ranks` says where P came from (default: --np)."""
    from gdsl.dist.run import graph_key, other_graph, program_key
    p0 = part_path(parts, 0)
    if not p0.exists():
        raise GdslError(f"{p0}: missing partition file for rank 0 (write them with `gdsl partition ... --out {parts}`)")
    h = read_header(p0)
    if h.get("size") != P:
        raise GdslError(f"{parts}: partitioned for {h.get('size')} ranks, but {ranks or f'--np is {P}'}")
    if h.get("program") != program_key(prog.source, prog.overrides, prog.train_name):
        raise GdslError(f"{parts}: partitioned for another program (or other --set values); partition again")
    if h.get("graph") != (key := graph_key(graph)):
        if (what := other_graph(h.get("graph"), key)) == "another graph":
            what = f"another graph (not {graph.source or graph.name})"
        raise GdslError(f"{parts}: partitioned for {what}; partition again")
    stored, sj = str(h.get("strategy", "")), h.get("spec") or {}
    refuse_modelled_only(partition)   # was: "unknown partition 'grid2d'" with --parts
    if partition not in (None, "auto"):
        want = parse_spec(partition)   # rows = rows(hash), edge_cut = rows(metis), ...

        def plan(strategy, arg):   # redistribute = redistribute(P) (was: matched redistribute(R) for any R)
            return strategy, (P if strategy == "redistribute" and arg is None else arg)
        if plan(want.strategy, want.arg) != plan(sj.get("strategy"), sj.get("arg")):
            raise GdslError(f"{parts}: partitioned as {stored}, but --partition asks for {partition}; partition "
                            "again or drop --partition")
    for flag, value, key in (("--delay", delay, "delay"), ("--halo", halo, "halo")):
        if key == "halo" and sj.get("strategy") != "rows":
            continue   # --halo applies to the row plans only: auto's non-row choice under --halo bcast (helper-37)
        if value is not None and key in sj and value != sj[key]:
            raise GdslError(f"{parts}: partitioned with {key} = {sj[key]}, but {flag} asks for {value}; partition "
                            f"again or drop {flag}")
    return h


def check_delay(delay, epochs: int) -> None:
    """cd-r (DistGNN §5.3): a leaf's partial aggregate reaches its root r
    epochs after it is sent; an r beyond the epochs trained delivers nothing
    (and keeps r bins per aggregation), so it is refused."""
    if isinstance(delay, int) and not isinstance(delay, bool) and delay > epochs:
        raise GdslError(f"delay = {delay} (--delay or the schedule's delay): cd-r delivers a remote partial "
                        f"aggregate r epochs after it is sent, and this run trains {epochs} epochs; give "
                        f"r <= {epochs} (or --delay none: no remote contributions at all)")


def _epochs(args, prog) -> int:
    return args.epochs or prog.train.epochs


def check_outputs(args) -> None:
    """--json FILE, --save FILE and --checkpoint DIR can be written: checked before the
    ranks start, not found out after training."""
    from gdsl.graph.io import resolve_data
    from gdsl.runtime.files import broken_link, check_json_path
    for flag in ("json", "save"):
        if getattr(args, flag, None):
            check_json_path(getattr(args, flag), f"--{flag}",
                            inputs=(getattr(args, "program", None), resolve_data(getattr(args, "data", None))))
            # nor a file of the directories the run reads or writes (was: --save parts/part-0.npz, --json
            # ck/checkpoint.json with --resume ck were accepted and broke them; helper-76)
            at = Path(getattr(args, flag)).resolve().parent
            for dflag in ("parts", "checkpoint", "resume"):
                d = getattr(args, dflag, None)
                if d and Path(d).resolve() == at:
                    raise GdslError(f"--{flag} {getattr(args, flag)}: is in the --{dflag} directory {d}, whose files "
                                    "gdsl reads and writes; write it elsewhere")
    if getattr(args, "checkpoint", None):
        p = Path(args.checkpoint)
        if p.exists() and not p.is_dir():
            raise GdslError(f"--checkpoint {p}: exists and is not a directory (a checkpoint is a directory)")
        if (link := broken_link(p)) is not None:   # (was: "cannot write there (File exists)")
            raise GdslError(f"--checkpoint {p}: {link}" + (" (a checkpoint is a directory)" if link.startswith("is a")
                                                           else ""))
        resumed = getattr(args, "resume", None)
        if (p / "checkpoint.json").exists() and not (resumed and Path(resumed).resolve() == p.resolve()):
            # another run's checkpoint (or this run's, restarted without --resume) is not replaced
            # without a word (was: overwritten at the first checkpoint; helper-76)
            raise GdslError(f"--checkpoint {p}: holds a checkpoint already; continue that run with --resume {p}, "
                            "or start over in another directory (or remove this one)")
        q = p
        while not q.exists() and q != q.parent:
            q = q.parent    # the directory it will be created in
        if not q.is_dir():
            raise GdslError(f"--checkpoint {p}: {q} is not a directory")
        if not os.access(q, os.W_OK | os.X_OK):
            raise GdslError(f"--checkpoint {p}: cannot write in {q} (permission denied)")
        try:   # os.access passes for root where writing fails (/proc, a read-only mount): try it
            args.made_checkpoint_dir = not p.exists()   # removed again if the run stops before writing in it
            p.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=p, prefix=".gdsl-probe-")
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise GdslError(f"--checkpoint {p}: cannot write there ({e.strerror or e})") from None


def _check_resume(args, P: int, prog, graph_key: str | None, plan: str | None) -> None:
    if args.resume:
        from gdsl.dist.run import check_resume, checkpoint_identity
        check_resume(Path(args.resume), P, {**checkpoint_identity(prog, graph_key, plan), "seed": args.seed},
                     _epochs(args, prog))


def run_distributed(args, prog, graph, data) -> int:
    from gdsl.dist.launch import (
        Terminated,
        launch,
        reap_stale_temp_dirs,
        stop_on_signals,
        temp_parts_dir,
        under_launcher,
    )
    from gdsl.dist.run import check_out_dir, graph_key, write_partition
    from gdsl.planning import idle_ranks_warning

    if under_launcher():
        return _run_as_rank(args, prog, graph)
    P = args.np_
    if P < 1:
        raise GdslError(f"--np must be at least 1, got {P}")
    require_backend(getattr(args, "backend", None))
    check_outputs(args)
    reap_stale_temp_dirs()   # what a killed run left
    tmp = None
    launched = False
    # SIGTERM / SIGHUP (and SIGINT) while partitioning or training: the ranks
    # are stopped (launch), the temporary directories removed (finally)
    started = time.time()
    with stop_on_signals():
        try:
            if args.parts and part_path(args.parts, 0).exists():
                check_trainable(prog, graph)
                h = _check_existing(Path(args.parts), P, prog, graph, args.partition, args.delay, args.halo)
                check_delay((h.get("spec") or {}).get("delay"), _epochs(args, prog))
                _check_resume(args, P, prog, h.get("graph"), h.get("strategy"))
                parts = args.parts
                note_recorded_only(prog)
                print(f"gdsl run: using the partition in {parts}", file=sys.stderr)
                if args.mem_per_rank is not None:   # (was: ignored without a word; helper-23's note)
                    print(f"gdsl run: warning: --mem-per-rank {args.mem_per_rank} is not used: the plan of the "
                          f"partition in {parts} was chosen when it was written", file=sys.stderr)
            else:
                if args.parts:
                    check_out_dir(args.parts)
                spec = choose_spec(prog, graph, P, args.partition, args.delay, args.halo, args.seed,
                                   args.mem_per_rank, backend=ranks_backend(args))
                check_delay(spec.delay, _epochs(args, prog))
                _check_resume(args, P, prog, graph_key(graph), spec.describe())
                parts = args.parts or (tmp := temp_parts_dir())
                info = write_partition(prog, graph, spec, P, parts)
                extra = f", replication factor {info['replication_factor']}" if "replication_factor" in info else ""
                print(f"gdsl run: {spec.describe()} over {P} rank{'s' if P != 1 else ''}; "
                      f"partitioned in {info['seconds']:.2f} s{extra}", file=sys.stderr)
                if spec.strategy != "replicate" and (idle := idle_ranks_warning(P, graph.num_nodes)):
                    print(f"gdsl run: warning: {idle}", file=sys.stderr)
            launched = True
            return launch(worker_args(args, prog, parts), P, temp_dirs=[tmp] if tmp else None)
        except (KeyboardInterrupt, Terminated) as e:
            if isinstance(e, Terminated):
                msg, code = f"gdsl: terminated ({e.name})", 128 + e.signum
            else:
                msg, code = "gdsl: interrupted", 130
            ran = launched and not getattr(e, "gdsl_before_ranks", False)   # (was: said between launch and mpiexec)
            print(msg + ("; all ranks stopped" if ran else ""), file=sys.stderr)
            if getattr(args, "made_checkpoint_dir", False):
                try:   # the empty directory check_outputs made, when nothing was written in it (helper-3)
                    Path(args.checkpoint).rmdir()
                except OSError:
                    pass
            # (the first signal lets the ranks finish their epoch and write them: gdsl/dist/stop.py;
            # here they were stopped at once, by a second signal or as they did not answer)
            why = "the ranks were stopped at once" if ran else "the run was stopped before its ranks started"
            # (each said only when rank 0 did not write it before the stop: was "not written" for a --json
            # rank 0 had written, the ranks then hung in their teardown; helper-3)
            if launched and getattr(args, "save", None) and not _written_since(args.save, started):
                print(f"gdsl: --save {args.save}: not written ({why}; "
                      "--checkpoint DIR keeps a stopped distributed run's state)", file=sys.stderr)
            if launched and getattr(args, "json", None) and not _written_since(args.json, started):   # (helper-70)
                print(f"gdsl: --json {args.json}: not written ({why})", file=sys.stderr)
            if launched and getattr(args, "checkpoint", None):   # which epoch it holds (helper-76's note)
                print(f"gdsl: --checkpoint {args.checkpoint}: {_checkpoint_held(args.checkpoint)}", file=sys.stderr)
            return code
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)


def _written_since(path: str, t0: float) -> bool:
    try:
        return os.stat(path).st_mtime >= t0 - 1.0   # (file systems with 1 s timestamps)
    except OSError:
        return False


def _checkpoint_held(directory: str) -> str:
    from gdsl.dist.run import read_checkpoint_index
    try:
        epoch = read_checkpoint_index(Path(directory))["epoch"]
    except GdslError:
        return "no checkpoint was written"
    return f"holds the checkpoint after epoch {epoch} (--resume {directory} continues from it)"


def _cache_name(args, prog, graph, size: int) -> str:
    """The partition cache under a foreign launcher, `.gdsl-parts/NAME`: one
    per program, graph, plan arguments and rank count (was: program and rank
    count only, so another --data or --partition reused a stale partition)."""
    import hashlib

    from gdsl.dist.run import graph_key, program_key
    # (and the ranks' backend: the auto plan is priced at its rates)
    plan = repr((graph_key(graph), args.partition, args.delay, args.halo, args.seed, args.mem_per_rank,
                 ranks_backend(args)))
    return f"{program_key(prog.source, prog.overrides, prog.train_name)}-" \
           f"{hashlib.sha256(plan.encode()).hexdigest()[:12]}-{size}"


def _run_as_rank(args, prog, graph) -> int:
    """Started by mpiexec/srun: rank 0 partitions (unless --parts holds one)
    and checks what can be checked before training (outputs, --resume); all
    ranks train. A first signal (the launcher forwards it to every rank) is
    the stop after an epoch from the start (gdsl/dist/stop.py): was, during
    rank 0's partitioning, a KeyboardInterrupt on rank 0 alone while the
    others waited in its bcast for ever."""
    from mpi4py import MPI

    from gdsl.dist import worker
    from gdsl.dist.run import check_out_dir, write_partition
    from gdsl.dist.stop import catch_signals
    catch_signals()
    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    if args.np_ is not None and args.np_ != size:   # every rank sees it alike, rank 0 says it (was: each
        if comm.Get_rank() == 0:                     # rank printed it; helper-72); no collective: none waits
            print(f"gdsl: error: --np {args.np_} but the launcher started {size} ranks", file=sys.stderr)
        return 1
    parts = args.parts or str(Path(".gdsl-parts") / _cache_name(args, prog, graph, size))
    err = None
    if comm.Get_rank() == 0:
        try:
            require_backend(getattr(args, "backend", None))
            check_outputs(args)
            if args.parts and part_path(parts, 0).exists():
                check_trainable(prog, graph)
                started = f"--np is {size}" if args.np_ is not None else f"the launcher started {size}"
                _check_existing(Path(parts), size, prog, graph, args.partition, args.delay, args.halo, started)
                if args.mem_per_rank is not None:   # as `gdsl run --np P` says it (was: not a word under mpiexec)
                    print(f"gdsl run: warning: --mem-per-rank {args.mem_per_rank} is not used: the plan of the "
                          f"partition in {parts} was chosen when it was written", file=sys.stderr)
            elif not part_path(parts, 0).exists():
                check_out_dir(parts)
                spec = choose_spec(prog, graph, size, args.partition, args.delay, args.halo, args.seed,
                                   args.mem_per_rank, backend=ranks_backend(args))
                check_delay(spec.delay, _epochs(args, prog))
                if (hold := os.environ.get("GDSL_TEST_HOLD_PARTITION")):   # test hook: a long partitioning
                    print("gdsl-test: partitioning", file=sys.stderr, flush=True)
                    time.sleep(float(hold))
                write_partition(prog, graph, spec, size, parts)
            h = read_header(part_path(parts, 0))
            check_delay((h.get("spec") or {}).get("delay"), _epochs(args, prog))
            if args.resume:
                _check_resume(args, size, prog, h.get("graph"), h.get("strategy"))
        except CompileError as e:   # the located no-params error (check_trainable): as `gdsl run` prints it
            err = ("located", render_all(e))   # (was: "internal error: CompileError ..."; helper-33)
        except GdslError as e:
            err = str(e)
        except OSError as e:   # e.g. a --parts or working directory that cannot be written
            err = f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}"
        except Exception as e:   # noqa: BLE001 - told to every rank, so none waits in bcast for ever
            err = f"internal error: {type(e).__name__}: {e} (this is a bug in gdsl)"
    err = comm.bcast(err, root=0)
    if err:
        if comm.Get_rank() == 0:
            print(err[1] if isinstance(err, tuple) else f"gdsl: error: {err}", file=sys.stderr)
        return 1
    return worker.run(worker_args(args, prog, parts))


def cmd_partition(args, prog, graph) -> int:
    from gdsl.dist.run import check_out_dir, write_partition
    from gdsl.runtime.signals import Terminated, stop_on_signals
    # SIGTERM and SIGHUP stop it as Ctrl-C does, with its files removed (was: killed with a temporary
    # file left in --out)
    check_out_dir(args.out)
    out = Path(args.out)
    made = not os.path.lexists(out)
    with stop_on_signals():
        try:
            spec = choose_spec(prog, graph, args.np_, args.partition, args.delay, args.halo, args.seed,
                               args.mem_per_rank)
            info = write_partition(prog, graph, spec, args.np_, args.out)
        except (KeyboardInterrupt, Terminated):
            if made and out.is_dir() and not any(out.iterdir()):
                try:   # the directory it made for the files, nothing in it
                    out.rmdir()
                except OSError:
                    pass
            if made and not os.path.lexists(out):   # (was: "DIR holds no partition ...", DIR never made)
                print("gdsl partition: stopped before anything was written", file=sys.stderr)
            elif not part_path(args.out, 0).exists():
                print(f"gdsl partition: stopped before every file was written: {args.out} holds no partition a "
                      "run would take", file=sys.stderr)
            raise
    from gdsl.planning import idle_ranks_warning
    if spec.strategy != "replicate" and (idle := idle_ranks_warning(args.np_, graph.num_nodes)):
        print(f"gdsl partition: warning: {idle}", file=sys.stderr)   # as `gdsl run --np` says it (was: not a word)
    print(f"wrote {args.np_} partition file{'s' if args.np_ != 1 else ''} to {args.out} ({spec.describe()}, "
          f"{info['seconds']:.2f} s)")
    for k, v in info.items():
        if k not in ("P", "strategy", "seconds"):
            print(f"  {k}: {v}")
    return 0
