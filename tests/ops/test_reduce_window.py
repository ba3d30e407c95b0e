"""reduce_window and select_and_scatter against JAX's CPU backend: max/min/avg pooling
(padding, strides, dilations, large pools split over threads, a window almost all
padding), non-identity init values, integer and bool dtypes, rank 0, cumulative reductions
(lax.cumsum/cumprod/cummax/cummin, jnp.cumsum/cumprod), general and variadic bodies, and
max/min-pool gradients (select_and_scatter: ties, NaNs). Family: reduce_window.

Tolerances: pooling picks or adds a handful of elements (max/min exact, sums and avg-pool
a few ulps). Two tests take numpy or the spec as the reference: the mostly-padding window
(XLA:CPU would walk every position) and the rank-0 window (XLA:CPU drops the init).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu
from family_helpers import rand_operand as _rand


# reduce_window.


def _pool(op, init, window, strides, padding, **kw):
  return lambda x: lax.reduce_window(x, init, op, window, strides, padding, **kw)


@pytest.mark.parametrize(
  "window, strides, padding",
  [
    ((1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
    ((1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
    ((1, 1, 3, 2), (1, 1, 2, 1), ((0, 0), (0, 0), (1, 1), (0, 1))),
    ((2, 2, 1, 1), (1, 1, 1, 1), ((1, 0), (0, 1), (0, 0), (0, 0))),  # NCHW-style.
  ],
)
def test_max_and_avg_pool(window, strides, padding):
  x = _rand((2, 7, 8, 3))
  assert_matches_cpu(_pool(lax.max, -jnp.inf, window, strides, padding), x)
  assert_matches_cpu(_pool(lax.min, jnp.inf, window, strides, padding), x)
  avg = lambda x: _pool(lax.add, 0.0, window, strides, padding)(x) / np.prod(window)
  assert_matches_cpu(avg, x, rtol=1e-6, atol=1e-6)


# Large enough that ranges of output rows split over the thread pool (window.cc).
@pytest.mark.parametrize(
  "shape, window, strides, padding, kw",
  [
    ((8, 56, 56, 64), (1, 3, 3, 1), (1, 2, 2, 1), "SAME", {}),
    ((4, 16, 57, 55), (1, 1, 3, 3), (1, 1, 2, 1), "VALID", {}),  # NCHW: short rows.
    (
      (4, 30, 30, 16),
      (1, 2, 3, 1),
      (1, 1, 1, 1),
      "SAME",
      {"base_dilation": (1, 2, 1, 1), "window_dilation": (1, 1, 2, 1)},
    ),
  ],
  ids=str,
)
def test_large_pools_split_over_threads(shape, window, strides, padding, kw):
  x = _rand(shape)
  assert_matches_cpu(_pool(lax.max, -jnp.inf, window, strides, padding, **kw), x)
  assert_matches_cpu(_pool(lax.add, 0.0, window, strides, padding, **kw), x, rtol=1e-6, atol=1e-5)


# Trailing dims the window passes through (channels) become contiguous blocks of the
# walk's elements (reduce_window.cc): one or two such dims, the others padded, strided and
# dilated; and a pass-through dim that is not trailing, which walks element by element.
@pytest.mark.parametrize(
  "shape, window, strides, padding, kw",
  [
    (
      (2, 9, 8, 3, 5),
      (1, 3, 2, 1, 1),
      (1, 2, 1, 1, 1),
      "SAME",
      dict(base_dilation=(1, 2, 1, 1, 1)),
    ),
    ((3, 10, 7), (2, 3, 1), (1, 2, 1), ((1, 0), (1, 1), (0, 0)), dict(window_dilation=(1, 2, 1))),
    ((6, 5), (3, 1), (2, 1), "VALID", {}),
    ((4, 3, 9), (2, 1, 2), (1, 1, 2), "SAME", {}),
  ],
)
def test_pooling_over_channel_blocks(shape, window, strides, padding, kw):
  with jax.enable_x64(True):  # Sums in f64: every term must be there exactly once.
    x = _rand(shape, np.float64)
    for op, init in ((lax.max, -np.inf), (lax.add, 0.0)):
      got = assert_matches_cpu(_pool(op, init, window, strides, padding, **kw), x, rtol=1e-13)
      assert got.dtype == np.float64


def test_reduce_window_dilations():
  f = _pool(
    lax.add, 0.0, (2, 3), (2, 1), ((1, 2), (2, 0)), base_dilation=(2, 1), window_dilation=(1, 2)
  )
  assert_matches_cpu(f, _rand((5, 9)), rtol=1e-6, atol=1e-6)
  g = _pool(
    lax.max,
    -jnp.inf,
    (3, 2),
    (3, 2),
    ((0, 2), (1, 1)),
    base_dilation=(3, 2),
    window_dilation=(2, 1),
  )
  assert_matches_cpu(g, _rand((4, 5)))


def test_reduce_window_mostly_padding():
  # A window of 2^48 + 1 over a dimension of 3, almost all of it padding: legal StableHLO
  # (and what a resealed fuzzer blob, seed 25 k=1867, made of a max-pool). The walk visits
  # only window positions that can read an operand element, so this takes the time of a
  # 3x3 pool, not 2^48 steps or a table of 2^48 runs. Along that axis each output is the
  # max over channels c.. (a suffix max); the reference is numpy's (XLA:CPU would walk
  # every position).
  big = 2**48 + 1
  x = _rand((2, 5, 3))
  y = jax.jit(_pool(lax.max, -jnp.inf, (1, 3, big), (1, 2, 1), ((0, 0), (1, 1), (0, big - 1))))(x)
  padded = np.pad(x, ((0, 0), (1, 1), (0, 0)), constant_values=-np.inf)
  pooled = np.stack([padded[:, i : i + 3].max(axis=1) for i in (0, 2, 4)], axis=1)
  np.testing.assert_array_equal(
    np.asarray(y), np.maximum.accumulate(pooled[..., ::-1], axis=-1)[..., ::-1]
  )
  cumsum = jax.jit(_pool(lax.add, 0.0, (1, big, 1), (1, 1, 1), ((0, 0), (big - 1, 0), (0, 0))))
  np.testing.assert_allclose(np.asarray(cumsum(x)), np.cumsum(x, axis=1), rtol=1e-6)


def test_reduce_window_non_identity_init():
  # The init value counts once per window, not once per padding element.
  f = _pool(lax.add, 1.0, (3, 3), (1, 1), "SAME")
  assert_matches_cpu(f, _rand((4, 5)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
def test_reduce_window_dtypes(dtype):
  x = _rand((3, 6, 5), np.int32).astype(dtype)
  if dtype == np.bool_:
    assert_matches_cpu(_pool(lax.bitwise_or, False, (1, 2, 2), (1, 2, 1), "SAME"), x)
  else:
    assert_matches_cpu(_pool(lax.max, dtype(np.iinfo(dtype).min), (1, 2, 3), (1, 1, 2), "VALID"), x)
    assert_matches_cpu(_pool(lax.add, dtype(0), (2, 2, 2), (1, 1, 1), "SAME"), x)


def test_reduce_window_scalar():
  # A rank-0 window holds the one element, folded into the init value as the StableHLO
  # spec says. (XLA:CPU's simplifier returns the operand unchanged, dropping the init,
  # so the reference here is the spec: 2 + 3.)
  out = jax.jit(_pool(lax.add, 2.0, (), (), ()))(np.float32(3.0))
  assert out.dtype == np.float32 and float(out) == 5.0


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative(axis, name, reverse):
  f = lambda x: getattr(lax, name)(x, axis=axis, reverse=reverse)
  x = _rand((4, 5, 6)) if name != "cumprod" else 1 + 0.1 * _rand((4, 5, 6))
  assert_matches_cpu(f, x, rtol=1e-5, atol=1e-5)


def test_cumulative_int_and_jnp():
  x = _rand((5, 7), np.int32)
  assert_matches_cpu(lambda x: jnp.cumsum(x, axis=1), x)
  assert_matches_cpu(lambda x: jnp.cumprod(x, axis=0), x)
  assert_matches_cpu(lambda x: jnp.cumsum(x), x)  # Flattened.


def test_reduce_window_general_bodies():
  # Bodies no kernel hard-codes and variadic forms: window slices reduced by the body
  # (associative and commutative, as the order of a window's reduction is unspecified).
  x = _rand((4, 5))
  assert_matches_cpu(_pool(lambda a, b: a + b + a * b, 0.0, (2, 2), (1, 1), "VALID"), x)
  variadic = lambda x: lax.reduce_window(
    (x, x), (0.0, 0.0), lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1])), (2, 3), (1, 2), "SAME"
  )
  assert_matches_cpu(variadic, x)


# select_and_scatter.


@pytest.mark.parametrize(
  "window, strides, padding",
  [
    ((1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
    ((1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
    ((1, 3, 2, 1), (1, 1, 2, 1), ((0, 0), (2, 1), (0, 1), (0, 0))),
  ],
)
def test_max_pool_grad(window, strides, padding):
  pool = _pool(lax.max, -jnp.inf, window, strides, padding)
  grad = jax.grad(lambda x: jnp.sum(pool(x) * jnp.arange(pool(x).size).reshape(pool(x).shape)))
  assert_matches_cpu(grad, _rand((2, 7, 6, 3)))


def test_max_pool_grad_ties():
  # GE keeps the first maximum of a window: ties go to the earliest element.
  x = np.random.default_rng(0).integers(0, 3, (1, 6, 6, 2)).astype(np.float32)
  pool = _pool(lax.max, -jnp.inf, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")
  assert_matches_cpu(jax.grad(lambda x: jnp.sum(pool(x))), x)


def test_max_pool_grad_nan():
  # `selected >= NaN` and `NaN >= candidate` are both false: a NaN candidate is
  # selected, then replaced by the window's next element, as on XLA:CPU.
  x = _rand((1, 6, 6, 2))
  x[0, 1, 1, 0] = x[0, 4, 3, 1] = np.nan
  pool = _pool(lax.max, -jnp.inf, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
  assert_matches_cpu(jax.grad(lambda x: jnp.sum(pool(x))), x)


def test_min_pool_grad():
  pool = _pool(lax.min, jnp.inf, (2, 2), (1, 2), "SAME")
  assert_matches_cpu(jax.grad(lambda x: jnp.sum(pool(x) ** 2)), _rand((5, 6)))


# 16-bit floats and pred, as StableHLO text (the same program on both backends: JAX lowers
# cumsum differently per platform). StableHLO's testdata cumsum_bfloat16_8_9,
# cumprod_bfloat16_8_9 and select_and_scatter_add_bool_1_3_5_bool_2_4_6 are these.


def _window_text(t: str, shape, body: str, window, pad_lo) -> str:
  tensor = f"tensor<{'x'.join(map(str, shape))}x{t}>"
  # Scans: high padding window - 1 - lo, the operand's shape; windows: no padding.
  scan = max(window) == 8 or max(window) == 9
  pads = ", ".join(f"[{lo}, {w - 1 - lo if scan else 0}]" for lo, w in zip(pad_lo, window))
  out = shape if scan else [n - w + 1 for n, w in zip(shape, window)]
  result = f"tensor<{'x'.join(map(str, out))}x{t}>"
  return f"""
