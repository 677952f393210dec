"""Isolated job runner (parent side) and the worker harness (child side, worker/)."""
