"""Loops with values in memory (codegen.compile_memory_loops, loops.memory_plan).

A loop whose values are too big for registers is compiled after fusion: each instruction
on such a value calls its kernel (WorkshopJitRun) on buffers the compiler placed, so its
results are the interpreter's bit for bit wherever the small values in registers are
computed exactly (no native dot). Each program runs generated (default setting),
interpreted (WORKSHOP_CODEGEN=0), on JAX's CPU backend and, where the algorithm is
short to restate, in float64 numpy.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codegen_helpers import plan_of, run_with, serialized_round_trip
from codegen_helpers import private_cache  # noqa: F401  (an autouse fixture: importing it applies it)
from jax_plugins.workshop.compiler.codegen import loops
from reference import cpu_device, run_on

rng = np.random.default_rng(3636)


def _loop(f, *args):
  """The one top-level while/jit_loop of f's plan."""
  return _memory(f, *args)[0]


def _memory(f, *args):
  """(the one top-level while/jit_loop of f's plan, its loops.memory_plan)."""
  plan = plan_of(f, *args)
  (loop,) = [i for i in plan.instrs if i.op in ("while", "jit_loop")]
  try:
    return loop, loops.memory_plan(plan, loop)
  except loops.Unsupported:
    return loop, None


def _check(monkeypatch, f, args, rtol, numpy_result=None, exact=True):
  """f's results generated against interpreted (bit for bit when `exact`), the CPU
  backend (rtol) and numpy_result (float64, 10 * rtol)."""
  generated = run_with(monkeypatch, "1", f, *args)
  interpreted = run_with(monkeypatch, "0", f, *args)
  cpu = run_on(cpu_device(), f, *args)
  for g, i, c in zip(
    jax.tree.leaves(generated), jax.tree.leaves(interpreted), jax.tree.leaves(cpu), strict=True
  ):
    if exact:
      np.testing.assert_array_equal(
        np.atleast_1d(g).view(np.uint8), np.atleast_1d(i).view(np.uint8)
      )
    else:
      np.testing.assert_allclose(g, i, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(
      np.asarray(g, np.float64), np.asarray(c, np.float64), rtol=rtol, atol=rtol
    )
  if numpy_result is not None:
    for g, want in zip(jax.tree.leaves(generated), jax.tree.leaves(numpy_result), strict=True):
      np.testing.assert_allclose(g, want, rtol=10 * rtol, atol=10 * rtol)
  return generated


def decode(cache, q):
  # A KV-cache decode loop: a row written in place, attention over the whole cache, and
  # the whole cache updated elementwise (a fusion writing over the updated cache).
  def body(i, c):
    k = jnp.tanh(q * (i + 1).astype(q.dtype))
    c = jax.lax.dynamic_update_slice(c, k[None], (i, 0))
    return c + 1e-3 * jax.nn.softmax(c @ q)[:, None]

  return jax.lax.fori_loop(0, cache.shape[0], body, cache)


def decode_numpy(cache, q):
  c, q = cache.astype(np.float64), q.astype(np.float64)
  for i in range(c.shape[0]):
    c[i] = np.tanh(q * (i + 1))
    s = c @ q
    p = np.exp(s - s.max())
    c = c + 1e-3 * (p / p.sum())[:, None]
  return c


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decode_loop_runs_with_its_cache_in_memory(monkeypatch, dtype):
  with jax.enable_x64(dtype == np.float64):
    cache = np.zeros((64, 128), dtype)
    q = (rng.standard_normal(128) / 4).astype(dtype)
    loop = _loop(decode, cache, q)
    assert loop.op == "jit_loop" and loop.attrs["scratch"] >= 0
    body = loop.attrs["body"]
    runs = {body.instrs[k].op for r, k in loop.attrs["calls"] if r == 1}
    assert "dot_general" in runs and runs & {"fusion", "jit_fusion"}, runs
    tol = 1e-5 if dtype == np.float32 else 1e-12
    _check(monkeypatch, decode, (cache, q), tol, decode_numpy(cache, q))


def rnn(h, xs, w, u, n):
  # h (32x64: too big for registers) is made each step by kernels that do not update it
  # in place (a dot, then a fusion over the dot's result): the next h goes to the
  # carried value's other buffer, and the final one is copied into the result buffer
  # when the last step left it there. `n` steps, a traced count.
  def step(i, h):
    return jnp.tanh(h @ w + xs[i] @ u)

  return jax.lax.fori_loop(0, n, step, h)


def rnn_numpy(h, xs, w, u, n):
  h = h.astype(np.float64)
  for x in xs[:n].astype(np.float64):
    h = np.tanh(h @ w + x @ u)
  return h


@pytest.mark.parametrize("steps", [0, 1, 2, 5])
def test_carried_values_alternate_between_two_buffers(monkeypatch, steps):
  # An even and an odd number of steps end in either buffer; none leaves the operand.
  h = rng.standard_normal((32, 64)).astype(np.float32)
  xs = rng.standard_normal((5, 32, 16)).astype(np.float32)
  w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
  u = (rng.standard_normal((16, 64)) / 4).astype(np.float32)
  n = np.int32(steps)
  loop, memory = _memory(rnn, h, xs, w, u, n)
  assert loop.op == "jit_loop"
  body = loop.attrs["body"]
  made = [i for i in memory.resident if i < len(loop.outs) and body.results[i] != body.params[i]]
  assert len(made) == 1 and made[0] in memory.other  # h: not made in place
  _check(monkeypatch, rnn, (h, xs, w, u, n), 1e-5, rnn_numpy(h, xs, w, u, steps))


def test_operands_of_a_generated_loop_are_not_written(monkeypatch):
  # The carried operand is copied into its result buffer before the first in-place
  # update; a captured value is only read: both arrays are the same after the call.
  cache = rng.standard_normal((64, 128)).astype(np.float32)
  q = (rng.standard_normal(128) / 4).astype(np.float32)
  monkeypatch.setenv("WORKSHOP_CODEGEN", "1")
  jax.clear_caches()
  try:
    dev = jax.devices("workshop")[0]
    c, qq = jax.device_put(cache, dev), jax.device_put(q, dev)
    first = np.asarray(jax.jit(decode)(c, qq))
    second = np.asarray(jax.jit(decode)(c, qq))
    np.testing.assert_array_equal(np.asarray(c), cache)
    np.testing.assert_array_equal(np.asarray(qq), q)
    np.testing.assert_array_equal(first, second)
  finally:
    jax.clear_caches()


def power_iteration(a, v):
  # The condition reads values in memory (a norm of the difference of 600-element
  # vectors) through kernel runs; the body has a matrix-vector product and a division.
  def cond(c):
    v, prev, i = c
    return (jnp.max(jnp.abs(v - prev)) > 1e-6) & (i < 200)

  def body(c):
    v, _, i = c
    w = a @ v
    return w / jnp.sqrt(jnp.sum(w * w)), v, i + 1

  return jax.lax.while_loop(cond, body, (v, jnp.zeros_like(v), 0))


def test_condition_reads_values_in_memory(monkeypatch):
  m = rng.standard_normal((600, 600)).astype(np.float32)
  a = ((m + m.T) / 60 + np.diag(np.r_[np.linspace(0, 3, 599), 5.0])).astype(np.float32)
  v = np.ones(600, np.float32) / np.sqrt(600)
  loop = _loop(power_iteration, a, v)
  assert loop.op == "jit_loop"
  assert any(r == 0 for r, _ in loop.attrs["calls"])  # kernel runs in the condition
  got = _check(monkeypatch, power_iteration, (a, v), 1e-4)
  top = np.linalg.eigvalsh(a.astype(np.float64))[-1]
  vec = got[0].astype(np.float64)
  np.testing.assert_allclose(vec @ a.astype(np.float64) @ vec, top, rtol=1e-4)


def scratch_heavy(x):
  # Many 1000-element temporaries per step, of two dtypes, so scratch buffers are reused
  # once their values die; a sort and a cumulative sum are kernel runs between fusions,
  # and a pred value lives in memory.
  def body(i, c):
    a, b = c
    s = jnp.sort(a)
    m = (s > 0) & (a < 1)
    t = jnp.where(m, s * 0.5, a) + b
    u = jnp.sort(-t) * 0.25
    k = (u * 8).astype(jnp.int32) % 7
    return t - u + k.astype(t.dtype) * 0.01, jnp.flip(b) * 0.9 + 0.1

  return jax.lax.fori_loop(0, 9, body, (x, x[::-1]))


def scratch_heavy_numpy(x):
  a, b = x.astype(np.float32), x[::-1].astype(np.float32)
  for _ in range(9):
    s = np.sort(a)
    m = (s > 0) & (a < 1)
    t = np.where(m, s * np.float32(0.5), a) + b
    u = np.sort(-t) * np.float32(0.25)
    k = np.mod((u * 8).astype(np.int32), 7)  # jnp's %: the divisor's sign
    a, b = (
      t - u + k.astype(np.float32) * np.float32(0.01),
      b[::-1] * np.float32(0.9) + np.float32(0.1),
    )
  return a, b


def test_scratch_buffers_are_reused_and_kept_apart(monkeypatch):
  x = rng.standard_normal(1000).astype(np.float32)
  loop, memory = _memory(scratch_heavy, x)
  assert loop.op == "jit_loop"
  temps = {w for (r, _), w in memory.homes.items() if w[0] == "t"}
  # Fewer buffers than values: some were reused.
  assert len(temps) < sum(1 for w in memory.homes.values() if w[0] == "t")
  _check(monkeypatch, scratch_heavy, (x,), 1e-6, scratch_heavy_numpy(x))


def bf16_scan(h, xs, w):
  # 16-bit floats in memory: the register tier never holds them, the kernels do.
  def step(h, x):
    h = jnp.tanh(jnp.concatenate([x, h], -1) @ w)
    return h, h.sum()

  return jax.lax.scan(step, h, xs)


def test_half_precision_values_live_in_memory(monkeypatch):
  import ml_dtypes

  h = np.zeros((16, 64), ml_dtypes.bfloat16)
  xs = rng.standard_normal((12, 16, 32)).astype(ml_dtypes.bfloat16)
  w = (rng.standard_normal((96, 64)) / 10).astype(ml_dtypes.bfloat16)
  generated = run_with(monkeypatch, "1", bf16_scan, h, xs, w)
  interpreted = run_with(monkeypatch, "0", bf16_scan, h, xs, w)
  for g, i in zip(generated, interpreted, strict=True):
    np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(i).view(np.uint8))
  cpu = run_on(cpu_device(), bf16_scan, h, xs, w)
  np.testing.assert_allclose(generated[0].astype(np.float32), cpu[0].astype(np.float32), atol=3e-2)