func.func public @main(%x: {tensor}, %init: tensor<{t}>) -> {result} {{
  %r = "stablehlo.reduce_window"(%x, %init) <{{padding = dense<[{pads}]> : tensor<{len(shape)}x2xi64>,
      window_dimensions = array<i64: {", ".join(map(str, window))}>}}> ({{
  ^bb0(%a: tensor<{t}>, %b: tensor<{t}>):
    %c = stablehlo.{body} %a, %b : tensor<{t}>
    stablehlo.return %c : tensor<{t}>
  }}) : ({tensor}, tensor<{t}>) -> {result}
  return %r : {result}
}}"""


@pytest.mark.parametrize("t", ["bf16", "f16"])
@pytest.mark.parametrize(
  "body, window, pad_lo",
  [
    ("add", (8, 1), (7, 0)),  # cumsum along 0
    ("multiply", (8, 1), (7, 0)),  # cumprod along 0
    ("add", (1, 9), (0, 8)),  # cumsum along 1
    ("add", (3, 2), (0, 0)),  # a window (sum pool), row-major order
  ],
)
def test_16bit_reduce_window_rounds_each_step_as_cpu(t, body, window, pad_lo):
  """Each body result is rounded to the 16-bit type (XLA:CPU's partial sums are bf16:
  3.75 + 1.203125 -> 4.9375, where a sum in f32 rounded once gave 4.96875), bit for
  bit."""
  import ml_dtypes
  from reference import run_stablehlo

  np_t = ml_dtypes.bfloat16 if t == "bf16" else np.float16
  x = np.random.default_rng(1).uniform(-4, 4, (8, 9)).astype(np_t)
  if body == "multiply":
    x = (1 + x.astype(np.float32) / 8).astype(np_t)
  init = np.array(0 if body == "add" else 1, np_t)
  text = _window_text(t, (8, 9), body, window, pad_lo)
  (ours,), (ref,) = run_stablehlo(text, x, init), run_stablehlo(text, x, init, platform="cpu")
  assert ours.dtype == ref.dtype and ours.tobytes() == ref.tobytes(), (ours, ref)


def test_16bit_pooling_rounds_each_step_as_cpu():
  """bf16 sum pools of rank 4 (JAX programs, pooled the same way on both backends), of
  stride 1 (strided windows: docs/known_gaps.md)."""
  import ml_dtypes

  x = np.random.default_rng(0).uniform(-4, 4, (2, 7, 6, 3)).astype(ml_dtypes.bfloat16)
  for window, strides, padding in [
    ((1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
    ((2, 2, 3, 1), (1, 1, 1, 1), "VALID"),
  ]:
    f = _pool(lax.add, ml_dtypes.bfloat16(0), window, strides, padding)
    assert_matches_cpu(f, x, rtol=0, atol=0)


def test_select_and_scatter_pred():
  """pred select_and_scatter (GE select, or scatter), computed as s8: it had no kernel."""
  from reference import run_stablehlo

  text = """
