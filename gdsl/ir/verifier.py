"""IR verifier: SSA dominance, operand arity and re-inferred result types."""
from __future__ import annotations

from gdsl.ir.core import Func, Module, Op
from gdsl.ir.ops import ALL_OPS, ShapeError, infer, same_dim


class VerifyError(Exception):
    pass


_ARITY = {"matmul": 2, "dot": 2, "loss": 2, "src": 1, "dst": 1, "gather": 1, "edge_softmax": 1,
          "dropout": 1, "sync": 1, "reduce": 1, "flatten": 1, "reshape": 1, "softmax": 1,
          "log_softmax": 1, "degree": 0, "vertex_const": 0, "edge_const": 0, "const": 0,
          "param": 0, "input": 0, "sddmm": 2, "gat_aggregate": 3}


def _check_op(op: Op, defined: set, f: Func) -> None:
    where = f"in @{f.name}: op '{op.name}'"
    if op.name not in ALL_OPS:
        raise VerifyError(f"{where}: unknown op")
    for v in op.operands:
        if v not in defined:
            raise VerifyError(f"{where}: operand {v!r} is used before it is defined")
    want = _ARITY.get(op.name)
    if want is not None and len(op.operands) != want:
        raise VerifyError(f"{where}: expects {want} operands, has {len(op.operands)}")
    if op.result is None:
        raise VerifyError(f"{where}: has no result")
    if op.name == "loss" or op.name == "call":
        return
    try:
        t = infer(op.name, [v.type for v in op.operands], op.attrs)
    except ShapeError as e:
        raise VerifyError(f"{where}: {e}") from None
    r = op.result.type
    if t.domain != r.domain or len(t.shape) != len(r.shape) or not all(same_dim(a, b) for a, b in zip(t.shape, r.shape)):
        raise VerifyError(f"{where}: result type {r} does not match inferred {t}")


def verify_func(f: Func, module: Module | None = None) -> None:
    defined = set(f.args)
    for op in f.ops:
        _check_op(op, defined, f)
        if op.name == "call" and module is not None and op.attrs["callee"] not in module.funcs:
            raise VerifyError(f"in @{f.name}: call of unknown function @{op.attrs['callee']}")
        if op.result in defined:
            raise VerifyError(f"in @{f.name}: value {op.result!r} defined twice")
        defined.add(op.result)
    for v in f.results:
        if v not in defined:
            raise VerifyError(f"in @{f.name}: returned value {v!r} is not defined")


def verify(m: Module) -> None:
    for f in m.funcs.values():
        verify_func(f, m)
    verify_func(m.main, m)