def test_serialized_memory_loop_round_trips(monkeypatch):
  # DeserializeAndLoad prepares the loop again, scratch size included; without generated
  # code the loop runs interpreted, with the same bits.
  q = (rng.standard_normal(128) / 4).astype(np.float32)
  cache = np.zeros((64, 128), np.float32)
  generated, interpreted = serialized_round_trip(
    monkeypatch, lambda c: decode(c, q), cache, b"jit_loop"
  )
  np.testing.assert_array_equal(generated, interpreted)
  np.testing.assert_allclose(generated, decode_numpy(cache, q), rtol=1e-4, atol=1e-4)


def test_loops_the_memory_tier_refuses_stay_interpreted():
  # An op without a plain kernel on a value in memory (an FFT): the loop stays a while.
  x = rng.standard_normal(1000).astype(np.complex64)
  f = lambda c: jax.lax.fori_loop(0, 3, lambda i, c: jnp.fft.fft(c) * 0.5, c)  # noqa: E731
  assert _loop(f, x).op == "while"


def test_scatter_never_writes_over_its_own_updates(monkeypatch):
  # The updates are the operand's bytes under another slot (a bitcast of it): the
  # scatter must not take the operand's buffer in place (kernel.h: other operands never
  # alias output 0), or it reads updates it has already overwritten.
  x = rng.standard_normal(1000).astype(np.float32)
  perm = rng.permutation(1000).astype(np.int32)

  def f(a, p):
    def body(i, a):
      s = jnp.sort(a)
      bits = jax.lax.bitcast_convert_type(s, jnp.int32)
      return jax.lax.bitcast_convert_type(bits.at[p].set(bits), jnp.float32)

    return jax.lax.fori_loop(0, 2, body, a)

  assert _loop(f, x, perm).op == "jit_loop"
  want = x.copy()
  for _ in range(2):
    s = np.sort(want)
    want = s.copy()
    want[perm] = s
  got = _check(monkeypatch, f, (x, perm), 0)
  np.testing.assert_array_equal(got, want)


