"""Serving engines and load generation (launch_serve, serve_benchmark): not built yet.

DESIGN.md reserves this package for engine adapters, process lifecycle, the load
generator and the built-in engine; no tool uses it so far.
"""
