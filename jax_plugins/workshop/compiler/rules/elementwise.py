"""Family `elementwise`: kernels/elementwise/ (elementwise.cc, element_ops.h, complex.cc,
convert.cc, gelu.cc); kernels named after the op, operands and results of one shape.

Which dtypes each op takes, and which are computed in f32, is the op table's business
(optable.py); legalize.py checks and upcasts every instruction, so these rules only map
attributes.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import dtypes, errors
from ..lowering import Lowering, register
from ..optable import COMPLEX, ELEMENTWISE, SPECS, SUB_BYTE  # noqa: F401  (ELEMENTWISE re-exported)
from ..upcast import element_dtype

# Ops whose kernel takes the op's operands and results as they are, without attributes:
# the elementwise family of the table (but gelu_tanh, which only idioms.py makes), plus
# byte-level ops (convert: any dtype to any; bitcast_convert: the row-major bytes
# reinterpreted, StableHLO has checked the shapes; copy).
_PLAIN = [
  name
  for name, spec in SPECS.items()
  if spec.family == "elementwise"
  and name not in ("compare", "reduce_precision", "gelu_tanh", "convert", "bitcast_convert")
] + ["convert", "copy"]


@register(*(f"stablehlo.{name}" for name in _PLAIN))
def _plain(ctx: Lowering, op: ir.Operation) -> None:
  ctx.emit(op)


@register("stablehlo.bitcast_convert")
def _bitcast_convert(ctx: Lowering, op: ir.Operation) -> None:
  """The row-major bytes reinterpreted; between a sub-byte integer (s4/u4/s2/u2, stored
  one per byte in its low bits) and a wider type, the narrow side's last dim holds the
  8 * width / bits values of each wide element, lowest bits first (XLA's and numpy /
  ml_dtypes' `view`): packed and unpacked here through u8 (_pack_sub_byte,
  _unpack_sub_byte).

  Raises:
    NotImplementedError: between two sub-byte types of different widths.
  """
  src = dtypes.lookup(ir.RankedTensorType(op.operands[0].type).element_type)
  dst = dtypes.lookup(ir.RankedTensorType(op.result.type).element_type)
  narrow = [t for t in (src, dst) if t is not None and t.name in SUB_BYTE]
  if not narrow or (src is not None and dst is not None and src.name == dst.name):
    ctx.emit(op)
    return
  if len(narrow) == 2:
    if SUB_BYTE[src.name][1] == SUB_BYTE[dst.name][1]:
      ctx.emit(op)  # Same width: the same bytes.
      return
    raise errors.unsupported(op, f"bitcast_convert from {src.name} to {dst.name}")
  if dst.name in SUB_BYTE:
    _unpack_sub_byte(ctx, op, src, dst)
  else:
    _pack_sub_byte(ctx, op, src, dst)


def _splat_u8(ctx: Lowering, op: ir.Operation, value: int, dims) -> int:
  """A u8 array of `dims` filled with `value`."""
  u8 = dtypes.by_name("u8")
  scalar = ctx.temp_slot(u8, ())
  ctx.emit_kernel(op, "constant", [], [scalar], {"data": bytes([value])})
  out = ctx.temp_slot(u8, dims)
  ctx.emit_kernel(op, "broadcast_in_dim", [scalar], [out], {"dims": []})
  return out


def _unpack_sub_byte(ctx: Lowering, op: ir.Operation, src, dst) -> None:
  """wide [..., ] -> sub-byte [..., n]: the bytes as u8 [..., w], each byte's n/w fields
  (byte >> (k * bits)) & mask as u8 [..., w, 1], concatenated along the last dim in k
  order, reshaped to [..., n], bitcast to the sub-byte type (whose storage is masked low
  bits: the same bytes)."""
  u8 = dtypes.by_name("u8")
  bits = SUB_BYTE[dst.name][1]
  dims = tuple(ir.RankedTensorType(op.operands[0].type).shape)
  width = src.numpy.itemsize  # Bytes per wide element.
  per_byte = 8 // bits
  byte_dims = (*dims, width)
  data = ctx.slot(op.operands[0])
  as_bytes = ctx.temp_slot(u8, byte_dims)
  if width == 1:  # [...] -> [..., 1]: same bytes, then a unit dim.
    same = ctx.temp_slot(u8, dims)
    ctx.emit_kernel(op, "bitcast_convert", [data], [same])
    ctx.emit_kernel(op, "reshape", [same], [as_bytes])
  else:
    ctx.emit_kernel(op, "bitcast_convert", [data], [as_bytes])
  mask = _splat_u8(ctx, op, (1 << bits) - 1, byte_dims)
  fields = []
  for k in range(per_byte):
    shifted = as_bytes
    if k:
      shifted = ctx.temp_slot(u8, byte_dims)
      amount = _splat_u8(ctx, op, k * bits, byte_dims)
      ctx.emit_kernel(op, "shift_right_logical", [as_bytes, amount], [shifted])
    field = ctx.temp_slot(u8, byte_dims)
    ctx.emit_kernel(op, "and", [shifted, mask], [field])
    column = ctx.temp_slot(u8, (*byte_dims, 1))
    ctx.emit_kernel(op, "reshape", [field], [column])
    fields.append(column)
  pairs = ctx.temp_slot(u8, (*byte_dims, per_byte))
  ctx.emit_kernel(op, "concatenate", fields, [pairs], {"dim": len(byte_dims)})
  flat = ctx.temp_slot(u8, (*dims, width * per_byte))
  ctx.emit_kernel(op, "reshape", [pairs], [flat])
  ctx.emit_kernel(op, "bitcast_convert", [flat], ctx.result_slots(op))


def _pack_sub_byte(ctx: Lowering, op: ir.Operation, src, dst) -> None:
  """sub-byte [..., n] -> wide [...]: the inverse of _unpack_sub_byte: field k of each
  byte shifted left by k * bits and or-ed in."""
  u8 = dtypes.by_name("u8")
  bits = SUB_BYTE[src.name][1]
  dims = tuple(ir.RankedTensorType(op.result.type).shape)
  width = dst.numpy.itemsize
  per_byte = 8 // bits
  byte_dims = (*dims, width)
  values = ctx.temp_slot(u8, (*dims, width * per_byte))
  ctx.emit_kernel(op, "bitcast_convert", [ctx.slot(op.operands[0])], [values])
  mask = _splat_u8(ctx, op, (1 << bits) - 1, (*dims, width * per_byte))
  masked = ctx.temp_slot(u8, (*dims, width * per_byte))
  ctx.emit_kernel(op, "and", [values, mask], [masked])
  grouped = ctx.temp_slot(u8, (*byte_dims, per_byte))
  ctx.emit_kernel(op, "reshape", [masked], [grouped])
  packed = None
  for k in range(per_byte):
    start = [0] * len(byte_dims) + [k]
    column = ctx.temp_slot(u8, (*byte_dims, 1))
    ctx.emit_kernel(
      op,
      "slice",
      [grouped],
      [column],
      {"start": start, "limit": [*byte_dims, k + 1], "stride": [1] * (len(byte_dims) + 1)},
    )
    field = ctx.temp_slot(u8, byte_dims)
    ctx.emit_kernel(op, "reshape", [column], [field])
    if k:
      shifted = ctx.temp_slot(u8, byte_dims)
      amount = _splat_u8(ctx, op, k * bits, byte_dims)
      ctx.emit_kernel(op, "shift_left", [field, amount], [shifted])
      combined = ctx.temp_slot(u8, byte_dims)
      ctx.emit_kernel(op, "or", [packed, shifted], [combined])
      field = combined
    packed = field
  if width == 1:
    flat = ctx.temp_slot(u8, dims)
    ctx.emit_kernel(op, "reshape", [packed], [flat])
    packed = flat
  ctx.emit_kernel(op, "bitcast_convert", [packed], ctx.result_slots(op))


@register("stablehlo.reduce_precision")
def _reduce_precision(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: exponent_bits, mantissa_bits. Works on the bits of any float dtype."""
  ctx.emit(
    op,
    {
      "exponent_bits": op.attributes["exponent_bits"].value,
      "mantissa_bits": op.attributes["mantissa_bits"].value,
    },
  )


