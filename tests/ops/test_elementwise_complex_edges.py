"""Complex tan, tanh, expm1, sinh, cosh, sinc, multiply and divide at the edges of the
complex plane, against XLA:CPU (same program, JAX's CPU backend) and numpy's complex128.

The grid crosses real and imaginary parts from: signed zeros, subnormals (read as zero on
both backends, which run with DAZ), small and moderate values, values where e^x overflows
f32 (88, 89) and f64, the largest finite values, infinities and NaN. The kernels follow
XLA's expansions (plugin_src/kernels/math/complex_math.h), so NaN, infinities and zeros, with
their signs, must be where XLA:CPU puts them. Finite values agree within 2e-5 relative (a
few ulps of the exp/sin/cos each side uses), or are closer to complex128 than XLA:CPU's:
expm1(x + iy) takes cos y - 1 as -2 sin^2(y/2), exact where XLA's cos(y) - 1 cancels
(expm1(88i): real part -6.2671636e-4 here and in complex128, -6.2674284e-4 on XLA:CPU).
sinc is sin(pi z) / (pi z) in StableHLO: complex multiply and divide, which follow XLA's
schoolbook product and Smith's quotient with the FMAs XLA:CPU's LLVM contracts them into.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reference import cpu_device, run_on

pytestmark = pytest.mark.usefixtures("x64")

FUNCTIONS = {
  "tan": jnp.tan,
  "tanh": jnp.tanh,
  "expm1": jnp.expm1,
  "sinh": jnp.sinh,
  "cosh": jnp.cosh,
  "sinc": jnp.sinc,
}
NUMPY = {
  "tan": np.tan,
  "tanh": np.tanh,
  "expm1": np.expm1,
  "sinh": np.sinh,
  "cosh": np.cosh,
  "sinc": np.sinc,
}


def _grid(dtype):
  real = np.finfo(np.float32 if dtype == np.complex64 else np.float64)
  parts = np.array(
    [
      0.0,
      -0.0,
      float(real.smallest_subnormal),
      -float(real.smallest_subnormal),
      float(real.smallest_normal),
      1e-20,
      1e-5,
      0.5,
      -0.5,
      1.0,
      3.0,
      -3.0,
      10.0,
      44.0,
      88.0,
      89.0,
      -89.0,
      400.0,
      710.0,
      1e10,
      -1e10,
      1e19,
      float(real.max),
      -float(real.max),
      np.inf,
      -np.inf,
      np.nan,
    ]
  )
  re, im = np.meshgrid(parts, parts)
  z = np.empty(re.size, dtype)
  z.real, z.imag = re.ravel(), im.ravel()  # (re + 1j * im would make NaN of inf * 1j)
  return z


def _components(z):
  return [np.asarray(z).real, np.asarray(z).imag]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_edges_as_on_cpu(name, dtype):
  z = _grid(dtype)
  ours = run_on(jax.devices("workshop")[0], FUNCTIONS[name], z)
  ref = run_on(cpu_device(), FUNCTIONS[name], z)
  assert ours.dtype == ref.dtype == dtype
  with np.errstate(all="ignore"):
    exact = NUMPY[name](z.astype(np.complex128))
  for o, r, e, part in zip(
    _components(ours), _components(ref), _components(exact), ("real", "imag"), strict=True
  ):
    # A zero of XLA:CPU's where the exact value is not zero is rounding (cos(710) - 1 is
    # 0 in f32 arithmetic, -1.8e-9 exactly): compared as a finite value.
    special = ~np.isfinite(r) | ((r == 0) & ~(np.isfinite(e) & (e != 0)))
    # NaN, infinities and zeros, with their signs, exactly where XLA:CPU has them.
    np.testing.assert_array_equal(np.isnan(o), np.isnan(r), err_msg=f"{part} NaN")
    same = (o == r) & (np.signbit(o) == np.signbit(r))
    bad = special & ~np.isnan(r) & ~same
    assert not bad.any(), (part, z[bad], o[bad], r[bad])
    finite = ~special
    with np.errstate(invalid="ignore"):
      close = np.abs(o - r) <= 2e-5 * np.abs(r)
      closer = np.abs(o - e) <= np.abs(r - e)
      bad = finite & ~(close | closer)
    assert not bad.any(), (part, z[bad], o[bad], r[bad], e[bad])


def test_named_edges():
  """The values that differed from XLA:CPU before its expansions were followed."""
  cases = {
    ("tan", complex(np.inf, 0)): (np.nan, np.nan),
    ("cosh", complex(np.inf, 1e-45)): (np.inf, 0.0),  # 1e-45 is 0 under DAZ.
    ("expm1", complex(89, 0)): (np.inf, 0.0),
    ("sinh", complex(1e-20, 0)): (0.0, 0.0),  # e^(x - ln 2) - e^(-x - ln 2)
  }
  for (name, z), (re, im) in cases.items():
    got = run_on(jax.devices("workshop")[0], FUNCTIONS[name], np.array([z], np.complex64))[0]
    np.testing.assert_array_equal([got.real, got.imag], [re, im], err_msg=f"{name}({z})")


@pytest.mark.parametrize("op", ["multiply", "divide"])
def test_multiply_divide_edges_as_on_cpu(op):
  """Every pair of a smaller grid: NaN and infinities where XLA:CPU has them (its
  schoolbook product has no C99 NaN recovery; its quotient is Smith's with limits for
  zero and infinite parts), both fusing the same products into FMAs. Finite parts agree
  within 1e-5 of the larger part of the result."""
  parts = np.array(
    [0.0, -0.0, 1e-20, 0.5, -3.0, 44.0, 1e19, 3.4e38, np.inf, -np.inf, np.nan], np.float32
  )
  re, im = np.meshgrid(parts, parts)
  z = np.empty(re.size, np.complex64)
  z.real, z.imag = re.ravel(), im.ravel()
  a, b = np.repeat(z, z.size), np.tile(z, z.size)
  f = (lambda x, y: x * y) if op == "multiply" else (lambda x, y: x / y)
  ours = run_on(jax.devices("workshop")[0], f, a, b)
  ref = run_on(cpu_device(), f, a, b)
  with np.errstate(all="ignore"):
    scale = np.maximum(np.abs(ref.real), np.abs(ref.imag))
    for o, r in zip(_components(ours), _components(ref), strict=True):
      np.testing.assert_array_equal(np.isnan(o), np.isnan(r))
      inf = np.isinf(r)
      np.testing.assert_array_equal(o[inf], r[inf])
      finite = np.isfinite(r) & np.isfinite(scale)
      bad = finite & ~(np.abs(o - r) <= 1e-5 * scale)
      assert not bad.any(), (a[bad], b[bad], o[bad], r[bad])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_sinc_on_jax_complex_plane_sample_as_on_cpu(dtype):
  """jnp.sinc, eagerly (op by op, as lax_test's FunctionAccuracyTest calls it), over JAX's
  own complex-plane sample (infinities, extremes, subnormals, zeros in every
  combination): NaN, infinities and zeros where XLA:CPU puts them, values within 2e-5.
  (That test's sinc_complex64 fails on XLA:CPU too with mpmath 1.4.1, whose reference is
  0 where both backends give NaN: sinc(-inf + iy).)"""
  pytest.importorskip("absl", reason="jax._src.test_util needs absl-py (the models extra)")
  from jax._src import test_util as jtu

  x = jtu.complex_plane_sample(dtype=dtype, size_re=11, size_im=11)
  out = []
  for device in (jax.devices("workshop")[0], cpu_device()):
    with jax.default_device(device):
      out.append(np.asarray(jnp.sinc(jnp.asarray(x))))
  ours, ref = out
  for part in (np.real, np.imag):
    np.testing.assert_array_equal(np.isnan(part(ours)), np.isnan(part(ref)))
    np.testing.assert_array_equal(np.isinf(part(ours)), np.isinf(part(ref)))
  # Relative to |sinc z| (a part much smaller than the other carries the cancellation of
  # sin(pi z) / (pi z)'s complex quotient: single parts differ in ulps of the larger).
  finite = np.isfinite(ours) & np.isfinite(ref)
  wide = np.complex128
  error = np.abs(ours[finite].astype(wide) - ref[finite].astype(wide))
  assert np.all(error <= 2e-5 * np.abs(ref[finite].astype(wide))), np.max(error)
