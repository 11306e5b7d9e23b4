"""Loading graphs from the .npz format of shared/data/README.md, with checks.

Never unpickles (`allow_pickle=False`): a file that holds Python objects is
refused. Every problem is reported with the file name and what is wrong.
"""
from __future__ import annotations

import errno
import os
import re
import warnings
import zipfile
import zlib
from importlib import resources
from pathlib import Path

import numpy as np

from gdsl.diagnostics import GdslError
from gdsl.graph.graph import DataWarning, Graph

BUILTIN = ("cora", "citeseer")
REQUIRED = ("src", "dst", "features")


def builtin_dataset(name: str) -> Path:
    """Path of a dataset shipped inside the package (see gdsl/data/README.md)."""
    return Path(str(resources.files("gdsl") / "data" / f"{name}.npz"))


def resolve_data(spec: str | None) -> Path:
    """`None` -> embedded Cora; a builtin name -> its file; else a path."""
    if spec is None:
        return builtin_dataset("cora")
    if isinstance(spec, str) and spec.lower() in BUILTIN and not Path(spec).is_file():
        # 'Cora', as PyG's Planetoid names it, too; only a *file* of that name wins (docs/cli.md), not a
        # directory (was: "cora: is a directory, not an .npz file")
        return builtin_dataset(spec.lower())
    return Path(spec)


FORMAT = REQUIRED + ("labels",)
STANDARD_MASKS = ("train", "val", "test")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _mask_name(key: str) -> str | None:
    """'train' for 'train_mask' or 'train_masks' (any name, as PyG's and DGL's
    `*_mask` fields), else None."""
    for suffix in ("_masks", "_mask"):
        if key.endswith(suffix) and _NAME.fullmatch(key[:-len(suffix)]):
            return key[:-len(suffix)]
    return None


def _data_name(key: str, prefix: str) -> str | None:
    """'w' for 'edge_w' (prefix 'edge_'), 'T' for 'node_T': a name an input can have."""
    return key[len(prefix):] if key.startswith(prefix) and _NAME.fullmatch(key[len(prefix):]) else None


def _known(key: str) -> bool:
    return (key in FORMAT or _mask_name(key) is not None or _data_name(key, "edge_") is not None
            or _data_name(key, "node_") is not None)


def _check_declared_size(zf: zipfile.ZipFile, where: str, key: str) -> None:
    """Refuse a member whose .npy header declares more data than the archive
    holds, or more than this machine's memory, before numpy allocates it
    (was: a raw MemoryError for a crafted 35 PiB header)."""
    try:
        info = zf.getinfo(key + ".npy")
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0), (3, 0)):
                raise GdslError(f"{where}: array '{key}' is in .npy format version {version[0]}.{version[1]}; "
                                "numpy writes and reads versions 1.0, 2.0 and 3.0")
            shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                               else np.lib.format.read_array_header_2_0(f))
            header = f.tell()
    except ValueError as e:   # numpy's header checks; its literal_eval's text names an ast object
        detail = "" if "<ast." in str(e) else f": {e}"
        raise GdslError(f"{where}: array '{key}' has a malformed .npy header{detail}") from None
    except (KeyError, OSError, EOFError, zipfile.BadZipFile, zlib.error):
        return   # np.load reports these in its own words below
    if dtype.hasobject:
        return   # refused as pickled data below
    from gdsl.cost.choose import fmt_bytes
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    have = info.file_size - header
    if need > have:
        said, held = fmt_bytes(need), fmt_bytes(max(have, 0))
        if said == held:   # (was: "(9.77 MiB), but the archive holds 9.77 MiB of it" for a row short)
            said, held = f"{need:,} bytes", f"{max(have, 0):,} bytes"
        raise GdslError(f"{where}: array '{key}' declares shape {list(shape)} of {dtype} ({said}), but "
                        f"the archive holds {held} of it: the file is corrupt or was cut short")
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > memory:
        raise GdslError(f"{where}: array '{key}' of shape {list(shape)} needs {fmt_bytes(need)}, more than this "
                        f"machine's memory ({fmt_bytes(memory)})")


