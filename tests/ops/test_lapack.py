"""eigh, svd, eig, schur, hessenberg, tridiagonal, QR with pivoting, LU and what is built on
them (eigvals, lstsq, pinv, matrix_rank, norm(2), norm('nuc'), sqrtm, det), against XLA:CPU;
non-finite and 16-bit input handled as the CPU backend handles it.

Both backends run JAX's CPU lowering around the same LAPACK routines, so values agree to
rounding; eigen/singular vectors are compared through reconstructions (A = Q diag(w) Q^H,
A = U S V^H, A = Z T Z^H) and, where the choice of sign or phase is LAPACK's, with the CPU
backend's vectors up to that phase. Matrices are small and well separated: tolerances are
1e-4 (32-bit) and 1e-10 (64-bit) relative to the matrix norm.
"""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

from family_helpers import workshop_device
from reference import cpu_device, run_on, run_stablehlo

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
TOL = {np.float32: 1e-4, np.complex64: 1e-4, np.float64: 1e-10, np.complex128: 1e-10}
BATCHES = [(), (3,), (2, 2)]


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):
    yield


def matrix(shape, dtype, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape)
  if np.issubdtype(dtype, np.complexfloating):
    x = x + 1j * rng.standard_normal(shape)
  return x.astype(dtype)


def hermitian(shape, dtype, seed=0):
  a = matrix(shape, dtype, seed)
  return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dtype)


def H(x):
  return np.conj(np.swapaxes(x, -1, -2))


def both(f, *args):
  return run_on(workshop_device(), f, *args), run_on(cpu_device(), f, *args)


def close(a, b, dtype, scale=1.0):
  np.testing.assert_allclose(a, b, rtol=TOL[dtype], atol=TOL[dtype] * scale)


def same_up_to_phase(v, v_ref, dtype):
  """Columns equal up to a unit factor per column (sign for real, phase for complex)."""
  phase = np.sum(np.conj(v_ref) * v, axis=-2, keepdims=True)
  close(np.abs(phase), np.ones_like(np.abs(phase)), dtype)
  close(v, v_ref * phase / np.abs(phase), dtype, 10)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh(dtype, batch):
  a = hermitian((*batch, 5, 5), dtype)
  (w, v), (w_ref, v_ref) = both(jnp.linalg.eigh, a)
  assert w.dtype == w_ref.dtype and v.dtype == v_ref.dtype
  close(w, w_ref, dtype, 10)
  assert np.all(np.diff(w, axis=-1) >= 0)  # Ascending, as on CPU.
  close(v @ (w[..., None] * H(v)), a, dtype, 10)
  same_up_to_phase(v, v_ref, dtype)


@pytest.mark.parametrize("lower", [True, False])
def test_eigh_reads_one_triangle(lower):
  a = matrix((4, 4), np.float64)  # Not symmetric: only the chosen triangle counts.
  f = lambda m: jax.lax.linalg.eigh(m, lower=lower, symmetrize_input=False)
  (v, w), (v_ref, w_ref) = both(f, a)
  close(w, w_ref, np.float64, 10)
  same_up_to_phase(v, v_ref, np.float64)


def test_grad_of_eigh():
  a = hermitian((4, 4), np.float64, seed=3)
  f = jax.grad(lambda m: jnp.sum(jnp.linalg.eigh(m)[0] ** 3) + jnp.linalg.eigh(m)[1][0, 0] ** 2)
  ours, ref = both(f, a)
  close(ours, ref, np.float64, 100)


