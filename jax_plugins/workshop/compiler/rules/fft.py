"""Fourier transforms: fft (FFT, IFFT, RFFT, IRFFT over the trailing 1-3 dims).

Family `fft`: plugin_src/kernels/fft.cc.

The kernel (plugin_src/kernels/fft.cc) runs Intel oneMKL's DFTI, which the plugin does not
link: it dlopens the libmkl_rt of the `mkl` wheel (a dependency in setup.py) from the path
this rule finds and passes as the instruction's `mkl_library` attribute. Whether MKL is
there is decided here, at compile time, once per process: without it the op is refused
with errors.unsupported naming what is missing, and the kernel's `prepare` (also at compile
or deserialize time) loads the library and commits a small transform, so running a program
never discovers a missing library.

WORKSHOP_MKL_LIBRARY=/path/to/libmkl_rt.so.N selects another libmkl_rt (an empty value or a
path that is no file makes fft unsupported).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import Lowering, register

# The DFTI entry points the kernel looks up (mkl_dfti.h: DftiCreateDescriptor is a macro
# over the four _s/_d _1d/_md functions); MKL_Set_Threading_Layer selects sequential MKL.
MKL_SYMBOLS = (
  "DftiCreateDescriptor_s_1d",
  "DftiCreateDescriptor_d_1d",
  "DftiCreateDescriptor_s_md",
  "DftiCreateDescriptor_d_md",
  "DftiSetValue",
  "DftiCommitDescriptor",
  "DftiComputeForward",
  "DftiComputeBackward",
  "DftiFreeDescriptor",
  "DftiErrorMessage",
  "MKL_Set_Threading_Layer",
)


def _candidates() -> list[str]:
  """libmkl_rt.so.N files of the `mkl` distribution, then of sys.prefix/lib; newest first."""
  from importlib import metadata

  found = []
  try:
    files = metadata.distribution("mkl").files or []
  except metadata.PackageNotFoundError:
    files = []
  for file in files:
    if file.name.startswith("libmkl_rt.so."):
      found.append(os.path.realpath(file.locate()))
  libdir = os.path.join(sys.prefix, "lib")
  if os.path.isdir(libdir):
    found += [
      os.path.join(libdir, name) for name in os.listdir(libdir) if name.startswith("libmkl_rt.so.")
    ]
  unique = sorted(
    {p for p in found if os.path.isfile(p)},
    key=lambda p: p.rsplit(".", 1)[-1].zfill(4),
    reverse=True,
  )
  return unique


@functools.cache
def _find_mkl(override: str | None) -> tuple[str | None, str]:
  """(path of a loadable libmkl_rt with every DFTI symbol the kernel uses, None) or
  (None, what is missing)."""
  if override is not None:
    paths = [override] if override else []
    where = f"WORKSHOP_MKL_LIBRARY={override!r}"
  else:
    paths = _candidates()
    where = (
      "libmkl_rt.so.N of the `mkl` wheel (pip install 'mkl>=2025,<2027'), "
      f"looked up in its installed files and in {os.path.join(sys.prefix, 'lib')}"
    )
  if not paths:
    return None, f"{where}: no such library"
  problems = []
  for path in paths:
    if not os.path.isfile(path):
      problems.append(f"{path}: no such file")
      continue
    try:
      # RTLD_LOCAL: MKL's unprefixed BLAS/LAPACK symbols stay out of the global namespace
      # (the plugin uses scipy-openblas32's); the plugin's dlopen returns this handle.
      library = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
      problems.append(f"{path}: {e}")
      continue
    absent = [s for s in MKL_SYMBOLS if not hasattr(library, s)]
    if absent:
      problems.append(f"{path} lacks {', '.join(absent)}")
      continue
    return path, ""
  return None, f"{where}: " + "; ".join(problems)


def mkl_library() -> str:
  """Path of the libmkl_rt the fft kernel dlopens (cached per process and override).

  Raises:
    LookupError: no usable library; the message names what is missing.
  """
  path, missing = _find_mkl(os.environ.get("WORKSHOP_MKL_LIBRARY"))
  if path is None:
    raise LookupError(missing)
  return path


@register("stablehlo.fft")
def _fft(ctx: Lowering, op: ir.Operation) -> None:
  """ins: x. Attrs: fft_type ("FFT", "IFFT", "RFFT", "IRFFT"), fft_length (1-3 ints),
  mkl_library (the libmkl_rt.so path the kernel dlopens).

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
  if fft_type in ("RFFT", "IRFFT") and list(real_dims[-len(lengths) :]) != lengths:
    raise errors.malformed(
      op, f"fft_length {lengths} does not match the real shape {list(real_dims)}"
    )
  try:
    library = mkl_library()
  except LookupError as e:
    raise errors.unsupported(op, f"fft needs Intel oneMKL's DFTI, not found: {e}") from None
  ctx.emit(op, {"fft_type": fft_type, "fft_length": lengths, "mkl_library": library})