_COMPRESSION = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
                zipfile.ZIP_LZMA: "lzma"}


def _some(names: list[str], most: int = 10) -> str:
    """Names quoted, at most `most` of them (was: a 54 KB warning line for 5,000 arrays)."""
    shown = ", ".join(repr(k) for k in names[:most])
    return shown + (f" and {len(names) - most:,} more" if len(names) > most else "")


def _check_members(zf: zipfile.ZipFile, where: str) -> None:
    """Members Python's zipfile cannot read, named before np.load meets them
    (was: an internal error, exit 3: "File ... is encrypted, password
    required", "That compression method is not supported")."""
    for info in zf.infolist():
        if info.flag_bits & 0x1:
            raise GdslError(f"{where}: member '{info.filename}' is encrypted; gdsl reads unencrypted .npz "
                            "archives (numpy.savez writes one)")
        if info.compress_type not in _COMPRESSION:
            raise GdslError(f"{where}: member '{info.filename}' uses zip compression method {info.compress_type}, "
                            f"which Python cannot read (it reads {', '.join(_COMPRESSION.values())}); write the file "
                            "with numpy.savez or numpy.savez_compressed")


def _names_in(p: Path) -> list[str]:
    """The array names of an .npz archive (its members without `.npy`)."""
    try:
        with zipfile.ZipFile(p) as zf:
            return [k[:-4] if k.endswith(".npy") else k for k in zf.namelist()]
    except (zipfile.BadZipFile, OSError, ValueError):
        return []


# names other libraries give the format's arrays (PyG's Data, DGL's ndata, edge lists): said with the fix
_ALIASES = {"edge_index": ("src", "src=edge_index[0], dst=edge_index[1]"),
            "edges": ("src", "src=edges[:, 0], dst=edges[:, 1] for [E, 2] (edges[0], edges[1] for [2, E])"),
            "x": ("features", "features=x"), "feat": ("features", "features=feat"),
            "feats": ("features", "features=feats"), "y": ("labels", "labels=y"), "label": ("labels", "labels=label")}


def _other_names_hint(have: list[str], missing: list[str]) -> str:
    """'; it has 'edge_index', 'x': save them as src=edge_index[0], ...' for the arrays the file
    holds under another library's name (helper-36: was the missing-array error alone)."""
    fixes = [(k, fix) for k, (stands_for, fix) in _ALIASES.items()
             if k in have and (stands_for in missing or stands_for == "labels" and "labels" not in have)]
    if not fixes:
        return ""
    return (f"; it has {', '.join(repr(k) for k, _ in fixes)}, not names of the format: save them as "
            f"{'; '.join(fix for _, fix in fixes)}")


def _index_mask_hint(m: np.ndarray, n: int) -> str:
    """A mask given as the ids of the vertices it selects (OGB's split_idx, `np.nonzero(mask)[0]`):
    said so, with the conversion (helper-36). A mask is read as bool, never as ids: [0, 1] would mean
    either vertex 1 or vertices 0 and 1."""
    if m.dtype.kind not in "iu" or m.ndim != 1 or m.size == 0 or (m.size == n and _maskish(m)):
        return ""
    if int(m.min()) < 0 or int(m.max()) >= n:
        return ""
    return (f"; it looks like vertex ids (an index array, as OGB's split_idx); a mask is bool with one entry per "
            f"vertex: mask = np.zeros({n}, bool); mask[ids] = True")


