"""stablehlo.fft (jnp.fft.*) against XLA:CPU and numpy.

The kernel runs Intel oneMKL's DFTI (plugin_src/kernels/fft.cc), found at compile time by
compiler/rules/fft.py. Accuracy: test_accuracy_at_least_xla's compares the error of both
backends against numpy in long double (numpy's pocketfft, the algorithm family of XLA's
ducc0, agrees with XLA bit for bit in float64, so a float64 reference would favour XLA).

Tolerance: the error of any FFT grows like eps * log2(n) relative to the signal's scale,
and individual outputs can be tiny through cancellation, so results are compared with an
absolute tolerance scaled by the largest reference magnitude: 1e-6 for 32-bit (eps 6e-8;
measured errors of both implementations stay below 4e-7 up to n = 65537) and 1e-14 for
64-bit (eps 1.1e-16).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu, cpu_device, run_on
from family_helpers import workshop_device

TOL = {np.complex64: 1e-6, np.float32: 1e-6, np.complex128: 1e-14, np.float64: 1e-14}
COMPLEX = {np.float32: np.complex64, np.float64: np.complex128}

# Radix 4 and 2 (powers of two), 3, generic small primes (5, 7, 17, 31), mixed products,
# and lengths with a prime factor above 32, which use Bluestein's algorithm (37, 97, 1031).
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 12, 17, 31, 37, 60, 97, 128, 243, 1000, 1031, 2048]


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


def assert_fft_matches(f, x, dtype):
  ours = run_on(workshop_device(), f, x)
  ref = run_on(cpu_device(), f, x)
  assert ours.dtype == ref.dtype and ours.shape == ref.shape
  scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
  np.testing.assert_allclose(ours, ref, rtol=0, atol=TOL[dtype] * scale)


def complex_input(rng, shape, dtype):
  return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["32", "64"])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("kind", ["fft", "ifft", "rfft", "irfft"])
def test_fft_1d(kind, n, dtype):
  rng = np.random.default_rng(n)
  if kind == "rfft":
    x = rng.standard_normal((3, n)).astype(dtype)
    f = jnp.fft.rfft
  elif kind == "irfft":
    # The n/2+1 half spectrum irfft needs for an output of length n. (lax.fft: jnp's
    # irfft with an explicit n adds a zero-width pad.)
    x = complex_input(rng, (3, n // 2 + 1), COMPLEX[dtype])
    f = lambda v: lax.fft(v, "IRFFT", (n,))
  else:
    x = complex_input(rng, (3, n), COMPLEX[dtype])
    f = getattr(jnp.fft, kind)
  assert_fft_matches(f, x, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["32", "64"])
@pytest.mark.parametrize(
  "shape,axes",
  [
    ((6, 10), (0, 1)),
    ((2, 5, 8), (1, 2)),
    ((3, 4, 6, 5), (1, 2, 3)),
    ((2, 1, 7, 3), (1, 2, 3)),
  ],
  ids=str,
)
@pytest.mark.parametrize("kind", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_fft_multi_dim(kind, shape, axes, dtype):
  rng = np.random.default_rng(len(shape))
  if kind == "rfftn":
    x = rng.standard_normal(shape).astype(dtype)
    f = lambda v: jnp.fft.rfftn(v, axes=axes)
  elif kind == "irfftn":
    half = shape[:-1] + (shape[-1] // 2 + 1,)
    x = complex_input(rng, half, COMPLEX[dtype])
    f = lambda v: lax.fft(v, "IRFFT", tuple(shape[a] for a in axes))
  else:
    x = complex_input(rng, shape, COMPLEX[dtype])
    f = lambda v: getattr(jnp.fft, kind)(v, axes=axes)
  assert_fft_matches(f, x, dtype)


@pytest.mark.parametrize("n", [8, 9])
def test_irfft_ignores_imaginary_dc_and_nyquist(n):
  # A half spectrum that is not exactly Hermitian: the imaginary parts of X[0] (and of
  # X[n/2] for even n) have no real-valued counterpart and must not leak into the output.
  x = complex_input(np.random.default_rng(0), (2, n // 2 + 1), np.complex64)
  x[:, 0] += 3j
  x[:, -1] += 2j
  assert_fft_matches(lambda v: lax.fft(v, "IRFFT", (n,)), x, np.float32)


def test_jnp_irfft2():
  x = complex_input(np.random.default_rng(1), (3, 6, 5), np.complex64)
  assert_fft_matches(jnp.fft.irfft2, x, np.float32)  # Output [3, 6, 8].


def test_fft_of_impulse_and_special_values():
  x = np.zeros((4, 16), np.complex64)
  x[0, 0] = 1  # Impulse: all ones.
  x[1, 3] = np.inf
  x[2, 5] = np.nan
  ours = run_on(workshop_device(), jnp.fft.fft, x)
  np.testing.assert_array_equal(ours[0], np.ones(16))
  assert np.isnan(ours[2]).all()
  assert not np.isfinite(ours[1]).any()
  np.testing.assert_array_equal(ours[3], 0)


def test_fft_of_empty_batch():
  x = np.zeros((0, 8), np.complex64)
  assert run_on(workshop_device(), jnp.fft.fft, x).shape == (0, 8)


@pytest.mark.parametrize("kind", ["fft", "rfft", "irfft"])
@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8)], ids=str)
def test_fft_of_zero_size(kind, shape):
  if kind == "rfft":
    x, f = np.zeros(shape, np.float32), jnp.fft.rfft
  elif kind == "irfft":
    x = np.zeros(shape[:-1] + (5,), np.complex64)
    f = lambda v: lax.fft(v, "IRFFT", (8,))
  else:
    x, f = np.zeros(shape, np.complex64), jnp.fft.fft
  assert_fft_matches(f, x, np.float32)


# (kind, shape, axes): primes (a Bluestein-like path in any library), a large power of two,
# rank 1-3, real and complex, forward and inverse, with and without batch dims.
ACCURACY_CASES = [
  ("fft", (4, 17), (1,)),
  ("ifft", (2, 10007), (1,)),
  ("fft", (1 << 20,), (0,)),
  ("rfft", (3, 10007), (1,)),
  ("irfft", (3, 5004), (1,)),  # Output length 10007 (odd: no Nyquist term).
  ("irfft", ((1 << 19) + 1,), (0,)),  # Output length 2^20.
  ("fftn", (256, 256), (0, 1)),
  ("ifftn", (3, 17, 31), (1, 2)),
  ("rfftn", (2, 17, 9, 10), (1, 2, 3)),
  ("irfftn", (2, 17, 9, 6), (1, 2, 3)),
  ("fftn", (64, 64, 64), (0, 1, 2)),
  ("irfftn", (128, 65), (0, 1)),
]


def _numpy_fft(kind, x, axes, out_len):
  """numpy's transform in long double (numpy >= 2 computes in the input's precision)."""
  wide = x.astype(np.clongdouble if np.iscomplexobj(x) else np.longdouble)
  if kind in ("irfft", "irfftn"):
    s = [x.shape[a] for a in axes[:-1]] + [out_len]
    return np.fft.irfftn(wide, s=s, axes=axes)
  name = {"fft": "fftn", "ifft": "ifftn", "rfft": "rfftn"}.get(kind, kind)
  return getattr(np.fft, name)(wide, axes=axes)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["32", "64"])
@pytest.mark.parametrize(
  "kind,shape,axes",
  ACCURACY_CASES,
  ids=[f"{k}-{'x'.join(map(str, s))}" for k, s, _ in ACCURACY_CASES],
)
def test_accuracy_at_least_xla(kind, shape, axes, dtype):
  rng = np.random.default_rng(sum(shape))
  x = (
    rng.standard_normal(shape)
    if kind.startswith("rfft")
    else complex_input(rng, shape, COMPLEX[dtype])
  ).astype(dtype if kind.startswith("rfft") else COMPLEX[dtype])
  out_len = 2 * (shape[axes[-1]] - 1) + (shape[axes[-1]] == 5004)  # 10007 odd case
  if kind.startswith("irfft"):
    lengths = tuple(shape[a] for a in axes[:-1]) + (out_len,)
    f = lambda v: lax.fft(v, "IRFFT", lengths)
  else:
    name = {"fft": "fftn", "ifft": "ifftn", "rfft": "rfftn"}.get(kind, kind)
    f = lambda v: getattr(jnp.fft, name)(v, axes=axes)
  ref = _numpy_fft(kind, x, axes, out_len)
  scale = float(np.abs(ref).max())
  ours = run_on(workshop_device(), f, x)
  xla = run_on(cpu_device(), f, x)
  assert ours.dtype == xla.dtype and ours.shape == xla.shape == ref.shape
  ours_err = float(np.abs(ours - ref).max()) / scale
  xla_err = float(np.abs(xla - ref).max()) / scale
  ours_rms = float(np.sqrt(np.mean(np.abs(ours - ref) ** 2))) / scale
  xla_rms = float(np.sqrt(np.mean(np.abs(xla - ref) ** 2))) / scale
  eps = float(np.finfo(dtype).eps)
  # Both are a few ulps. Measured (ulps, max / rms): MKL's is at or below ducc0's on every
  # rank-1 case and in float32; its float64 power-of-two transforms of 256 and 64 points
  # are slightly worse (256x256: max 2.0 vs 1.3, rms 0.41 vs 0.35).
  assert ours_err <= max(1.25 * xla_err, 2.5 * eps), (ours_err, xla_err)
  assert ours_rms <= 1.25 * xla_rms, (ours_rms, xla_rms)
  assert ours_err <= 8 * eps * np.log2(max(ref.size, 2)), ours_err
  assert_matches_cpu(f, x, rtol=0, atol=TOL[dtype] * scale)


@pytest.mark.parametrize("kind", ["rfft2", "irfft2", "fft2", "ifft"])
def test_input_is_not_modified(kind):
  # DFTI runs out of place; its complex-to-real transforms must not overwrite the input
  # buffer (the IRFFT of rank > 1 works on a scratch copy).
  rng = np.random.default_rng(2)
  x = (
    rng.standard_normal((3, 40, 32)).astype(np.float32)
    if kind == "rfft2"
    else complex_input(rng, (3, 40, 17 if kind == "irfft2" else 32), np.complex64)
  )
  placed = jax.device_put(x, workshop_device())
  jax.jit(getattr(jnp.fft, kind))(placed).block_until_ready()
  np.testing.assert_array_equal(np.asarray(placed), x)


def test_results_are_deterministic():
  # The batch is split over the thread pool in fixed parts: run to run, the same bits.
  x = complex_input(np.random.default_rng(3), (64, 4096), np.complex64)
  f = jax.jit(jnp.fft.fft)
  placed = jax.device_put(x, workshop_device())
  first = np.asarray(f(placed))
  for _ in range(3):
    np.testing.assert_array_equal(np.asarray(f(placed)), first)


def test_many_configurations_past_the_descriptor_cache():
  # More distinct transforms than the pool keeps idle (64): evicted descriptors are freed
  # and recreated, results unaffected.
  rng = np.random.default_rng(4)
  for n in range(2, 90):
    x = complex_input(rng, (2, n), np.complex64)
    ours = run_on(workshop_device(), jnp.fft.fft, x)
    np.testing.assert_allclose(
      ours, np.fft.fft(x.astype(np.complex128)), rtol=0, atol=1e-6 * max(1.0, np.abs(ours).max())
    )


def test_missing_mkl_is_refused_at_compile_time(monkeypatch):
  import jax_plugins.workshop.compiler.rules.fft as rules

  monkeypatch.setenv("WORKSHOP_MKL_LIBRARY", "/nonexistent/libmkl_rt.so.3")
  with pytest.raises(
    Exception,
    match=r"fft needs Intel oneMKL's DFTI.*"
    r"/nonexistent/libmkl_rt.so.3: no such file",
  ):
    # A shape no other test compiles, so no cached executable answers.
    run_on(workshop_device(), jnp.fft.fft, np.zeros((3, 11, 13), np.complex64))
  monkeypatch.delenv("WORKSHOP_MKL_LIBRARY")
  assert rules.mkl_library().split("/")[-1].startswith("libmkl_rt.so.")
