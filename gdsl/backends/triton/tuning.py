"""Block sizes of the Triton kernels: the autotune space of each kernel
family, and the single config used where autotuning is off.

Every generated kernel is decorated with ``@triton.autotune(configs=
tuning.configs("<family>"), key=[...], prune_configs_by=...)``; the grids
are functions of the chosen config.  The spaces are small on purpose (each
config is compiled and timed on the first call with a new key):

===========  ==============================  ====================  =============
family       meta-parameters                 space                 key
===========  ==============================  ====================  =============
aggregate    BLOCK_E (edges per step),       BLOCK_E 16 / 32 / 64  F, deg_key
             BLOCK_F (features per program)  x BLOCK_F 32/64/128,  (log2 of the
                                             num_warps 2-8         mean degree)
merge        BLOCK_F                         32 / 64 / 128         F
sddmm        BLOCK_E, BLOCK_F (BLOCK_K dot)  32/64/128 x 16-128    F (K)
softmax      BLOCK_E (BLOCK_K = heads,       16 / 32 / 64          K
             padded to a power of two)
gat          BLOCK_E, BLOCK_F                as aggregate          F, deg_key
gat_edge     BLOCK_E (BLOCK_D loop)          32 / 64 / 128         D
===========  ==============================  ====================  =============

Configs whose feature block is more than twice the (power-of-two padded)
feature width are pruned before timing (``prune_feature_block``): they would
only add masked lanes.

Autotuning is off, and ``fixed(family)`` the one config, in two cases:

* under the interpreter (``TRITON_INTERPRET=1``): Triton's autotuner times
  configs with the GPU driver, which the interpreter does not have, and on
  the CPU the timings would mean nothing.  The interpreter's fixed config
  takes large edge blocks (fewer interpreted loop steps: the interpreter
  costs about a millisecond per tl operation, whatever the block size).
  Tests override it (``set_fixed``) to force several feature blocks and edge
  steps on small shapes.
* ``GDSL_TRITON_AUTOTUNE=0``: the GPU default config below, for debugging and
  for reproducible timings.

The generated source is the same either way; only the list of configs
handed to ``triton.autotune`` differs (one config: the autotuner runs it
without timing).
"""
from __future__ import annotations

import os

import triton

from gdsl.backends.triton import interpret_mode

# the spaces: (meta-parameters, num_warps)
SPACES: dict[str, list[tuple[dict, int]]] = {
    "aggregate": [({"BLOCK_E": 16, "BLOCK_F": 32}, 2), ({"BLOCK_E": 32, "BLOCK_F": 32}, 4),
                  ({"BLOCK_E": 16, "BLOCK_F": 64}, 2), ({"BLOCK_E": 32, "BLOCK_F": 64}, 4),
                  ({"BLOCK_E": 64, "BLOCK_F": 64}, 4), ({"BLOCK_E": 16, "BLOCK_F": 128}, 4),
                  ({"BLOCK_E": 32, "BLOCK_F": 128}, 4), ({"BLOCK_E": 64, "BLOCK_F": 128}, 8)],
    "merge": [({"BLOCK_F": 32}, 1), ({"BLOCK_F": 64}, 2), ({"BLOCK_F": 128}, 4)],
    "sddmm": [({"BLOCK_E": 32, "BLOCK_F": 32}, 4), ({"BLOCK_E": 64, "BLOCK_F": 32}, 4),
              ({"BLOCK_E": 32, "BLOCK_F": 128}, 4), ({"BLOCK_E": 64, "BLOCK_F": 64}, 4),
              ({"BLOCK_E": 128, "BLOCK_F": 32}, 8)],
    "sddmm_dot": [({"BLOCK_E": 32, "BLOCK_K": 32}, 4), ({"BLOCK_E": 64, "BLOCK_K": 32}, 4),
                  ({"BLOCK_E": 128, "BLOCK_K": 16}, 4), ({"BLOCK_E": 32, "BLOCK_K": 128}, 4),
                  ({"BLOCK_E": 64, "BLOCK_K": 64}, 8)],
    "softmax": [({"BLOCK_E": 16}, 2), ({"BLOCK_E": 32}, 4), ({"BLOCK_E": 64}, 4)],
    "gat": [({"BLOCK_E": 16, "BLOCK_F": 32}, 2), ({"BLOCK_E": 32, "BLOCK_F": 64}, 4),
            ({"BLOCK_E": 16, "BLOCK_F": 64}, 2), ({"BLOCK_E": 16, "BLOCK_F": 128}, 4),
            ({"BLOCK_E": 32, "BLOCK_F": 128}, 4), ({"BLOCK_E": 64, "BLOCK_F": 128}, 8)],
    "gat_edge": [({"BLOCK_E": 32, "BLOCK_D": 32}, 4), ({"BLOCK_E": 64, "BLOCK_D": 32}, 4),
                 ({"BLOCK_E": 128, "BLOCK_D": 16}, 4), ({"BLOCK_E": 32, "BLOCK_D": 128}, 4)],
}