def _float_labels_hint(a: np.ndarray) -> str:
    """labels of a float dtype: whole numbers (stored as float by pandas or torch's `.float()`) or a
    real-valued target, said apart (helper-36)."""
    if a.dtype.kind != "f":
        return ""
    finite = np.isfinite(a)
    with np.errstate(invalid="ignore"):
        whole = bool((a[finite] == np.round(a[finite])).all())
    if whole and not finite.all():   # OGB marks unlabelled vertices NaN
        at = int(np.flatnonzero(~finite)[0])
        return (f" holding whole numbers and NaN (first at vertex {at}: unlabelled?); give unlabelled vertices any "
                "class id (0), leave them out of the masks, and store the labels as integers: labels.astype(np.int64)")
    if whole:
        return " holding whole numbers; store them as integers: labels.astype(np.int64)"
    return (" (a real-valued target is not a class label: store it as an array node_NAME, read by a vertex "
            "input NAME, with a loss such as mse)")


def _float_mask_hint(m: np.ndarray) -> str:
    """A float mask of 0.0s and 1.0s (torch's mask.float()): refused (a weight is not a mask), with the
    conversion (helper-37; was: the dtype only, where docs/cli.md promises the fix)."""
    if m.dtype.kind != "f" or not m.size:
        return ""
    with np.errstate(invalid="ignore"):
        if bool(((m == 0) | (m == 1)).all()):
            return " holding 0.0 and 1.0; store it as bool: mask.astype(bool)"
    return ""


def _label_shape_hint(a: np.ndarray) -> str:
    """2-d labels other libraries write: OGB's [N, 1] column and one-hot rows (of any numeric dtype:
    np.eye(C)[y] is float64), with the 1-d class ids to save instead (helper-36; float one-hot, helper-37)."""
    if a.ndim != 2 or a.dtype.kind not in "biuf" or not a.size:
        return ""
    if a.shape[1] == 1:
        if a.dtype.kind == "f" and _float_labels_hint(a).startswith(" holding whole numbers;"):
            return " (OGB's [N, 1] labels: save labels[:, 0].astype(np.int64))"
        return " (OGB's [N, 1] labels: save labels[:, 0])" if a.dtype.kind in "iu" else ""
    if bool(((a == 0) | (a == 1)).all() and (a.sum(1) == 1).all()):
        return " (one-hot rows: save the class ids, labels.argmax(1))"
    return ""


def _is_text(start: bytes) -> bool:
    """The first bytes of a file decode as UTF-8 text without control characters other than whitespace."""
    try:
        text = start.decode("utf-8")
    except UnicodeDecodeError as e:   # a multi-byte character cut at the end of the sample is still text
        if e.start < len(start) - 3:
            return False
        text = start[:e.start].decode("utf-8")
    return bool(text) and all(c.isprintable() or c in "\t\r\n\f" for c in text)


def _maskish(a: np.ndarray) -> bool:
    """bool, or integers that are all 0 or 1."""
    return a.dtype == np.bool_ or (a.dtype.kind in "iu" and bool(((a == 0) | (a == 1)).all()))


def _is_a_directory(typed, p: Path) -> str:
    """The error for a directory given as data: named as typed and, when
    relative, by its absolute path too (was: `--data ./` named '.')."""
    name = os.fspath(typed) if typed is not None else str(p)
    where = "" if os.path.isabs(name) else f" ({os.path.abspath(p)})"
    return f"{name}: is a directory{where}, not an .npz file"


