"""The reference backend: plain torch ops and autograd; the semantic oracle."""
from gdsl.backends.reference.executor import ReferenceModule  # noqa: F401
