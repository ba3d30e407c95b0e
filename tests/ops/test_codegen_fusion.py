"""Fused elementwise regions compiled to native code (compiler/codegen/fusions.py,
`jit_fusion` in kernels/fusion.cc).

Each region runs three ways: generated code, the interpreter's fusion
(WORKSHOP_CODEGEN=0) and JAX's CPU backend. The generated code must have the
interpreter's bits exactly: reductions fold in the reduce kernel's order, and exp, tanh
and logistic are the interpreter's algorithms with its roundings (one per multiply-add
where the interpreter runs its FMA clones, two elsewhere); they are also checked against
float64 numpy within the kernels' documented ulp bounds. Every case asserts that the
region was compiled (a silent fallback to the interpreter fails).
"""

import hashlib
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from codegen_helpers import ops, plan_of, run_with, serialized_round_trip, workshop
from codegen_helpers import private_cache  # noqa: F401  (an autouse fixture: importing it applies it)
from jax_plugins.workshop.compiler import codegen
from jax_plugins.workshop.compiler.codegen import fusions
from f32_ulps import floats_around, ulp_error
from reference import cpu_device, default_tol, run_on
from op_samples import x64_each  # noqa: F401  (a fixture: float64 stays float64)

rng = np.random.default_rng(16)


@pytest.fixture(autouse=True)
def every_large_region(monkeypatch):
  """Regions from MIN_ELEMENTS on are compiled whatever their work (MIN_WORK is a compile
  time trade-off, tested below), so the cases stay small."""
  monkeypatch.setattr(fusions, "MIN_WORK", 0)
  codegen._emitted.clear()  # pylint: disable=protected-access
  yield
  codegen._emitted.clear()  # pylint: disable=protected-access


def normal(*shape, dtype=np.float32):
  return rng.standard_normal(shape).astype(dtype)


def layer_norm(x, gamma, beta):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  d = x - mean
  var = jnp.mean(d * d, axis=-1, keepdims=True)
  return d * lax.rsqrt(var + 1e-5) * gamma + beta


def reductions(x):  # max, min, product and sum of rows, NaNs included; per-row results
  return (
    jnp.max(x, -1),
    jnp.min(x, -1),
    jnp.prod(x * 0.01 + 1.0, -1),
    x - jnp.sum(x, -1, keepdims=True) * 0.5,
  )


def int_chain(a, b):  # integer divide (by 0, MIN / -1), min/max, bit ops, compare, select
  q = lax.div(a, jnp.where(b == 0, 0, b))
  m = jnp.maximum(jnp.minimum(q, 1000), -1000) ^ (a & 7)
  return jnp.where(a > b, m, ~m) + jnp.clip(b, -5, 5), (a > 0) & (b < 3)


def float_chain(x, y):  # NaN-propagating max/min, clamp, sqrt, abs, converts
  z = jnp.clip(jnp.maximum(x, y) * 1.5, -3.0, 2.5) - jnp.sqrt(jnp.abs(x))
  return z, jnp.minimum(x, y).astype(jnp.int32), (x > y).astype(jnp.float32) * 3 + y


def columns(x, g, b, r):  # a column (g, b) and a per-row operand (r) broadcast
  return x * g + b - r[:, None]


def masked_softmax(x, keep):  # a [S, S] mask under [B, H, S, S]: a tile of S rows
  return jax.nn.softmax(jnp.where(keep[None, None], x, -jnp.inf), axis=-1)


def nan_floats(*shape):
  x = normal(*shape)
  x.reshape(-1)[::97] = np.nan
  x.reshape(-1)[5::101] = -np.inf
  return x


def with_subnormals(x):
  """`x` (f32) with subnormals of both signs, the largest one and signed zeros in it."""
  flat = x.reshape(-1)
  flat[3::89] = np.array([1e-40, -1e-45, 1.1754942e-38, -0.0, 0.0], np.float32)[
    np.arange(flat.size)[3::89] % 5
  ]
  return x


def halves(dtype, *shape):
  """Random values of a 16-bit float dtype, with NaNs (payloads too), infinities, zeros of
  both signs, subnormals and the largest finite values."""
  x = (normal(*shape) * 30).astype(dtype)
  bits = x.reshape(-1).view(np.uint16)
  top = 0x7C00 if dtype == jnp.float16 else 0x7F80  # the exponent field
  bits[::89] = top | 0x0123  # NaN, payload without the quiet bit
  bits[1::97] = 0xFC00 if dtype == jnp.float16 else 0xFF80  # -inf
  bits[2::101] = 0x8000
  bits[3::103] = 0x0005  # subnormal
  bits[4::107] = top - 1  # largest finite
  return x


def f32_edges(n):
  """f32 values where f16/bf16 rounding switches: ties, overflow to inf, the subnormal
  range, NaNs with payloads, around n elements in all."""
  edges = np.concatenate(
    [
      floats_around(v, 64)
      for v in (
        65504.0,
        65520.0,
        2.0**-14,
        2.0**-24,
        3.0 * 2.0**-25,
        1.0 + 2.0**-11,
        3.3895314e38,
        1.0 + 2.0**-8,
        1e-40,
      )
    ]
  )
  nans = np.array([0x7FC00001, 0x7F800001, 0xFFBFFFFF, 0x7FFFE000], np.uint32).view(np.float32)
  x = normal(n) * 1e3
  x[: edges.size] = edges
  x[edges.size : edges.size + 4] = nans
  return np.concatenate([x, -x])


