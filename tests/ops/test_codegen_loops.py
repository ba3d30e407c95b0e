"""The code-generation tier (compiler/codegen, kernels/codegen/jit_loop.cc): small while loops as
native code.

Each loop runs three ways: generated code, the interpreter (WORKSHOP_CODEGEN=0) and JAX's
CPU backend. Generated code must have the interpreter's bits exactly; against the CPU
backend integers and selections are exact and floats within a few ulps.
"""

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from codegen_helpers import ops, plan_of, run_with, serialized_round_trip, workshop
from codegen_helpers import private_cache  # noqa: F401  (an autouse fixture: importing it applies it)
from jax_plugins.workshop.compiler import codegen, compile_program
from reference import assert_matches_cpu, cpu_device, run_on

rng = np.random.default_rng(0)


def fori_scalar(x):
  return lax.fori_loop(0, 1000, lambda i, c: c * 1.0001 + 1.0, x)


def newton(a):
  def body(s):
    x, i = s
    return 0.5 * (x + a / x), i + 1

  return lax.while_loop(lambda s: s[1] < 50, body, (a, 0))[0]


def until_converged(a):  # data-dependent trip count, compare + select + abs in the body
  def cond(s):
    x, prev, i = s
    return (jnp.abs(x - prev)[0] > 1e-6) & (i < 100)

  def body(s):
    x, _, i = s
    return jnp.where(x > 0, 0.5 * (x + a / x), x), x, i + 1

  return lax.while_loop(cond, body, (a, a + 1.0, 0))


def int_mix(x):  # integer divide (incl. by 0 and MIN/-1), min/max, bit ops, converts
  def body(i, c):
    d = jnp.where(c > 100, jnp.int32(0), jnp.where(c < -100, jnp.int32(-1), jnp.int32(3)))
    m = (jnp.maximum(jnp.minimum(lax.div(c, d), 1000), -1000) ^ (c & 7)) | i
    return (m.astype(jnp.float32) * 3.5).astype(jnp.int32) + ~c

  return lax.fori_loop(0, 37, body, x)


def float_mix(x):  # NaN-propagating min/max, clamp, negate, sqrt, saturating f32 -> s32
  def body(i, c):
    v, n = c
    w = jnp.clip(jnp.maximum(v, -v[::-1]) * 1.5, -1e30, 3e38) - jnp.sqrt(jnp.abs(v))
    return w, n + w.astype(jnp.int32)

  return lax.fori_loop(0, 20, body, (x, jnp.zeros(x.shape, jnp.int32)))


def moves(x):  # broadcast, transpose, slice, reverse, reshape on small arrays
  def body(i, c):
    t = c.T[:, ::-1] + c[:1, :].reshape(1, 4) * 0.5
    return jnp.broadcast_to(t[0], (4, 4)) * 0.25 + t * 0.75

  return lax.fori_loop(0, 9, body, x)


def preds(x):
  def body(i, c):
    v, p = c
    p2 = (v > 0) ^ p | (v < -1)
    return jnp.where(p2, v - 1.0, v + 2.0), ~p2 & p

  return lax.fori_loop(0, 11, body, (x, x > 0.5))


def transcendental(x):  # ops the generated code calls the interpreter's kernels for
  def body(i, c):
    v, n = c
    w = jnp.tanh(v) * 0.9 + jnp.exp(-jnp.abs(v)) * 0.1 + jnp.sin(v) * jnp.floor(v) * 0.01
    w = w + lax.rem(v, 1.5) * 0.01 + lax.pow(jnp.abs(v) + 1.0, 0.5) * 0.001
    n = n + jnp.isfinite(w).astype(jnp.int32) + lax.shift_right_logical(n, 1) + lax.rem(n, 7)
    return w, n

  return lax.fori_loop(0, 15, body, (x, jnp.arange(x.size, dtype=jnp.int32)))


