"""`custom_call @<name>` of a user FFI target registered for `workshop` (see
jax_plugins/workshop/extensions/ffi.py) -> `ffi_call` (plugin_src/kernels/ffi.cc).

Family `ffi`: plugin_src/kernels/ffi.cc.

attrs: target (the name) and ffi_attrs, the custom call's attributes sorted by name in
the binary form kernels/ffi.cc documents: scalars (bool, signed/unsigned ints of 8-64
bits, f32, f64), strings, dense arrays of those and dictionaries of any of these
(`ffi::Dictionary`, or a struct with XLA_FFI_REGISTER_STRUCT_ATTR_DECODING). Non-row-major
layouts and legacy (api_version < 4) targets are compile errors naming the target.
"""

from __future__ import annotations

import struct

from jaxlib.mlir import ir

from ... import custom_calls
from .. import errors
from ..lowering import CUSTOM_CALL_FALLBACKS, UNKNOWN_TARGET_HINTS, Lowering

_SCALAR, _ARRAY, _DICTIONARY, _STRING = 3, 1, 2, 4  # XLA_FFI_AttrType
_PRED, _F32, _F64 = 1, 11, 12  # XLA_FFI_DataType
_INT = {
  (8, True): 2,
  (16, True): 3,
  (32, True): 4,
  (64, True): 5,
  (8, False): 6,
  (16, False): 7,
  (32, False): 8,
  (64, False): 9,
}
_FORMAT = {1: "?", 2: "b", 3: "h", 4: "i", 5: "q", 6: "B", 7: "H", 8: "I", 9: "Q", 11: "f", 12: "d"}
_ARRAYS = [
  ("DenseBoolArrayAttr", _PRED),
  ("DenseI8ArrayAttr", 2),
  ("DenseI16ArrayAttr", 3),
  ("DenseI32ArrayAttr", 4),
  ("DenseI64ArrayAttr", 5),
  ("DenseF32ArrayAttr", _F32),
  ("DenseF64ArrayAttr", _F64),
]


def _encode_dict(op: ir.Operation, target: str, path: str, attrs: ir.DictAttr) -> bytes:
  """`attrs` sorted by name (XLA looks names up by binary search): u32 count, entries."""
  named = sorted((a.name, a.attr) for a in attrs)
  return struct.pack("<I", len(named)) + b"".join(
    _encode(op, target, name, attr, f"{path}{name}") for name, attr in named
  )


def _encode(
  op: ir.Operation, target: str, name: str, attr: ir.Attribute, path: str | None = None
) -> bytes:
  """One entry: `name` is its key, `path` its dotted name in errors (nested dictionaries)."""
  path = path or name
  if isinstance(attr, ir.DictAttr):
    kind, dtype, payload = _DICTIONARY, 0, _encode_dict(op, target, path + ".", attr)
  elif isinstance(attr, ir.BoolAttr):
    kind, dtype, payload = _SCALAR, _PRED, struct.pack("<?", attr.value)
  elif isinstance(attr, ir.IntegerAttr) and ir.IntegerType(attr.type).width == 1:
    kind, dtype, payload = _SCALAR, _PRED, struct.pack("<?", bool(attr.value))
  elif isinstance(attr, ir.IntegerAttr):
    t = ir.IntegerType(attr.type)
    dtype = _INT.get((t.width, not t.is_unsigned))
    if dtype is None:
      raise errors.unsupported(op, f"FFI target {target}: attribute {path} of type {t}")
    value = attr.value % (1 << t.width) if t.is_unsigned else attr.value
    kind, payload = _SCALAR, struct.pack("<" + _FORMAT[dtype], value)
  elif isinstance(attr, ir.FloatAttr):
    dtype = {"f32": _F32, "f64": _F64}.get(str(attr.type))
    if dtype is None:
      raise errors.unsupported(op, f"FFI target {target}: attribute {path} of type {attr.type}")
    kind, payload = _SCALAR, struct.pack("<" + _FORMAT[dtype], attr.value)
  elif isinstance(attr, (ir.DenseIntElementsAttr, ir.DenseFPElementsAttr)):
    # jax.ffi passes numpy arrays as dense elements of a rank-1 tensor.
    element = ir.RankedTensorType(attr.type).element_type
    if isinstance(element, ir.IntegerType):
      t = ir.IntegerType(element)
      dtype = _PRED if t.width == 1 else _INT.get((t.width, not t.is_unsigned))
    else:
      dtype = {"f32": _F32, "f64": _F64}.get(str(element))
    if dtype is None:
      raise errors.unsupported(op, f"FFI target {target}: array attribute {path} of {element}")
    values = list(attr)
    if dtype in (6, 7, 8, 9):
      values = [v % (1 << ir.IntegerType(element).width) for v in values]
    kind, payload = _ARRAY, struct.pack(f"<{len(values)}{_FORMAT[dtype]}", *values)
  elif isinstance(attr, ir.StringAttr):
    kind, dtype, payload = _STRING, 0, attr.value.encode()
  else:
    for cls_name, dtype in _ARRAYS:
      cls = getattr(ir, cls_name, None)
      if cls is not None and isinstance(attr, cls):
        values = list(attr)
        kind, payload = _ARRAY, struct.pack(f"<{len(values)}{_FORMAT[dtype]}", *values)
        break
    else:
      raise errors.unsupported(
        op,
        f"FFI target {target}: attribute {path} ({attr}) is not "
        "a scalar, string, dense array or dictionary",
      )
  key = name.encode()
  return (
    struct.pack("<I", len(key)) + key + struct.pack("<BBI", kind, dtype, len(payload)) + payload
  )


