"""Programs of JAX users' code that mix dtypes, against JAX's CPU backend: f16/bf16 math computed in f32 by the op table's one upcast rule, complex windows,
mixed-type convolutions, pred dots."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu, run_stablehlo

pytestmark = pytest.mark.usefixtures("x64")

HALF = [np.float16, ml_dtypes.bfloat16]
_X = np.linspace(-0.9, 0.9, 12)


@pytest.mark.parametrize("dtype", HALF, ids=["f16", "bf16"])
@pytest.mark.parametrize(
  "f",
  [
    jnp.arcsinh,
    jnp.arcsin,
    jnp.arccos,
    jnp.arctanh,
    jnp.sinh,
    jnp.cosh,
    jax.scipy.special.erf,
    lambda x: jnp.arccosh(x + 2),
  ],
  ids=["arcsinh", "arcsin", "arccos", "arctanh", "sinh", "cosh", "erf", "arccosh"],
)
def test_chlo_math_on_half(f, dtype):
  assert_matches_cpu(f, _X.astype(dtype))


_WINDOWS = {
  "cumsum": jnp.cumsum,
  "cumprod": jnp.cumprod,
  "window_add": lambda x: lax.reduce_window(
    x, jnp.zeros((), x.dtype), lax.add, (3,), (1,), "VALID"
  ),
  "window_mul": lambda x: lax.reduce_window(x, jnp.ones((), x.dtype), lax.mul, (3,), (2,), "SAME"),
}
_ORDERED = {
  "cummax": lax.cummax,
  "cummin": lax.cummin,
  "window_max": lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (3,), (1,), "VALID"),
  "window_min": lambda x: lax.reduce_window(x, jnp.inf, lax.min, (2,), (1,), "SAME"),
}


@pytest.mark.parametrize(
  "dtype", [*HALF, np.complex64, np.complex128], ids=["f16", "bf16", "c64", "c128"]
)
@pytest.mark.parametrize("name", [*_WINDOWS, *_ORDERED])
def test_cumulative_and_windows(name, dtype):
  if name in _ORDERED and np.dtype(dtype).kind == "c":
    pytest.skip("max/min windows of complex: see test_cumulative_max_min_of_complex")
  x = (_X * 1.5).astype(dtype)
  if np.dtype(dtype).kind == "c":
    x = x + 1j * x[::-1]
  assert_matches_cpu({**_WINDOWS, **_ORDERED}[name], x)


@pytest.mark.parametrize("dtype", HALF, ids=["f16", "bf16"])
def test_max_pool_grad_on_half(dtype):
  """select_and_scatter on f16/bf16."""

  def loss(v):
    return (
      lax.reduce_window(v, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
      .astype(jnp.float32)
      .sum()
    )

  x = np.random.RandomState(0).randn(2, 6, 6, 3).astype(dtype)
  assert_matches_cpu(jax.grad(loss), x)


@pytest.mark.parametrize("dtype", [*HALF, np.bool_], ids=["f16", "bf16", "pred"])
def test_top_k(dtype):
  x = np.random.RandomState(1).randn(3, 10)
  assert_matches_cpu(lambda v: lax.top_k(v, 4), (x > 0) if dtype is np.bool_ else x.astype(dtype))


@pytest.mark.parametrize("dtype", HALF, ids=["f16", "bf16"])
def test_triangular_solve_on_half(dtype):
  rs = np.random.RandomState(2)
  a = (np.tril(rs.rand(4, 4)) + 2 * np.eye(4)).astype(dtype)
  b = rs.randn(4, 3).astype(dtype)
  assert_matches_cpu(
    lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True), a, b
  )


@pytest.mark.parametrize(
  "dtype",
  [*HALF, np.float64, np.complex64, np.int32, np.int8],
  ids=["f16", "bf16", "f64", "c64", "s32", "s8"],
)
def test_convolution_dtypes(dtype):
  rs = np.random.RandomState(3)
  lhs, rhs = rs.randn(2, 3, 6, 6) * 3, rs.randn(4, 3, 3, 3) * 3
  if np.dtype(dtype).kind == "c":
    lhs, rhs = lhs + 1j * lhs[::-1], rhs - 1j * rhs
  assert_matches_cpu(
    lambda a, b: lax.conv(a, b, (1, 1), "SAME"),
    lhs.astype(dtype),
    rhs.astype(dtype),
    rtol=2e-2 if dtype in HALF else None,
  )


@pytest.mark.parametrize(
  "operands,result",
  [(np.int8, np.int32), (ml_dtypes.bfloat16, np.float32)],
  ids=["s8xs8->s32", "bf16xbf16->f32"],
)
def test_convolution_preferred_element_type(operands, result):
  rs = np.random.RandomState(4)
  lhs = (rs.randn(1, 2, 5, 5) * 40).astype(operands)
  rhs = (rs.randn(3, 2, 3, 3) * 40).astype(operands)
  assert_matches_cpu(
    lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", preferred_element_type=result),
    lhs,
    rhs,
  )


def test_dot_general_on_pred():
  rs = np.random.RandomState(5)
  a, b = rs.rand(4, 5) > 0.7, rs.rand(5, 3) > 0.7
  assert_matches_cpu(jnp.dot, a, b)
  assert_matches_cpu(lambda a, b: lax.dot(a, b, preferred_element_type=jnp.bool_), a, b)


# reduce_window bodies no kernel hard-codes, and variadic forms (pad, window slices, then
# reduce_general over the window positions).


def test_max_pool_jvp():
  """Variadic reduce_window: (value, tangent) pairs."""
  x = np.random.RandomState(6).randn(16).astype(np.float32)
  t = np.random.RandomState(7).randn(16).astype(np.float32)
  assert_matches_cpu(
    lambda v, t: jax.jvp(
      lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (2,), (1,), "VALID"), (v,), (t,)
    ),
    x,
    t,
  )


def test_max_pool_jvp_2d_strided_padded():
  x = np.random.RandomState(8).randn(2, 7, 6).astype(np.float32)
  assert_matches_cpu(
    lambda v: jax.jvp(
      lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 3, 2), (1, 2, 2), "SAME"),
      (v,),
      (jnp.ones_like(v),),
    ),
    x,
  )


def test_cumlogsumexp():
  x = np.random.RandomState(9).randn(3, 10).astype(np.float32)
  assert_matches_cpu(lambda v: lax.cumlogsumexp(v, axis=1), x)
  assert_matches_cpu(lambda v: lax.cumlogsumexp(v, axis=0, reverse=True), x)


@pytest.mark.parametrize("f", [lax.cummax, lax.cummin], ids=["cummax", "cummin"])
def test_cumulative_max_min_of_complex(f):
  rs = np.random.RandomState(10)
  x = (rs.randint(-2, 3, 12) + 1j * rs.randint(-2, 3, 12)).astype(np.complex64)
  assert_matches_cpu(f, x)


def test_scatter_apply():
  """scatter with an update computation that is not a combiner (scatter_general)."""
  x = np.linspace(-2, 2, 10).astype(np.float32)
  assert_matches_cpu(lambda v: v.at[3].apply(jnp.sin), x)
  assert_matches_cpu(lambda v: v.at[jnp.array([1, 4, 1, 7])].apply(lambda e: e * e + 1), x)
  assert_matches_cpu(lambda v: v.at[2:5].apply(jnp.exp), x.astype(ml_dtypes.bfloat16))


def test_scatter_apply_on_rows_with_repeats():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  # Row 0 twice: the second application sees the first (2 * (2 * e + 1) + 1).
  assert_matches_cpu(lambda a: a.at[jnp.array([0, 2, 0])].apply(lambda e: e * 2 + 1), x)


@pytest.mark.parametrize(
  "dtype", [jnp.int4, jnp.uint4, jnp.int2, jnp.uint2], ids=["s4", "u4", "s2", "u2"]
)
def test_sub_byte_ints(dtype):
  x = np.arange(-9, 9, dtype=np.int32)
  assert_matches_cpu(lambda v: (v.astype(dtype) + v.astype(dtype)).astype(jnp.int32), x)
  assert_matches_cpu(lambda v: (v.astype(dtype) * dtype(3)).astype(jnp.float32), x)
  assert_matches_cpu(lambda v: jnp.max(v.astype(dtype)).astype(jnp.int32), x)


def test_map_and_tokens():
  """stablehlo.map (JAX never emits it; StableHLO programs do) and token ops."""
  text = """
  func.func public @main() -> (tensor<2x3xi64>, tensor<2x3xf32>) {
    %t0 = stablehlo.create_token : !stablehlo.token
    %t1 = stablehlo.after_all %t0, %t0 : !stablehlo.token
    %a = stablehlo.constant dense<[[0, 1, 2], [3, 4, 5]]> : tensor<2x3xi64>
    %b = stablehlo.constant dense<[[6, 7, 8], [9, 10, 11]]> : tensor<2x3xi64>
    %f = stablehlo.constant dense<[[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]]> : tensor<2x3xf32>
    %m = "stablehlo.map"(%a, %b) ({
      ^bb0(%x: tensor<i64>, %y: tensor<i64>):
        %0 = stablehlo.multiply %x, %y : tensor<i64>
        %1 = stablehlo.subtract %0, %x : tensor<i64>
        stablehlo.return %1 : tensor<i64>
    }) {dimensions = array<i64: 0, 1>} : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
    %n = "stablehlo.map"(%f) ({
      ^bb0(%x: tensor<f32>):
        %0 = stablehlo.sine %x : tensor<f32>
        stablehlo.return %0 : tensor<f32>
    }) {dimensions = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    return %m, %n : tensor<2x3xi64>, tensor<2x3xf32>
  }"""
  ours, ref = run_stablehlo(text), run_stablehlo(text, platform="cpu")
  np.testing.assert_array_equal(ours[0], ref[0])
  np.testing.assert_allclose(ours[1], ref[1], rtol=2e-6)


def test_dynamic_ops_with_constant_shapes():
  text = """
  func.func public @main() -> (tensor<3x4xi64>, tensor<3x2x2xi64>, tensor<6xi64>,
                               tensor<7x5xi64>) {
    %shape = stablehlo.constant dense<[3, 4]> : tensor<2xi64>
    %0 = stablehlo.dynamic_iota %shape, dim = 1 : (tensor<2xi64>) -> tensor<3x4xi64>
    %x = stablehlo.constant dense<[[1], [2], [3]]> : tensor<3x1xi64>
    %dims = stablehlo.constant dense<[3, 2, 2]> : tensor<3xi64>
    %1 = "stablehlo.dynamic_broadcast_in_dim"(%x, %dims) {
      broadcast_dimensions = array<i64: 0, 2>} : (tensor<3x1xi64>, tensor<3xi64>)
        -> tensor<3x2x2xi64>
    %y = stablehlo.constant dense<[[1, 2, 3, 4, 5, 6]]> : tensor<1x6xi64>
    %six = stablehlo.constant dense<[6]> : tensor<1xi64>
    %2 = stablehlo.dynamic_reshape %y, %six : (tensor<1x6xi64>, tensor<1xi64>) -> tensor<6xi64>
    %z = stablehlo.constant dense<[[0, 1, 2, 0], [3, 4, 5, 6], [7, 8, 9, 1], [2, 3, 4, 5],
                                   [6, 7, 8, 9]]> : tensor<5x4xi64>
    %v = stablehlo.constant dense<-1> : tensor<i64>
    %lo = stablehlo.constant dense<[1, -1]> : tensor<2xi64>
    %hi = stablehlo.constant dense<[1, -1]> : tensor<2xi64>
    %in = stablehlo.constant dense<[0, 1]> : tensor<2xi64>
    %3 = stablehlo.dynamic_pad %z, %v, %lo, %hi, %in : (tensor<5x4xi64>, tensor<i64>,
        tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<7x5xi64>
    return %0, %1, %2, %3 : tensor<3x4xi64>, tensor<3x2x2xi64>, tensor<6xi64>, tensor<7x5xi64>
  }"""
  for ours, ref in zip(run_stablehlo(text), run_stablehlo(text, platform="cpu"), strict=True):
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize(
  "dtype",
  [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn],
  ids=["f8e4m3fn", "f8e5m2", "f4e2m1fn"],
)
def test_narrow_floats_move(dtype):
  """Stored one per byte and moved (and computed in f32: test_elementwise_dtypes)."""
  x = np.array([0.5, -1.0, 1.5, 0.0, 2.0, -0.5], np.float32).astype(dtype)
  ours = assert_matches_cpu(lambda v: jnp.flip(v.reshape(2, 3), 1).T, x)
  assert ours.dtype == np.dtype(dtype)