def power_iteration(m):  # ops run through their kernels: dot, reduce, dynamic_slice, ...
  def cond(s):
    v, prev, i = s
    return (jnp.max(jnp.abs(v - prev)) > 1e-6) & (i < 60)

  def body(s):
    v, _, i = s
    w = m @ v
    w = w / jnp.sqrt(jnp.sum(w * w))
    row = lax.dynamic_slice(m, (i % 8, 0), (1, 8))[0]
    w = w + 0.0 * row + 0.0 * jnp.sort(w) + 0.0 * jnp.argmax(w).astype(w.dtype)
    return w, v, i + 1

  v0 = jnp.ones(8, m.dtype) / jnp.sqrt(8.0)
  return lax.while_loop(cond, body, (v0, v0 + 1.0, 0))


def scan_rnn(w, h0, xs):  # xs and ys too big for registers: resident, updated in place
  def step(h, x):
    h = jnp.tanh(w @ h + x)
    return h, h * 2.0

  return lax.scan(step, h0, xs)


def windows(xs):  # native dynamic_slice/update_slice: clamped starts, in registers and memory
  small = xs[:5]

  def step(c, x):
    i = c[0] % 9 - 2  # -2..6: clamped into [0, 4]
    row = lax.dynamic_slice(small, (i, 0), (1, 4))[0]
    c = c + x + row
    small2 = lax.dynamic_update_slice(small, c[None, :], (i + 1, 0))
    return c, c * 2 + small2[4]

  return lax.scan(step, jnp.zeros(4, xs.dtype), xs)


def cond_in_loop(x):  # lax.cond in the body: both branches computed, one selected
  return lax.fori_loop(
    0,
    9,
    lambda i, c: lax.cond(i % 2 == 0, lambda: c * 0.5, lambda: jnp.where(c > 1, c - 1.0, c + 2.0)),
    x,
  )


def switch_in_loop(x):  # lax.switch, an index out of range (-1: the last branch), a call
  def body(i, c):
    v, n = c
    v = lax.switch(i % 4 - 1, [lambda: v * 0.5, lambda: jnp.tanh(v) + 0.25, lambda: v - 1.0])
    n = lax.cond(v[0] > 0, lambda: n + 1, lambda: n * 2)
    return v, n

  return lax.fori_loop(0, 13, body, (x, jnp.int32(1)))


def nested(x):  # a while inside the body: one function, the inner loop's blocks inside
  def outer(i, c):
    inner = lax.fori_loop(0, i % 4 + 2, lambda j, d: d * 0.5 + c * 0.25 + j.astype(c.dtype), c)
    return jnp.where(inner > 1.0, inner * 0.9 + 0.1, inner - 0.5)

  return lax.fori_loop(0, 7, outer, x)


def pivots_to_permutation(pivots):  # a resident value updated by a chain of two scatters
  return lax.linalg.lu_pivots_to_permutation(pivots, 600)


def buffer_updates(xs):  # native one-update scatters: .at[i].set/.add, in place and in registers
  def body(c):
    i, buf, rows, small = c
    row = jnp.full(4, i, rows.dtype) - buf[i % 5] + rows[i % 3, 1]  # reads before the updates
    buf = buf.at[i].set(buf[i - 1] * 0.5 + 1.0)  # a chain of two in-place updates
    buf = buf.at[(i * 7) % 1300].add(1.5)  # a start above 999: the update is dropped
    rows = rows.at[i % 320].set(row)  # a contiguous row; 300..319 dropped
    small = small.at[(i % 20).astype(jnp.uint32)].add(row[0])  # registers, unsigned index
    return i + 1, buf, rows, small

  init = (jnp.int32(0), xs, jnp.zeros((300, 4), xs.dtype), jnp.zeros(16, xs.dtype))
  return lax.while_loop(lambda c: c[0] < 400, body, init)


def make_rnn():
  return (
    rng.standard_normal((16, 16)).astype(np.float32) * 0.3,
    rng.standard_normal(16).astype(np.float32),
    rng.standard_normal((300, 16)).astype(np.float32),
  )