def test_values_of_any_stored_dtype_live_in_memory(monkeypatch):
  # float8 values only the kernels touch: a loop with values in memory, no warning.
  import warnings

  import ml_dtypes

  a = rng.standard_normal(600).astype(ml_dtypes.float8_e4m3fn)
  f = lambda a: jax.lax.fori_loop(  # noqa: E731
    0, 3, lambda i, a: (jnp.sort(a.astype(jnp.float32)) * 0.5).astype(a.dtype), a
  )
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)
    assert _loop(f, a).op == "jit_loop"
    generated = run_with(monkeypatch, "1", f, a)
  interpreted = run_with(monkeypatch, "0", f, a)
  np.testing.assert_array_equal(generated.view(np.uint8), interpreted.view(np.uint8))
  cpu = run_on(cpu_device(), f, a)
  np.testing.assert_array_equal(generated.view(np.uint8), cpu.view(np.uint8))


def test_a_failing_call_site_ends_the_loop_with_its_error(monkeypatch):
  # A host callback fails inside a nested loop the generated loop calls: the error is
  # the program's, raised at once, as interpreted; the generated code does not run on
  # with what the failed call left behind (here the step count bounds it either way).
  x = rng.standard_normal(1000).astype(np.float32)
  calls = [0]

  def callback(v):
    calls[0] += 1
    if calls[0] > 3:
      raise ValueError("boom")
    return v

  def f(a):
    def body(c):
      a, k = c

      def inner(j, d):
        s = jax.pure_callback(callback, jax.ShapeDtypeStruct((), jnp.float32), d[0])
        return jnp.sort(d) * 0.5 + s * 0

      return jax.lax.fori_loop(0, 2, inner, jnp.sort(a)) + 1.0, k + 1

    return jax.lax.while_loop(lambda c: (jnp.sum(c[0]) < 5000.0) & (c[1] < 50), body, (a, 0))

  for setting in ("1", "0"):
    calls[0] = 0
    with pytest.raises(Exception, match="boom"):
      run_with(monkeypatch, setting, f, x)
    assert calls[0] == 4, (setting, calls[0])


