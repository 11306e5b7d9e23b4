"""The gdsl IR: SSA values with domains and symbolic shapes (imports nothing else of gdsl)."""
from gdsl.ir.core import Func, Module, Op, Type, Value, dim, format_dim  # noqa: F401
