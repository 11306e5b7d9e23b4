"""What every pass shares: the context it runs in and the pass protocol."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gdsl.ir.core import Module


@dataclass
class PassContext:
    """Read-only facts for passes (no mutable global compiler state)."""

    dims: dict[str, int] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


class Pass(Protocol):
    name: str

    def run(self, module: Module, ctx: PassContext) -> Module: ...
