"""Backends execute the IR; `reference` (plain torch) is the semantic oracle."""
