"""Distributed runs: partition files, the per-rank training loop, checkpoints.

`write_partition` (behind `gdsl partition` and `gdsl run --np P`) loads the
whole graph once, applies the program's graph options, builds every rank's
part and writes one file per rank; `run_rank` is what each MPI rank runs: it
loads only its own file, compiles the program with the dims recorded there,
and trains with `DistModule`.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

import torch

from gdsl.diagnostics import GdslError
from gdsl.dist.comm import WATCHDOG, waiting
from gdsl.dist.errors import AllRanksError
from gdsl.dist.part import read_header
from gdsl.dist.stop import Stop
from gdsl.runtime.files import broken_link, not_a_file, torch_save

# Every rank prints nothing but errors; rank 0 prints progress and results.


def program_key(source: str, overrides: dict, train: str | None) -> str:
    h = hashlib.sha256(source.encode())
    h.update(json.dumps({"overrides": overrides, "train": train}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _is_part_file(path: Path) -> bool:
    try:
        read_header(path)
        return True
    except GdslError:
        return False


def graph_key(graph) -> str:
    """What a partition (and a checkpoint) was written for: "G-T", G a hash of
    the edges, N, the features and the edge and vertex data, T of the labels
    and the masks (a --split's). Every byte of them (was: the edges, the
    features' shape and first 64 rows only, so a file whose later features,
    labels or masks had changed, or another --split, ran on the partition's
    stale copies without a word; helper-70)."""
    def digest(tensors) -> str:
        h = hashlib.sha256()
        for name, t in tensors:
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()[:16]
    n = torch.tensor([graph.num_nodes])
    data = [("src", graph.src), ("dst", graph.dst), ("N", n)]
    data += [("features", graph.features)] if graph.features is not None else []
    data += [(f"edge {k}", v) for k, v in sorted(graph.edata.items())]
    data += [(f"vertex {k}", v) for k, v in sorted(graph.ndata.items())]
    targets = [("labels", graph.labels)] if graph.labels is not None else []
    targets += [(f"mask {k}", v) for k, v in sorted(graph.masks.items())]
    return f"{digest(data)}-{digest(targets)}"


def other_graph(was: str | None, now: str) -> str:
    """What differs between two graph_key values, for a refusal."""
    if was and "-" in was and was.split("-")[0] == now.split("-")[0]:
        return "other labels or masks (another --split, or the data file's labels or masks changed since)"
    return "another graph"


def write_partition(prog, graph, spec, P: int, out: str | Path) -> dict:
    """Partition `graph` for `prog` (a gdsl.Program) over P ranks into `out`."""
    from gdsl.dist.part import build_parts, part_path, partition_key, save_part
    from gdsl.runtime.binding import bind_dims, check_masks

    check_masks(prog.checked, graph)
    out = Path(out)
    check_out_dir(out)
    summary = out / "partition.json"
    dims = bind_dims(prog.checked, graph)
    opts = prog.checked.graph_options
    g = graph.with_options(self_loops=opts.get("self_loops", False), symmetric=opts.get("symmetric", False))
    t0 = time.perf_counter()
    parts = build_parts(spec, g, P)
    meta = {"dims": dims, "program": program_key(prog.source, prog.overrides, prog.train_name),
            "graph": graph_key(graph), "strategy": spec.describe(), "graph_name": graph.name,
            "partition": partition_key(parts)}
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise   # a file where the directory goes: the CLI's own message
    except OSError as e:   # was: "/proc/x: no such file" (helper-72)
        raise GdslError(f"{out}: cannot create the directory ({e.strerror or e})") from None
    # part-0 is the file `gdsl run --parts` looks for and checks: removed first, written last, so a partition
    # stopped halfway (Ctrl-C, SIGTERM, a full disk) leaves no part-0 and no run takes the directory (was:
    # part-0 written first; a re-partition stopped after it left part-0 of the new partition beside the others'
    # old files, which the ranks took when only the halo exchange, the graph's features or its masks differed)
    p0 = part_path(out, 0)
    for old in [*out.glob("part-*.npz"), summary]:
        rank = old.stem.split("-", 1)[-1]
        stale = old == summary or (rank.isdigit() and (int(rank) >= P or old == p0) and _is_part_file(old))
        if stale and old.is_file():
            old.unlink()  # of an earlier partition (gdsl's own files only)
    for tmp in out.glob("part-*.npz.tmp.npz"):   # what a gdsl killed while writing left
        tmp.unlink()
    for pr in parts[1:]:
        save_part(pr, out, meta)
    info = {"P": P, "strategy": spec.describe(), "seconds": round(time.perf_counter() - t0, 3),
            "rows_per_rank": [int(p.n_own) for p in parts], "edges_per_rank": [int(p.src.size) for p in parts],
            "local_rows_per_rank": [int(p.n_local) for p in parts]}
    if spec.strategy in ("rows", "features", "redistribute"):
        info["halo_rows_per_rank"] = [int(p.n_local - p.n_own) for p in parts]
    if spec.strategy == "vertex_cut":
        info["replication_factor"] = round(float(parts[0].meta["replication_factor"]), 4)
    summary.write_text(json.dumps(info, indent=2) + "\n")
    save_part(parts[0], out, meta)
    return info


def check_out_dir(out: str | Path) -> None:
    """The directory a partition goes to can be made and written, checked
    before the plan is chosen and the graph partitioned (was: after METIS
    and the cost model, which take minutes on a large graph), and holds no
    partition.json of another tool, which writing would overwrite."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise GdslError(f"{out}: exists and is not a directory")
    if (link := broken_link(out)) is not None:   # (was: refused after the plan was chosen, "exists and is ...")
        raise GdslError(f"{out}: {link}" + (", not a directory" if link.startswith("is a") else ""))
    q = out
    while not q.exists() and q != q.parent:
        q = q.parent    # the directory it will be created in
    if not q.is_dir():
        raise GdslError(f"{out}: cannot create the directory ({q} is not a directory)")
    if not os.access(q, os.W_OK | os.X_OK):   # (root passes: writing then says why)
        raise GdslError(f"{out}: " + ("cannot write there" if q == out else "cannot create the directory")
                        + " (permission denied)")
    summary = out / "partition.json"
    if summary.exists() and not _is_summary(summary):   # (was: a file of that name overwritten without a word)
        raise GdslError(f"{summary}: exists and is not the summary `gdsl partition` writes; partition into "
                        "another directory, or move that file away")


