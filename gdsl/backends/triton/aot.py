"""Compile the generated kernels for a GPU architecture without a GPU.

Triton compiles ahead of time for a named target (TTIR -> TTGIR -> LLVM IR
-> PTX -> cubin, with the ptxas its wheel ships), no device needed.  This
checks what the interpreter cannot: that every kernel type-checks and
lowers as GPU code (int64 loop bounds, masks, float64 math, ...), and shows
its register and shared-memory use.

    python -m gdsl.backends.triton.aot [--arch 90] [--all] [--dtype fp32|fp64]

compiles each kernel family's signatures (``--all``: every aggregation
signature) with every config of its autotune space (``--configs all``) or
the first one, and prints one line per kernel.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

_INDEX_ARGS = ("indptr", "indices", "eid", "src", "dst")
_I64_ARGS = ("seg", "arg", "part_arg", "long_rows", "long_ptr")
_INT_ARGS = ("nrows", "F", "H", "D", "deg_key", "E", "P", "K")
_FLOAT_ARGS = ("slope",)


def _arg_types(fn, dtype: str, index: str) -> dict:
    sig = {}
    for a in fn.arg_names:
        if a.startswith("BLOCK_"):
            sig[a] = "constexpr"
        elif a in _INDEX_ARGS:
            sig[a] = f"*{index}"
        elif a in _I64_ARGS:
            sig[a] = "*i64"
        elif a in _INT_ARGS:
            sig[a] = "i32"
        elif a in _FLOAT_ARGS:
            sig[a] = "fp32"
        else:
            sig[a] = f"*{dtype}"
    return sig


def compile_kernel(autotuned, arch: int = 90, dtype: str = "fp32", index: str = "i32", config: int = 0,
                   extra: dict | None = None):
    """Compile one generated kernel (an attribute of a get_kernel module:
    triton.autotune around triton.jit) for sm_<arch>; returns Triton's
    CompiledKernel (its .asm has ttir, ttgir, llir, ptx, cubin; .n_regs,
    .n_spills after loading, .metadata.shared)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compile as tcompile

    fn = autotuned.fn
    cfg = autotuned.configs[config]
    consts = dict(cfg.kwargs)
    for a in fn.arg_names:
        if a.startswith("BLOCK_") and a not in consts:
            consts[a] = (extra or {}).get(a, 16)
    src = ASTSource(fn=fn, signature=_arg_types(fn, dtype, index), constexprs=consts)
    return tcompile(src, target=GPUTarget("cuda", arch, 32),
                    options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})


def kernel_functions(kind: str, **sig):
    """[(name, autotuned kernel)] of one generated source, compiled-mode
    (TRITON_INTERPRET must be off when the module is imported)."""
    from triton.runtime.autotuner import Autotuner

    from gdsl.backends.triton.codegen import get_kernel

    mod = get_kernel(kind, **sig)
    return [(n, getattr(mod, n)) for n in sorted(vars(mod)) if isinstance(getattr(mod, n), Autotuner)]


def signatures(all_aggregates: bool = False) -> list[tuple[str, dict]]:
    from gdsl.backends.triton.codegen import BINARY, MSGS, REDUCES

    out: list[tuple[str, dict]] = []
    if all_aggregates:
        for msg, reduce in itertools.product(MSGS, REDUCES):
            for bcast in (("none", "w", "s") if msg in BINARY else ("none",)):
                for bal in (False, True):
                    out.append(("aggregate", {"msg": msg, "reduce": reduce, "bcast": bcast, "balanced": bal}))
    else:
        out += [("aggregate", {"msg": "copy_src", "reduce": "sum", "rscale": True}),
                ("aggregate", {"msg": "mul", "reduce": "sum", "bcast": "w", "xscale": True, "balanced": True}),
                ("aggregate", {"msg": "div", "reduce": "max", "bcast": "s", "balanced": True})]
    out += [("aggregate", {"msg": "copy_src", "reduce": "sum", "xscale": True, "rscale": True})]
    out += [("sddmm", {"op": o}) for o in ("dot", "sub", "div")]
    out += [("edge_softmax", {}), ("gat_aggregate", {})]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", type=int, default=90, help="compute capability x 10 (80: A100, 90: H100)")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "fp64"))
    p.add_argument("--index", default="i32", choices=("i32", "i64"))
    p.add_argument("--all", action="store_true", help="every aggregation signature")
    p.add_argument("--configs", default="first", choices=("first", "all"))
    args = p.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "0"
    os.environ.setdefault("GDSL_TRITON_AUTOTUNE", "1")
    failed = 0
    for kind, sig in signatures(args.all):
        for name, k in kernel_functions(kind, **sig):
            for ci in range(len(k.configs) if args.configs == "all" else 1):
                t = time.perf_counter()
                try:
                    c = compile_kernel(k, args.arch, args.dtype, args.index, ci, {"BLOCK_K": 8})
                    md = c.metadata
                    print(f"ok   {name:<40} {k.configs[ci]}  shared={md.shared}B  "
                          f"{time.perf_counter() - t:.1f}s", flush=True)
                except Exception as e:  # noqa: BLE001 - report and go on
                    failed += 1
                    print(f"FAIL {name:<40} {k.configs[ci]}: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                          flush=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
