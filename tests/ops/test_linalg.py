"""cholesky, triangular_solve and QR (jnp.linalg, lax.linalg) against XLA:CPU.

Both sides run LAPACK-style algorithms on well-conditioned matrices (condition numbers
below ~10), so results agree to a few ulps times the matrix size: tolerances are 2e-5
for 32-bit and 1e-12 for 64-bit types.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from family_helpers import workshop_device
from reference import cpu_device, run_on, run_stablehlo

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
TOL = {np.float32: 2e-5, np.complex64: 2e-5, np.float64: 1e-12, np.complex128: 1e-12}


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


def random_matrix(rng, shape, dtype):
  x = rng.standard_normal(shape)
  if np.issubdtype(dtype, np.complexfloating):
    x = x + 1j * rng.standard_normal(shape)
  return x.astype(dtype)


def spd(rng, shape, dtype):
  """Hermitian positive definite, well conditioned."""
  a = random_matrix(rng, shape, dtype)
  n = shape[-1]
  return (a @ np.conj(np.swapaxes(a, -1, -2)) / n + np.eye(n)).astype(dtype)


# Kernels of this family: missing ones fail tests, other families' skip them.


def assert_matches(f, *args, dtype):
  ours = run_on(workshop_device(), f, *args)
  ref = run_on(cpu_device(), f, *args)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=TOL[dtype], atol=TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 5, 5), (2, 2, 16, 16), (0, 3, 3)], ids=str)
def test_cholesky(shape, dtype):
  a = spd(np.random.default_rng(shape[-1]), shape, dtype)
  assert_matches(jnp.linalg.cholesky, a, dtype=dtype)
  assert_matches(lambda x: jnp.linalg.cholesky(x, upper=True), a, dtype=dtype)


def test_cholesky_not_positive_definite_is_nan():
  # Batch element 1 is indefinite: only it becomes NaN (in the lower triangle jnp keeps),
  # as on the CPU backend.
  a = spd(np.random.default_rng(0), (3, 4, 4), np.float32)
  a[1] = np.diag([1.0, -1.0, 1.0, 1.0])
  ours = run_on(workshop_device(), jnp.linalg.cholesky, a)
  assert np.isnan(ours[1][np.tril_indices(4)]).all() and np.isfinite(ours[[0, 2]]).all()
  assert_matches(jnp.linalg.cholesky, a, dtype=np.float32)


CHOLESKY_TEXT = """
func.func public @main(%a: tensor<2x3x3xf64>) -> tensor<2x3x3xf64> {
  %0 = stablehlo.cholesky %a, lower = LOWER : tensor<2x3x3xf64>
  return %0 : tensor<2x3x3xf64>
}
"""


@pytest.mark.parametrize("lower", ["true", "false"])
def test_cholesky_reads_one_triangle(lower):
  # JAX always asks for lower = true; StableHLO also has upper factors. Garbage in the
  # triangle that is not read must not matter, and the other output triangle is zero.
  a = spd(np.random.default_rng(1), (2, 3, 3), np.float64)
  junk = np.triu(np.full((3, 3), 1e3), 1)
  a += junk if lower == "true" else junk.T
  text = CHOLESKY_TEXT.replace("LOWER", lower)
  [ours] = run_stablehlo(text, a)
  [ref] = run_stablehlo(text, a, platform="cpu")
  np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("left_side", [True, False], ids=["left", "right"])
@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("transpose", ["N", "T", "C"])
@pytest.mark.parametrize("unit_diagonal", [False, True], ids=["", "unit"])
def test_triangular_solve(dtype, left_side, lower, transpose, unit_diagonal):
  rng = np.random.default_rng(0)
  # Diagonally dominant and with junk in the triangle that must not be read.
  a = random_matrix(rng, (2, 5, 5), dtype) + 5 * np.eye(5, dtype=dtype)
  b = random_matrix(rng, (2, 5, 3) if left_side else (2, 3, 5), dtype)

  def f(a, b):
    return lax.linalg.triangular_solve(
      a,
      b,
      left_side=left_side,
      lower=lower,
      transpose_a=transpose != "N",
      conjugate_a=transpose == "C",
      unit_diagonal=unit_diagonal,
    )

  assert_matches(f, a, b, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_solve_triangular_and_cho_solve(dtype):
  rng = np.random.default_rng(2)
  a = spd(rng, (6, 6), dtype)
  b = random_matrix(rng, (6, 2), dtype)
  assert_matches(
    lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True, trans=1),
    np.tril(a),
    b,
    dtype=dtype,
  )
  assert_matches(
    lambda a, b: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), b), a, b, dtype=dtype
  )


def test_triangular_solve_empty():
  a = np.eye(0, dtype=np.float32)
  b = np.zeros((0, 3), np.float32)
  out = run_on(
    workshop_device(), lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True), a, b
  )
  assert out.shape == (0, 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 5, 4), (1, 1)], ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(shape, dtype, mode):
  # QR through the Qr and ProductOfElementaryHouseholderReflectors custom calls (LAPACK
  # geqrf/orgqr on both sides, so even the signs agree).
  a = random_matrix(np.random.default_rng(3), shape, dtype)
  assert_matches(lambda x: jnp.linalg.qr(x, mode=mode), a, dtype=dtype)


@pytest.mark.parametrize(
  "name,f",
  [
    ("solve", jnp.linalg.solve),
    ("inv", lambda a, b: jnp.linalg.inv(a)),
    ("det", lambda a, b: jnp.linalg.det(a)),
    ("lu", lambda a, b: jax.scipy.linalg.lu(a[0])),
  ],
)
def test_lu_based(name, f):
  # LU lowers to a while loop with gather/scatter/dynamic_slice, plus triangular_solve.
  rng = np.random.default_rng(4)
  a = random_matrix(rng, (2, 4, 4), np.float64) + 4 * np.eye(4)
  b = random_matrix(rng, (2, 4, 3), np.float64)
  assert_matches(f, a, b, dtype=np.float64)