def ints(*shape):
  x = rng.integers(-50, 50, shape).astype(np.int32)
  x.reshape(-1)[::31] = 0
  x.reshape(-1)[3::37] = -(2**31)
  x.reshape(-1)[4::37] = -1
  return x


# (name, function, argument maker)
CASES = [
  ("layer_norm", layer_norm, lambda: (normal(64, 1024), normal(1024), normal(1024))),
  (
    "layer_norm_odd_rows",
    layer_norm,
    lambda: (normal(700, 100), normal(100), normal(100)),
  ),
  ("reductions_1000", reductions, lambda: (nan_floats(66, 1000),)),
  ("reductions_37", reductions, lambda: (nan_floats(1800, 37),)),
  ("reductions_20", reductions, lambda: (nan_floats(3300, 20),)),
  ("reductions_5", reductions, lambda: (nan_floats(13200, 5),)),
  ("int_chain", int_chain, lambda: (ints(70001), ints(70001))),
  # Shifts by counts past the width and negative (read unsigned: 0, or the sign), in the
  # four widths and both signednesses; a threefry hash (jax.random.bits) is such a chain.
  (
    "shifts",
    lambda x, c: tuple(
      (
        lax.shift_left(x.astype(t), c.astype(t)),
        lax.shift_right_logical(x.astype(t), c.astype(t)),
        lax.shift_right_arithmetic(x.astype(t), c.astype(t)) ^ x.astype(t),
      )
      for t in (jnp.int32, jnp.uint32, jnp.int8, jnp.uint16)
    ),
    lambda: (ints(70001), rng.integers(-3, 40, 70001).astype(np.int32)),
  ),
  (
    "threefry",
    lambda k: jax.random.bits(jax.random.wrap_key_data(k), (70001,)),
    lambda: (np.array([7, 42], np.uint32),),
  ),
  ("float_chain", float_chain, lambda: (nan_floats(513, 129), normal(513, 129))),
  ("columns", columns, lambda: (normal(260, 256), normal(256), normal(256), normal(260))),
  ("softmax", lambda x: jax.nn.softmax(x, axis=-1), lambda: (normal(128, 1024) * 4,)),
  (
    "masked_softmax",
    masked_softmax,
    lambda: (normal(2, 4, 96, 96) * 3, np.tril(np.ones((96, 96), bool))),
  ),
  (
    "tanh_exp_chain",
    lambda x: jnp.tanh(jnp.exp(-x * x) * 2 - 1) * 0.5 + jax.nn.sigmoid(x),
    lambda: (normal(100003),),
  ),
  ("gelu", jax.nn.gelu, lambda: (normal(66, 1000) * 3,)),
  # f16/bf16 (kernels/math/half.h): computed in f32 between the body's converts.
  (
    "f16_chain",
    lambda x: jnp.tanh(x * 2 + 1) - jnp.log(jnp.abs(x)) * x,
    lambda: (halves(jnp.float16, 256, 512),),
  ),
  (
    "bf16_softmax",
    lambda x: jax.nn.softmax(x, axis=-1),
    lambda: (halves(jnp.bfloat16, 128, 1000),),
  ),
  (
    "half_converts",
    lambda x, i: (
      x.astype(jnp.float16),
      x.astype(jnp.bfloat16),
      x.astype(jnp.float16).astype(jnp.bfloat16),
      x.astype(jnp.bfloat16).astype(jnp.float16) != 0,
      i.astype(jnp.float16),
      x.astype(jnp.float16).astype(jnp.int32),
      jnp.where(x > 0, x.astype(jnp.bfloat16), jnp.bfloat16(7)),
    ),
    lambda: (f32_edges(1 << 16), ints(1 << 17) * 1001),
  ),
  # (Not bf16 != 0: a subnormal bf16 is an f32 subnormal, equal to 0 under DAZ in both
  # tiers, while XLA:CPU says true; docs/codegen.md "Code generation".)
  (
    "halves_widened",
    lambda h, b: (h != 0, h.astype(jnp.float32), b.astype(jnp.float32)),
    lambda: (halves(jnp.float16, 1 << 16), halves(jnp.bfloat16, 1 << 16)),
  ),
  # Vector transcendentals (fusions.LIBMVEC: libmvec's and the plugin's), flat and per row
  # (log-softmax).
  (
    "log_chain",
    lambda x: jnp.log(jnp.abs(x)) * 2 + jnp.log1p(jnp.abs(x)) - jnp.expm1(-jnp.abs(x)) + jnp.cos(x),
    lambda: (nan_floats(70001),),
  ),
  # Sine passes subnormals through (fusions.KEEPS_SUBNORMALS), as the interpreter's kernel.
  (
    "sine",
    lambda x: (jnp.sin(x), jnp.sin(x * 3) + x),
    lambda: (with_subnormals(nan_floats(70001)),),
  ),
  ("log_softmax", lambda x: jax.nn.log_softmax(x, axis=-1), lambda: (normal(300, 333) * 4,)),
  # Slices read in place, a run of the operand per row: SwiGLU's halves of one matmul, the
  # even and odd rows of associative_scan (strided on the leading dim), a softmax of the
  # second half of each row (a row fusion over a slice), a slice of a 1-D operand.
  (
    "swiglu_halves",
    lambda h: jax.nn.silu(h[:, :515]) * h[:, 515:],
    lambda: (normal(130, 1030),),
  ),
  ("even_odd_rows", lambda a, b: a[::2] * b[1::2] + a[1::2], lambda: (normal(602, 257),) * 2),
  ("offset_slices", lambda a, b: a[2:, 3:] - b[:-2, :-3], lambda: (normal(302, 257),) * 2),
  ("softmax_of_a_slice", lambda x: jax.nn.softmax(x[:, 700:] * 2, -1), lambda: (normal(90, 1700),)),
  ("vector_slice", lambda x: jnp.tanh(x[5:70005]) + x[:70000], lambda: (normal(70007),)),
  # Scalar constants taken in as literals (codegen._known_operands): divides, remainders
  # and shifts by constants, a floor divide converting its divisor, float constants.
  (
    "constant_operands_int",
    lambda a: (a // 3, a % 7, a >> 5, jnp.floor_divide(a, 2), (a * -9) ^ 0x5BD1E995),
    lambda: (ints(300, 300),),
  ),
  (
    "constant_operands_uint",
    lambda a: (a // 10, a % 4096, (a << 13) | (a >> 19), a * np.uint32(2654435761)),
    lambda: (rng.integers(0, 2**32, (300, 300), dtype=np.uint32),),
  ),
  (
    "constant_operands_float",
    lambda x: (x * 0.1 + 3.0, jnp.maximum(x, -0.0) / 7.0, jnp.where(x > 0.5, x, 1e-30)),
    lambda: (with_subnormals(normal(300, 300)),),
  ),
  # Broadcasts whose rows are runs of their operand at a per-row start (a row of x per
  # center in a pairwise distance): reduced, written whole, f64, integers, a middle axis.
  (
    "pairwise_distances",
    lambda x, c: ((x[:, None] - c[None]) ** 2).sum(-1),
    lambda: (normal(1024, 16), normal(64, 16)),
  ),
  (
    "pairwise_differences",
    lambda x, c: jnp.abs(x[:, None] - c[None]) * 0.5,
    lambda: (normal(512, 24), normal(40, 24)),
  ),
  (
    "pairwise_distances_f64_tail",
    lambda x, c: jnp.sqrt(((x[:, None] - c[None]) ** 2).sum(-1)),
    lambda: (normal(700, 13, dtype=np.float64), normal(96, 13, dtype=np.float64)),
  ),
  (
    "pairwise_ints",
    lambda x, c: jnp.max(x[:, None] * c[None], -1),
    lambda: (ints(600, 40), ints(50, 40)),
  ),
  (
    "run_over_a_middle_axis",
    lambda x, m: jax.nn.logsumexp(-((x[:, :, None] - m[:, None]) ** 2), -1),
    lambda: (normal(8, 300, 32), normal(8, 20, 32)),
  ),
]


_SLICE_CASES = {
  "swiglu_halves",
  "even_odd_rows",
  "offset_slices",
  "softmax_of_a_slice",
  "vector_slice",
}


@pytest.mark.parametrize("name,f,make", CASES, ids=[c[0] for c in CASES])
def test_fusion_is_generated_and_matches(monkeypatch, name, f, make):
  args = make()
  kinds = ops(f, *args)
  assert "jit_fusion" in kinds and "fusion" not in kinds, (name, kinds)  # all compiled
  if name in _SLICE_CASES:
    assert "slice" not in kinds, (name, kinds)  # read in place, not written out first
  assert "jit_fusion" not in ops(f, *args, env="0")
  generated = run_with(monkeypatch, "1", f, *args)
  interpreted = run_with(monkeypatch, "0", f, *args)
  for g, i in zip(jax.tree.leaves(generated), jax.tree.leaves(interpreted), strict=True):
    np.testing.assert_array_equal(g.view(np.uint8), i.view(np.uint8))
  reference = run_on(cpu_device(), f, *args)
  for g, r in zip(jax.tree.leaves(generated), jax.tree.leaves(reference), strict=True):
    if g.dtype.kind == "f" or g.dtype in (jnp.bfloat16,):
      # XLA:CPU's max/min drop NaNs (docs/compiler.md, deliberate differences); 16-bit
      # floats within their own few ulps (a last-bit f32 difference flips a rounding).
      tol = max(2e-5, default_tol(g.dtype))
      g, r = g.astype(np.float32), r.astype(np.float32)
      ok = ~np.isnan(g) & ~np.isnan(r)
      np.testing.assert_allclose(g[ok], r[ok], rtol=tol, atol=tol)
    else:
      np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize(
  "fn,reference,bound",
  [
    (jnp.exp, np.exp, 1.1),
    (jnp.tanh, np.tanh, 2.0),
    (jax.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), 2.5),
  ],
  ids=["exp", "tanh", "logistic"],
)
def test_inline_transcendentals_within_ulp_bounds(fn, reference, bound):
  # Every 9973rd float32 in [-100, 100], everything around the points where the
  # algorithms switch (tanh: 2^-12, 1, saturation; exp: its under/overflow thresholds),
  # special values and subnormals, in one array big enough to be compiled.
  top = int(np.array(100.0, np.float32).view(np.int32))
  x = np.arange(0, top, 9973, dtype=np.int32).view(np.float32)
  x = np.concatenate(
    [
      x,
      floats_around(2.0**-12, 2048),
      floats_around(1.0, 2048),
      floats_around(9.01091385, 2048),
      floats_around(-87.3365402, 2048),
      floats_around(88.7228317, 2048),
      floats_around(1e-40, 64),
      np.array([0, np.inf, np.nan, 3e38], np.float32),
    ]
  )
  x = np.concatenate([x, -x])
  assert "jit_fusion" in ops(fn, x)  # alone, but big: a fusion of one, compiled
  y = run_on(workshop(), fn, x)
  finite = ~np.isnan(x)
  # Results below the smallest normal float32 are +0 (the kernels' FTZ rule), not in ulps.
  tiny = np.finfo(np.float32).tiny
  with np.errstate(over="ignore"):  # exp past FLT_MAX: inf, as the kernel's result
    ref = reference(x[finite].astype(np.float64))
    rounded = ref.astype(np.float32)
    err = np.where(np.abs(ref) < tiny, 0.0, ulp_error(y[finite], ref))
  assert (y[finite][rounded < tiny] == 0).all() or fn is jnp.tanh
  worst = int(err.argmax())
  assert err[worst] <= bound, f"{x[finite][worst]!r}: {err[worst]:.2f} ulp"
  assert np.isnan(y[~finite]).all()
  if fn is jnp.tanh:  # +-0 and subnormals pass through, as the interpreter's kernel
    tiny = np.abs(x) < np.finfo(np.float32).tiny
    np.testing.assert_array_equal(y[tiny].view(np.uint32), x[tiny].view(np.uint32))


@pytest.mark.parametrize("fma", [True, False], ids=["avx2", "sse"])
def test_log_calls_the_plugins_log_within_half_an_ulp(fma):
  # f32 log through the plugin's own AVX2 entry point (the interpreter's where the host has
  # AVX2 and FMA) and its SSE one (the interpreter's elsewhere), the generated function
  # called directly: within half an ulp (and 2^-10) of float64 log on every 9973rd positive
  # float32 and around 1; the entry point this host's interpreter uses gives its bits.
  import ctypes

  if fma and not codegen.host_has_fma():
    pytest.skip("no AVX2 and FMA on this CPU")
  top = int(np.array(np.inf, np.float32).view(np.int32))
  x = np.arange(1 << 23, top, 9973, dtype=np.int32).view(np.float32)
  x = np.concatenate(
    [
      x,
      floats_around(1.0, 4096),
      floats_around(2.0, 64),
      np.array([np.inf, 0, -1, np.nan], np.float32),
    ]
  )
  (fusion,) = [i for i in plan_of(jnp.log, x, env="0").instrs if i.op == "fusion"]
  code, _ = fusions.emit_fusion(fusion, "f", fma=fma)
  assert "_ZGV" + ("dN8" if fma else "bN4") + "v_workshop_logf" in code
  symbol = "workshop_fusion_" + hashlib.sha256(code.encode()).hexdigest()[:16]
  code = codegen.with_tag(code.replace("@f(", f"@{symbol}(", 1), symbol)
  call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
    codegen.load("llvm", code, symbol)
  )
  y = np.empty_like(x)
  call((ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data), 0, x.size)
  normal_ = np.isfinite(x) & (x > 0)
  err = ulp_error(y[normal_], np.log(x[normal_].astype(np.float64)))
  worst = int(err.argmax())
  assert err[worst] <= 0.5 + 2.0**-10, f"{x[normal_][worst]!r}: {err[worst]:.4f} ulp"
  assert y[-4] == np.inf and y[-3] == -np.inf and np.isnan(y[-2:]).all()
  if fma == codegen.host_has_fma():
    interpreted = run_on(workshop(), jnp.log, x)
    np.testing.assert_array_equal(y.view(np.uint32), interpreted.view(np.uint32))