# (name, function, argument maker, rtol against the CPU backend or None not to compare):
# float_mix makes NaNs that XLA:CPU's maximum drops (docs/compiler.md, "Deliberate
# differences from XLA:CPU"); transcendentals differ from XLA's in the last ulps.
CASES = [
  ("fori_scalar", fori_scalar, lambda: np.float32(1.5)),
  ("newton", newton, lambda: np.arange(1, 65, dtype=np.float32)),
  ("until_converged", until_converged, lambda: rng.uniform(1, 100, 8).astype(np.float32)),
  ("int_mix", int_mix, lambda: np.array([0, 1, -7, 2**31 - 1, -(2**31), 12345, 3, -1], np.int32)),
  (
    "float_mix",
    float_mix,
    lambda: np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -2.5, 3e38], np.float32),
    None,
  ),
  ("moves", moves, lambda: rng.standard_normal((4, 4)).astype(np.float32)),
  ("preds", preds, lambda: rng.standard_normal(16).astype(np.float32)),
  ("transcendental", transcendental, lambda: rng.standard_normal(8).astype(np.float32), 1e-4),
  (
    "power_iteration",
    power_iteration,
    lambda: (lambda a: (a + a.T).astype(np.float32))(rng.standard_normal((8, 8))),
    1e-4,
  ),
  ("scan_rnn", scan_rnn, make_rnn, 1e-4),
  ("nested", nested, lambda: np.linspace(-3, 3, 8, dtype=np.float32)),
  ("cond_in_loop", cond_in_loop, lambda: np.linspace(-3, 3, 8, dtype=np.float32)),
  ("switch_in_loop", switch_in_loop, lambda: np.linspace(-3, 3, 8, dtype=np.float32), 1e-5),
  ("windows", windows, lambda: rng.integers(-50, 50, (300, 4)).astype(np.int32)),
  ("buffer_updates", buffer_updates, lambda: rng.standard_normal(1000).astype(np.float32)),
  (
    "pivots_to_permutation",
    pivots_to_permutation,
    lambda: np.array([rng.integers(i, 600) for i in range(500)], np.int32),
  ),
]


CASES = [c if len(c) == 4 else (*c, 1e-5) for c in CASES]
# Loops whose small float dots the generated code computes itself (loops.native_dot).
WITH_NATIVE_DOTS = {"power_iteration", "scan_rnn"}


@pytest.mark.parametrize("name,f,make,rtol", CASES, ids=[c[0] for c in CASES])
def test_loop_is_generated_and_exact(monkeypatch, name, f, make, rtol):
  x = make()
  x = x if isinstance(x, tuple) else (x,)
  assert "jit_loop" in ops(f, *x), name
  assert "jit_loop" not in ops(f, *x, env="0")
  generated = run_with(monkeypatch, "1", f, *x)
  interpreted = run_with(monkeypatch, "0", f, *x)
  for g, i in zip(jax.tree.leaves(generated), jax.tree.leaves(interpreted), strict=True):
    if name in WITH_NATIVE_DOTS:  # summed in another order than OpenBLAS: not exact
      np.testing.assert_allclose(g, i, rtol=1e-5, atol=1e-6)
    else:  # bit for bit
      np.testing.assert_array_equal(
        np.atleast_1d(g).view(np.uint8), np.atleast_1d(i).view(np.uint8)
      )
  if rtol is None:
    return
  reference = run_on(cpu_device(), f, *x)
  for g, r in zip(jax.tree.leaves(generated), jax.tree.leaves(reference), strict=True):
    if np.issubdtype(g.dtype, np.floating):
      np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol / 10)
    else:
      np.testing.assert_array_equal(g, r)


def test_gcc_backend_is_exact_too(monkeypatch):
  x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -2.5, 3e38], np.float32)
  generated = run_with(monkeypatch, "gcc", float_mix, x)
  interpreted = run_with(monkeypatch, "0", float_mix, x)
  for g, i in zip(jax.tree.leaves(generated), jax.tree.leaves(interpreted), strict=True):
    np.testing.assert_array_equal(np.atleast_1d(g).view(np.uint8), np.atleast_1d(i).view(np.uint8))


