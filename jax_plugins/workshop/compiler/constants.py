"""Raw bytes of a `stablehlo.constant`'s dense elements attribute."""

from __future__ import annotations

import re

import numpy as np
from jaxlib.mlir import ir

from . import errors
from .dtypes import DType


def splat_bytes(op: ir.Operation, dtype: DType) -> bytes | None:
  """The one element of a splat constant (every element equal) as bytes of `dtype`, or
  None when the constant is not a splat. Large splats (jax.random's constants have the
  full result shape) are then never expanded."""
  try:
    attr = ir.DenseElementsAttr(op.attributes["value"])
  except (TypeError, ValueError):  # dense resources, other attribute kinds
    return None
  if not attr.is_splat:
    return None
  return dense_bytes(op, dtype, (1,), first_only=True)


def dense_bytes(
  op: ir.Operation, dtype: DType, dims: tuple[int, ...], *, first_only: bool = False
) -> bytes:
  """Returns the constant's full array (splats expanded) as row-major bytes of `dtype`.

  pred elements are one byte each, 0 or 1. `first_only`: only the first element (of a
  splat), for dims (1,).

  Raises:
    ValueError: the attribute's element count doesn't match the result shape.
  """
  try:
    # The buffer protocol covers every integer, f16, f32 and f64 attribute, splat or not
    # (a splat comes back with its full shape, i1 comes back as bool).
    values = np.asarray(op.attributes["value"])
  except TypeError:
    # The bindings refuse bf16 (and complex, already when downcasting the attribute), so
    # read those from the printed form instead.
    values = _parse_printed(str(op), dtype)
  values = values.reshape(-1)
  if first_only:
    values = values[:1]
  values = values.astype(dtype.numpy, copy=False)
  count = int(np.prod(dims, dtype=np.int64))
  if values.size == 1:
    values = np.broadcast_to(values, (count,))
  if values.size != count:
    raise errors.malformed(op, f"{values.size} constant elements for shape {list(dims)}")
  return np.ascontiguousarray(values).tobytes()


# A scalar in MLIR's dense literal syntax: a decimal float/int, or a hex bit pattern
# (used for NaN/inf and for floats that don't print exactly).
_SCALAR = re.compile(r"0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|[0-9][0-9.]*(?:[eE][-+]?[0-9]+)?)")
# The literal itself never contains ">", so this stops before the ": tensor<...>" suffix.
_DENSE = re.compile(r"dense<([^>]*)>")


def _parse_printed(text: str, dtype: DType) -> np.ndarray:
  """Flat element values from `dense<...>` in an op's printed form.

  MLIR prints large attributes as one hex blob of the raw little-endian data
  (`dense<"0x...">`) and small ones as (nested) lists of scalars; complex elements are
  "(re,im)" pairs, which flatten into consecutive components.
  """
  literal = _DENSE.search(text).group(1)
  if literal.startswith('"0x'):
    return np.frombuffer(bytes.fromhex(literal[3 : literal.index('"', 1)]), dtype.numpy)
  # Components of a complex element are the matching float type; bit patterns are ints.
  component = np.empty(0, dtype.numpy).real.dtype
  bits = np.dtype(f"u{component.itemsize}")
  flat = [
    np.array(int(tok, 16), bits).view(component)
    if tok.startswith("0x")
    else np.array(float(tok), component)
    for tok in _SCALAR.findall(literal)
  ]
  return np.array(flat, component).view(dtype.numpy)