def load_graph(path: str | Path | None = None, split: int = 0) -> Graph:
    """Load a graph from an .npz file (or a builtin name: 'cora', 'citeseer').

    Files with several splits (`train_masks` of shape [S, N]) use split `split`.
    """
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_graph takes a path (str or os.PathLike) or a builtin name, got {type(path).__name__}"
                        + (" (open file objects are not read: pass the file's path)" if hasattr(path, "read") else ""))
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)):
        raise TypeError(f"split must be an int, got {type(split).__name__}")
    if path is not None and not str(os.fspath(path)).strip():   # was: ".: is a directory" (Path('') is '.')
        raise GdslError("load_graph: empty path (give an .npz file or a builtin name: cora, citeseer; "
                        "load_graph() is the embedded Cora)")
    p = resolve_data(None if path is None else os.fspath(path))
    where = str(p)
    if split < 0:
        raise GdslError(f"{where}: split {split} is not available (splits count from 0)")
    try:
        os.stat(p)
    except OSError as e:   # a symlink loop, a path through a file, no permission: said as it is (helper-74)
        if e.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise GdslError(f"{where}: {(e.strerror or str(e)).lower()}") from None
    if not p.exists():
        # a bare name that is not a path: say which names are built in (was: only "actor: no such file")
        # named as typed: `nonexist/` is a path, not a name (was: "nonexist: no such file (the built-in ...)")
        typed = os.fspath(path) if path is not None else where
        hint = (f" (the built-in data sets are {' and '.join(BUILTIN)}; other data is a path to an .npz file)"
                if os.sep not in typed and not typed.endswith(".npz") else
                f" (the built-in data set is named {Path(typed).stem.lower()}, without a path or .npz)"
                if Path(typed).stem.lower() in BUILTIN else "")
        from gdsl.runtime.files import broken_link
        raise GdslError(f"{typed}: {broken_link(p) or 'no such file'}{hint}")   # (was: a dangling symlink "no such file")
    if p.is_dir():
        raise GdslError(_is_a_directory(path, p))
    if not p.is_file():   # was: /dev/zero read as a pickle, a named pipe waited on forever
        raise GdslError(f"{where}: not a regular file (a device, pipe or socket), not an .npz file")
    try:
        with open(p, "rb") as f:
            start = f.read(512)   # the format's magic, and whether the file is text
            head = start[:6]
    except OSError as e:   # no permission (was: a raw PermissionError from load_graph)
        raise GdslError(f"{where}: {(e.strerror or str(e)).lower()}") from None
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")) or not zipfile.is_zipfile(p):
        # np.load picks the format by the first bytes: a .npy or a pickle with a zip appended is not
        # read as a zip (was: a raw TypeError, or numpy's "if you trust the file ... allow_pickle=")
        what = ("a pickled Python object; gdsl never unpickles data" if head[:1] == b"\x80"
                else "a single .npy array" if head == b"\x93NUMPY"
                else "it has bytes before its zip archive (an .npz file starts with the archive)" if zipfile.is_zipfile(p)
                else "not a zip archive (truncated, corrupt or another format)")
        if head == b"":   # (was: "not a zip archive (truncated, corrupt or another format)" for a 0-byte file)
            what = "not a zip archive: the file is empty (0 bytes)"
        elif p.suffix == ".gd" and _is_text(start):   # the program and the data swapped
            what = "not a zip archive: it is a text file, a gdsl program by its name, not data"
        elif _is_text(start):   # a CSV, an edge list (helper-36)
            what = ("not a zip archive: it is a text file (an edge list or CSV?); gdsl reads .npz files: write one "
                    "with numpy.savez(path, src=..., dst=..., features=..., labels=...)")
        raise GdslError(f"{where}: not an .npz file: {what}")
    try:
        with zipfile.ZipFile(p) as zf:
            _check_members(zf, where)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise GdslError(f"{where}: not a readable .npz file ({e})") from None
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {}
            unknown = [k for k in z.files if not _known(k)]
            if unknown:   # not read (a typo such as 'trian_mask' would otherwise pass unnoticed)
                npy = set(z.zip.namelist())
                other = [k for k in unknown if k + ".npy" not in npy]   # a readme.txt: not called an array
                unknown = [k for k in unknown if k not in other]
                what = [f"array{'s' if len(unknown) > 1 else ''} {_some(unknown)}"] * bool(unknown) \
                    + [f"member{'s' if len(other) > 1 else ''} {_some(other)} (not a .npy array)"] * bool(other)
                warnings.warn(f"{where}: ignoring {' and '.join(what)} (not part of the .npz graph "
                              f"format: {', '.join(FORMAT)}, NAME_mask(s), edge_NAME, node_NAME)", DataWarning, stacklevel=2)
            for k in z.files:
                if not _known(k):
                    continue
                _check_declared_size(z.zip, where, k)   # the archive np.load holds open
                try:
                    arrays[k] = z[k]
                except MemoryError:
                    raise GdslError(f"{where}: array '{k}' does not fit in this machine's memory") from None
                except ValueError as e:
                    if "pickle" in str(e).lower():
                        raise GdslError(f"{where}: array '{k}' holds pickled Python objects; gdsl never unpickles data") from None
                    raise GdslError(f"{where}: array '{k}' cannot be read: {e}") from None
                if not isinstance(arrays[k], np.ndarray):
                    raise GdslError(f"{where}: member '{k}' of the archive is not a .npy array")
    except GdslError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error, RuntimeError, NotImplementedError) as e:
        raise GdslError(f"{where}: not a readable .npz file ({e})") from None
    missing = [k for k in REQUIRED if k not in arrays]
    if missing:
        # np.savez(path, src, dst, ...) stores positional arrays as arr_0, arr_1, ... (helper-36)
        have = _names_in(p)
        positional = "; np.savez(path, src=..., dst=..., features=...) names them: arrays passed by position " \
            "are stored as arr_0, arr_1, ..." if any(re.fullmatch(r"arr_\d+", k) for k in have) else ""
        raise GdslError(f"{where}: missing array{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} "
                        f"(an .npz graph holds src, dst, features, and optionally labels and masks{positional})"
                        + _other_names_hint(have, missing))
    src, dst, feats = (arrays[k] for k in REQUIRED)
    for k in ("src", "dst"):
        if arrays[k].size == 0 and arrays[k].dtype.kind == "f":
            arrays[k] = arrays[k].astype(np.int64)   # np.array([]) is float64: no edges (as from_edges takes it)
    src, dst = arrays["src"], arrays["dst"]
    labels = arrays.get("labels")   # optional: a program without a label input (mse, bce of floats) needs none
    for k, a in (("src", src), ("dst", dst), ("labels", labels)):
        if a is None:
            continue
        shape_hint = _label_shape_hint(a) if k == "labels" else ""
        if a.dtype.kind not in "iu" and not shape_hint:
            raise GdslError(f"{where}: array '{k}' must hold integers, got dtype {a.dtype}"
                            + (_float_labels_hint(a) if k == "labels" else ""))
        if a.ndim != 1:
            # (before the dtype: float one-hot rows, as np.eye(C)[y] makes, were told to store them as
            # integers, still one-hot; helper-37)
            raise GdslError(f"{where}: array '{k}' must be 1-d, got shape {list(a.shape)}{shape_hint}")
        if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:   # would wrap negative
            raise GdslError(f"{where}: array '{k}' holds {int(a.max())}, which does not fit in int64")
    if feats.dtype.kind not in "fiub" or feats.ndim != 2:
        hint = (" (one feature per vertex is the shape [N, 1]: features[:, None])"
                if feats.ndim == 1 and feats.dtype.kind in "fiub" else "")
        raise GdslError(f"{where}: array 'features' must be a 2-d numeric array [N, F], got dtype {feats.dtype} "
                        f"shape {list(feats.shape)}{hint}")
    if len(src) != len(dst):
        raise GdslError(f"{where}: array 'dst' has {len(dst)} entries but 'src' has {len(src)}")
    n = feats.shape[0]
    if labels is not None and len(labels) != n:
        raise GdslError(f"{where}: array 'labels' has {len(labels)} entries but 'features' has {n} rows")
    names = sorted({m for k in arrays if (m := _mask_name(k)) is not None},
                   key=lambda m: (m not in STANDARD_MASKS, STANDARD_MASKS.index(m) if m in STANDARD_MASKS else 0, m))
    if split != 0 and not any(f"{name}_masks" in arrays for name in names):
        # (was "(no 'train_masks')" whatever the masks were called; helper-3)
        have = ", ".join(f"'{n}_mask'" for n in names) or "no mask"
        raise GdslError(f"{where}: split {split} is not available: the file has a single split ({have}; several "
                        f"splits are NAME_masks arrays of shape [S, N])")
    if split != 0:   # (was: split k's train mask beside the one val mask of every split, without a word)
        multi = [n for n in names if f"{n}_masks" in arrays]
        single = [n for n in names if f"{n}_masks" not in arrays]
        if multi and single:
            warnings.warn(f"{where}: split {split}: {', '.join(repr(n + '_mask') for n in single)} "
                          f"{'is a single mask' if len(single) == 1 else 'are single masks'}, the same in every "
                          f"split, beside split {split} of {', '.join(repr(n + '_masks') for n in multi)}", DataWarning,
                          stacklevel=2)
    masks = {}
    for name in names:
        single, multi = arrays.get(f"{name}_mask"), arrays.get(f"{name}_masks")
        m, key = single, f"{name}_mask"
        if multi is not None and (multi.ndim != 2 or not _maskish(multi) or multi.shape[1] != n
                                  or multi.shape[0] == 0):
            # checked whichever split is used (was: only when this array's split was selected,
            # and a 1-d, 3-d or empty one not at all)
            layout = (" (PyG's layout [N, S]: save its transpose, .T)"
                      if multi.ndim == 2 and multi.shape[0] == n and multi.shape[1] != n and _maskish(multi) else "")
            raise GdslError(f"{where}: array '{name}_masks' must be bool (or 0/1 integers) of shape [S, {n}] with "
                            f"S >= 1 splits, got dtype {multi.dtype} shape {list(multi.shape)}{layout}")
        if multi is not None and (split != 0 or single is None):
            if multi.ndim != 2 or not 0 <= split < multi.shape[0]:
                raise GdslError(f"{where}: split {split} is not available in '{name}_masks' of shape {list(multi.shape)}")
            m, key = multi[split], f"{name}_masks"
        if m is None:
            continue
        if not _maskish(m):
            # 0/1 integers are taken, as Graph.from_edges takes them (was: refused here only)
            raise GdslError(f"{where}: array '{key}' must be bool (or 0/1 integers), got dtype {m.dtype}"
                            + (" holding values other than 0 and 1" if m.dtype.kind in "iu" else "")
                            + _index_mask_hint(m, n) + _float_mask_hint(m))
        if m.shape != (n,):
            raise GdslError(f"{where}: array '{key}' has shape {list(m.shape)}, expected [{n}]" + _index_mask_hint(m, n))
        masks[name] = m.astype(bool)
    edata = {name: v for k, v in arrays.items() if (name := _data_name(k, "edge_")) is not None}
    ndata = {name: v for k, v in arrays.items() if (name := _data_name(k, "node_")) is not None}
    for prefix, d, per in (("edge_", edata, "edge"), ("node_", ndata, "vertex")):
        for k, v in d.items():
            if v.dtype.kind not in "fiub":
                raise GdslError(f"{where}: array '{prefix}{k}' must be numeric, got dtype {v.dtype}")
            if v.ndim < 1:
                raise GdslError(f"{where}: array '{prefix}{k}' must have one row per {per}, got a scalar")
            rows = len(src) if per == "edge" else n
            if v.shape[0] != rows:   # named as the file names it (was: "edge data 'index'" for edge_index)
                hint = (" (PyG's edge_index [2, E] is the file's src and dst arrays)"
                        if prefix + k == "edge_index" and v.shape == (2, rows) else "")
                raise GdslError(f"{where}: array '{prefix}{k}' must have one row per {per} ({rows}), got shape "
                                f"{list(v.shape)}{hint}")
    # float64 features beyond float32's range are refused by from_edges, by value and row
    if feats.dtype not in (np.float32, np.float64):
        with np.errstate(over="ignore"):   # a longdouble beyond float32's range: inf, refused as such
            feats = feats.astype(np.float32)
    g = Graph.from_edges(src.astype(np.int64), dst.astype(np.int64), n, features=feats,
                         labels=None if labels is None else labels.astype(np.int64), masks=masks, edata=edata,
                         ndata=ndata, name=p.stem, where=where, copy=False)   # the arrays are the loader's own
    g.source = where
    return g