def test_loops_outside_the_tier_stay_interpreted():
  # A kernel run (sort) inside a conditional does not keep a loop interpreted: the
  # generated loop hands that case to the interpreter (a call site). Elementwise ops on a
  # 1000-element carry (too big for registers) make it a loop with values in memory; an
  # op without a plain kernel on such a value (an FFT) keeps it interpreted.
  def f(x):
    return lax.fori_loop(
      0, 5, lambda i, c: lax.cond(i % 2 == 0, lambda: jnp.sort(c) * 0.5, lambda: c + 1.0), x
    )

  x = np.linspace(-1, 1, 8, dtype=np.float32)
  (loop,) = [i for i in plan_of(f, x).instrs if i.op in ("while", "jit_loop")]
  assert loop.op == "jit_loop" and loop.attrs["calls"]
  big = np.ones(1000, np.float32)
  (loop,) = [i for i in plan_of(fori_scalar, big).instrs if i.op in ("while", "jit_loop")]
  assert loop.op == "jit_loop" and loop.attrs["scratch"] >= 0
  spectral = lambda c: lax.fori_loop(0, 3, lambda i, c: jnp.fft.fft(c) * 0.5, c)  # noqa: E731
  assert "while" in ops(spectral, big.astype(np.complex64))
  assert_matches_cpu(f, x, rtol=1e-6)


def test_nested_loop_inside_an_interpreted_loop_is_generated():
  def f(x, big):  # an FFT of a 1000-element carry keeps the outer loop interpreted
    def outer(i, c):
      v, b = c
      v = lax.fori_loop(0, 10, lambda j, d: d * 0.5 + 0.1, v)
      return v * 0.1 + jnp.sum(b) * 0.001, jnp.fft.irfft(jnp.fft.rfft(b), 1000) * 0.5

    return lax.fori_loop(0, 3, outer, (x, big))

  x = np.linspace(-1, 1, 8, dtype=np.float32)
  big = np.linspace(0, 1, 1000, dtype=np.float32)
  text = jax.jit(f).lower(x, big).as_text()
  plan = compile_program(text.encode(), "mlir", b"", 4).plan
  (outer,) = [i for i in plan.instrs if i.op == "while"]
  assert "jit_loop" in [i.op for i in outer.attrs["body"].instrs]
  assert_matches_cpu(f, x, big, rtol=1e-6)


def test_without_llvmlite_loops_are_interpreted_with_one_warning(monkeypatch):
  monkeypatch.setattr(codegen, "_llvm", None)
  monkeypatch.setattr(codegen, "_llvm_failed", "ImportError: no llvmlite")
  monkeypatch.setattr(codegen, "_warned", False)
  x = np.float32(2.0)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert "while" in ops(fori_scalar, x)
    assert "while" in ops(newton, np.ones(4, np.float32))
  assert len([w for w in caught if "llvmlite is unavailable" in str(w.message)]) == 1


@pytest.mark.parametrize(
  "f,x",
  [
    (newton, np.arange(1, 65, dtype=np.float32)),
    (lambda m: power_iteration(m)[0], np.eye(8, dtype=np.float32) + 0.5),
  ],  # call sites
  ids=["newton", "power_iteration"],
)
def test_serialized_executable_with_generated_loop_round_trips(monkeypatch, f, x):
  generated = run_with(monkeypatch, "1", f, x)
  interpreted = run_with(monkeypatch, "0", f, x)
  loaded, without_jit = serialized_round_trip(monkeypatch, f, x, b"jit_loop")
  np.testing.assert_array_equal(loaded, generated)
  np.testing.assert_array_equal(without_jit, interpreted)  # the loop ran interpreted


def test_static_trip_count_decides_inline_runs():
  def loop_attrs(f, x):
    text = jax.jit(f).lower(x).as_text()
    (loop,) = [
      i for i in compile_program(text.encode(), "mlir", b"", 4).plan.instrs if i.op == "jit_loop"
    ]
    return loop.attrs

  # 1000 steps of compare, multiply, add, add (the counter).
  assert loop_attrs(fori_scalar, np.float32(1))["work"] == 1000 * 4
  assert loop_attrs(until_converged, np.ones(8, np.float32))["work"] == -1
  # Through JAX (which hoists the bounds out of the loop): a short loop runs inline (its
  # result is ready on return), a long one is queued and returns before it finishes.
  x = jax.device_put(np.float32(3), workshop())
  short = jax.jit(lambda a: lax.fori_loop(0, 100, lambda i, c: c * 0.5 + 1.0, a))
  short(x).block_until_ready()
  assert short(x).is_ready()
  f = jax.jit(lambda a: lax.fori_loop(0, 3_000_000, lambda i, c: c * 0.5 + 1.0, a))
  expected = np.asarray(f(x))
  y = f(x)
  assert not y.is_ready()
  np.testing.assert_array_equal(np.asarray(y), expected)


