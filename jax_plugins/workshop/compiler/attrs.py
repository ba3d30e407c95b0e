"""Readers of op attributes that several lowering rules and SPMD steps share.

Each takes the op (`ir.Operation`) and the attribute's name; the module has been verified,
so an attribute present has the type the op's definition gives it.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir


def ints(op: ir.Operation, name: str) -> list[int]:
  """An integer or bool array attribute (`array<i64: ...>`, `array<i1: ...>`) as Python
  ints; [] when the op does not carry it."""
  return [int(v) for v in op.attributes[name]] if name in op.attributes else []


def ints_per_dim(op: ir.Operation, name: str, n: int, default: int) -> list[int]:
  """An optional per-dimension array attribute of a rank-`n` window op (strides,
  dilations, window_reversal) as ints; absent = `default` for every dimension."""
  return ints(op, name) if name in op.attributes else [default] * n


def pad_lo(op: ir.Operation, n: int) -> list[int]:
  """The low padding of each of the `n` dimensions of a window op's `padding` (an n x 2
  i64 elements attribute; may be negative); absent = 0."""
  if "padding" not in op.attributes:
    return [0] * n
  padding = np.asarray(op.attributes["padding"], dtype=np.int64).reshape(n, 2)
  return padding[:, 0].tolist()
