"""stablehlo.fft (jnp.fft.*) against XLA:CPU.

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

from reference import cpu_device, run_on
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
@pytest.mark.parametrize("shape,axes", [
    ((6, 10), (0, 1)),
    ((2, 5, 8), (1, 2)),
    ((3, 4, 6, 5), (1, 2, 3)),
    ((2, 1, 7, 3), (1, 2, 3)),
], ids=str)
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
