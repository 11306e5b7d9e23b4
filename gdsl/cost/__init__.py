"""gdsl's cost model: symbolic flops, words, messages and memory per rank for
each partitioning strategy and operation order of a GCN-like layer stack
(CAGNET §IV, RDM §III-IV, P3 §3.1-3.2, DistGNN §5), the time model over a
machine profile, and the chooser. See docs/cost-model.md."""
from gdsl.cost.choose import Candidate, Choice, NoPlanFits, candidates, choose  # noqa: F401
from gdsl.cost.strategies import *  # noqa: F401,F403
from gdsl.cost.strategies import __all__ as _strategies_all

__all__ = ["Candidate", "Choice", "NoPlanFits", "candidates", "choose", *_strategies_all]