@pytest.mark.parametrize("shape", [(3, 5, 5), (6, 4), (2, 4, 6)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_svd(dtype, shape):
  a = matrix(shape, dtype)
  for full in (False, True):
    (u, s, vh), (u_ref, s_ref, vh_ref) = both(lambda m: jnp.linalg.svd(m, full_matrices=full), a)
    assert u.shape == u_ref.shape and vh.shape == vh_ref.shape and s.dtype == s_ref.dtype
    close(s, s_ref, dtype, 10)
    k = s.shape[-1]
    close((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a, dtype, 10)
    same_up_to_phase(u[..., :, :k], u_ref[..., :, :k], dtype)
  s_only, s_only_ref = both(lambda m: jnp.linalg.svd(m, compute_uv=False), a)
  close(s_only, s_only_ref, dtype, 10)


def test_svd_qr_algorithm():
  a = matrix((5, 3), np.float64)
  f = lambda m: jax.lax.linalg.svd(m, full_matrices=False, algorithm=jax.lax.linalg.SvdAlgorithm.QR)
  (u, s, vh), (u_ref, s_ref, vh_ref) = both(f, a)
  close(s, s_ref, np.float64, 10)
  close((u * s) @ vh, a, np.float64, 10)


@pytest.mark.parametrize("batch", [(), (3,)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_eig(dtype, batch):
  a = matrix((*batch, 5, 5), dtype, seed=1)
  (w, v), (w_ref, v_ref) = both(jnp.linalg.eig, a)
  assert w.dtype == w_ref.dtype and v.dtype == v_ref.dtype
  close(w, w_ref, dtype, 10)  # Same routine, same order.
  close(a @ v, v * w[..., None, :], dtype, 10)
  same_up_to_phase(v, v_ref, dtype)
  vals, vals_ref = both(jnp.linalg.eigvals, a)
  close(vals, vals_ref, dtype, 10)


def test_eig_left_vectors():
  a = matrix((4, 4), np.float64, seed=2)
  f = lambda m: jax.lax.linalg.eig(m, compute_left_eigenvectors=True)
  (w, vl, vr), (w_ref, vl_ref, vr_ref) = both(f, a)
  close(H(vl) @ a, w[:, None] * H(vl), np.float64, 10)
  same_up_to_phase(vl, vl_ref, np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_schur_and_sqrtm(dtype):
  a = matrix((5, 5), dtype, seed=4)
  (t, z), (t_ref, z_ref) = both(lambda m: jax.scipy.linalg.schur(m), a)
  close(z @ t @ H(z), a, dtype, 10)
  close(H(z) @ z, np.eye(5), dtype, 10)
  below = np.tril(t, -2 if np.isrealobj(t) else -1)  # Real: 2x2 blocks on the diagonal.
  assert np.all(below == 0)
  close(np.diag(t), np.diag(t_ref), dtype, 10)
  spd = (a @ H(a) + 5 * np.eye(5)).astype(dtype)
  r, r_ref = both(jax.scipy.linalg.sqrtm, spd)
  close(r, r_ref, dtype, 100)
  close(r @ r, spd, dtype, 100)


@pytest.mark.parametrize("dtype", DTYPES)
def test_hessenberg(dtype):
  a = matrix((6, 6), dtype, seed=5)
  (h, q), (h_ref, q_ref) = both(lambda m: jax.scipy.linalg.hessenberg(m, calc_q=True), a)
  assert np.all(np.tril(h, -2) == 0)
  close(q @ h @ H(q), a, dtype, 10)
  close(h, h_ref, dtype, 10)
  close(q, q_ref, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tridiagonal(dtype):
  a = hermitian((2, 5, 5), dtype, seed=6)
  ours, ref = both(lambda m: jax.lax.linalg.tridiagonal(m, lower=True), a)
  for x, y in zip(ours, ref):  # arr (reflectors), d, e, taus
    assert x.dtype == y.dtype and x.shape == y.shape
    close(x, y, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qr_with_pivoting(dtype):
  a = matrix((6, 4), dtype, seed=7)
  f = lambda m: jax.scipy.linalg.qr(m, pivoting=True, mode="economic")
  (q, r, p), (q_ref, r_ref, p_ref) = both(f, a)
  np.testing.assert_array_equal(p, p_ref)
  close(q @ r, a[:, p], dtype, 10)
  close(r, r_ref, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_functions_built_on_svd(dtype):
  a = matrix((2, 5, 3), dtype, seed=8)
  b = matrix((5, 2), dtype, seed=9)
  low_rank = (a[0] @ H(a[0])).astype(dtype)  # 5x5 of rank 3
  cases = [
    (jnp.linalg.pinv, a),
    (lambda m: jnp.linalg.lstsq(m, b)[0], a[0]),
    (jnp.linalg.matrix_rank, low_rank),
    (lambda m: jnp.linalg.norm(m, ord=2, axis=(-2, -1)), a),
    (lambda m: jnp.linalg.norm(m, ord="nuc", axis=(-2, -1)), a),
    (lambda m: jnp.linalg.cond(m), a[0]),
  ]
  for f, x in cases:
    ours, ref = both(f, x)
    if np.issubdtype(np.asarray(ref).dtype, np.integer):
      np.testing.assert_array_equal(ours, ref)
    else:
      close(ours, ref, dtype, 10)
  assert int(run_on(workshop_device(), jnp.linalg.matrix_rank, low_rank)) == 3


def test_failures_become_nan_as_on_cpu():
  bad = np.full((3, 3), np.nan)
  for f in (jnp.linalg.eigh, jnp.linalg.svd, jnp.linalg.eigvals):
    ours, ref = both(f, bad)
    for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
      np.testing.assert_array_equal(np.isnan(x), np.isnan(y))


def test_empty_and_one_by_one():
  for shape in [(0, 0), (1, 1), (2, 0, 0)]:
    a = np.ones(shape)
    for f in (jnp.linalg.eigh, jnp.linalg.svd, jnp.linalg.eig):
      ours, ref = both(f, a)
      for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
        assert x.shape == y.shape
        close(x, y, np.float64)


def test_wrong_dtype_is_a_compile_error_naming_target_and_dtype():
  text = """
  func.func public @main(%a: tensor<2x2xf64>) -> tensor<2xf32> {
    %v, %w, %info = stablehlo.custom_call @lapack_ssyevd_ffi(%a)
        {mhlo.backend_config = {mode = 86 : ui8, uplo = 76 : ui8}}
        : (tensor<2x2xf64>) -> (tensor<2x2xf64>, tensor<2xf32>, tensor<i32>)
    return %w : tensor<2xf32>
  }"""
  with pytest.raises(Exception, match="lapack_ssyevd_ffi has no kernel for dtype f64"):
    run_stablehlo(text, np.eye(2))


# ---- Found by trying it as a hostile user (session break13la) ----


@pytest.mark.parametrize("shape", [(2, 4, 4), (3, 5), (5, 3), (0, 3, 3)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_is_lapack_getrf_as_on_cpu(dtype, shape):
  # Pivots are integers and must be equal. Complex pivots are chosen by |re| + |im|
  # (LAPACK's i?amax): in a first column of 3, 2+2j and small entries, |z| would pick 3.
  a = matrix(shape, dtype, seed=10)
  if np.iscomplexobj(a) and a.size:
    a[..., 0, 0], a[..., 1, 0] = 3, 2 + 2j
    a[..., 2:, 0] *= 0.1
  (lu, piv, perm), (lu_ref, piv_ref, perm_ref) = both(jax.lax.linalg.lu, a)
  np.testing.assert_array_equal(piv, piv_ref)
  np.testing.assert_array_equal(perm, perm_ref)
  close(lu, lu_ref, dtype, 10)


def test_lu_det_slogdet_with_nan_as_on_cpu():
  # getrf's i?amax skips a NaN when it picks a pivot (JAX's generic LU, which the workshop
  # ran before, took the NaN): pivots, NaN positions and slogdet's sign follow the CPU.
  a = hermitian((4, 4), np.float64, seed=1)
  a[1, 2] = a[2, 1] = np.nan
  for f in (jax.lax.linalg.lu, jnp.linalg.slogdet, jnp.linalg.det, jsl.lu_factor):
    ours, ref = both(f, a)
    for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
      np.testing.assert_array_equal(x, y) if x.dtype.kind == "i" else np.testing.assert_allclose(
        x, y, rtol=1e-10, equal_nan=True
      )


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_input_computed_as_on_cpu(dtype):
  # LAPACKE's NaN screen (info = -k before computing) is off, as jaxlib calls LAPACK: the
  # reductions then leave NaN where the CPU backend's do, and geqp3 no longer fails.
  a = hermitian((4, 4), dtype, seed=1)
  a[1, 2] = a[2, 1] = np.nan
  for f in (
    lambda m: jsl.hessenberg(m, calc_q=True),
    jax.lax.linalg.tridiagonal,
    lambda m: jsl.qr(m, pivoting=True),
  ):
    ours, ref = both(f, a)
    for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
      np.testing.assert_array_equal(np.isnan(x), np.isnan(y))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eig_of_non_finite_is_nan_without_lapack_noise(dtype, capfd):
  # geev answers NaN with info = -4 but prints "parameter number 4 had an illegal value"
  # on stdout; the CPU backend's result for NaN and Inf input is all NaN, quietly.
  for bad in (np.nan, np.inf):
    a = matrix((2, 3, 3), dtype, seed=2)
    a[1, 2, 1] = bad
    for f in (
      jnp.linalg.eig,
      jnp.linalg.eigvals,
      lambda m: jax.lax.linalg.eig(m, compute_left_eigenvectors=True),
    ):
      ours, ref = both(f, a)
      for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
  assert "illegal value" not in capfd.readouterr().out


def test_svd_of_inf_is_nan_not_an_endless_loop():
  # gesdd loops forever on this matrix (Reference-LAPACK/lapack#1409), and so does the CPU
  # backend, so the reference is the CPU backend's answer for NaN input: all NaN. A child
  # process, so that a regression fails the test instead of hanging the suite.
  script = """if True:
    import jax, jax.numpy as jnp, numpy as np
    a = np.ones((3, 3), np.float32); a[0, 0] = np.inf
    w = jax.devices("workshop")[0]
    out = jax.jit(jnp.linalg.svd)(jax.device_put(a, w))
    print(sum(int(np.isnan(np.asarray(x)).sum()) for x in out))"""
  env = {**os.environ, "JAX_PLATFORMS": "workshop,cpu"}
  done = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
  )
  assert done.returncode == 0, done.stderr[-2000:]
  nan = np.ones((3, 3), np.float32)
  nan[0, 0] = np.nan
  ref = run_on(cpu_device(), jnp.linalg.svd, nan)
  assert int(done.stdout.split()[-1]) == sum(int(np.isnan(x).sum()) for x in ref) == 3 + 9 + 9


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_sixteen_bit_refused_as_on_cpu(dtype):
  # The CPU rules of cholesky, QR, LU and tridiagonal_solve accept LAPACK's types only;
  # the workshop ran JAX's generic rules on f16/bf16 instead of refusing.
  import ml_dtypes

  dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
  a = (np.eye(4) * 2 + 0.1).astype(dtype)  # 4x4: jnp.linalg.det has a formula up to 3x3.
  d = np.ones(4, dtype)
  for f in (
    jnp.linalg.cholesky,
    jnp.linalg.qr,
    jnp.linalg.det,
    jnp.linalg.inv,
    jax.lax.linalg.lu,
    lambda m: jax.lax.linalg.ormqr(m, d[:2], m),
    lambda m: jax.lax.linalg.tridiagonal_solve(d - 1, d, d - 1, m),
  ):
    errors = []
    for device in (workshop_device(), cpu_device()):
      with pytest.raises(NotImplementedError, match="Unsupported dtype") as e:
        run_on(device, f, a)
      errors.append(str(e.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("dtype", DTYPES)
def test_tridiagonal_solve_perturbed_as_on_cpu(dtype):
  # perturb_singular=True was refused on workshop (JAX's generic rule has no such path);
  # singular systems (zero and T - lambda I) must give the CPU backend's finite answers.
  f = lambda *a: jax.lax.linalg.tridiagonal_solve(*a, perturb_singular=True)
  for n, k in [(1, 2), (2, 1), (7, 3)]:
    dl, d, du, b = (matrix(s, dtype, seed=i) for i, s in enumerate([(2, n)] * 3 + [(2, n, k)]))
    dl[:, 0] = du[:, -1] = 0
    for diagonals in [(dl, d, du), (0 * dl, 0 * d, 0 * du), (dl, 0 * d, du)]:
      ours, ref = both(f, *diagonals, b)
      assert np.isfinite(ours).all()
      scale = np.abs(ref).max()  # About 1 / (eps max|U|): up to 1e38 for zero diagonals.
      close(ours / scale, ref / scale, dtype, 10)
  t = hermitian((6, 6), np.float64, seed=3)
  t = np.triu(np.tril(t, 1), -1).real  # Symmetric tridiagonal, then shifted to singular.
  lam = np.linalg.eigvalsh(t)[0]
  sub = np.r_[0, np.diag(t, -1)].astype(dtype)
  sup = np.r_[np.diag(t, 1), 0].astype(dtype)
  ours, ref = both(f, sub, (np.diag(t) - lam).astype(dtype), sup, matrix((6, 1), dtype))
  close(ours / np.abs(ref).max(), ref / np.abs(ref).max(), dtype, 10)


@pytest.mark.parametrize("perturb_singular", [False, True])
def test_tridiagonal_solve_with_no_elements_as_on_cpu(perturb_singular):
  # Systems of size 0 (JAX's generic rule reads d[0]), no right-hand sides, no batch.
  f = lambda *a: jax.lax.linalg.tridiagonal_solve(*a, perturb_singular=perturb_singular)
  for batch, n, k in [((), 0, 1), ((), 0, 0), ((2,), 0, 3), ((0,), 3, 2), ((), 3, 0)]:
    diagonals = [matrix(batch + (n,), np.float32, seed=i) for i in range(3)]
    b = matrix(batch + (n, k), np.float32)
    ours, ref = both(f, *diagonals, b)
    assert ours.shape == ref.shape == b.shape and ours.dtype == ref.dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eigh_tridiagonal_with_vectors(dtype):
  # Its inverse iteration is tridiagonal_solve(perturb_singular=True).
  d, e = matrix((8,), dtype, seed=1), matrix((7,), dtype, seed=2)
  f = lambda d, e: jsl.eigh_tridiagonal(d, e)
  (w, v), (w_ref, v_ref) = both(f, d, e)
  close(w, w_ref, dtype, 10)
  t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
  close(t @ v, v * w, dtype, 10)
  same_up_to_phase(v, v_ref, dtype)


def test_malformed_perturbed_solve_is_a_compile_error():
  text = """
  func.func public @main(%a: tensor<3xf64>, %b: tensor<3x1xf32>) -> tensor<3x1xf32> {
    %x = stablehlo.custom_call @tridiagonal_solve_perturbed_ffi(%a, %a, %a, %b)
        : (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>, tensor<3x1xf32>) -> tensor<3x1xf32>
    return %x : tensor<3x1xf32>
  }"""
  with pytest.raises(Exception, match="needs dl, d, du .* of one dtype"):
    run_stablehlo(text, np.ones(3), np.ones((3, 1), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_large_batches_of_small_matrices_split_over_threads_as_on_cpu(dtype):
  # 600 3x3 matrices are past ForEachMatrix's grain, so the batch is split over the thread
  # pool (each piece with its own scratch); one matrix holds a NaN and one an Inf, which
  # must stay in their own results.
  a = hermitian((600, 3, 3), dtype, seed=3)
  a[7, 0, 1] = a[7, 1, 0] = np.nan
  a[411, 2, 2] = np.inf
  fns = [
    jnp.linalg.eigvalsh,
    lambda m: jnp.linalg.svd(m, compute_uv=False),
    lambda m: jnp.sort_complex(jnp.linalg.eigvals(m)),
    jnp.linalg.det,
    lambda m: jax.lax.linalg.lu(m)[0],
  ]
  for f in fns:
    ours, ref = both(f, a)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    fine = ~np.isnan(ref)
    np.testing.assert_allclose(ours[fine], ref[fine], rtol=TOL[dtype], atol=TOL[dtype])


# ---- one large LU over the pool (kernels/lapack.cc BlockedGetrf: panels of 128 columns,
# used from 384 columns up): the same pivots as LAPACK's getrf on the CPU backend, and a
# factorization that reconstructs the permuted matrix.


@pytest.mark.parametrize(
  "shape,dtype",
  [
    ((512, 512), np.float32),
    ((1000, 700), np.float64),
    ((450, 900), np.float32),
    ((600, 600), np.complex64),
    ((400, 400), np.complex128),
  ],
  ids=lambda v: str(v) if isinstance(v, tuple) else np.dtype(v).name,
)
def test_blocked_lu_matches_lapack(shape, dtype):
  rng = np.random.default_rng(sum(shape))
  x = rng.standard_normal(shape)
  if np.issubdtype(dtype, np.complexfloating):
    x = x + 1j * rng.standard_normal(shape)
  x = x.astype(dtype)
  with jax.enable_x64(True):
    lu, pivots, perm = run_on(workshop_device(), jax.lax.linalg.lu, x)
    _, cpu_pivots, _ = run_on(cpu_device(), jax.lax.linalg.lu, x)
  np.testing.assert_array_equal(pivots, cpu_pivots)
  m, n = shape
  k = min(m, n)
  lower = np.tril(lu, -1)[:, :k] + np.eye(m, k)
  upper = np.triu(lu)[:k, :]
  eps = np.finfo(dtype).eps
  err = np.max(np.abs(lower @ upper - x[perm])) / np.max(np.abs(x))
  assert err < 50 * eps * np.sqrt(k), err


def test_blocked_lu_singular_matches_cpu():
  """A zero column in the second panel: the same info (first zero pivot) and a solve full
  of NaN/inf on both backends."""
  x = np.random.default_rng(3).standard_normal((600, 600)).astype(np.float32)
  x[:, 450] = 0
  solve = lambda a: jnp.linalg.solve(a, jnp.ones(600, jnp.float32))  # noqa: E731
  ours = run_on(workshop_device(), solve, x)
  theirs = run_on(cpu_device(), solve, x)
  assert not np.isfinite(ours).all() and not np.isfinite(theirs).all()
  _, pivots, _ = run_on(workshop_device(), jax.lax.linalg.lu, x)
  _, cpu_pivots, _ = run_on(cpu_device(), jax.lax.linalg.lu, x)
  np.testing.assert_array_equal(pivots, cpu_pivots)