def test_object_code_is_cached_on_disk(private_cache, monkeypatch):  # noqa: F811 (the fixture)
  def f(x):
    return lax.fori_loop(0, 77, lambda i, c: c * 0.25 + 3.0, x)

  before = set(os.listdir(private_cache))
  assert "jit_loop" in ops(f, np.float32(1))
  written = set(os.listdir(private_cache)) - before
  assert len(written) == 1 and next(iter(written)).endswith(".o")
  # A fresh process (here: an empty in-process table) reads the object instead of
  # generating code; the result is the same.
  monkeypatch.setattr(codegen, "_loaded", {})
  assert "jit_loop" in ops(f, np.float32(1))
  assert set(os.listdir(private_cache)) - before == written
  np.testing.assert_array_equal(
    run_on(workshop(), f, np.float32(1)), run_with(monkeypatch, "0", f, np.float32(1))
  )


def test_generated_loop_on_four_devices_at_once():
  # pmap: four workers call the same generated function concurrently.
  x = np.arange(1, 33, dtype=np.float32).reshape(4, 8)
  f = jax.pmap(newton, devices=jax.devices("workshop")[:4])
  ref = jax.pmap(newton, devices=jax.devices("cpu")[:4])
  np.testing.assert_allclose(np.asarray(f(x)), np.asarray(ref(x)), rtol=1e-6)


def test_small_dot_is_native_and_int_dot_calls_the_kernel(monkeypatch):
  def f(w, v):  # f32 matvec: native; s32: the interpreter's kernel, bit for bit
    return lax.fori_loop(
      0,
      4,
      lambda i, c: (w @ c[0] * 0.5, (w.astype(jnp.int32) @ c[1]) % 97),
      (v, v.astype(jnp.int32)),
    )

  w = rng.integers(-3, 4, (6, 6)).astype(np.float32)
  v = rng.integers(-3, 4, 6).astype(np.float32)
  text = jax.jit(f).lower(w, v).as_text()
  (loop,) = [
    i for i in compile_program(text.encode(), "mlir", b"", 4).plan.instrs if i.op == "jit_loop"
  ]
  body_ops = [loop.attrs["body"].instrs[k].op for _, k in loop.attrs.get("calls", [])]
  assert body_ops.count("dot_general") == 1  # only the integer one is a kernel call
  generated = run_with(monkeypatch, "1", f, w, v)
  interpreted = run_with(monkeypatch, "0", f, w, v)
  for g, i in zip(generated, interpreted):  # small integers: exact either way
    np.testing.assert_array_equal(g, i)


def test_unknown_setting_warns_and_debug_says_why(monkeypatch, capsys):
  # A misspelt WORKSHOP_CODEGEN must not pass silently, and WORKSHOP_CODEGEN_DEBUG must
  # name what keeps a region interpreted (size, element type), not a buffer-type code.
  monkeypatch.setattr(codegen, "_warned", False)
  loop = lambda x: lax.fori_loop(0, 10, lambda i, c: c * 1.5 + 1, x)
  with pytest.warns(RuntimeWarning, match="WORKSHOP_CODEGEN='focre' is not a setting"):
    assert "jit_loop" in ops(loop, np.float32(1), env="focre")  # treated as the default
  monkeypatch.setenv("WORKSHOP_CODEGEN_DEBUG", "1")
  assert "jit_loop" not in ops(loop, np.ones(4, np.float16))
  assert "jit_fusion" not in ops(jax.nn.softmax, np.ones((3, 7), np.float32))
  err = capsys.readouterr().err
  assert "stays interpreted: element type f16" in err, err
  assert "21 elements (fewer than 65536" in err, err