def _row_major(op: ir.Operation, name: str) -> bool:
  if name not in op.attributes:
    return True
  for layout in ir.ArrayAttr(op.attributes[name]):
    dims = [int(d) for d in ir.DenseIntElementsAttr(layout)]
    if dims != sorted(dims, reverse=True):
      return False
  return True


def _ffi_call(ctx: Lowering, op: ir.Operation, target: str) -> None:
  config = None
  for key in ("mhlo.backend_config", "backend_config"):
    if key in op.attributes and isinstance(op.attributes[key], ir.DictAttr):
      config = op.attributes[key]
  if config is None:
    raise errors.unsupported(
      op,
      f"FFI target {target}: only typed FFI calls "
      "(api_version 4, attributes in a dictionary) are supported",
    )
  if not (_row_major(op, "operand_layouts") and _row_major(op, "result_layouts")):
    raise errors.unsupported(op, f"FFI target {target}: non-row-major layouts")
  blob = _encode_dict(op, target, "", config)
  ctx.emit(op, {"target": target, "ffi_attrs": blob}, kernel="ffi_call")


def _lookup(target: str):
  if not custom_calls.is_ffi_target(target):
    return None
  return lambda ctx, op: _ffi_call(ctx, op, target)


def _unregistered_hint(target: str, op: ir.Operation) -> str:
  """For a custom call with its attributes in a dictionary whose target has no rule and
  was never registered for workshop: both facts, and how to register a user kernel.
  (XLA:CPU: "No FFI handler registered for <target>".) Such a call is either a user's
  jax.ffi.ffi_call, which needs the registration, or one of XLA's own targets that the
  compiler lacks a lowering rule for (jax.lax.approx_max_k's ApproxTopK has the same
  form), so the message names both rather than guess. JAX matches platform names exactly,
  so platform="WORKSHOP" or "cpu" alone does not reach the plugin."""
  del target
  if not any(
    key in op.attributes and isinstance(op.attributes[key], ir.DictAttr)
    for key in ("mhlo.backend_config", "backend_config")
  ):
    return ""
  return (
    " (the compiler has no lowering rule for it, "
    "compiler.lowering.CUSTOM_CALLS, "
    "and no FFI handler is registered for it on platform 'workshop': a user's kernel "
    "is registered with jax.ffi.register_ffi_target(name, capsule, "
    "platform=\"workshop\"))"
  )


CUSTOM_CALL_FALLBACKS.append(_lookup)
UNKNOWN_TARGET_HINTS.append(_unregistered_hint)
