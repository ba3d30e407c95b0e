"""Just enough protobuf wire-format decoding for the protos jaxlib hands us as bytes.

jaxlib exposes no Python proto classes for XLA, and `CompileOptions.ParseFromString`
silently returns defaults for bytes that don't parse; so we validate and decode by hand.
"""

from __future__ import annotations

from collections.abc import Iterator

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
  """Yields (field number, value) for each field in a serialized message.

  Values are ints for varint fields and bytes for length-delimited and fixed-width fields.

  Raises:
    ValueError: `data` is not well-formed wire format (truncated, bad wire type or
      field number, e.g. deprecated groups).
  """
  pos = 0
  while pos < len(data):
    key, pos = _varint(data, pos)
    number, wire_type = key >> 3, key & 7
    if number == 0:
      raise ValueError("field number 0")
    if wire_type == _VARINT:
      value, pos = _varint(data, pos)
    else:
      if wire_type == _LEN:
        size, pos = _varint(data, pos)
      elif wire_type in (_FIXED64, _FIXED32):
        size = 8 if wire_type == _FIXED64 else 4
      else:
        raise ValueError(f"unsupported wire type {wire_type}")
      if pos + size > len(data):
        raise ValueError("truncated field")
      value, pos = data[pos:pos + size], pos + size
    yield number, value


def packed_varints(data: bytes) -> list[int]:
  """Decodes a packed repeated varint field."""
  values, pos = [], 0
  while pos < len(data):
    value, pos = _varint(data, pos)
    values.append(value)
  return values


def _varint(data: bytes, pos: int) -> tuple[int, int]:
  result = shift = 0
  while True:
    if pos >= len(data) or shift >= 64:
      raise ValueError("truncated or overlong varint")
    byte = data[pos]
    result |= (byte & 0x7F) << shift
    pos, shift = pos + 1, shift + 7
    if not byte & 0x80:
      return result, pos