def test_f64_libmvec_transcendentals_match_the_interpreter(monkeypatch):
  # f64 log, log1p, expm1, exp, cos and sin call libmvec as the interpreter does: the same
  # bits (sin of a subnormal is itself).
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  try:
    x = nan_floats(300, 333).astype(np.float64) * 20
    x.reshape(-1)[7::89] = -1000.0  # f64 exp's lanes answered as +0 (vector_math.cc)
    x.reshape(-1)[11::97] = np.array([5e-324, -1e-310, 2.2e-308, -0.0])[
      np.arange(x.size)[11::97] % 4
    ]
    f = lambda v: (
      jnp.log(jnp.abs(v)) + jnp.log1p(jnp.abs(v)) * jnp.expm1(v * 0.01),  # noqa: E731
      jnp.exp(v) - jnp.cos(v),
      jnp.sin(v),
      jax.nn.log_softmax(v, axis=-1),
    )
    kinds = ops(f, x)
    assert "jit_fusion" in kinds and "fusion" not in kinds, kinds
    generated = run_with(monkeypatch, "1", f, x)
    interpreted = run_with(monkeypatch, "0", f, x)
    for g, i in zip(generated, interpreted, strict=True):
      np.testing.assert_array_equal(g.view(np.uint64), i.view(np.uint64))
    reference = run_on(cpu_device(), f, x)
    for g, r in zip(generated, reference, strict=True):
      ok = np.isfinite(g) & np.isfinite(r)
      np.testing.assert_allclose(g[ok], r[ok], rtol=1e-12, atol=1e-12)
  finally:
    jax.config.update("jax_enable_x64", previous)
    jax.clear_caches()


