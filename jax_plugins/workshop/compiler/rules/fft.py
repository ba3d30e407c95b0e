"""Fourier transforms: fft (FFT, IFFT, RFFT, IRFFT over the trailing 1-3 dims)."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import Lowering, register


@register("stablehlo.fft")
def _fft(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x. Attrs: fft_type ("FFT", "IFFT", "RFFT", "IRFFT"), fft_length (1-3 ints).

  FFT/IFFT: c64/c128 -> same. RFFT: f32/f64 [..., n] -> complex [..., n/2+1].
  IRFFT: complex [..., n/2+1] -> real [..., n] (imaginary parts of the DC and Nyquist
  terms are ignored). IFFT and IRFFT scale by 1/prod(fft_length).
  """
  fft_type = stablehlo.FftTypeAttr(op.attributes["fft_type"]).value
  lengths = list(op.attributes["fft_length"])
  if not 1 <= len(lengths) <= 3:
    raise errors.malformed(op, f"fft_length must have 1 to 3 entries, got {lengths}")
  x, y = op.operands[0].type, op.results[0].type
  real_dims = x.shape if fft_type == "RFFT" else y.shape
  if fft_type in ("RFFT", "IRFFT") and list(real_dims[-len(lengths):]) != lengths:
    raise errors.malformed(op, f"fft_length {lengths} does not match the real shape "
                           f"{list(real_dims)}")
  ctx.emit(op, {"fft_type": fft_type, "fft_length": lengths})
