"""Compiler passes over the IR; `pipeline.py` holds their order."""