def test_regions_outside_the_tier_stay_interpreted(monkeypatch):
  x = normal(256, 1024)
  assert "fusion" in ops(lambda v: jnp.tan(v) * 2 + 1, x)  # tan is not inlined
  small = normal(64, 1000)
  assert "fusion" in ops(lambda v: jnp.exp(v) * 2 + 1, small)  # below MIN_ELEMENTS
  assert 64 * 1000 < fusions.MIN_ELEMENTS
  assert "fusion" in ops(lambda v: jnp.exp(v) * 2 + 1, x, env="gcc")  # llvm only
  # Large but cheap: 2^18 elements of two operations is under MIN_WORK; 2^21 is not.
  monkeypatch.setattr(fusions, "MIN_WORK", 1 << 21)
  codegen._emitted.clear()  # pylint: disable=protected-access
  assert "fusion" in ops(lambda v: v * 2 + 1, normal(1 << 18))
  assert "jit_fusion" in ops(lambda v: v * 2 + 1, normal(1 << 21))
  # The same 2^18 elements in bf16: its converts (each a pass of its own when interpreted)
  # count four operations, so it is compiled; the bits are the interpreter's.
  x = normal(1 << 18).astype(jnp.bfloat16)
  assert "jit_fusion" in ops(lambda v: v * 2 + 1, x)
  got = jax.jit(lambda v: v * 2 + 1)(x)
  want = (x.astype(np.float32) * 2 + 1).astype(jnp.bfloat16)  # exact products, one rounding
  np.testing.assert_array_equal(np.asarray(got).view(np.uint16), want.view(np.uint16))