@register("stablehlo.compare")
def _compare(ctx: Lowering, op: ir.Operation) -> None:
  """Attrs: direction ("EQ".."GE") and compare_type, filled in from the dtype if absent.

  Complex operands compare only for (in)equality.
  """
  direction = stablehlo.ComparisonDirectionAttr(op.attributes["comparison_direction"]).value
  if "compare_type" in op.attributes:
    compare_type = stablehlo.ComparisonTypeAttr(op.attributes["compare_type"]).value
  else:
    compare_type = default_compare_type(op.operands[0].type)
  if direction not in ("EQ", "NE") and element_dtype(op, op.operands[0]).name in COMPLEX:
    raise errors.unsupported(
      op, f"complex operands have no order: comparison direction {direction}"
    )
  ctx.emit(op, {"direction": direction, "compare_type": compare_type})


def default_compare_type(t: ir.RankedTensorType) -> str:
  # The StableHLO spec's default: FLOAT for floats and complex, SIGNED for signed integers,
  # UNSIGNED for unsigned integers and pred.
  dtype = dtypes.lookup(t.element_type)
  kind = dtype.numpy.kind if dtype else "f"  # Unrepresentable types fail in emit anyway.
  return {"i": "SIGNED", "u": "UNSIGNED", "b": "UNSIGNED"}.get(kind, "FLOAT")