def _is_summary(path: Path) -> bool:
    """A partition.json `write_partition` wrote (an object with P and strategy)."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(info, dict) and "P" in info and "strategy" in info


# ------------------------------------------------------------------ per rank

def _metrics(model, out, names: list[str]) -> dict[str, float]:
    """Global accuracy per mask: correct and total counts summed over ranks."""
    from gdsl.runtime.trainer import binary_logit, correct_count, share
    vals = []
    binary = binary_logit(model)
    labels = model.graph.labels
    for m in names:
        mask = model.graph.masks.get(m) if m else None
        rows = model.counted if mask is None else (mask & model.counted)
        vals += [correct_count(out, labels, rows, binary), int(rows.sum())]
    tot = model.comm.allreduce_scalars(vals)
    return {f"{m or 'all'}_acc": share(round(tot[2 * i]), round(tot[2 * i + 1])) for i, m in enumerate(names)}


CHECKPOINT_FORMAT = "gdsl-checkpoint-1"


def checkpoint_identity(prog, graph: str, plan: str) -> dict:
    """What a checkpoint was written by, recorded in its checkpoint.json: a
    resume by another program, other --set values, another train block,
    graph or plan is refused naming the difference (instead of failing to
    load the state, or loading it into something else)."""
    train = prog.train.name if prog.train is not None else prog.train_name
    return {"program": str(prog.file), "source": hashlib.sha256(prog.source.encode()).hexdigest()[:16],
            "train": train, "overrides": dict(prog.overrides), "graph": graph, "plan": plan}


def _sets(overrides: dict) -> str:
    return " ".join(f"--set {k}={v}" for k, v in sorted(overrides.items())) or "no --set"


def read_checkpoint_index(directory: Path) -> dict:
    """DIR/checkpoint.json, checked to be a gdsl checkpoint index."""
    directory = Path(directory)
    if not directory.exists():
        what = not_a_file(directory)
        raise GdslError(f"{directory}: no checkpoint here ({'no such directory' if what == 'does not exist' else what})")
    if not directory.is_dir():
        raise GdslError(f"{directory}: no checkpoint here (not a directory)")
    idx = directory / "checkpoint.json"
    what = not_a_file(idx)
    if what == "does not exist":
        raise GdslError(f"{directory}: no checkpoint here (checkpoint.json missing)")
    if what is not None:   # (was: a broken symlink "missing", a FIFO read for ever)
        raise GdslError(f"{idx}: {what}, not a checkpoint index")
    try:
        text = idx.read_text()
    except OSError as e:
        raise GdslError(f"{idx}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError:   # (was: an internal error; helper-76)
        raise GdslError(f"{idx}: not a gdsl checkpoint (not UTF-8 text)") from None
    try:
        info = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GdslError(f"{idx}: not a gdsl checkpoint (not JSON: {e})") from None
    except RecursionError:   # was: an internal error
        raise GdslError(f"{idx}: not a gdsl checkpoint (nested too deeply)") from None
    if not isinstance(info, dict) or not all(isinstance(info.get(k), int) and not isinstance(info.get(k), bool)
                                             for k in ("epoch", "size")):
        raise GdslError(f"{idx}: not a gdsl checkpoint (expected an object with an integer epoch and size)")
    if info.get("format", CHECKPOINT_FORMAT) != CHECKPOINT_FORMAT:
        raise GdslError(f"{idx}: unknown checkpoint format {info.get('format')!r} (expected {CHECKPOINT_FORMAT})")
    if info["size"] < 1 or info["epoch"] < 0:
        raise GdslError(f"{idx}: not a gdsl checkpoint (epoch {info['epoch']}, size {info['size']})")
    ident = info.get("identity")
    if ident is not None and not (isinstance(ident, dict) and isinstance(ident.get("overrides") or {}, dict)):
        # (was: a list skipped every identity check, a list of overrides an internal error; helper-76)
        raise GdslError(f"{idx}: not a gdsl checkpoint (its identity is not the object gdsl writes)")
    if "dir" in info and not (isinstance(info["dir"], str) and re.fullmatch(r"epoch-\d+(-\d+)?", info["dir"])):
        # the subdirectory of the rank files: never a path out of DIR
        raise GdslError(f"{idx}: not a gdsl checkpoint (its dir is {info['dir']!r}, not a checkpoint's epoch-K)")
    return info


def _layout(plan) -> str | None:
    """A plan without its halo exchange, which moves the same rows either way
    (what the ranks hold, and so their files, does not depend on it)."""
    return None if plan is None else re.sub(r" halo=\w+", "", str(plan))


def check_checkpoint(info: dict, directory: Path, size: int, identity: dict | None) -> None:
    """Refuse to resume a checkpoint of another rank count, program, set of
    static args, train block, graph or plan, naming what differs.
    (Checkpoints written before the identity was recorded are not checked.)"""
    if info["size"] != size:
        raise GdslError(f"{directory}: checkpoint of {info['size']} ranks, this run has {size} "
                        f"(resume with --np {info['size']})")
    was = info.get("identity")
    if not isinstance(was, dict) or identity is None:
        return
    now = identity
    why = None
    if was.get("source") != now["source"]:
        if was.get("program") != now["program"]:
            why = f"it was written by {was.get('program')}, this run is {now['program']}"
        else:
            why = f"{now['program']} has changed since it was written"
    elif was.get("train") != now["train"]:
        why = f"it was written by train block '{was.get('train')}', this run trains '{now['train']}'"
    elif (was.get("overrides") or {}) != now["overrides"]:
        why = (f"it was written with {_sets(was.get('overrides') or {})}, this run has {_sets(now['overrides'])} "
               "(the static args decide the parameters' shapes)")
    elif was.get("graph") != now["graph"]:
        what = other_graph(was.get("graph"), now["graph"] or "")
        why = f"it was written for {what}" + (" (--data)" if what == "another graph" else "")
    elif _layout(was.get("plan")) != _layout(now["plan"]):
        why = f"it was written by plan {was.get('plan')}, this run's plan is {now['plan']} (give the same --partition/--delay)"
    elif _delayed(now["plan"]) and None not in (was.get("partition"), now.get("partition")) \
            and was["partition"] != now.get("partition"):
        # cd-r's pipelines hold the partial sums of one partition's vertex copies (was: an
        # internal error in index_add_ at the first epoch; helper-72)
        drawn = (f"drawn with --seed {was.get('seed')}, this run's with --seed {now.get('seed')}"
                 if was.get("seed") != now.get("seed") else "another `gdsl partition` of it")
        why = (f"it was written for another partition of the graph ({drawn}), and its delayed aggregations hold "
               f"that partition's partial sums" + (f": resume with --seed {was.get('seed')}"
                                                   if was.get("seed") != now.get("seed") else ""))
    if why:
        raise GdslError(f"{directory}: cannot resume this checkpoint: {why}")


def _delayed(plan) -> bool:
    """Whether a plan (Spec.describe()) keeps state between epochs: cd-r, r > 0."""
    return plan is not None and "(cd-" in str(plan) and "(cd-0)" not in str(plan)


def same_partition(comm, pdir: Path, header: dict) -> None:
    """Every rank's file must belong to one partition (partition_key in the
    headers): else the halo tables disagree, and the first exchange fails
    with MPI's own error, or moves the wrong rows when the counts happen to
    fit (helper-72). Files written before the key was recorded pass. The
    files must also have been written by one `gdsl partition`: the same
    rows and edges under another halo exchange or delay make the ranks run
    different collectives (they waited for each other until --comm-timeout),
    for another graph or split they train on mixed features or masks."""
    from gdsl.dist.part import part_path
    ident = {k: header.get(k) for k in ("partition", "strategy", "graph", "dims")}
    idents = [ident]
    if comm.size > 1:
        with waiting("allgather of the partition files' keys"):
            idents = comm.comm.allgather(ident)
    odd = [r for r, i in enumerate(idents) if i != idents[0]]
    if odd:
        names = ", ".join(part_path(pdir, r).name for r in odd[:4]) + (" ..." if len(odd) > 4 else "")
        first, zero = idents[odd[0]], idents[0]
        why = ""
        if first["partition"] == zero["partition"]:   # the same rows and edges, written by another run
            why = {"strategy": f"; written as {first['strategy']}, {part_path(pdir, 0).name} as {zero['strategy']}",
                   "graph": f"; written for {other_graph(zero['graph'], first['graph'] or '')}",
                   "dims": "; written for other dims"}[next(k for k in ident if first[k] != zero[k])]
        raise AllRanksError(f"{pdir}: {names} {'belongs' if len(odd) == 1 else 'belong'} to another partition "
                            f"than {part_path(pdir, 0).name} (a directory refreshed in part, or a stale copy{why}): "
                            "partition again with `gdsl partition`, or leave out --parts")


def check_resume(directory: Path, size: int, identity: dict | None, epochs: int | None = None) -> dict:
    """Everything about a --resume DIR that can be checked before the ranks
    start: the index, the identity, every rank's file present, and (given the
    run's `epochs`) an epoch left to train."""
    info = read_checkpoint_index(directory)
    check_checkpoint(info, directory, size, identity)
    was = (info.get("identity") or {}).get("seed")
    if identity is not None and was is not None and identity.get("seed") is not None and was != identity["seed"]:
        # an exact plan's state does not depend on it, so it resumes; the masks from here are this seed's
        # (was: without a word, and --json recorded this seed only; helper-76)
        print(f"gdsl run: warning: {directory} was written with --seed {was}; from here the dropout masks are "
              f"--seed {identity['seed']}'s (resume with --seed {was} to continue that run)", file=sys.stderr)
    done = info.get("epoch")
    if epochs is not None and isinstance(done, int) and epochs <= done:
        # (was: "resuming after epoch 6", no epoch trained, and the old run's final line)
        raise GdslError(f"--resume {directory}: the checkpoint is after epoch {done}, and this run ends at epoch "
                        f"{epochs}: nothing is left to train (--epochs N with N > {done} trains on from it)")
    files = checkpoint_files(directory, info)
    for r in range(size):
        _check_rank_file(files / f"rank-{r}.pt", r)
    return info


