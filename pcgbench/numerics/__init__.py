"""Numerics shared by several tasks (a solver that serves one task family lives with it,
``tasks/<task>/solver.py``)."""