# one config per family where autotuning is off: on a GPU (GDSL_TRITON_AUTOTUNE=0)
GPU_DEFAULT: dict[str, tuple[dict, int]] = {
    "aggregate": ({"BLOCK_E": 32, "BLOCK_F": 64}, 4), "merge": ({"BLOCK_F": 64}, 2),
    "sddmm": ({"BLOCK_E": 64, "BLOCK_F": 64}, 4), "sddmm_dot": ({"BLOCK_E": 64, "BLOCK_K": 32}, 4),
    "softmax": ({"BLOCK_E": 32}, 4), "gat": ({"BLOCK_E": 32, "BLOCK_F": 64}, 4),
    "gat_edge": ({"BLOCK_E": 64, "BLOCK_D": 32}, 4),
}
# ... and under the interpreter: big edge blocks, few interpreted steps
INTERPRET_DEFAULT: dict[str, tuple[dict, int]] = {
    "aggregate": ({"BLOCK_E": 64, "BLOCK_F": 64}, 4), "merge": ({"BLOCK_F": 64}, 4),
    "sddmm": ({"BLOCK_E": 64, "BLOCK_F": 64}, 4), "sddmm_dot": ({"BLOCK_E": 64, "BLOCK_K": 64}, 4),
    "softmax": ({"BLOCK_E": 64}, 4), "gat": ({"BLOCK_E": 64, "BLOCK_F": 64}, 4),
    "gat_edge": ({"BLOCK_E": 64, "BLOCK_D": 64}, 4),
}
_OVERRIDE: dict[str, tuple[dict, int]] = {}


def autotuning() -> bool:
    """Whether kernels autotune (a GPU, and GDSL_TRITON_AUTOTUNE not 0)."""
    return not interpret_mode() and os.environ.get("GDSL_TRITON_AUTOTUNE", "1") != "0"


def fixed(family: str) -> tuple[dict, int]:
    """The one config of `family` where autotuning is off."""
    if family in _OVERRIDE:
        return _OVERRIDE[family]
    return (INTERPRET_DEFAULT if interpret_mode() else GPU_DEFAULT)[family]


def set_fixed(family: str, meta: dict | None, num_warps: int = 4) -> tuple[dict, int] | None:
    """Replace (meta dict) or restore (None) the fixed config of `family`;
    returns the previous override.  Kernels are cached per config, so this
    takes effect at the next launch."""
    if family not in SPACES:
        raise ValueError(f"unknown kernel family {family!r} (one of {', '.join(SPACES)})")
    prev = _OVERRIDE.pop(family, None)
    if meta is not None:
        _OVERRIDE[family] = (dict(meta), num_warps)
    return prev


def config_key() -> tuple:
    """What the configs handed to triton.autotune depend on (a cache key)."""
    if autotuning():
        return ("autotune",)
    return ("fixed", interpret_mode(), tuple(sorted((k, tuple(sorted(m.items())), w)
                                                    for k, (m, w) in _OVERRIDE.items())))


def configs(family: str) -> list:
    """The triton.Config list for `family`: the space, or the fixed config."""
    if autotuning():
        return [triton.Config(dict(m), num_warps=w) for m, w in SPACES[family]]
    m, w = fixed(family)
    return [triton.Config(dict(m), num_warps=w)]


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def prune_feature_block(configs, named_args, **kwargs):
    """Drop configs whose BLOCK_F (BLOCK_K, BLOCK_D) exceeds twice the padded
    width (F, K or D among the arguments); keeps at least one (the smallest)."""
    width = None
    for name, block in (("F", "BLOCK_F"), ("K", "BLOCK_K"), ("D", "BLOCK_D")):
        if name in named_args and any(block in c.kwargs for c in configs):
            width, key = int(named_args[name]), block
            break
    if width is None or len(configs) <= 1:
        return configs
    limit = max(16, 2 * _pow2(width))
    kept = [c for c in configs if c.kwargs.get(key, 0) <= limit]
    return kept or [min(configs, key=lambda c: c.kwargs.get(key, 0))]