def test_sampler_with_threefry_bits_in_memory(monkeypatch):
  # A threefry split per step in registers, a 2048-element uniform draw (u32 bits
  # bitcast to f32: the same buffer) and a chain over it in memory: one jit_loop.
  from test_codegen_loop_bodies import sampler

  x = rng.standard_normal(2048).astype(np.float32)
  key = np.asarray(jax.random.key_data(jax.random.key(3)))
  assert _loop(sampler, x, key).op == "jit_loop"
  generated = _check(monkeypatch, sampler, (x, key), 2e-6)
  np.testing.assert_array_equal(generated[1], run_on(cpu_device(), sampler, x, key)[1])


def test_scan_outputs_updated_in_place_take_no_second_buffer():
  # ys is written a row per step in place: only values made elsewhere get a second buffer,
  # so the scratch holds no copy of the stack.
  def f(h, xs):
    return jax.lax.scan(lambda h, x: (jnp.tanh(h * 0.5 + x[0]),) * 2, h, xs)

  h, xs = np.ones((128, 64), np.float32), np.ones((12, 1, 64), np.float32)
  loop, memory = _memory(f, h, xs)
  assert loop.op == "jit_loop"
  stack = 12 * 128 * 64 * 4
  assert loop.attrs["scratch"] < stack, loop.attrs["scratch"]
  body = loop.attrs["body"]
  (ys,) = [i for i in memory.resident if tuple(body.slots[body.params[i]][1]) == (12, 128, 64)]
  assert ys not in memory.other and ys not in memory.copies


