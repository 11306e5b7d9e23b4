"""gdsl: a compiler for graph neural network training.

    import gdsl
    prog  = gdsl.compile("programs/gcn.gd")
    graph = gdsl.load_graph("cora")
    model = prog.module(graph)
    out   = model(graph.features)

Names are imported lazily so `gdsl compile` does not pay for importing torch.
"""
__version__ = "0.1.0"

# (the error classes too: the `gdsl` command's first code, gdsl/__main__.py, runs after this
# package is imported, and a Ctrl-C before it printed a traceback: nothing here imports)
_LAZY = {"Program": "gdsl.api", "compile": "gdsl.api", "Graph": "gdsl.graph", "load_graph": "gdsl.graph",
         "DataWarning": "gdsl.graph",
         "train": "gdsl.runtime.trainer", **dict.fromkeys(("CompileError", "Error", "GdslError", "GdslWarning"),
                                                          "gdsl.diagnostics")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gdsl' has no attribute {name!r}")


__all__ = ["Program", "compile", "Graph", "load_graph", "train", "CompileError", "Error", "GdslError", "GdslWarning",
           "DataWarning"]