def test_slices_count_as_passes_in_min_work(monkeypatch):
  # The interpreter writes each block of a slice through a strided copy (generated code
  # reads it in place), so a slice weighs four operations: associative_scan's even/odd
  # halves of 1024x256 are compiled, the same products of unsliced operands are not.
  monkeypatch.setattr(fusions, "MIN_WORK", 1 << 21)
  codegen._emitted.clear()  # pylint: disable=protected-access
  x = normal(2048, 256)
  f = lambda v: v[::2] * v[1::2] + v[1::2]  # noqa: E731
  kinds = ops(f, x)
  assert "jit_fusion" in kinds and "fusion" not in kinds, kinds
  assert "fusion" in ops(lambda v: v * v + v, normal(1024, 256))
  generated = run_with(monkeypatch, "1", f, x)
  np.testing.assert_array_equal(generated, run_with(monkeypatch, "0", f, x))


def test_long_bodies_are_compiled_below_min_elements(monkeypatch):
  # jax.random's threefry hash (~125 steps an element) over 2000 elements, far under
  # MIN_ELEMENTS and MIN_WORK: compiled at the top level all the same (fusions.LONG_BODY:
  # the interpreter's cost is per step); a short chain of that size stays interpreted.
  monkeypatch.setattr(fusions, "MIN_WORK", 1 << 21)
  codegen._emitted.clear()  # pylint: disable=protected-access
  key = np.asarray(jax.random.key_data(jax.random.key(3)))
  f = lambda k: jax.random.bits(jax.random.wrap_key_data(k), (40, 50))  # noqa: E731
  kinds = ops(f, key)
  assert "jit_fusion" in kinds and "fusion" not in kinds, kinds
  assert "fusion" in ops(lambda v: v * 2 + 1, normal(40, 50))
  generated = run_with(monkeypatch, "1", f, key)
  interpreted = run_with(monkeypatch, "0", f, key)
  np.testing.assert_array_equal(generated, interpreted)
  np.testing.assert_array_equal(generated, run_on(cpu_device(), f, key))


