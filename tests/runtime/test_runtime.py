"""Runtime behaviour through JAX: transfers, buffer lifetime, donation, errors, concurrency.

References are numpy (what the bytes must be) or JAX's CPU backend. Everything that could
hang (a failed execution, waiting on a poisoned buffer) runs under a deadline.
"""

from __future__ import annotations

import re
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu

DTYPES = [np.dtype(d) for d in (np.float32, np.float64, np.int32, np.int64, np.uint32, np.bool_)]
IDS = [d.name for d in DTYPES]
DEADLINE_S = 60


pytestmark = pytest.mark.usefixtures("x64")  # conftest.py: x64 on for the module.


def workshop(i=0):
  return jax.devices("workshop")[i]


def values(dtype, shape, seed=0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if dtype.kind == "f":
    return rng.standard_normal(shape).astype(dtype)
  return rng.integers(0 if dtype.kind == "u" else -(10**6), 10**6, shape).astype(dtype)


def within_deadline(fn, seconds=DEADLINE_S):
  """Runs fn() in a daemon thread; fails the test (instead of hanging) past the deadline.

  Returns fn's result or re-raises its exception.
  """
  result = {}

  def run():
    try:
      result["value"] = fn()
    except BaseException as e:  # noqa: BLE001 - handed to the caller
      result["error"] = e

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f"{fn} did not finish within {seconds} s (hang?)"
  if "error" in result:
    raise result["error"]
  return result["value"]


def run_threads(worker, n=4):
  """Runs worker(i) for i < n in daemon threads; fails on a hang or any worker error."""
  errors = []

  def guarded(i):
    try:
      worker(i)
    except BaseException as e:  # noqa: BLE001 - reported below
      errors.append((i, e))

  threads = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(n)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(DEADLINE_S)
  assert not any(t.is_alive() for t in threads), "a thread hung"
  assert not errors, errors


# ---- host <-> device transfers ----

VIEWS = {
  "contiguous": lambda a: a,
  "transposed": lambda a: a.T,
  "negative_stride": lambda a: a[::-1, ::-2],
  "sliced": lambda a: a[1:4, 2:7:3],
  "column": lambda a: a[:, 3],
  "broadcast_view": lambda a: np.broadcast_to(a[:1], a.shape),  # stride 0
  "zero_size": lambda a: a[2:2],
  "zero_d": lambda a: a[1, 2][()],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("view", list(VIEWS))
def test_host_to_device_round_trip(view, dtype):
  x = VIEWS[view](values(dtype, (5, 8)))
  x = np.asarray(x) if view != "zero_d" else np.array(x)
  on_device = jax.device_put(x, workshop())
  assert on_device.devices() == {workshop()}
  assert on_device.dtype == x.dtype and on_device.shape == x.shape
  back = np.asarray(on_device)
  assert back.tobytes() == np.ascontiguousarray(x).tobytes()
  # The device holds it row-major: flattening on the device agrees with numpy's order.
  flat = np.asarray(jax.jit(lambda a: a.reshape(-1))(on_device))
  np.testing.assert_array_equal(flat, x.reshape(-1))


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_strided_input_computes_like_cpu(dtype):
  x = values(dtype, (6, 7), seed=1)[::-1, 1::2].T
  assert not x.flags.c_contiguous
  assert_matches_cpu(lambda a: (a.T, jnp.concatenate([a, a]), a[1:, ::2]), x)


def test_scalar_python_values():
  assert np.asarray(jax.device_put(3, workshop())) == 3
  assert np.asarray(jax.device_put(2.5, workshop())) == 2.5
  assert np.asarray(jax.device_put(True, workshop())) == np.True_


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_device_to_device(dtype):
  x = values(dtype, (3, 5), seed=2)
  a = jax.device_put(x, workshop(0))
  for i in (1, 2, 3, 0):
    b = jax.device_put(a, workshop(i))
    assert b.devices() == {workshop(i)}
    np.testing.assert_array_equal(np.asarray(b), x)
  # Workshop -> CPU -> workshop.
  c = jax.device_put(jax.device_put(a, jax.devices("cpu")[0]), workshop(3))
  np.testing.assert_array_equal(np.asarray(c), x)


def test_compute_on_each_device():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  for i in range(4):
    y = jax.jit(lambda a: a * 2 + 1)(jax.device_put(x, workshop(i)))
    assert y.devices() == {workshop(i)}
    np.testing.assert_array_equal(np.asarray(y), x * 2 + 1)


def test_copy_is_independent_of_source():
  a = jax.device_put(np.arange(6, dtype=np.int32), workshop(0))
  b = jax.device_put(a, workshop(1))
  a.delete()
  np.testing.assert_array_equal(np.asarray(b), np.arange(6))


# ---- buffer lifetime ----


def test_use_after_delete_is_an_error():
  x = jax.device_put(np.ones(4, np.float32), workshop())
  x.delete()
  assert x.is_deleted()
  with pytest.raises(RuntimeError, match="deleted"):
    jnp.add(x, 1)
  with pytest.raises(RuntimeError, match="deleted"):
    np.asarray(x)


def test_delete_input_while_execution_pending():
  # The executable must keep its inputs alive until it has run, whatever the caller does.
  x = jax.device_put(np.full((512, 512), 0.5, np.float32), workshop())
  f = jax.jit(lambda a: jnp.tanh(a @ a @ a) + a)
  expected = np.asarray(f(x))
  y = f(x)
  x.delete()
  np.testing.assert_array_equal(np.asarray(y), expected)


def test_outputs_alive_after_inputs_deleted():
  x = jax.device_put(np.arange(5, dtype=np.int32), workshop())
  y, z = jax.jit(lambda a: (a, a + 1))(x)
  x.delete()
  np.testing.assert_array_equal(np.asarray(y), np.arange(5))
  np.testing.assert_array_equal(np.asarray(z), np.arange(5) + 1)


# ---- donation ----


def test_donation_deletes_input_and_result_is_correct():
  x = jax.device_put(np.arange(8, dtype=np.float32), workshop())
  y = jax.jit(lambda a: a * 3 + 1, donate_argnums=0)(x)
  assert x.is_deleted()
  np.testing.assert_array_equal(np.asarray(y), np.arange(8) * 3 + 1)
  with pytest.raises(RuntimeError, match="deleted"):
    np.asarray(x)


def test_donation_chain():
  # Each step donates the previous result: one buffer is reused, the values accumulate.
  step = jax.jit(lambda a: a + 1, donate_argnums=0)
  x = jax.device_put(np.zeros(1000, np.int64), workshop(2))
  for _ in range(50):
    prev, x = x, step(x)
    assert prev.is_deleted()
  np.testing.assert_array_equal(np.asarray(x), np.full(1000, 50))
  assert x.devices() == {workshop(2)}


def test_donation_with_multiple_outputs():
  x = jax.device_put(np.arange(6, dtype=np.float32), workshop())
  y = jax.device_put(np.ones(6, np.float32), workshop())
  a, b = jax.jit(lambda p, q: (q - p, p * 2), donate_argnums=(0, 1))(x, y)
  assert x.is_deleted() and y.is_deleted()
  np.testing.assert_array_equal(np.asarray(a), 1 - np.arange(6))
  np.testing.assert_array_equal(np.asarray(b), np.arange(6) * 2)


ALIASING = {
  # The result reuses the donated buffer while the kernel still reads the operand.
  "transpose": lambda a: a.T,
  "matmul": lambda a: a @ a,
  "add_transpose": lambda a: a + a.T,
  "rotate_rows": lambda a: jnp.concatenate([a[1:], a[:1]]),
  "broadcast_column": lambda a: jnp.broadcast_to(a[:, :1], a.shape),
  "reduce_then_scale": lambda a: a.sum(axis=0, keepdims=True).T * a[0],
  "two_results": lambda a: (a * 2, a + 1),
  "same_result_twice": lambda a: (a - 1, a - 1),
}


@pytest.mark.parametrize("name", list(ALIASING))
def test_donated_buffer_aliasing_result(name):
  x = np.arange(36, dtype=np.float32).reshape(6, 6) / 7
  assert_matches_cpu(ALIASING[name], x, donate_argnums=0)


# Programs whose result is an argument (or a reshape of one, or another result): each
# result has a buffer of its own, as on XLA:CPU, unless the argument was donated.
RETURNS_ITS_INPUT = {
  "identity": jax.jit(lambda a: a),
  "array_copy": lambda a: jnp.array(a, copy=True),
  "reshape": jax.jit(lambda a: a.reshape(2, -1)),
  "loop_of_no_steps": jax.jit(
    lambda a: lax.while_loop(lambda c: c[0] < 0, lambda c: (c[0] + 1, c[1] * 2), (0, a))[1]
  ),
  "result_twice": jax.jit(lambda a: (a * 2,) * 2),
  "input_and_computed": jax.jit(lambda a: (a, a + 1, a)),
}


@pytest.mark.parametrize("name", list(RETURNS_ITS_INPUT))
def test_result_that_is_an_argument_is_a_new_buffer(name):
  x = np.arange(12, dtype=np.float32) / 3
  for device in (workshop(), jax.devices("cpu")[0]):
    a = jax.device_put(x, device)
    outs = jax.tree.leaves(RETURNS_ITS_INPUT[name](a))
    expected = [
      np.asarray(o)
      for o in jax.tree.leaves(RETURNS_ITS_INPUT[name](jax.device_put(x, jax.devices("cpu")[0])))
    ]
    pointers = [o.unsafe_buffer_pointer() for o in outs]
    assert a.unsafe_buffer_pointer() not in pointers, device
    assert len(set(pointers)) == len(pointers), device
    a.delete()
    for out, want in zip(outs, expected, strict=True):
      np.testing.assert_array_equal(np.asarray(out), want)


def test_donated_argument_returned_is_aliased_not_copied():
  x = jax.device_put(np.arange(12, dtype=np.float32), workshop())
  pointer = x.unsafe_buffer_pointer()
  y, z = jax.jit(lambda a: (a, a), donate_argnums=0)(x)
  assert x.is_deleted()
  # One of the results may keep the donated storage; the other has its own.
  assert pointer in (y.unsafe_buffer_pointer(), z.unsafe_buffer_pointer())
  assert y.unsafe_buffer_pointer() != z.unsafe_buffer_pointer()
  np.testing.assert_array_equal(np.asarray(y), np.arange(12))
  np.testing.assert_array_equal(np.asarray(z), np.arange(12))


def test_same_donated_buffer_twice_is_invalid_argument():
  x = jax.device_put(np.arange(4, dtype=np.float32), workshop())
  with pytest.raises(jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT"):
    jax.jit(lambda a, b: a + b, donate_argnums=0)(x, x)
  # The failed call did not consume x.
  assert not x.is_deleted()
  np.testing.assert_array_equal(np.asarray(x + x), np.arange(4) * 2)


# ---- errors ----


def _dilate(a):
  return lax.conv(a > 0, jnp.ones((1, 1, 3, 3), bool), (1, 1), "SAME")  # line checked below


def test_unsupported_op_error_names_op_dtype_and_location():
  # The op table gives convolution no pred kernel.
  with pytest.raises(jax.errors.JaxRuntimeError) as e:
    jax.jit(_dilate)(np.ones((1, 1, 4, 4), np.float32))
  message = str(e.value)
  assert "UNIMPLEMENTED" in message
  assert "stablehlo.convolution" in message
  assert "(pred)" in message
  line = _dilate.__code__.co_firstlineno + 1
  assert re.search(rf"test_runtime\.py:{line}\b", message), message


def test_unsupported_parameter_dtype_error_names_dtype():
  x = np.ones((1, 1, 3, 3), bool)
  with pytest.raises(jax.errors.JaxRuntimeError, match=r"UNIMPLEMENTED.*\(pred\)"):
    jax.jit(lambda x: lax.conv(x, x, (1, 1), "VALID"))(x)


def test_failing_execution_does_not_hang_and_client_survives():
  # 2^60 bytes cannot be allocated: the execution fails with RESOURCE_EXHAUSTED.
  def huge(a):
    return jnp.broadcast_to(a, (2**29, 2**29)) + 1

  with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
    within_deadline(lambda: jax.jit(huge)(np.float32(1)).block_until_ready())
  # Work queued on every device afterwards still runs.
  for i in range(4):
    y = within_deadline(lambda: np.asarray(jax.device_put(np.int32(2), workshop(i)) * 3))
    assert y == 6


def test_failing_execution_in_a_chain_does_not_hang():
  x = jax.device_put(np.ones(3, np.float32), workshop())

  def chain():
    y = jax.jit(lambda a: a + 1)(x)
    bad = jax.jit(lambda a: jnp.broadcast_to(a[0], (2**29, 2**29)) * 2)(y)
    return np.asarray(jax.jit(lambda b: b[0, :3] + 1)(bad))

  with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
    within_deadline(chain)


# ---- execution ----


def test_multiple_outputs_of_mixed_dtypes():
  x = values(np.dtype(np.float32), (3, 4), seed=3)
  i = values(np.dtype(np.int32), (4,), seed=4)

  def f(x, i):
    return x.sum(axis=0), i * 2, x > 0, (x @ x.T).astype(jnp.float64), i

  assert_matches_cpu(f, x, i)


def test_many_async_executes_chained():
  step = jax.jit(lambda a: a + 1)
  mix = jax.jit(lambda a, b: a * 2 - b)
  x = jax.device_put(np.zeros((64, 64), np.int64), workshop(1))
  y = x
  for _ in range(300):
    y = step(y)
  z = mix(y, y)  # 2*300 - 300
  within_deadline(z.block_until_ready)
  np.testing.assert_array_equal(np.asarray(z), np.full((64, 64), 300))


def test_executes_on_all_devices_concurrently_from_threads():
  f = jax.jit(lambda a, b: jnp.tanh(a @ b).sum(axis=0) + b[0])
  rng = np.random.default_rng(5)
  inputs = [
    (
      rng.standard_normal((64, 64)).astype(np.float32),
      rng.standard_normal((64, 64)).astype(np.float32),
    )
    for _ in range(4)
  ]
  expected = [np.asarray(f(*jax.device_put(args, jax.devices("cpu")[0]))) for args in inputs]

  def worker(i):
    a, b = jax.device_put(inputs[i], workshop(i))
    for _ in range(25):
      out = f(a, b)
      assert out.devices() == {workshop(i)}
      # Sums of 64 tanh values in a different order: a few f32 ulps.
      np.testing.assert_allclose(np.asarray(out), expected[i], rtol=1e-5, atol=1e-5)

  run_threads(worker)


def test_compiles_and_executes_concurrently_from_threads():
  # Compiling takes the GIL inside the plugin while other threads execute: no deadlock.
  base = np.arange(16, dtype=np.float32).reshape(4, 4) / 16

  def worker(i):
    x = jax.device_put(base, workshop(i))
    for k in range(8):
      y = jax.jit(lambda a, k=k: jnp.tanh(a * (k + i)) @ a + k)(x)
      expected = np.tanh(base * (k + i)) @ base + k
      np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-5)

  run_threads(worker)


def test_collectives_launched_concurrently_from_threads():
  # Every device must see the launches of different threads in the same order, or two
  # all-reduces wait for each other forever.
  psum = jax.pmap(lambda x: x + lax.psum(x, "i"), axis_name="i")
  pmax = jax.pmap(lambda x: lax.pmax(x * 2, "i"), axis_name="i")

  def worker(i):
    for k in range(20):
      x = np.arange(4) + k
      if i % 2:
        np.testing.assert_array_equal(np.asarray(psum(x)), x + x.sum())
      else:
        np.testing.assert_array_equal(np.asarray(pmax(x)), np.full(4, 2 * x.max()))

  run_threads(worker)


def test_pmap_on_all_devices_matches_cpu():
  def g(a):
    return a - lax.pmean(a, "i") + lax.pmax(a, "i")

  x = values(np.dtype(np.float32), (4, 3, 5), seed=6)
  ours = np.asarray(jax.pmap(g, axis_name="i", devices=jax.devices("workshop"))(x))
  ref = np.asarray(jax.pmap(g, axis_name="i", devices=jax.devices("cpu"))(x))
  # pmean sums 4 values in a different order: a couple of f32 ulps.
  np.testing.assert_allclose(ours, ref, rtol=2e-6, atol=1e-6)


# ---- inline execution (small single-device programs run on the caller's thread) ----


def slow_program(seconds_of_work=2_000_000):
  """A jit whose while loop (never run inline) keeps the device busy for a while."""

  def body(carry):
    i, acc = carry
    return i + 1, acc * 0.5 + 1.0

  return jax.jit(lambda a: lax.while_loop(lambda c: c[0] < seconds_of_work, body, (0, a))[1])


def tampered_reduce_precision():
  """An executable for workshop:0 that fails *while running*: JAX and StableHLO reject
  exponent_bits=0 at trace and parse time, so the plan of a valid one is edited in its
  serialized form (a blob from this build is loaded without recompiling)."""
  from jax._src.lib import xla_client as xc

  device = workshop(0)
  backend = device.client
  compiled = (
    jax.jit(lambda a: lax.reduce_precision(a, exponent_bits=5, mantissa_bits=2))
    .lower(np.ones(4, np.float32))
    .compile()
  )
  blob = backend.serialize_executable(compiled.runtime_executable())
  key = b"exponent_bits" + b"\x00" + (5).to_bytes(8, "little")
  assert blob.count(key) == 1
  blob = blob.replace(key, b"exponent_bits" + b"\x00" + (0).to_bytes(8, "little"))
  return backend.deserialize_executable(reseal(blob), xc.DeviceList((device,)), xc.CompileOptions())


def reseal(blob):
  """A deliberately edited executable with its body size and CRC-32 made valid again
  (runtime/serialize.h), so it reaches the plan instead of failing the checksum."""
  import struct
  import zlib

  magic = b"\x04\x00\x00\x00\x00\x00\x00\x00WSEX"
  start = blob.find(magic)
  head = start + len(magic) + 4  # magic, format version
  body = blob[head + 12 :]
  return blob[:head] + struct.pack("<QI", len(body), zlib.crc32(body)) + body


def test_error_in_inline_program_surfaces_as_jax_runtime_error():
  exe = tampered_reduce_precision()
  x = jax.device_put(np.ones(4, np.float32), workshop(0))
  with pytest.raises(jax.errors.JaxRuntimeError, match=r"INVALID_ARGUMENT.*reduce_precision"):
    within_deadline(lambda: [np.asarray(y) for y in exe.execute([x])])
  # The device is free again: the next small program runs (inline) and is right.
  np.testing.assert_array_equal(np.asarray(jnp.add(x, 1)), np.full(4, 2, np.float32))


def test_error_in_queued_program_surfaces_as_jax_runtime_error():
  # The same failure behind a busy device: the program is queued, not run inline.
  exe = tampered_reduce_precision()
  x = jax.device_put(np.ones(4, np.float32), workshop(0))
  busy = slow_program()(x)
  with pytest.raises(jax.errors.JaxRuntimeError, match=r"INVALID_ARGUMENT.*reduce_precision"):
    within_deadline(lambda: [np.asarray(y) for y in exe.execute([x])])
  within_deadline(busy.block_until_ready)


def test_inline_outputs_are_ready_on_return():
  x = jax.device_put(np.arange(4, dtype=np.float32), workshop(2))
  x.block_until_ready()
  y = jax.jit(lambda a: a * 2)(x)
  assert y.is_ready()  # Ran on this thread: its ready event was complete on return.
  np.testing.assert_array_equal(np.asarray(y), np.arange(4) * 2)


def test_large_program_without_arithmetic_runs_inline():
  # 32 MiB of values but no flops (a transpose, a few ms of copying): run inline as
  # XLA:CPU does, so it is ready on return. Queued, it would still be running.
  n = 2048
  x = jax.device_put(np.arange(n * n, dtype=np.float32).reshape(n, n), workshop(1))
  x.block_until_ready()
  y = jax.jit(lambda a: a.T)(x)
  assert y.is_ready()
  np.testing.assert_array_equal(np.asarray(y), np.arange(n * n, dtype=np.float32).reshape(n, n).T)


def test_async_dispatch_of_a_long_program_returns_before_it_finishes():
  x = jax.device_put(np.float32(3), workshop(3))
  f = slow_program()
  expected = np.asarray(f(x))  # Compiles and runs once.
  y = f(x)
  # ~10^6 loop steps take far longer than returning from the call: still running.
  assert not y.is_ready()
  # A small program queued behind it must not run inline ahead of it; its result depends
  # on the long one's.
  z = jax.jit(lambda a: a + 1)(y)
  np.testing.assert_array_equal(within_deadline(lambda: np.asarray(z)), expected + 1)
  assert y.is_ready()


def test_inline_donation_and_donation_of_a_pending_buffer():
  step = jax.jit(lambda a: a * 2 + 1, donate_argnums=0)
  x = jax.device_put(np.arange(6, dtype=np.float32), workshop(0))
  y = step(x)  # Small and ready: runs inline.
  assert x.is_deleted()
  np.testing.assert_array_equal(np.asarray(y), np.arange(6) * 2 + 1)
  # Donating the output of a still-running program: queued, takes it once it exists.
  pending = slow_program()(jax.device_put(np.full(6, 3, np.float32), workshop(0)))
  z = step(pending)
  assert pending.is_deleted()
  expected = np.asarray(slow_program()(np.full(6, 3, np.float32))) * 2 + 1
  np.testing.assert_array_equal(within_deadline(lambda: np.asarray(z)), expected)