func.func public @main(%src: tensor<1x3x5xi1>, %x: tensor<2x4x6xi1>) -> tensor<2x4x6xi1> {
  %f = stablehlo.constant dense<false> : tensor<i1>
  %r = "stablehlo.select_and_scatter"(%x, %src, %f) <{window_dimensions = array<i64: 2, 2, 2>}> ({
  ^bb0(%a: tensor<i1>, %b: tensor<i1>):
    %c = stablehlo.compare GE, %a, %b, UNSIGNED : (tensor<i1>, tensor<i1>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }, {
  ^bb0(%a: tensor<i1>, %b: tensor<i1>):
    %c = stablehlo.or %a, %b : tensor<i1>
    stablehlo.return %c : tensor<i1>
  }) : (tensor<2x4x6xi1>, tensor<1x3x5xi1>, tensor<i1>) -> tensor<2x4x6xi1>
  return %r : tensor<2x4x6xi1>
}"""
  rng = np.random.default_rng(2)
  for src, x in [
    (np.ones((1, 3, 5), bool), np.ones((2, 4, 6), bool)),
    (rng.integers(0, 2, (1, 3, 5)).astype(bool), rng.integers(0, 2, (2, 4, 6)).astype(bool)),
  ]:
    (ours,), (ref,) = run_stablehlo(text, src, x), run_stablehlo(text, src, x, platform="cpu")
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize(
  "init, body",
  [(1.0, lambda a, b: a + b), (0.0, lambda a, b: a * b), (0.0, lambda a, b: a - b)],
  ids=["add_init1", "mul", "sub"],
)
@pytest.mark.parametrize(
  "shape, window, strides, padding, base, dilation",
  [
    ((4, 6), (2, 1), (1, 1), "SAME", (1, 1), (1, 1)),
    ((4, 6), (1, 2), (2, 1), ((0, 3), (1, 2)), (2, 3), (1, 2)),
    ((4, 6), (2, 1), (1, 2), "VALID", (1, 1), (1, 1)),
    ((3, 2, 4, 6), (2, 1, 2, 1), (1, 2, 2, 1), "SAME", (2, 1, 3, 2), (1, 2, 2, 1)),
  ],
)
def test_general_body_jvp(init, body, shape, window, strides, padding, base, dilation):
  """The JVP of a reduce_window whose body JAX does not recognize is a variadic
  reduce_window with (primal, tangent) bodies: folded as XLA:CPU folds a window (init
  once, padding and dilation holes skipped, row-major), so a non-identity init (1 for
  add) and a non-commutative body (a - b) agree (lax_test's testReduceWindowGeneralJVP:
  values were off by 1 per padding element)."""

  def f(x):
    return lax.reduce_window(x, np.float32(init), body, window, strides, padding, base, dilation)

  x = _rand(shape)
  assert_matches_cpu(lambda x: jax.jvp(f, (x,), (jnp.ones_like(x),)), x, rtol=1e-5, atol=1e-5)