def test_repeated_small_flat_fusions_share_one_function(monkeypatch):
  # An optimizer step over a pytree: the same chain on leaves of 1000-40000 elements,
  # each under MIN_ELEMENTS, together over it: one function, every leaf its own items; a
  # lone small fusion stays interpreted. Bits are the interpreter's.
  sizes = [1000, 3000, 9000, 20000, 40000]
  leaves = [normal(n) for n in sizes] + [normal(7, 13)]
  step = lambda p: p - 0.01 * p / (jnp.sqrt(p * p) + 1e-8)  # noqa: E731
  f = lambda ps: [step(p) for p in ps[:-1]] + [jnp.exp(ps[-1]) * 3 - 1]  # noqa: E731
  # (The compiled leaves then run as one horizontal_fusion: tests/ops/test_fusion_horizontal.py.)
  instrs = plan_of(f, leaves).instrs
  members = [m for i in instrs if i.op == "horizontal_fusion" for m in i.attrs["body"].instrs]
  fused = [i for i in instrs + members if i.op in ("fusion", "jit_fusion")]
  jitted = [i for i in fused if i.op == "jit_fusion"]
  assert [i.attrs["items"] for i in jitted] == sizes
  assert len({i.attrs["symbol"] for i in jitted}) == 1 and len(fused) == len(sizes) + 1
  generated = run_with(monkeypatch, "1", f, leaves)
  for got, want in zip(generated, run_with(monkeypatch, "0", f, leaves)):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(generated, run_on(cpu_device(), f, leaves)):
    np.testing.assert_allclose(got, want, rtol=default_tol(np.float32))


def test_a_leaf_over_min_elements_shares_the_function_of_its_siblings(monkeypatch):
  # At the default MIN_WORK a leaf of 70000 elements is too little work to compile alone;
  # with siblings of the same chain it shares their function instead of staying
  # interpreted beside them.
  monkeypatch.setattr(fusions, "MIN_WORK", 1 << 21)
  sizes = [70000] + [60000] * 7
  leaves = [normal(n) for n in sizes[:1]] + [normal(n + k) for k, n in enumerate(sizes[1:])]
  step = lambda p: p - 0.01 * p / (jnp.sqrt(p * p) + 1e-8)  # noqa: E731
  f = lambda ps: [step(p) for p in ps]  # noqa: E731
  instrs = plan_of(f, leaves).instrs
  members = [m for i in instrs if i.op == "horizontal_fusion" for m in i.attrs["body"].instrs]
  fused = [i for i in instrs + members if i.op in ("fusion", "jit_fusion")]
  assert {i.op for i in fused} == {"jit_fusion"} and len({i.attrs["symbol"] for i in fused}) == 1
  for got, want in zip(
    run_with(monkeypatch, "1", f, leaves), run_with(monkeypatch, "0", f, leaves)
  ):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_in_a_generated_region(monkeypatch, dtype):
  # Lion's update direction: NaN stays NaN, zeros and subnormals (DAZ) keep their sign.
  x = normal(1 << 16, dtype=dtype)
  x[:6] = [np.nan, 0.0, -0.0, np.inf, -np.inf, -1e-40 if dtype == np.float32 else -1e-310]
  f = lambda v: jnp.sign(v * 0.9 + 0.1 * v) * 2.0  # noqa: E731
  assert "jit_fusion" in ops(f, x)
  generated = run_with(monkeypatch, "1", f, x)
  np.testing.assert_array_equal(generated, run_with(monkeypatch, "0", f, x))
  np.testing.assert_array_equal(generated[6:], np.sign(x[6:] * 0.9 + 0.1 * x[6:]) * 2.0)


def test_large_region_splits_over_the_pool(monkeypatch):
  # 2^22 elements: many chunks of the pool's grain, each thread calling the function on
  # its own range; the result must not depend on the split.
  x = normal(1 << 22)
  f = lambda v: jnp.maximum(v * 3.0 - 1.0, v * v) / (jnp.abs(v) + 1.0)  # noqa: E731
  (fused,) = [i for i in plan_of(f, x).instrs if i.op == "jit_fusion"]
  assert fused.attrs["items"] == 1 << 22 and fused.attrs["row_length"] == 0
  generated = run_with(monkeypatch, "1", f, x)
  np.testing.assert_array_equal(generated, run_with(monkeypatch, "0", f, x))


def test_serialized_executable_with_generated_fusion_round_trips(monkeypatch):
  x = normal(64, 1024)
  f = lambda v: layer_norm(v, 1.5, 0.25)  # noqa: E731
  generated = run_with(monkeypatch, "1", f, x)
  loaded, without_jit = serialized_round_trip(monkeypatch, f, x, b"jit_fusion")
  np.testing.assert_array_equal(loaded, generated)
  np.testing.assert_array_equal(without_jit, generated)  # interpreted: the same bits


def test_fusion_object_code_is_cached_on_disk(private_cache, monkeypatch):  # noqa: F811 (the fixture)
  f = lambda v: jnp.minimum(v * 0.125 + 7.0, v * v)  # noqa: E731  (a body no other test has)
  x = normal(1 << 17)
  monkeypatch.setattr(codegen, "_loaded", {})
  before = set(os.listdir(private_cache))
  assert "jit_fusion" in ops(f, x)
  written = set(os.listdir(private_cache)) - before
  assert len(written) == 1 and next(iter(written)).endswith(".o")
  monkeypatch.setattr(codegen, "_loaded", {})  # a fresh process reads the object back
  assert "jit_fusion" in ops(f, x)
  assert set(os.listdir(private_cache)) - before == written


