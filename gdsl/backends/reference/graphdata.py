"""Graph-side tensors a compiled module needs: indices, degrees, constants."""
from __future__ import annotations

from typing import ClassVar

import sympy
import torch

from gdsl.graph.graph import Graph


def eval_sympy(expr: sympy.Expr, env: dict[str, torch.Tensor]) -> torch.Tensor | float:
    """Evaluate a folded graph-constant expression with torch ops."""
    if expr.is_number:  # also E, pi, sqrt(2)/2: nsimplify folds user floats into these
        return float(expr)
    if expr.is_Symbol:
        return env[expr.name]
    args = [eval_sympy(a, env) for a in expr.args]
    if expr.is_Add:
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if expr.is_Mul:
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if expr.is_Pow:
        base, exp = args
        if isinstance(base, float):
            return torch.pow(torch.tensor(base, dtype=torch.float64), exp)  # the exponent's dtype wins
        return torch.pow(base, exp)
    if isinstance(expr, (sympy.Max, sympy.Min)):
        fn = torch.maximum if isinstance(expr, sympy.Max) else torch.minimum
        tens = [a for a in args if isinstance(a, torch.Tensor)]
        out = tens[0]
        for a in args:
            if a is out:
                continue
            out = fn(out, a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=out.dtype))
        return out
    unary = {sympy.exp: torch.exp, sympy.log: torch.log, sympy.Abs: torch.abs}
    for k, fn in unary.items():
        if isinstance(expr, k):
            a = args[0]
            return fn(a if isinstance(a, torch.Tensor) else torch.tensor(a))
    raise NotImplementedError(f"cannot evaluate graph constant {expr}")


class EdgeEnv(dict):
    """Edge tensors by name: the graph's edge data, plus the per-edge degree
    arrays (`src_degree`, ...) made on first use only: each is an E-long
    tensor, and most programs read none or two of the four.  (No lambdas
    inside: a module that holds one pickles and deep-copies.)"""

    DERIVED: ClassVar[dict[str, tuple[str, str]]] = {"src_degree": ("degree", "src"), "dst_degree": ("degree", "dst"),
               "src_out_degree": ("out_degree", "src"), "dst_out_degree": ("out_degree", "dst")}

    def __init__(self, data: dict, vertex_env: dict, ends: dict) -> None:
        super().__init__(data)
        self._vertex_env, self._ends = vertex_env, ends   # {"degree": ..}, {"src": .., "dst": ..}

    def __missing__(self, key):
        if key not in self.DERIVED:
            raise KeyError(key)
        deg, end = self.DERIVED[key]
        v = self[key] = self._vertex_env[deg][self._ends[end]]
        return v

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or key in self.DERIVED

    def get(self, key, default=None):
        return self[key] if key in self else default


class GraphData:
    """The bound graph as the executor sees it (after the program's options)."""

    def __init__(self, graph: Graph, options: dict[str, bool]) -> None:
        g = graph.with_options(self_loops=options.get("self_loops", False),
                               symmetric=options.get("symmetric", False))
        self.graph = g
        self.num_nodes = g.num_nodes
        self.src, self.dst = g.src, g.dst
        indeg, outdeg = g.in_degree(), g.out_degree()
        self.vertex_env = {"degree": indeg, "out_degree": outdeg}
        self.edge_env = EdgeEnv(g.edata, self.vertex_env, {"src": g.src, "dst": g.dst})

    def vertex_const(self, expr, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A folded per-vertex constant, evaluated in `dtype` from the integer
        degrees (so a float64 module's constants carry no float32 rounding)."""
        v = eval_sympy(expr, _InDtype(self.vertex_env, dtype))
        return v.to(dtype) if isinstance(v, torch.Tensor) else torch.full(
            (self.num_nodes,), v, dtype=dtype, device=self.src.device)

    def edge_const(self, expr, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        v = eval_sympy(expr, _InDtype(self.edge_env, dtype))
        return v.to(dtype) if isinstance(v, torch.Tensor) else torch.full(
            (self.src.numel(),), v, dtype=dtype, device=self.src.device)


class _InDtype:
    """A read-only view of a name -> tensor env whose float tensors come out in `dtype`."""

    def __init__(self, env, dtype: torch.dtype) -> None:
        self.env, self.dtype = env, dtype

    def __getitem__(self, key):
        v = self.env[key]
        return v.to(self.dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
