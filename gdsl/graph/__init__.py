"""Graphs: the in-memory `Graph`, the .npz loader with its checks, generators."""
from gdsl.graph.graph import DataWarning, Graph  # noqa: F401
from gdsl.graph.io import load_graph, builtin_dataset  # noqa: F401
