"""Convolution against JAX's CPU backend: every window feature, layout and grouping JAX
emits, their gradients, and a small CNN (conv, relu, max-pool, batch norm, dense head).
Family: convolution (reduce_window and select_and_scatter: test_reduce_window.py).

Tolerances: convolutions are GEMMs over K = window * features products (K <= ~300
here), summed in a different order than XLA's, so f32 results of magnitude ~sqrt(K)
differ by a few ulps times K: rtol 1e-5 with atol 1e-5 * sqrt(K)-ish slack (_F32).
Integer results must match exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jaxlib.mlir import ir

from jax_plugins.workshop.compiler import lowering, rules  # noqa: F401  (rules register)
from reference import assert_matches_cpu, cpu_device, results_with_helpers_awake_and_parked, run_on
from family_helpers import rand_operand as _rand


_F32 = dict(rtol=1e-5, atol=1e-4)
_F64 = dict(rtol=1e-12, atol=1e-12)
NHWC = ("NHWC", "HWIO", "NHWC")


def _requires(*ops):
  """Skips a test whose program (on the workshop platform) uses ops not lowered yet."""
  missing = [op for op in ops if f"stablehlo.{op}" not in lowering._RULES]
  return pytest.mark.skipif(bool(missing), reason=f"needs stablehlo.{', '.join(missing)}")


def _conv(**kw):
  return lambda x, w: lax.conv_general_dilated(x, w, **kw)


# Convolution forward.


@pytest.mark.parametrize(
  "dn, x_shape, w_shape",
  [
    (("NCHW", "OIHW", "NCHW"), (2, 3, 9, 8), (4, 3, 3, 2)),
    (NHWC, (2, 9, 8, 3), (3, 2, 3, 4)),
    (("NHWC", "OIHW", "NCHW"), (2, 9, 8, 3), (4, 3, 3, 2)),  # Output position-minor.
    (("NCHW", "HWIO", "NHWC"), (2, 3, 9, 8), (3, 2, 3, 4)),
    (("CHWN", "IOWH", "WCNH"), (3, 9, 8, 2), (3, 4, 2, 3)),  # Output neither: scattered.
  ],
)
def test_conv_layouts(dn, x_shape, w_shape):
  f = _conv(window_strides=(1, 1), padding="SAME", dimension_numbers=dn)
  assert_matches_cpu(f, _rand(x_shape), _rand(w_shape, seed=1), **_F32)


@pytest.mark.parametrize(
  "kw",
  [
    dict(window_strides=(2, 3), padding="VALID"),
    dict(window_strides=(2, 2), padding="SAME"),
    dict(window_strides=(1, 1), padding=((2, 1), (0, 3))),
    dict(window_strides=(1, 2), padding=((-1, 2), (1, -2))),  # Negative padding crops.
    dict(window_strides=(1, 1), padding="VALID", rhs_dilation=(2, 3)),
    dict(window_strides=(1, 1), padding=((1, 1), (2, 2)), lhs_dilation=(2, 3)),
    dict(window_strides=(3, 2), padding=((3, 0), (1, 2)), lhs_dilation=(2, 1), rhs_dilation=(1, 2)),
  ],
)
def test_conv_window(kw):
  f = _conv(dimension_numbers=NHWC, **kw)
  assert_matches_cpu(f, _rand((2, 11, 10, 3)), _rand((3, 3, 3, 5), seed=1), **_F32)


@pytest.mark.parametrize("dn", [NHWC, ("NCHW", "OIHW", "NCHW")])
@pytest.mark.parametrize(
  "groups, in_features, out_features",
  [
    (2, 4, 6),  # Grouped.
    (4, 4, 4),  # Depthwise.
    (3, 3, 6),  # Depthwise with channel multiplier 2.
  ],
)
def test_conv_feature_groups(dn, groups, in_features, out_features):
  f = _conv(window_strides=(1, 2), padding="SAME", dimension_numbers=dn, feature_group_count=groups)
  x = _rand((2, 7, 6, in_features))
  w = _rand((3, 3, in_features // groups, out_features), seed=1)
  if dn[0] == "NCHW":
    x, w = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)
  assert_matches_cpu(f, x, w, **_F32)


def test_conv_batch_groups():
  # batch_group_count splits the lhs batch; JAX emits it for filter gradients.
  f = _conv(window_strides=(1, 1), padding="VALID", dimension_numbers=NHWC, batch_group_count=3)
  assert_matches_cpu(f, _rand((6, 5, 5, 2)), _rand((2, 2, 2, 9), seed=1), **_F32)


def test_conv_1d_and_3d():
  f1 = _conv(
    window_strides=(2,),
    padding=((2, 1),),
    rhs_dilation=(2,),
    dimension_numbers=("NWC", "WIO", "NWC"),
  )
  assert_matches_cpu(f1, _rand((3, 17, 4)), _rand((3, 4, 5), seed=1), **_F32)
  f3 = _conv(
    window_strides=(1, 2, 1),
    padding="SAME",
    feature_group_count=2,
    dimension_numbers=("NCDHW", "OIDHW", "NCDHW"),
  )
  assert_matches_cpu(f3, _rand((2, 4, 5, 6, 4)), _rand((6, 2, 3, 3, 2), seed=1), **_F32)


@pytest.mark.parametrize(
  "strides, padding", [((2, 2), "SAME"), ((3, 2), "VALID"), ((2, 1), ((1, 2), (0, 1)))]
)
def test_conv_transpose(strides, padding):
  f = lambda x, w: lax.conv_transpose(x, w, strides, padding, dimension_numbers=NHWC)
  assert_matches_cpu(f, _rand((2, 5, 4, 3)), _rand((3, 3, 3, 4), seed=1), **_F32)


def test_conv_1x1():
  # Reads the lhs as the patch matrix (NHWC) or after making it feature-minor (NCHW).
  assert_matches_cpu(
    _conv(window_strides=(1, 1), padding="VALID", dimension_numbers=NHWC),
    _rand((2, 5, 6, 8)),
    _rand((1, 1, 8, 3), seed=1),
    **_F32,
  )
  assert_matches_cpu(
    _conv(window_strides=(1, 1), padding="VALID"),
    _rand((2, 8, 5, 6)),
    _rand((3, 8, 1, 1), seed=1),
    **_F32,
  )
  assert_matches_cpu(
    _conv(window_strides=(1, 1), padding="VALID", dimension_numbers=NHWC, feature_group_count=2),
    _rand((2, 5, 6, 8)),
    _rand((1, 1, 4, 6), seed=1),
    **_F32,
  )


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.float64])
def test_conv_dtypes(dtype):
  f = _conv(
    window_strides=(2, 1),
    padding="SAME",
    feature_group_count=2,
    dimension_numbers=("NCHW", "OIHW", "NCHW"),
  )
  x, w = _rand((2, 4, 6, 5), dtype), _rand((6, 2, 3, 3), dtype, seed=1)
  assert_matches_cpu(f, x, w, **(_F64 if dtype == np.float64 else {}))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_conv_large_window(dtype):
  # A patch matrix too large for one tile: the window is split and partial products
  # accumulate.
  f = _conv(window_strides=(1, 1), padding="VALID", dimension_numbers=NHWC)
  x, w = _rand((1, 40, 40, 16), dtype), _rand((9, 9, 16, 4), dtype, seed=1)
  assert_matches_cpu(f, x, w, **({} if dtype == np.int32 else dict(rtol=1e-5, atol=1e-3)))


def test_conv_depthwise_int():
  f = _conv(window_strides=(2, 1), padding="SAME", dimension_numbers=NHWC, feature_group_count=3)
  assert_matches_cpu(f, _rand((2, 5, 6, 3), np.int16), _rand((3, 2, 1, 6), np.int16, seed=1))


def test_conv_int32_wraps():
  # Overflow wraps (two's complement), as on XLA:CPU; no UB in the kernel.
  x = np.full((1, 1, 1, 2), 2**30, np.int32)
  w = np.full((1, 1, 2, 3), 3, np.int32)
  assert_matches_cpu(
    _conv(window_strides=(1, 1), padding="VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")), x, w
  )


def test_conv_empty():
  f = _conv(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)
  assert_matches_cpu(f, _rand((0, 4, 4, 2)), _rand((3, 3, 2, 3), seed=1))
  assert_matches_cpu(f, _rand((2, 4, 4, 0)), _rand((3, 3, 0, 3), seed=1))  # All zeros.


def test_conv_window_reversal():
  # JAX never sets window_reversal; set it in the lowered module and compare with the
  # filter flipped by hand on the CPU backend.
  f = _conv(window_strides=(1, 2), padding="SAME")
  x, w = _rand((2, 3, 6, 7)), _rand((4, 3, 3, 2), seed=1)
  args = jax.device_put((x, w), jax.devices("workshop")[0])
  lowered = jax.jit(f).lower(*args)
  module = lowered.compiler_ir("stablehlo")
  with module.context:
    [conv] = [op for op in _walk(module.operation) if op.name == "stablehlo.convolution"]
    conv.attributes["window_reversal"] = ir.DenseBoolArrayAttr.get([True, False])
  ours = lowered.compile()(*args)
  ref = jax.jit(f)(*jax.device_put((x, np.flip(w, 2).copy()), cpu_device()))
  np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), **_F32)


def _walk(op):
  yield op
  for region in op.regions:
    for block in region.blocks:
      for child in block.operations:
        yield from _walk(child.operation)


def test_conv_mixed_dtypes():
  # Operands converted to the result's type first (rules/reduce.py emit_converted).
  f = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "VALID", preferred_element_type=jnp.int32)
  x, w = _rand((1, 1, 3, 3), np.int8), _rand((1, 1, 2, 2), np.int8)
  assert_matches_cpu(f, x, w)


# Over 4 MFLOP and many row tiles: the tiles are split over the thread pool
# (convolution.cc), in every output layout, grouped, 1x1 (no im2col) and integer.
@pytest.mark.parametrize(
  "dn, x_shape, w_shape, groups, dtype",
  [
    (("NCHW", "OIHW", "NCHW"), (4, 8, 40, 36), (16, 8, 3, 3), 1, np.float32),
    (NHWC, (4, 40, 36, 8), (3, 3, 8, 16), 1, np.float32),
    (("NHWC", "OIHW", "NCHW"), (4, 40, 36, 8), (16, 8, 3, 3), 1, np.float32),
    (("NCHW", "HWIO", "NHWC"), (4, 8, 40, 36), (3, 3, 8, 16), 1, np.float32),
    (("CHWN", "IOWH", "WCNH"), (8, 40, 36, 4), (8, 16, 3, 3), 1, np.float32),
    (NHWC, (4, 40, 36, 16), (3, 3, 8, 32), 2, np.float32),
    (NHWC, (4, 40, 36, 32), (1, 1, 32, 64), 1, np.float32),
    (NHWC, (4, 40, 36, 8), (3, 3, 8, 16), 1, np.int32),
  ],
  ids=str,
)
def test_large_conv_split_over_threads(dn, x_shape, w_shape, groups, dtype):
  f = _conv(window_strides=(1, 1), padding="SAME", dimension_numbers=dn, feature_group_count=groups)
  tol = {} if dtype == np.int32 else {"rtol": 1e-5, "atol": 1e-4}
  assert_matches_cpu(f, _rand(x_shape, dtype), _rand(w_shape, dtype, seed=1), **tol)


# Windows lying inside the input copy whole runs of taps into the patch matrix (im2col's
# interior path), border windows tap by tap; depthwise convolutions split their output
# positions over the pool. Float64, so any misplaced or missing tap shows.
@pytest.mark.parametrize(
  "dn, x_shape, w_shape, kw",
  [
    (
      NHWC,
      (4, 33, 31, 6),
      (3, 3, 6, 16),
      dict(window_strides=(2, 1), rhs_dilation=(2, 1), padding=((2, 1), (0, 3))),
    ),
    (("NCHW", "OIHW", "NCHW"), (4, 8, 30, 30), (16, 4, 3, 3), dict(feature_group_count=2)),
    (NHWC, (8, 40, 40, 32), (3, 3, 1, 64), dict(feature_group_count=32)),
    (NHWC, (8, 41, 40, 32), (3, 3, 1, 32), dict(window_strides=(2, 2), feature_group_count=32)),
    (NHWC, (4, 20, 20, 8), (3, 3, 8, 8), dict(lhs_dilation=(2, 2), padding=((2, 2), (1, 2)))),
    (("NDHWC", "DHWIO", "NDHWC"), (2, 9, 10, 11, 4), (3, 2, 3, 4, 8), {}),
  ],
  ids=["strided-dilated", "nchw-groups", "depthwise", "depthwise-strided", "lhs-dilated", "3d"],
)
def test_conv_f64_paths(dn, x_shape, w_shape, kw):
  kw = {"window_strides": (1,) * (len(x_shape) - 2), "padding": "SAME", **kw}
  f = _conv(dimension_numbers=dn, **kw)
  with jax.enable_x64(True):  # Else the operands become f32.
    x, w = _rand(x_shape, np.float64), _rand(w_shape, np.float64, seed=1)
    assert assert_matches_cpu(f, x, w, **_F64).dtype == np.float64


# Convolution gradients.


@_requires("reverse")
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_grad_input(groups):
  f = _conv(
    window_strides=(2, 1), padding="SAME", dimension_numbers=NHWC, feature_group_count=groups
  )
  grad = jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), argnums=0)
  assert_matches_cpu(grad, _rand((2, 7, 6, 4)), _rand((3, 3, 4 // groups, 4), seed=1), **_F32)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("dn", [NHWC, ("NCHW", "OIHW", "NCHW")])
def test_conv_grad_filter(groups, dn):
  # Grouped: JAX expresses the filter gradient with batch_group_count.
  f = _conv(
    window_strides=(2, 1),
    padding="SAME",
    dimension_numbers=dn,
    feature_group_count=groups,
    rhs_dilation=(1, 2),
  )
  grad = jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), argnums=1)
  x, w = _rand((2, 7, 6, 4)), _rand((3, 3, 4 // groups, 4), seed=1)
  if dn[0] == "NCHW":
    x, w = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)
  assert_matches_cpu(grad, x, w, rtol=1e-5, atol=5e-4)


# A small CNN.


def _cnn(params, x):
  """conv-relu-maxpool-batchnorm (batch statistics), twice, then a dense head."""
  for w in params["convs"]:
    x = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC)
    x = jax.nn.relu(x)
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.mean((x - mean) ** 2, axis=(0, 1, 2))
    x = (x - mean) * lax.rsqrt(var + 1e-5)
  return jnp.mean(x, axis=(1, 2)) @ params["dense"]


def _cnn_params():
  return {
    "convs": [_rand((3, 3, 3, 8), seed=1) * 0.3, _rand((3, 3, 8, 8), seed=2) * 0.2],
    "dense": _rand((8, 4), seed=3),
  }


def test_cnn_forward():
  assert_matches_cpu(_cnn, _cnn_params(), _rand((4, 12, 12, 3)), rtol=1e-4, atol=1e-4)


@_requires("reverse")
def test_cnn_grad():
  loss = lambda p, x: jnp.sum(_cnn(p, x) ** 2)
  assert_matches_cpu(
    jax.grad(loss, argnums=(0, 1)), _cnn_params(), _rand((4, 12, 12, 3)), rtol=1e-3, atol=1e-3
  )


@pytest.mark.parametrize(
  "x_shape, w_shape",
  [
    ((1, 64, 64, 3), (3, 3, 3, 16)),
    ((1, 17, 17, 64), (3, 3, 64, 64)),
    ((1, 33, 33, 64), (3, 3, 64, 64)),
  ],
  ids=str,
)
def test_conv_bits_do_not_depend_on_whether_the_helpers_are_awake(x_shape, w_shape):
  # How many threads share a kernel depends on whether the pool's helpers still poll after
  # their last task (thread_pool.cc, PartsFor); a convolution's row tiles are its GEMMs'
  # rows, and OpenBLAS's bits depend on those (cut into row tiles of other heights, a GEMM
  # differs in the last bits), so the tiles come from the shape and thread count only
  # (BlocksFor). Called right after a split kernel (helpers polling) and after they have
  # parked, the result is the same to the bit; and close to the CPU backend's.
  x, w = _rand(x_shape), _rand(w_shape, seed=1)
  f = _conv(window_strides=(1, 1), padding="SAME", dimension_numbers=NHWC)
  results = results_with_helpers_awake_and_parked(f, x, w)
  for r in results:
    np.testing.assert_array_equal(r, results[0])
  np.testing.assert_allclose(results[0], run_on(cpu_device(), f, x, w), rtol=1e-4, atol=1e-3)
