"""MLIR element types <-> PJRT_Buffer_Type codes, XLA names and numpy dtypes."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir

# Dtype families by XLA name (the op table's, re-exported).
from .optable import ALL, COMPLEX, FLOATS, HALF, INTS, PRED, SIGNED, UNSIGNED  # noqa: F401


@dataclasses.dataclass(frozen=True)
class DType:
  """A representable element type.

  Attributes:
    code: the PJRT_Buffer_Type enum value the executor uses.
    name: the XLA primitive type name, used in error messages ("f32", "pred", ...).
    numpy: the numpy dtype of one element as laid out in a buffer (pred: one byte 0/1).
  """

  code: int
  name: str
  numpy: np.dtype


# Keyed by the MLIR spelling of the element type. StableHLO integers are signless ("i32")
# meaning signed, or explicitly unsigned ("ui32").
_BY_MLIR: dict[str, DType] = {
  mlir: DType(code, name, np.dtype(np_type))
  for mlir, code, name, np_type in [
    ("i1", 1, "pred", np.bool_),
    ("i8", 2, "s8", np.int8),
    ("i16", 3, "s16", np.int16),
    ("i32", 4, "s32", np.int32),
    ("i64", 5, "s64", np.int64),
    ("ui8", 6, "u8", np.uint8),
    ("ui16", 7, "u16", np.uint16),
    ("ui32", 8, "u32", np.uint32),
    ("ui64", 9, "u64", np.uint64),
    ("f16", 10, "f16", np.float16),
    ("f32", 11, "f32", np.float32),
    ("f64", 12, "f64", np.float64),
    ("bf16", 13, "bf16", ml_dtypes.bfloat16),
    ("complex<f32>", 14, "c64", np.complex64),
    ("complex<f64>", 15, "c128", np.complex128),
    # One element per byte, the value in the low bits (ml_dtypes' layout); legalize.py
    # widens them to s8/u8 for every kernel that computes.
    ("i4", 21, "s4", ml_dtypes.int4),
    ("ui4", 22, "u4", ml_dtypes.uint4),
    ("i2", 24, "s2", ml_dtypes.int2),
    ("ui2", 25, "u2", ml_dtypes.uint2),
    # 8-bit and narrower floats, one per byte (the XLA name is the MLIR spelling):
    # moved as bytes and computed in f32 (optable.MINIFLOATS).
    ("f8E5M2", 16, "f8E5M2", ml_dtypes.float8_e5m2),
    ("f8E4M3FN", 17, "f8E4M3FN", ml_dtypes.float8_e4m3fn),
    ("f8E4M3B11FNUZ", 18, "f8E4M3B11FNUZ", ml_dtypes.float8_e4m3b11fnuz),
    ("f8E5M2FNUZ", 19, "f8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz),
    ("f8E4M3FNUZ", 20, "f8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz),
    ("f8E4M3", 26, "f8E4M3", ml_dtypes.float8_e4m3),
    ("f8E3M4", 27, "f8E3M4", ml_dtypes.float8_e3m4),
    ("f8E8M0FNU", 28, "f8E8M0FNU", ml_dtypes.float8_e8m0fnu),
    ("f4E2M1FN", 29, "f4E2M1FN", ml_dtypes.float4_e2m1fn),
  ]
}


_BY_NAME: dict[str, DType] = {d.name: d for d in _BY_MLIR.values()}
_BY_CODE: dict[int, DType] = {d.code: d for d in _BY_MLIR.values()}


def by_name(name: str) -> DType:
  return _BY_NAME[name]


def lookup(element_type: ir.Type) -> DType | None:
  """Returns the DType of an MLIR element type, or None if buffers can't hold it."""
  return _BY_MLIR.get(str(element_type))


def type_name(t: ir.Type) -> str:
  """A short name for a value type in error messages: "f32" for tensor<2x3xf32>.

  Element types the plugin can't represent keep their MLIR spelling ("f8E4M3FN", "i4").
  """
  element_type = t.element_type if isinstance(t, ir.ShapedType) else t
  dtype = lookup(element_type)
  return dtype.name if dtype else str(element_type)


def by_code(code: int) -> DType | None:
  """Returns the DType with PJRT_Buffer_Type `code`, or None."""
  return _BY_CODE.get(code)