def test_compiled_memory_stats_count_the_scratch():
  # The device memory limit is checked against the compiled stats: they hold the
  # generated loop's scratch beside the plan's own temporaries.
  h = rng.standard_normal((256, 256)).astype(np.float32)
  xs = rng.standard_normal((5, 256, 16)).astype(np.float32)
  w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
  u = (rng.standard_normal((16, 256)) / 4).astype(np.float32)
  n = np.int32(5)
  loop = _loop(rnn, h, xs, w, u, n)
  dev = jax.devices("workshop")[0]
  compiled = jax.jit(rnn).lower(*jax.device_put((h, xs, w, u, n), dev)).compile()
  assert compiled.memory_analysis().temp_size_in_bytes >= loop.attrs["scratch"] > 0


def test_an_edited_scratch_size_is_refused():
  # The symbol names the scratch size the code was generated for; an executable whose
  # attribute says less (a resealed edit) is refused at load, not run past its block.
  import struct
  import zlib

  from jax._src.lib import xla_client as xc

  header = b"\x04\x00\x00\x00\x00\x00\x00\x00WSEX"
  header_size = len(header) + 4 + 8 + 4  # magic, version, body size, CRC-32
  dev = jax.devices("workshop")[0]
  q = (rng.standard_normal(128) / 4).astype(np.float32)
  cache = np.zeros((64, 128), np.float32)
  compiled = jax.jit(decode).lower(cache, q).compile()
  blob = dev.client.serialize_executable(compiled.runtime_executable())
  start = blob.find(header)
  key = b"\x07\x00\x00\x00\x00\x00\x00\x00scratch\x00"
  at = blob.find(key, start)
  assert start >= 0 and at > 0
  value = struct.unpack_from("<q", blob, at + len(key))[0]
  assert value == _loop(decode, cache, q).attrs["scratch"]
  edited = bytearray(blob)
  struct.pack_into("<q", edited, at + len(key), value // 2 if value else 64)
  body = bytes(edited[start + header_size :])
  edited[start + len(header) + 4 : start + header_size] = struct.pack(
    "<QI", len(body), zlib.crc32(body)
  )
  with pytest.raises(Exception, match="scratch"):
    dev.client.deserialize_executable(bytes(edited), xc.DeviceList((dev,)), xc.CompileOptions())


def resampler(w, u):
  # A particle filter's resampling step: a cumulative sum over 2048 weights and
  # jnp.searchsorted (a nested while loop over values in memory, called on views of the
  # buffers as the interpreter would run it), then a gather by the indices found.
  def step(w, k):
    c = jnp.cumsum(w)
    idx = jnp.searchsorted(c, (u + k) * c[-1] / (1 + k))
    w = jnp.abs(jnp.sin(w[idx] * 3.0 + k)) + 0.01
    return w, idx.sum()

  return jax.lax.scan(step, w, jnp.arange(6, dtype=w.dtype))


def test_nested_loop_on_values_in_memory_is_called(monkeypatch):
  w = rng.random(2048).astype(np.float32) + 0.01
  u = np.sort(rng.random(2048)).astype(np.float32)
  loop = _loop(resampler, w, u)
  assert loop.op == "jit_loop"
  body = loop.attrs["body"]
  called = {body.instrs[k].op for r, k in loop.attrs["calls"] if r == 1}
  assert called & {"while", "jit_loop"}, called
  _check(monkeypatch, resampler, (w, u), 1e-5)