@pytest.mark.parametrize("fma", [True, False], ids=["fma", "no_fma"])
@pytest.mark.parametrize("name", ["exp", "tanh"])
def test_inline_transcendentals_round_as_the_fit_replays(name, fma):
  # Both roundings, whatever this CPU has: the generated function (called directly) against
  # tools/fit_exp.py's and fit_tanh.py's float32 replays of the interpreter's kernels, with
  # and without FMA, which the fits bounded (exp 1.035 / 1.009 ulp, tanh 1.72 / 1.91) and
  # checked bit for bit against the kernels' two clones.
  import ctypes
  import sys
  from pathlib import Path

  sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
  import fit_exp  # pylint: disable=import-outside-toplevel
  import fit_tanh  # pylint: disable=import-outside-toplevel

  x = np.concatenate(
    [
      np.linspace(-90, 90, 1 << 16, dtype=np.float32),
      floats_around(1.0, 512),
      floats_around(0.5, 512),
      floats_around(9.01091385, 512),
      floats_around(2.0**-12, 512),
    ]
  )
  fn = {"exp": jnp.exp, "tanh": jnp.tanh}[name]
  (fusion,) = [i for i in plan_of(fn, x, env="0").instrs if i.op == "fusion"]
  code, _ = fusions.emit_fusion(fusion, "f", fma=fma)
  symbol = "workshop_fusion_" + hashlib.sha256(code.encode()).hexdigest()[:16]
  code = codegen.with_tag(code.replace("@f(", f"@{symbol}(", 1), symbol)
  call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
    codegen.load("llvm", code, symbol)
  )
  y = np.empty_like(x)
  call((ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data), 0, x.size)
  if name == "exp":
    e = fusions.EXP
    replay = fit_exp.exp32(x, np.array([e["c2"], e["c3"], e["c4"], e["c5"], e["c6"]]), fma)
  else:
    t = fusions.TANH
    replay = fit_tanh.tanh32(
      x, np.array([t["d0"], t["d1"], t["d2"]]), np.array([1.0, t["q1"], t["q2"]]), fused=fma
    )
  np.testing.assert_array_equal(y.view(np.uint32), replay.view(np.uint32))


def test_a_region_of_broadcasts_alone_is_generated(monkeypatch):
  # Two scalars broadcast to two results (jnp.searchsorted's initial bounds): no element
  # operation, so the region's work per item was 0, which the kernel refuses ("items do
  # not match its body"); it is compiled and gives numpy's values.
  def f(a, b):
    return jnp.broadcast_to(a, (70000,)), jnp.broadcast_to(b, (70000,))

  args = (np.int32(3), np.int32(-7))
  assert "jit_fusion" in ops(f, *args, env="force")
  lo, hi = run_with(monkeypatch, "force", f, *args)
  np.testing.assert_array_equal(lo, np.full(70000, 3, np.int32))
  np.testing.assert_array_equal(hi, np.full(70000, -7, np.int32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("method", ["compare_all", "scan"])
def test_total_order_compares_are_generated(monkeypatch, dtype, method):
  # jnp.searchsorted compares with TOTALORDER (NaN above +inf, -0 below +0): generated
  # as the interpreter's integer keys (elementwise.cc TotalOrderKey), so both give the
  # CPU backend's indices, signed zeros, NaNs, infinities and subnormals included.
  specials = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0], dtype
  )
  values = np.concatenate([specials, rng.standard_normal(54).astype(dtype)])
  keys = np.sort(values)  # NaN last, as JAX sorts
  keys = np.asarray(jax.jit(jnp.sort)(jax.device_put(keys, cpu_device())))
  queries = np.concatenate([specials, rng.standard_normal(118).astype(dtype)])

  def f(a, v):
    return jnp.searchsorted(a, v, side="left", method=method), jnp.searchsorted(
      a, v, side="right", method=method
    )

  expected = run_on(cpu_device(), f, keys, queries)
  for setting in ("0", "force"):
    got = run_with(monkeypatch, setting, f, keys, queries)
    for g, e in zip(got, expected):
      np.testing.assert_array_equal(g, e)
  assert "jit_fusion" in ops(f, keys, queries, env="force") or method == "scan"