def _check_rank_file(path: Path, rank: int) -> None:
    """A rank's checkpoint file is a regular file (was: a directory or a broken
    symlink there was "missing"; a FIFO, read by a rank under mpiexec, hung it)."""
    what = not_a_file(path)
    if what == "does not exist":
        raise GdslError(f"{path}: missing checkpoint file of rank {rank}")
    if what is not None:
        raise GdslError(f"{path}: {what}, not a checkpoint file (of rank {rank})")


def checkpoint_files(directory: Path, info: dict) -> Path:
    """Where the rank files of the checkpoint `info` (its index) are: the
    subdirectory it names (`epoch-K-...`), or `directory` itself for a
    checkpoint written before 2026-12-07."""
    sub = info.get("dir")
    return Path(directory) if sub is None else Path(directory) / sub


def _save_checkpoint(directory: Path, comm, model, opt, epoch: int, history: list,
                     identity: dict | None = None) -> None:
    """Every rank writes its state into a new directory `DIR/epoch-K`; once
    all have, rank 0 points `DIR/checkpoint.json` at it (write, rename) and
    removes the previous one. A crash at any moment leaves an index naming a
    whole checkpoint, the new one or the last (was: the rank files were
    renamed into DIR one by one, then the index written, so a crash between
    the two left files one epoch ahead of the index, which --resume refused)."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict(), "step": model.step,
             "rank": comm.rank, "size": comm.size, "history": history, "delay": model.delay_state_dict(),
             "rng": torch.get_rng_state()}   # the next steps' dropout mask keys (ReferenceModule.count_step)
    name = None
    if comm.rank == 0:   # a name no file has (a resumed run may write epoch K again)
        name, n = f"epoch-{epoch}", 0
        while (directory / name).exists():
            n += 1
            name = f"epoch-{epoch}-{n}"
    if comm.size > 1:
        with waiting("bcast of the checkpoint's directory"):
            name = comm.comm.bcast(name, root=0)
    sub = directory / name
    path = sub / f"rank-{comm.rank}.pt"
    try:
        sub.mkdir(parents=True, exist_ok=True)
        torch_save(state, path, sub)
        failed = ""
    except OSError as e:
        failed = f"rank {comm.rank}: {path.relative_to(directory)}: {e.strerror or e}"
    with waiting("the checkpoint's write"):
        failures = [f for f in comm.comm.allgather(failed) if f]
    if failures:
        if comm.rank == 0:   # every write has ended (allgather); the index still names the last checkpoint
            shutil.rmtree(sub, ignore_errors=True)
        kept = "the checkpoint there is kept as it was" if (directory / "checkpoint.json").exists() else \
            "no checkpoint was written"
        raise AllRanksError(f"--checkpoint {directory}: the checkpoint of epoch {epoch} could not be written "
                            f"({'; '.join(failures)}); {kept}")
    comm.barrier()
    if comm.rank == 0:
        idx = directory / "checkpoint.json"
        tmp = idx.with_name(idx.name + ".tmp")
        index = {"format": CHECKPOINT_FORMAT, "epoch": epoch, "size": comm.size, "dir": name}
        if identity is not None:
            index["identity"] = identity
        tmp.write_text(json.dumps(index) + "\n")
        os.replace(tmp, idx)
        for old in directory.iterdir():   # the checkpoints before, and the files of one before 2026-12-07
            if old.name != name and (re.fullmatch(r"epoch-\d+(-\d+)?", old.name) and old.is_dir()):
                shutil.rmtree(old, ignore_errors=True)
            elif re.fullmatch(r"rank-\d+\.pt(\.tmp)?", old.name) and old.is_file():
                old.unlink(missing_ok=True)


_STATE_KEYS = ("epoch", "model", "opt", "step", "history")


def _fit_params(path: Path, model, params: dict, directory: Path) -> None:
    """Refuse a rank file whose parameters are not this model's (names,
    shapes): the program differs, so every rank finds it (one report, naming
    the directory)."""
    want = model.state_dict()
    if not isinstance(params, dict):
        raise GdslError(f"{path}: not a gdsl checkpoint file (no parameters)")
    missing = [k for k in want if k not in params]
    extra = [k for k in params if k not in want]
    shapes = [k for k in want if k in params and hasattr(params[k], "shape")
              and tuple(params[k].shape) != tuple(want[k].shape)]
    if missing or extra or shapes:
        what = (", ".join(f"{k} is {list(params[k].shape)} in the checkpoint, {list(want[k].shape)} here" for k in shapes[:3])
                or (f"this program's {', '.join(missing[:3])} not in it" if missing else
                    f"its {', '.join(extra[:3])} not in this program"))
        raise AllRanksError(f"{directory}: the checkpoint's parameters do not fit this program: {what}")


def _load_checkpoint(directory: Path, comm, model, opt, identity: dict | None = None) -> tuple[int, list]:
    """Rank 0 checks the index (and the identity) for every rank; then each
    rank loads and checks its own file."""
    err, info = None, None
    if comm.rank == 0:
        try:
            info = read_checkpoint_index(directory)
            check_checkpoint(info, directory, comm.size, identity)
        except GdslError as e:
            err = str(e)
    if comm.size > 1:
        with waiting("bcast of the checkpoint index"):
            err, info = comm.comm.bcast((err, info), root=0)
    if err:
        raise AllRanksError(err)
    path = checkpoint_files(directory, info) / f"rank-{comm.rank}.pt"
    _check_rank_file(path, comm.rank)
    try:
        state = torch.load(path, weights_only=True, map_location=model.device)
    except OSError as e:
        raise GdslError(f"{path}: cannot read it ({e.strerror or type(e).__name__})") from None
    except Exception as e:  # noqa: BLE001 - torch's messages suggest unsafe loading; name only the kind
        raise GdslError(f"{path}: corrupt, or not a gdsl checkpoint file (torch.load: {type(e).__name__})") from None
    if not isinstance(state, dict) or any(k not in state for k in _STATE_KEYS):
        raise GdslError(f"{path}: not a gdsl checkpoint file (expected {', '.join(_STATE_KEYS)})")
    if (state.get("rank", comm.rank), state.get("size", comm.size)) != (comm.rank, comm.size):
        raise GdslError(f"{path}: written by rank {state.get('rank')} of {state.get('size')}, "
                        f"this is rank {comm.rank} of {comm.size}")
    if state["epoch"] != info["epoch"]:
        raise GdslError(f"{path}: holds epoch {state['epoch']}, the index says {info['epoch']}")
    _fit_params(path, model, state["model"], directory)
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        model.step = int(state["step"])
        if "rng" in state:
            torch.set_rng_state(state["rng"])
        model.load_delay_state(state.get("delay", {}))   # cd-r's pipelines, with what was in flight
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GdslError(f"{path}: the checkpoint does not fit this run ({first})") from None
    return state["epoch"], state["history"]


@contextlib.contextmanager
def _alike():
    """The executor's own errors (a plan that cannot run an op, ...) depend on
    the program and the plan only: every rank raises them alike."""
    try:
        yield
    except AllRanksError:
        raise
    except GdslError as e:
        raise AllRanksError(str(e)) from None


def make_model(prog, part, comm, dims: dict, seed: int, backend: str = "reference"):
    """This rank's DistModule of `prog` (params drawn as a single process would;
    `backend` numba or triton runs the local sparse ops on its kernels; triton
    on a GPU machine places the rank on its GPU: kernels.rank_device)."""
    from gdsl.compiler import compile_source
    from gdsl.dist.kernels import rank_device
    from gdsl.dist.module import DistModule
    from gdsl.runtime.memory import release_free_heap
    # the plan's delay reaches the order pass: cd-r aggregates param-free inputs sparse-first (passes/order.py)
    compiled = compile_source(prog.source, prog.file, dims=dims, overrides=prog.overrides, train=prog.train_name,
                              delay=part.spec.delay)
    torch.manual_seed(seed)
    with _alike():
        model = DistModule(compiled.module, part, comm, backend=backend, device=rank_device(backend, comm))
    model.dropout_seed = seed
    release_free_heap()   # the binding's temporaries, as Program.module does (gdsl/runtime/memory.py)
    return model


def train_loop(model, cfg, comm, epochs: int, *, opt=None, start: int = 0, history: list | None = None,
               on_epoch=None, checkpoint: Path | None = None, every: int = 10, traffic: bool = False,
               identity: dict | None = None, stop=None) -> list[dict]:
    """Full-batch training of one rank's model; returns the per-epoch records
    (global loss and accuracies; with `traffic`, bytes per collective).
    `stop` (gdsl/dist/stop.py): the launcher's request to stop, looked for at
    each epoch's loss all-reduce; the ranks then finish that epoch (and
    write its checkpoint) and return, with `stop.epoch` set."""
    from gdsl.runtime.trainer import (
        accuracy_masks,
        make_optimizer,
        nonfinite_grad,
        nonfinite_grads,
        nonfinite_loss,
        optimizer_step,
        reports_accuracy,
    )
    opt = opt or make_optimizer(cfg.optimizer, cfg.optimizer_args, model.parameters())
    names = accuracy_masks(cfg)
    history = history if history is not None else []
    fail_at = os.environ.get("GDSL_TEST_FAIL_AT")  # test hook: "rank:epoch" raises there
    comm.stats.take()
    for epoch in range(start + 1, epochs + 1):
        if fail_at and fail_at == f"{comm.rank}:{epoch}":
            raise RuntimeError(f"injected failure at epoch {epoch} (GDSL_TEST_FAIL_AT)")
        if os.environ.get("GDSL_TEST_KILL_AT") == f"{comm.rank}:{epoch}":  # test hook: die without a word
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("GDSL_TEST_HANG_AT") == f"{comm.rank}:{epoch}":  # test hook: alive, never joins again
            time.sleep(3600)
        WATCHDOG.where = f"epoch {epoch}"
        t0 = time.perf_counter()
        model.train()
        model.epoch = epoch - 1
        opt.zero_grad(set_to_none=True)
        with _alike():
            out = model()
        loss = model.loss(out)
        loss.backward()
        model.sync_grads()
        # the global loss and which gradients are non-finite on some rank (P3's model-parallel
        # weights are local): every rank stops here alike, before the step, as one process does
        # (and whether the launcher asked any rank to stop: every rank learns it in this epoch)
        loss_value, stopping, *flags = comm.allreduce_scalars([float(loss.detach()), stop.seen() if stop else 0.0]
                                                               + nonfinite_grads(model))
        if stopping:
            stop.acknowledge(epoch)
        if not math.isfinite(loss_value):
            raise AllRanksError(nonfinite_loss(epoch, loss_value))
        if (why := nonfinite_grad(model, flags, epoch, loss_value)) is not None:
            raise AllRanksError(why)
        optimizer_step(opt, epoch, AllRanksError)   # the same lr and overflow on every rank
        t_train = time.perf_counter() - t0
        train_traffic = comm.stats.take()
        model.eval()
        with torch.no_grad(), _alike():
            out = model()
        metrics = _metrics(model, out, names) if reports_accuracy(model) else {}
        eval_traffic = comm.stats.take()
        rec = {"epoch": epoch, "loss": loss_value, **metrics, "time": time.perf_counter() - t0, "train_time": t_train}
        if traffic:
            rec["comm"] = _gather_traffic(comm, train_traffic)
            rec["comm_eval"] = _gather_traffic(comm, eval_traffic)
        history.append(rec)
        if on_epoch is not None:
            on_epoch(rec)
        if checkpoint is not None and (epoch % every == 0 or epoch == epochs or stopping):
            model.finish()
            _save_checkpoint(checkpoint, comm, model, opt, epoch, history, identity)
        if stopping:
            break
        if stop is not None:
            stop.heartbeat(rec["time"])
    WATCHDOG.where = "the end of the run"
    model.finish()
    return history


def run_rank(args: dict) -> int:
    """One rank of `gdsl run --np P` (args: the launcher's JSON)."""
    from mpi4py import MPI

    import gdsl
    from gdsl.dist.comm import Comm
    from gdsl.dist.part import load_part, part_path
    from gdsl.runtime.files import finish_run, kept_instead, save_state_dict
    from gdsl.runtime.trainer import (
        EpochStats,
        Progress,
        full_batch_warning,
        loss_warning,
        make_optimizer,
        write_json,
    )

    comm = Comm(MPI.COMM_WORLD)
    rank, size = comm.rank, comm.size
    prog = gdsl.compile(args["program"], train=args.get("train"), **args.get("overrides", {}))
    cfg = prog.train
    if cfg is None:
        raise AllRanksError(f"{args['program']}: the program has no train block")
    pdir = Path(args["parts"])
    part = load_part(pdir, rank, size, expect={"program": program_key(prog.source, prog.overrides, prog.train_name)})
    header = read_header(part_path(pdir, rank))
    dims = header["dims"]
    same_partition(comm, pdir, header)
    identity = checkpoint_identity(prog, header.get("graph"), part.spec.describe())
    identity.update(partition=header.get("partition"), seed=part.spec.seed)
    seed = args.get("seed", 0)
    model = make_model(prog, part, comm, dims, seed, args.get("backend") or "reference")
    opt = make_optimizer(cfg.optimizer, cfg.optimizer_args, model.parameters())
    if rank == 0:   # (the mini-batch warning was said by one process only)
        for warning in (full_batch_warning(cfg), loss_warning(model)):
            if warning is not None:
                print(f"gdsl: warning: {warning}", file=sys.stderr)
    epochs = args.get("epochs") or cfg.epochs
    history: list[dict] = []
    start = 0
    if args.get("resume"):
        start, history = _load_checkpoint(Path(args["resume"]), comm, model, opt, identity)
        if rank == 0:
            print(f"gdsl run: resuming after epoch {start} from {args['resume']}", file=sys.stderr)
    progress = Progress(epochs, every=args.get("log_every")) if rank == 0 else None

    def on_epoch(rec):
        if progress is not None:
            progress(EpochStats(rec["epoch"], rec["loss"], {k: v for k, v in rec.items() if k.endswith("_acc")},
                                rec["time"]))

    report = args.get("report") == "comm"
    ck = Path(args["checkpoint"]) if args.get("checkpoint") else None
    stop = Stop(args.get("run_dir"), rank)
    train_loop(model, cfg, comm, epochs, opt=opt, start=start, history=history, on_epoch=on_epoch,
               checkpoint=ck, every=int(args.get("checkpoint_every") or 10), traffic=bool(report or args.get("json")),
               identity=identity, stop=stop)
    if stop.epoch is not None and rank == 0:   # as one process says it (gdsl/cli.py)
        progress.close()   # the live line ends before the message
        n = len(history) - start
        print(f"gdsl: {stop.what()} after {n} epoch{'s' if n != 1 else ''}"
              + (f" (resumed after epoch {start})" if start else "")
              + (f"; {ck} holds the checkpoint after epoch {stop.epoch}" if ck else ""), file=sys.stderr)
    kernels = {} if model.kernels is None else dict(model.kernels.used)
    state = full_state_dict(model, comm) if args.get("save") and history else None   # every rank takes part
    if rank == 0:
        def save_file():
            save_state_dict(args["save"], state)
            when = " when stopped" if stop.epoch is not None else ""
            print(f"wrote {args['save']} (the params{when} after epoch {history[-1]['epoch']}, as one process holds "
                  f"them; model.load_state_dict(torch.load({str(args['save'])!r})))", file=sys.stderr)

        def json_file():
            if kept_instead(args["json"], len(history)):
                return
            last = history[-1] if history else {}
            # the run's inputs as one process's --json has them (was: no data, split, --set; helper-70)
            write_json(args["json"], {"program": args["program"], "data": args.get("data"),
                                      "split": args.get("split", 0), "set": dict(args.get("overrides") or {}),
                                      "train": cfg.name, "model": cfg.model,
                                      "np": size, "plan": part.spec.describe(),
                                      "exact": part.spec.exact, "seed": seed, "backend": model.backend,
                                      "kernels": kernels, "interrupted": stop.epoch is not None, "epochs": history,
                                      "final": {k: v for k, v in last.items() if not k.startswith("comm")}})
            print(f"wrote {args['json']}", file=sys.stderr)
        # each file written even if stdout or the other file failed
        finish_run(lambda: _print_summary(history, report, part, args, model.backend, kernels),
                   [w for w, want in ((save_file, state is not None), (json_file, args.get("json"))) if want])
    if stop.epoch is not None and not args.get("run_dir"):   # a foreign launcher's ranks: as one process exits
        return 128 + stop.signum   # (under gdsl's launcher, the launcher says it)
    return 0


def full_state_dict(model, comm) -> dict:
    """The trained params as one process holds them (`gdsl run --np P
    --save`). Data-parallel params are the same on every rank (their
    gradients are all-reduced); a model-parallel one (P3 §3.1, layer 1's W
    under `partition = features`) is trained on each rank's rows
    `feature_cols` only, so rank 0 takes each rank's rows."""
    state = model.state_dict()
    local = sorted(k for k in model.local_params if k in state)
    if not local:
        return state
    lo, hi = model.feature_cols
    with waiting("gather of the model-parallel weights"):
        parts = comm.comm.gather((lo, hi, {k: state[k][lo:hi].clone() for k in local}), root=0)
    if comm.rank == 0:
        for plo, phi, rows in parts:
            for k in local:
                state[k][plo:phi] = rows[k]
    return state


def _gather_traffic(comm, traffic) -> dict:
    """Per op: bytes sent and received by each rank this epoch (gathered on every rank)."""
    local = {f"{coll} {label}": (t.sent, t.recv, t.calls, t.seconds) for (coll, label), t in traffic.items()}
    with waiting("allgather of the traffic report"):
        allr = comm.comm.allgather(local)
    keys = sorted({k for d in allr for k in d})
    z = (0, 0, 0, 0.0)
    return {k: {"sent": [d.get(k, z)[0] for d in allr], "recv": [d.get(k, z)[1] for d in allr],
                "calls": max(d.get(k, z)[2] for d in allr), "seconds": [d.get(k, z)[3] for d in allr]}
            for k in keys}


def _print_summary(history: list, report: bool, part, args, backend: str = "reference",
                   kernels: dict | None = None) -> None:
    if not history:
        return
    last = history[-1]
    accs = "  ".join(f"{k} {v:.4f}" for k, v in last.items() if k.endswith("_acc"))
    from gdsl.runtime.trainer import epoch_time_text, split_epoch_times  # noqa: PLC0415
    times = [h["time"] for h in history]
    split = split_epoch_times(times)
    ttext = epoch_time_text(sum(times) / len(times), split.get("first_epoch_time"), split.get("later_epoch_time"))
    from gdsl.runtime.trainer import loss_text  # noqa: PLC0415
    print(f"final (epoch {last['epoch']}): loss {loss_text(last['loss'])}  {accs + '  ' if accs else ''}{ttext}  "
          f"[{part.spec.describe()}, {part.size} rank{'s' if part.size != 1 else ''}"   # describe() marks an approximate plan
          f"{', ' + backend + ' kernels: ' + ', '.join(sorted(kernels)) if kernels else ''}]")
    if report:
        print("communication per epoch (bytes per rank: max over ranks; total = all ranks):")
        for h in history:
            tot = sum(sum(v["sent"]) for v in h["comm"].values())
            print(f"  epoch {h['epoch']}: {tot:,} bytes sent in total")
        ev = sum(sum(v["sent"]) for v in last["comm_eval"].values())
        print(f"  (evaluation passes, not included above: {ev:,} bytes per epoch)")
        print(f"  per op (training step of epoch {last['epoch']}):")
        width = max((len(k) for k in last["comm"]), default=10)
        print(f"    {'collective / op':<{width}}  {'calls':>5}  {'sent/rank (max)':>16}  {'recv/rank (max)':>16}  {'total sent':>14}")
        for k, v in last["comm"].items():
            print(f"    {k:<{width}}  {v['calls']:>5}  {max(v['sent']):>16,}  {max(v['recv']):>16,}  {sum(v['sent']):>14,}")
