"""Lowering rules, one module per op family; importing this package registers them all."""

from . import collectives, control, elementwise, indexing, reduce, shape  # noqa: F401