def test_scalar_constants_are_literals_in_the_code():
  f = lambda a: (a // 3) + (a % 7)  # noqa: E731
  a = ints(300, 300)
  plan = plan_of(f, a)
  fusion = next(i for i in plan.instrs if i.op == "jit_fusion")
  # The divisors are constants of the plan: the code has their values as constant
  # vectors (LLVM then turns the division into a multiply and shifts), not loaded at run
  # time; remainder's divisor too, though jnp guards it with a select (folded).
  code = fusion.attrs["code"]
  assert "<8 x i32> <" + ", ".join(["i32 3"] * 8) + ">" in code
  assert "<8 x i32> <" + ", ".join(["i32 7"] * 8) + ">" in code


def test_a_remainders_guarded_divisor_is_a_literal(monkeypatch):
  # jnp.remainder guards its divisor on scalars, select(d == 0, 1, d), and fixes the sign
  # with compares of it: the compiler folds those compares and selects of constants
  # (codegen._constant_scalars), so the code divides by the literal 11 (a multiply).
  f = lambda a: ((a * 7 + 3) % 11) >> 1  # noqa: E731
  a = ints(300, 300)
  fusion = next(i for i in plan_of(f, a).instrs if i.op == "jit_fusion")
  assert "<8 x i32> <" + ", ".join(["i32 11"] * 8) + ">" in fusion.attrs["code"]
  generated = run_with(monkeypatch, "1", f, a)
  np.testing.assert_array_equal(generated, run_with(monkeypatch, "0", f, a))
  wrapped = (a.astype(np.int64) * 7 + 3).astype(np.int32)  # int32 arithmetic wraps
  np.testing.assert_array_equal(generated, (wrapped % 11) >> 1)


ROUNDINGS = {
  "round_nearest_even": (jnp.round, np.round),
  "floor": (jnp.floor, np.floor),
  "ceil": (jnp.ceil, np.ceil),
  "round_nearest_afz": (
    lambda v: lax.round(v, lax.RoundingMethod.AWAY_FROM_ZERO),
    # In float64, where |v| + 0.5 is exact for every float32 (0.49999997 + 0.5 is not).
    lambda v: np.copysign(np.floor(np.abs(v.astype(np.float64)) + 0.5), v).astype(v.dtype),
  ),
}


@pytest.mark.parametrize("op", list(ROUNDINGS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.usefixtures("x64_each")
def test_rounding_in_a_generated_region(monkeypatch, op, dtype):
  # LLVM's floor, ceil, round and roundeven on whole vectors (fusions.ROUNDING): the
  # interpreter's bits (libm per element), halves to even or away from zero, -0.0 kept,
  # NaN and infinities through; subnormal operands flushed to a signed zero first, as
  # elementwise.cc does (floor(-1e-40) is -0.0, not -1, as on XLA:CPU).
  fn, reference = ROUNDINGS[op]
  info = np.finfo(dtype)
  special = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.0, 0.0, np.inf, -np.inf]
  special += [2.0**23 + 0.5, -(2.0**52) - 0.5, info.max, -info.max, info.tiny, -info.tiny]
  x = (normal(1 << 16, dtype=dtype) * 40).astype(dtype)
  x[: len(special)] = special
  subnormal = np.array([info.tiny / 4, -info.tiny / 4], dtype)
  x[-2:] = subnormal
  x[-3] = np.nan
  f = lambda v: fn(v) * 3.0  # noqa: E731
  (fused,) = [i for i in plan_of(f, x).instrs if i.op == "jit_fusion"]
  assert op in [i.op for i in fused.attrs["body"].instrs]
  generated = run_with(monkeypatch, "1", f, x)
  np.testing.assert_array_equal(
    generated.view(np.uint8), run_with(monkeypatch, "0", f, x).view(np.uint8)
  )
  normal_part = slice(0, len(x) - 3)
  with np.errstate(over="ignore"):  # max * 3 is inf, as in the program
    expected = reference(x[normal_part]) * dtype(3)
  np.testing.assert_array_equal(generated[normal_part], expected)
  np.testing.assert_array_equal(np.signbit(generated[normal_part]), np.signbit(expected))
  assert np.isnan(generated[-3])
  np.testing.assert_array_equal(np.signbit(generated[-2:]), [False, True])
  np.testing.assert_array_equal(generated[-2:], [0.0, 0.0])


CONVERT_EDGES = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, -0.99, 0.99, 127.5]
CONVERT_EDGES += [128.0, -128.5, -129.0, 255.5, 256.0, -1.0, 32767.5, 32768.0, -32769.0, 65536.0]
CONVERT_EDGES += [2.0**31, -(2.0**31), 2.0**31 - 128, -(2.0**31) - 512, 2.0**32, 2.0**32 - 512]
CONVERT_EDGES += [2.0**63, -(2.0**63), 2.0**63 - 2048, 2.0**64, 1e30, -1e30, 3.7, -3.7]


@pytest.mark.parametrize("src", [np.float32, np.float64])
@pytest.mark.parametrize(
  "dst", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
)
@pytest.mark.usefixtures("x64_each")
def test_float_to_int_converts_saturate_in_a_generated_region(monkeypatch, src, dst):
  # llvm_ir._float_to_int: NaN -> 0, truncation, the type's limits beyond its range (the
  # limit a float cannot hold, 2^31 - 1 in f32, by a select), on whole vectors; the
  # interpreter's bits and XLA:CPU's values.
  x = np.array(CONVERT_EDGES * 2000, src)
  f = lambda v: (v * 1.5).astype(dst) + dst(1)  # noqa: E731
  assert "jit_fusion" in ops(f, x)
  generated = run_with(monkeypatch, "1", f, x)
  np.testing.assert_array_equal(generated, run_with(monkeypatch, "0", f, x))
  np.testing.assert_array_equal(generated, run_on(cpu_device(), f, x))
