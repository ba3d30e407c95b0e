"""Host callbacks (jax.debug.print/callback, pure_callback, io_callback) against XLA:CPU.

One file of about 850 lines: every host-callback form, its ordering and its deadlock
scenarios share the recording fixtures at its top.

The same program runs on both backends in this process; the callbacks record what they
saw, and the records and results must agree. Deadlock scenarios run in a subprocess with a
timeout, so a deadlock fails the test instead of hanging the suite.
"""

import functools
import gc
import os
import subprocess
import sys
import textwrap
import weakref

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.experimental import io_callback
from jax.sharding import Mesh, PartitionSpec as P

from reference import cpu_device


def on_both(f, *args):
  """jit(f)(*args) on workshop and on cpu: (ours, reference), as numpy."""
  out = []
  for device in (jax.devices("workshop")[0], cpu_device()):
    r = jax.jit(f)(*jax.device_put(args, device))
    jax.effects_barrier()
    out.append(jax.tree.map(np.asarray, r))
  return out


def test_debug_print_output_and_order(capfd):
  def f(x):
    jax.debug.print("first {x}", x=x, ordered=True)
    y = jnp.sin(x)
    jax.debug.print("second {y} {n}", y=y, n=x.sum(), ordered=True)
    return y * 2

  x = np.arange(4, dtype=np.float32)
  outputs = []
  for device in (jax.devices("workshop")[0], cpu_device()):
    jax.block_until_ready(jax.jit(f)(jax.device_put(x, device)))
    jax.effects_barrier()
    outputs.append(capfd.readouterr().out)
  ours, ref = outputs
  assert ours == ref
  assert ours.index("first [0. 1. 2. 3.]") < ours.index("second")


def _body_print(c):
  jax.debug.print("body {i} {x}", i=c[0], x=c[1])
  return c[0] + 1, c[1] * 2


def _cond_print(c):
  jax.debug.print("cond {i} {x}", i=c[0], x=c[1])
  return c[1] < 20


LOOP_PRINTS = {
  # A trip count XLA:CPU knows (3), and one it does not (data-dependent: 4 steps).
  "while_body_counted": lambda x: jax.lax.while_loop(lambda c: c[0] < 3, _body_print, (0, x)),
  "while_body_data": lambda x: jax.lax.while_loop(lambda c: c[1][0] < 10, _body_print, (0, x)),
  # XLA:CPU runs a cond's callback only when it does not know the trip count (with
  # known_trip_count it never evaluates the cond); this one it does not: 4 + 1 prints.
  "while_cond_data": lambda x: jax.lax.while_loop(
    _cond_print, lambda c: (c[0] + 1, c[1] + 5), (0, x[0])
  ),
  "fori_loop": lambda x: jax.lax.fori_loop(
    0, 3, lambda i, c: (jax.debug.print("fori {i} {c}", i=i, c=c), c + i)[1], x
  ),
  "scan": lambda x: jax.lax.scan(
    lambda c, r: (jax.debug.print("scan {c} {r}", c=c, r=r), (c + r, r * c))[1], 0.0, x
  ),
  "nested": lambda x: jax.lax.fori_loop(
    0, 2, lambda i, c: jax.lax.while_loop(lambda d: d[0] < 2, _body_print, (0, c + i))[1], x
  ),
}


@pytest.mark.parametrize("name", list(LOOP_PRINTS))
def test_debug_print_in_loops_as_on_cpu(name, capfd):
  """Each iteration prints once, in order, with the iteration's values, as on XLA:CPU."""
  x = np.array([1.5, -2.0], np.float32)
  outputs, results = [], []
  for device in (jax.devices("workshop")[0], cpu_device()):
    results.append(jax.tree.map(np.asarray, jax.jit(LOOP_PRINTS[name])(jax.device_put(x, device))))
    jax.effects_barrier()
    outputs.append(capfd.readouterr().out)
  ours, ref = outputs
  assert ours == ref
  assert (
    len(ours.splitlines())
    == {
      "while_body_counted": 3,
      "while_body_data": 3,
      "while_cond_data": 5,
      "fori_loop": 3,
      "scan": 2,
      "nested": 4,
    }[name]
  ), ours
  for o, r in zip(jax.tree.leaves(results[0]), jax.tree.leaves(results[1]), strict=True):
    np.testing.assert_array_equal(o, r)


def test_debug_callback_unordered_sees_values():
  seen = {"workshop": [], "cpu": []}

  def f(x, key):
    jax.debug.callback(lambda v: seen[key].append(np.array(v)), x * 3)
    return x + 1

  x = np.arange(6, dtype=np.int32).reshape(2, 3)
  for key, device in (("workshop", jax.devices("workshop")[0]), ("cpu", cpu_device())):
    jax.jit(f, static_argnums=1)(jax.device_put(x, device), key)
    jax.effects_barrier()
  assert len(seen["workshop"]) == 1
  np.testing.assert_array_equal(seen["workshop"][0], seen["cpu"][0])


@pytest.mark.parametrize(
  "dtype", [np.float32, np.int8, np.bool_, np.complex64, ml_dtypes.bfloat16, np.uint32]
)
def test_pure_callback_dtypes(dtype):
  def host(a):
    return (np.asarray(a)[::-1].copy(), np.asarray(a).shape[0] * np.ones((), np.int32))

  def f(x):
    spec = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((), np.int32))
    r, n = jax.pure_callback(host, spec, x)
    return r, n + 1

  x = (np.arange(10) % 3).astype(dtype)
  ours, ref = on_both(f, x)
  for a, b in zip(ours, ref):
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("method", ["sequential", "expand_dims", "broadcast_all"])
def test_pure_callback_vmap(method):
  calls = []

  def host(a, b):
    calls.append(np.shape(a))
    return (np.asarray(a) * np.asarray(b)).astype(np.float32)

  def g(a, b):
    return jax.pure_callback(
      host,
      jax.ShapeDtypeStruct(jnp.broadcast_shapes(a.shape, b.shape), np.float32),
      a,
      b,
      vmap_method=method,
    )

  f = jax.vmap(g, in_axes=(0, None))
  a = np.arange(12, dtype=np.float32).reshape(4, 3)
  b = np.array([1.0, -2.0, 0.5], np.float32)
  ours, ref = on_both(f, a, b)
  np.testing.assert_array_equal(ours, ref)
  np.testing.assert_array_equal(ours, a * b)
  # The batching strategy reaches the host the same way on both backends.
  assert calls[: len(calls) // 2] == calls[len(calls) // 2 :]


def test_grad_through_custom_jvp_pure_callback():
  @jax.custom_jvp
  def host_sin(x):
    return jax.pure_callback(
      lambda v: np.sin(v).astype(v.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype), x
    )

  @host_sin.defjvp
  def _jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return host_sin(x), jax.pure_callback(
      lambda v: np.cos(v).astype(v.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype), x
    ) * t

  f = jax.grad(lambda x: (host_sin(x) ** 2).sum())
  x = np.linspace(-1, 1, 5).astype(np.float32)
  ours, ref = on_both(f, x)
  np.testing.assert_allclose(ours, ref, rtol=1e-6)
  np.testing.assert_allclose(ours, 2 * np.sin(x) * np.cos(x), rtol=1e-5)


@pytest.mark.parametrize("ordered", [True, False])
def test_io_callback_in_scan(ordered):
  logs = {"workshop": [], "cpu": []}

  def run(key, x):
    def step(carry, xi):
      y = io_callback(
        lambda c, v: (logs[key].append((float(c), float(v))), np.float32(c + v))[1],
        jax.ShapeDtypeStruct((), np.float32),
        carry,
        xi,
        ordered=ordered,
      )
      return y, y * 2

    return jax.lax.scan(step, np.float32(0), x)

  x = np.arange(5, dtype=np.float32)
  results = {}
  for key, device in (("workshop", jax.devices("workshop")[0]), ("cpu", cpu_device())):
    results[key] = jax.tree.map(
      np.asarray, jax.jit(run, static_argnums=0)(key, jax.device_put(x, device))
    )
    jax.effects_barrier()
  for a, b in zip(results["workshop"], results["cpu"]):
    np.testing.assert_array_equal(a, b)
  assert logs["workshop"] == logs["cpu"]


def test_ordered_effects_across_calls():
  log = []
  f = jax.jit(
    lambda x: io_callback(
      lambda v: (log.append(int(v)), v)[1], jax.ShapeDtypeStruct((), np.int32), x, ordered=True
    )
  )
  for i in range(20):
    f(np.int32(i))  # Async dispatch: no waiting between calls.
  jax.effects_barrier()
  assert log == list(range(20))


def test_raising_callback_is_a_runtime_error_naming_it():
  def exploding_callback(v):
    raise ValueError("boom from the host")

  f = jax.jit(
    lambda x: jax.pure_callback(exploding_callback, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
  )
  with pytest.raises(
    jax.errors.JaxRuntimeError, match="exploding_callback.*ValueError: boom from the host"
  ):
    np.asarray(f(np.ones(3, np.float32)))
  # The device is still usable afterwards.
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda x: x + 1)(np.ones(2))), [2, 2])


@pytest.mark.parametrize(
  "result,match",
  [
    (np.ones(4, np.float32), "incorrect output shape.*expected \\(3,\\)"),
    (np.ones(3, np.int32), "incorrect output dtype.*expected float32"),
    ((np.ones(3, np.float32), np.ones(3, np.float32)), "returned 2 results, expected 1"),
  ],
)
def test_wrong_result_is_a_clear_error(result, match):
  def wrong_result(v):
    return result

  f = jax.jit(lambda x: jax.pure_callback(wrong_result, jax.ShapeDtypeStruct((3,), np.float32), x))
  # pure_callback wraps a single non-tuple result: a 2-tuple is two results.
  with pytest.raises(jax.errors.JaxRuntimeError, match="wrong_result.*" + match):
    np.asarray(f(np.ones(3, np.float32)))


def test_pmap_runs_the_callback_per_device():
  seen = []
  f = jax.pmap(
    lambda x: jax.pure_callback(
      lambda v: (seen.append(float(v.sum())), v * 10)[1], jax.ShapeDtypeStruct(x.shape, x.dtype), x
    ),
    devices=jax.devices("workshop"),
  )
  x = np.arange(8, dtype=np.float32).reshape(4, 2)
  np.testing.assert_array_equal(np.asarray(f(x)), x * 10)
  assert sorted(seen) == sorted(x.sum(axis=1).tolist())


def test_shard_map_runs_the_callback_per_shard():
  results = {}
  for name in ("workshop", "cpu"):
    mesh = Mesh(np.array(jax.devices(name)), ("i",))
    seen = []

    def body(x):
      jax.debug.callback(lambda v: seen.append(np.array(v)), x)
      return jax.pure_callback(lambda v: v + 1, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    out = np.asarray(f(np.arange(8, dtype=np.float32)))
    jax.effects_barrier()
    results[name] = (out, sorted(s.tolist() for s in seen))
  np.testing.assert_array_equal(results["workshop"][0], results["cpu"][0])
  assert results["workshop"][1] == results["cpu"][1]
  assert len(results["workshop"][1]) == 4


def test_ordered_io_callback_inside_shard_map_as_on_cpu():
  # pjit_test.py::ArrayPjitTest::test_empty_io_callback_under_shard_map: an ordered
  # callback threads a token through the manual computation, whose operand checks read
  # the token's "shape" (an internal error).
  results = {}
  for name in ("workshop", "cpu"):
    mesh = Mesh(np.array(jax.devices(name)), ("i",))
    seen = []

    def body(x, y):
      io_callback(lambda v: seen.append(np.array(v)), (), x, ordered=True)
      return x + y[..., None]

    f = jax.jit(
      jax.shard_map(body, mesh=mesh, in_specs=(P(None, "i"), P(None)), out_specs=P(None, "i"))
    )
    out = np.asarray(f(np.arange(32, dtype=np.float32).reshape(2, 16), np.ones(2, np.float32)))
    jax.effects_barrier()
    results[name] = (out, sorted(s.tolist() for s in seen))
  np.testing.assert_array_equal(results["workshop"][0], results["cpu"][0])
  assert results["workshop"][1] == results["cpu"][1]
  assert len(results["workshop"][1]) == 4


def test_executable_releases_the_callback():
  class Host:
    def __call__(self, v):
      return v

  host = Host()
  ref = weakref.ref(host)
  # noqa reason: ruff reads the lambda after the `del host` below; it runs before.
  f = jax.jit(lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x))  # noqa: F821
  np.testing.assert_array_equal(np.asarray(f(np.ones(2, np.float32))), [1, 1])
  del f, host
  jax.clear_caches()
  gc.collect()
  if ref() is not None:
    # The device worker may drop the executable's last reference just after the result
    # is ready; without the GIL it queues the callback's release for the next entry into
    # Python (runtime/python_gate.h), which a compile is.
    jax.jit(lambda x: x + 1).lower(np.ones(2, np.float32)).compile()
    gc.collect()
  assert ref() is None


_DEADLOCK_SCRIPT = textwrap.dedent("""
    import os, threading
    os.environ["JAX_PLATFORMS"] = "workshop,cpu"
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import io_callback

    cpu = jax.devices("cpu")[0]
    ws = jax.devices("workshop")

    # 1. A callback that calls JAX on the CPU backend (compiles and runs there).
    def uses_cpu_jax(v):
      return np.asarray(jax.jit(jnp.cumsum)(jax.device_put(v, cpu)))
    f = jax.jit(lambda x: jax.pure_callback(uses_cpu_jax, jax.ShapeDtypeStruct(x.shape, x.dtype), x))
    assert np.asarray(f(np.ones(5, np.float32))).tolist() == [1, 2, 3, 4, 5]

    # 2. Callbacks from all devices at once, while this thread keeps the GIL busy.
    def slow_host(v):
      sum(range(20000))  # Python work: holds the GIL for a while.
      return v + 7
    slow = jax.pmap(lambda x: jax.pure_callback(slow_host, jax.ShapeDtypeStruct(x.shape, x.dtype), x),
                    devices=ws)
    outs = [slow(np.full((4, 3), i, np.float32)) for i in range(10)]  # Async.
    busy = sum(i * i for i in range(200000))  # Holds the GIL while callbacks wait for it.
    for i, o in enumerate(outs):
      assert np.asarray(o).tolist() == [[i + 7] * 3] * 4

    # 3. Host threads dispatching and fetching concurrently.
    g = jax.jit(lambda x: io_callback(lambda v: v * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x))
    errors = []
    def worker(k):
      try:
        for i in range(20):
          assert float(g(np.float32(i + k))) == 2 * (i + k)
      except Exception as e:
        errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert not errors, errors

    # 5. A callback that calls JAX on the workshop device that runs it (as XLA:CPU, the
    # nested program runs on the callback's thread), from a small program (run on the
    # caller's thread) and from one with a loop (which has callbacks: run there too when idle).
    def uses_workshop_jax(v):
      return np.asarray(jax.jit(lambda u: u.sum() * 2)(jax.device_put(v, ws[0])))
    spec = jax.ShapeDtypeStruct((), np.float32)
    small = jax.jit(lambda x: jax.pure_callback(uses_workshop_jax, spec, x))
    looped = jax.jit(lambda x: jax.lax.fori_loop(
        0, 3, lambda i, c: c + io_callback(uses_workshop_jax, spec, x, ordered=True), 0.0))
    assert float(small(np.ones(4, np.float32))) == 8
    assert float(looped(np.ones(4, np.float32))) == 24

    # 4. block_until_ready, delete and garbage while callbacks are pending.
    h = jax.jit(lambda x: jax.pure_callback(lambda v: v - 1, jax.ShapeDtypeStruct(x.shape, x.dtype), x))
    ys = [h(np.ones(1000, np.float32)) for _ in range(20)]
    jax.block_until_ready(ys[-1])
    for y in ys[:10]:
      y.delete()
    del ys
    jax.effects_barrier()
    print("OK")
""")


def test_no_deadlock_scenarios():
  done = subprocess.run(
    [sys.executable, "-c", _DEADLOCK_SCRIPT], capture_output=True, text=True, timeout=240
  )
  assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]


_EXIT_SCRIPT = textwrap.dedent("""
    import os, sys, time
    os.environ["JAX_PLATFORMS"] = sys.argv[1] + ",cpu"
    import jax, numpy as np

    def slow(v):
      time.sleep(0.005)  # Releases the GIL: the main thread goes on to exit meanwhile.
      return v
    spec = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)
    f = jax.pmap(lambda x: jax.pure_callback(slow, spec(x), x), devices=jax.devices(sys.argv[1]))
    g = jax.jit(lambda x: jax.lax.fori_loop(
        0, 20, lambda i, c: c + jax.pure_callback(slow, spec(c), c), x))
    outs = [f(np.ones((4, 3), np.float32)) for _ in range(10)]
    outs += [g(np.ones(3, np.float32)) for _ in range(2)]
    print("leaving with programs queued", flush=True)
""")


@pytest.mark.parametrize("platform", ["workshop", "cpu"])
def test_exit_with_callbacks_still_queued(platform):
  """Leaving the interpreter while programs with callbacks are queued exits cleanly, as on
  XLA:CPU. (On workshop a callback still running at finalization was ended by CPython
  inside pybind11's GIL guard: "Fatal Python error: PyThreadState_Get", SIGABRT;
  jax.effects_barrier() at exit does not wait for pmap's later calls.)"""
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
  done = subprocess.run(
    [sys.executable, "-c", _EXIT_SCRIPT, platform],
    capture_output=True,
    text=True,
    timeout=240,
    env=env,
  )
  assert done.returncode == 0, done.stderr[-3000:]
  assert "leaving with programs queued" in done.stdout and "Fatal" not in done.stderr


def test_replicated_multi_device_jit_calls_once_as_on_cpu(capfd):
  from jax.sharding import NamedSharding

  results = {}
  for name in ("workshop", "cpu"):
    calls = []
    replicated = NamedSharding(Mesh(np.array(jax.devices(name)), ("i",)), P())

    def host(v):
      calls.append(1)
      return v + len(calls)  # A second call anywhere would change the result.

    def f(x):
      jax.debug.print("once {x}", x=x)
      return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x) * 2

    g = jax.jit(f, in_shardings=replicated, out_shardings=replicated)
    out = g(jax.device_put(np.arange(4, dtype=np.float32), replicated))
    jax.effects_barrier()
    results[name] = (
      [np.asarray(s.data) for s in out.addressable_shards],
      len(calls),
      capfd.readouterr().out.count("once"),
    )
  ours, ref = results["workshop"], results["cpu"]
  assert ours[1:] == ref[1:] == (1, 1)
  for a, b in zip(ours[0], ref[0]):
    np.testing.assert_array_equal(a, b)


def test_checkify_runtime_errors_inside_jit():
  from jax.experimental import checkify

  def f(x):
    checkify.check(jnp.all(x > 0), "needs positive values, got {}", x.min())
    return jnp.log(x)

  previous = jax.config.jax_experimental_unsafe_xla_runtime_errors
  jax.config.update("jax_experimental_unsafe_xla_runtime_errors", True)
  try:
    for device in (jax.devices("workshop")[0], cpu_device()):
      with pytest.raises(jax.errors.JaxRuntimeError, match="needs positive values, got -2"):
        np.asarray(jax.jit(f)(jax.device_put(np.array([1.0, -2.0], np.float32), device)))
      # A good run afterwards is unaffected.
      ok = jax.jit(f)(jax.device_put(np.ones(3, np.float32), device))
      np.testing.assert_array_equal(np.asarray(ok), np.zeros(3))
    jax.effects_barrier()
  finally:
    jax.config.update("jax_experimental_unsafe_xla_runtime_errors", previous)


def test_sharded_jit_runs_each_callback_once_as_on_cpu(capfd):
  """A jit over a sharded array (outside shard_map): JAX pins each callback to device 0,
  so it runs once on the whole value. (Partitioning used to reject a pinned callback with
  results, and ran a debug.print/debug.callback once per device.)"""
  from jax.sharding import NamedSharding

  x = np.arange(8, dtype=np.float32)
  results = {}
  for name in ("workshop", "cpu"):
    devices = np.array(jax.devices(name))
    row = NamedSharding(Mesh(devices, ("i",)), P("i"))
    grid = NamedSharding(Mesh(devices.reshape(2, 2), ("a", "b")), P("a", "b"))
    seen = []

    def host(v):
      seen.append(v.shape)
      return v * 2 + len(seen)  # A second call anywhere would change the result.

    def f(v):
      jax.debug.print("sharded {v}", v=v)
      return jax.pure_callback(host, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + v

    out = jax.jit(f)(jax.device_put(x, row))
    g = jax.jit(lambda v: (jax.debug.callback(lambda u: seen.append(u.shape), v), v.sum())[1])
    total = g(jax.device_put(x.reshape(2, 4), grid))
    jax.effects_barrier()
    results[name] = (np.asarray(out), float(total), seen, capfd.readouterr().out)
  ours, ref = results["workshop"], results["cpu"]
  np.testing.assert_array_equal(ours[0], ref[0])
  np.testing.assert_array_equal(ours[0], x * 3 + 1)
  assert ours[1:] == ref[1:]
  assert ref[2] == [(8,), (2, 4)] and ref[3].count("sharded") == 1


def test_ordered_io_callback_in_a_sharded_jit_as_on_cpu():
  """An ordered io_callback threads a token through a sharded jit's @main; partitioning
  read the token's rank as a tensor's ("Cannot cast type to RankedTensorType (from
  Type(!stablehlo.token))")."""
  from jax.sharding import NamedSharding

  x = np.arange(8, dtype=np.float32)
  results = {}
  for name in ("workshop", "cpu"):
    row = NamedSharding(Mesh(np.array(jax.devices(name)), ("i",)), P("i"))
    seen = []

    def host(v):
      seen.append(np.asarray(v).copy())
      return np.asarray(v) * 2

    f = jax.jit(
      lambda v: (
        io_callback(host, jax.ShapeDtypeStruct(v.shape, v.dtype), jnp.sin(v), ordered=True) + 1
      )
    )
    out = [np.asarray(f(jax.device_put(x, row))) for _ in range(2)]
    jax.effects_barrier()
    results[name] = (out, seen)
  ours, ref = results["workshop"], results["cpu"]
  for a, b in zip(ours[0], ref[0]):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  assert len(ours[1]) == len(ref[1]) == 2
  for a, b in zip(ours[1], ref[1]):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_partitioned_debug_callback_gets_each_devices_shards_as_on_cpu(capfd):
  """jax.debug.callback(..., partitioned=True) in a sharded jit runs on every device with
  its own shards (debugging_primitives_test.py::PartitionedDebugCallbackTest); it ran
  once on the gathered array. Also under vmap, and debug.print."""
  from jax.sharding import NamedSharding

  x = np.arange(16).reshape(2, 8)
  results = {}
  for name in ("workshop", "cpu"):
    s = NamedSharding(Mesh(np.array(jax.devices(name)), ("i",)), P(None, "i"))
    seen = []

    @jax.jit
    def f(v):
      jax.debug.callback(lambda u: seen.append(np.asarray(u).tolist()), v, partitioned=True)
      jax.vmap(lambda r: jax.debug.print("row {r}", r=r, partitioned=True))(v)
      return v + 1

    out = f(jax.device_put(x, s))
    jax.effects_barrier()
    results[name] = (np.asarray(out), sorted(seen), sorted(capfd.readouterr().out.splitlines()))
  ours, ref = results["workshop"], results["cpu"]
  np.testing.assert_array_equal(ours[0], ref[0])
  assert ours[1:] == ref[1:]
  assert ref[1] == sorted(x[:, 2 * i : 2 * i + 2].tolist() for i in range(4))
  assert len(ref[2]) == 8  # two rows on each of four devices


def test_partitioned_debug_callback_inside_a_cond_gets_shards_as_on_cpu():
  """The same inside lax.cond and lax.switch: a conditional whose branches run on shards
  stays sharded (it ran whole, and every device's callback got the whole array)."""
  from jax.sharding import NamedSharding

  x = np.arange(8, dtype=np.float32)
  results = {}
  for name in ("workshop", "cpu"):
    s = NamedSharding(Mesh(np.array(jax.devices(name)), ("i",)), P("i"))
    seen = []

    def branch(v, k):
      jax.debug.callback(lambda u: seen.append((k, np.asarray(u).tolist())), v, partitioned=True)
      return v * k

    @jax.jit
    def f(v, p, i):
      a = jax.lax.cond(p, lambda u: branch(u, 2), lambda u: branch(u, 3), v)
      return jax.lax.switch(i, [lambda u: branch(u, 4), lambda u: u, lambda u: branch(u, 5)], a)

    out = f(jax.device_put(x, s), True, 2)
    jax.effects_barrier()
    results[name] = (np.asarray(out), sorted(seen))
  ours, ref = results["workshop"], results["cpu"]
  np.testing.assert_array_equal(ours[0], x * 10)
  np.testing.assert_array_equal(ref[0], x * 10)
  assert ours[1] == ref[1]
  assert ref[1] == sorted(
    [(2, x[2 * i : 2 * i + 2].tolist()) for i in range(4)]
    + [(5, (2 * x[2 * i : 2 * i + 2]).tolist()) for i in range(4)]
  )


def test_callback_pinned_to_another_device_runs_there_once():
  """pure_callback(..., sharding=SingleDeviceSharding(d)) in a jit over 4 devices runs on
  partition d only and every device gets its result. Compared with numpy: XLA:CPU returns
  the result with a MAXIMAL sharding whose device-0 shard np.asarray reads (zeros here)."""
  from jax.sharding import NamedSharding, SingleDeviceSharding

  devices = jax.devices("workshop")
  x = np.arange(8, dtype=np.float32)
  calls = []

  def host(v):
    calls.append(1)
    return v * 2 + 1

  f = jax.jit(
    lambda v: (
      jax.pure_callback(
        host, jax.ShapeDtypeStruct(v.shape, v.dtype), v, sharding=SingleDeviceSharding(devices[2])
      )
      * 1
    )
  )
  out = f(jax.device_put(x, NamedSharding(Mesh(np.array(devices), ("i",)), P("i"))))
  jax.effects_barrier()
  assert len(calls) == 1
  for shard in out.addressable_shards:
    np.testing.assert_array_equal(np.asarray(shard.data), (x * 2 + 1)[shard.index])


@pytest.mark.parametrize("kind", ["pure_callback", "io_callback"])
def test_failed_callback_is_raised_once_as_on_cpu(kind):
  """A callback that raises fails that call, as on XLA:CPU (which runs such a small program
  on the caller's thread and returns the error from Execute); later effects barriers and
  programs are unaffected. (It used to be re-raised by every jax.effects_barrier() until
  another program with callbacks ran on the device, and at exit.)"""

  def failing_host(v):
    raise ValueError("callback refuses")

  call = {
    "pure_callback": jax.pure_callback,
    "io_callback": functools.partial(io_callback, ordered=False),
  }[kind]
  f = jax.jit(lambda v: call(failing_host, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + 1)
  for device in (jax.devices("workshop")[0], cpu_device()):
    with pytest.raises(jax.errors.JaxRuntimeError, match="ValueError: callback refuses"):
      np.asarray(f(jax.device_put(np.ones(3, np.float32), device)))
    jax.effects_barrier()  # Must not raise the old error again.
    np.testing.assert_array_equal(
      np.asarray(jax.jit(lambda v: v * 2)(jax.device_put(np.ones(2, np.float32), device))), [2, 2]
    )
    jax.effects_barrier()


_INSPECTED = {
  # name: (mesh shape, input spec, function of the value, inspect and mesh)
  "sharded": ((4,), P("i"), lambda v, ins, mesh: (ins(v), v * 2)[1]),
  "replicated": ((4,), P(), lambda v, ins, mesh: (ins(v), v * 2)[1]),
  "2d_transposed": ((2, 2), P("b", "a"), lambda v, ins, mesh: (ins(v), v * 2)[1]),
  "propagated_through_transpose": (
    (2, 2),
    P("a", None),
    lambda v, ins, mesh: (ins(v.T), v.T @ v)[1],
  ),
  "dead_operand": ((4,), P("i"), lambda v, ins, mesh: (ins(v + 1), v)[1]),
  "shard_map_body": (
    (4,),
    P(),
    lambda v, ins, mesh: jax.shard_map(
      lambda u: (ins(u), u + 1)[1], mesh=mesh, in_specs=P("i"), out_specs=P("i")
    )(v),
  ),
}


@pytest.mark.parametrize("case", sorted(_INSPECTED))
def test_inspect_array_sharding_inside_jit_as_on_cpu(case):
  """jax.debug.inspect_array_sharding inside jit is answered at compile time with the
  sharding the partitioner chose for the value (XLA's SPMD partitioner on CPU; Shardy's
  propagation here), or P() in a shard_map body. It used to be an unsupported custom call
  (InspectSharding); `dead_operand` also made an empty fusion once the call was dropped."""
  from jax.sharding import NamedSharding

  shape, spec, body = _INSPECTED[case]
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  results = {}
  for name in ("workshop", "cpu"):
    mesh = Mesh(
      np.array(jax.devices(name)).reshape(shape), ("i",) if len(shape) == 1 else ("a", "b")
    )
    seen = []
    ins = functools.partial(
      jax.debug.inspect_array_sharding, callback=lambda s: seen.append(str(s.spec))
    )
    out = jax.jit(lambda v: body(v, ins, mesh))(jax.device_put(x, NamedSharding(mesh, spec)))
    results[name] = (np.asarray(out), seen)
  np.testing.assert_array_equal(results["workshop"][0], results["cpu"][0])
  assert results["workshop"][1] == results["cpu"][1] and len(results["cpu"][1]) == 1


def test_dce_sink_is_a_no_op_that_keeps_its_operand():
  """lax.dce_sink(y, prevent_mlir_dce=True) (custom_call @dce_sink) compiles and computes
  nothing; the compiled text keeps it and y's add, as XLA:CPU's (lax_test's
  test_dce_sink_prevents_xla_dce), also inside a loop body."""

  def f(x):
    y = x + 1
    jax.lax.dce_sink(y, prevent_mlir_dce=True)
    return x * 2

  def in_loop(x):
    def body(i, c):
      jax.lax.dce_sink(c + i, prevent_mlir_dce=True)
      return c * 2

    return jax.lax.fori_loop(0, 3, body, x)

  x = jnp.array([1.0, 2.0])
  for fn in (f, in_loop):
    ours, ref = on_both(fn, x)
    np.testing.assert_array_equal(ours, ref)
  text = jax.jit(f).lower(jax.device_put(x, jax.devices("workshop")[0])).compile().as_text()
  assert "dce_sink" in text and "add" in text, text


def _print_in_loop(x):
  return jax.lax.fori_loop(0, 3, lambda i, c: (jax.debug.print("{i}", i=i), c @ c / 64)[1], x)


def _print_outside_loops(x):
  # Too much arithmetic to run on the caller's thread for its size alone.
  y = x @ x
  jax.debug.print("before {s}", s=y[0, 0])
  y = jnp.tanh(y @ x)
  jax.debug.print("after {s}", s=y[0, 0])
  return y


def _is_float(word):
  try:
    float(word)
  except ValueError:
    return False
  return True


@pytest.mark.parametrize("case", ["fori_loop", "no_loop", "pmap", "sharded", "busy_device"])
def test_callbacks_have_run_when_the_call_returns(case):
  """What a program's callbacks print is printed by the time the jitted call returns:
  stdout captured only around the call, without waiting for the result, holds what the
  CPU backend prints in all (captured until its effects are done). XLA:CPU gives the
  first three cases too (jaxlib runs programs with host callbacks synchronously there),
  not a sharded jit or one queued behind a running program. Workshop used to return first
  and print into whatever ran next (equinox's test_backward_checkpointed)."""
  import contextlib
  import io

  from jax.sharding import NamedSharding

  x = np.eye(64, dtype=np.float32) + np.float32(0.01)
  captured = {}
  for name in ("workshop", "cpu"):
    devices = jax.devices(name)
    if case == "pmap":
      f = jax.pmap(_print_in_loop, devices=devices)
      arg = np.stack([x] * len(devices))
    elif case == "sharded":
      f = jax.jit(_print_in_loop)
      arg = jax.device_put(x, NamedSharding(Mesh(np.array(devices), ("i",)), P("i")))
    else:
      f = jax.jit(_print_in_loop if case != "no_loop" else _print_outside_loops)
      arg = jax.device_put(x, devices[0])
    with contextlib.redirect_stdout(io.StringIO()):
      jax.block_until_ready(f(arg))  # Compiled, and nothing of it still running.
      jax.effects_barrier()
    if case == "busy_device":
      # Queued behind a long program on the same device.
      busy = jax.jit(lambda v: jax.lax.fori_loop(0, 200, lambda i, c: jnp.tanh(c @ v), v))
      arg = busy(arg)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      result = f(arg)
      if name == "cpu":
        jax.block_until_ready(result)
        jax.effects_barrier()
    captured[name] = out.getvalue()
    jax.block_until_ready(result)
    jax.effects_barrier()
  if case == "pmap":  # The devices' prints interleave in any order, on both backends.
    captured = {name: "".join(sorted(text.splitlines(True))) for name, text in captured.items()}
  # The printed floats of no_loop come from matmuls whose summation order depends on how
  # many threads split them (13 cores differ from 2 in the last bits): words equal,
  # numbers to f32 rounding.
  ours, ref = captured["workshop"].splitlines(), captured["cpu"].splitlines()
  assert len(ours) == len(ref), captured
  for got, want in zip(ours, ref):
    got_words, want_words = got.split(), want.split()
    assert [w for w in got_words if not _is_float(w)] == [
      w for w in want_words if not _is_float(w)
    ], captured
    np.testing.assert_allclose(
      [float(w) for w in got_words if _is_float(w)],
      [float(w) for w in want_words if _is_float(w)],
      rtol=1e-5,
    )
  lines = captured["cpu"].splitlines()
  assert len(lines) == {"no_loop": 2, "pmap": 12}.get(case, 3), captured["cpu"]


def test_token_results_are_token_buffers():
  """A program's token result is a PJRT_Buffer_Type_TOKEN buffer, as XLA:CPU's: reading
  it as an array raises (api_test's test_print_token_buffer_error; it was an empty
  pred array), and passing it back as a token argument works."""
  for device in (jax.devices("workshop")[0], cpu_device()):
    with jax.default_device(device):
      token = jax.lax.create_token()
      with pytest.raises(RuntimeError, match="Cannot convert a token-shape buffer"):
        _ = token._buf._value

      @jax.jit
      def noop(a, tok):
        return a * 2, tok

      a, token2 = noop(jnp.ones(3), token)
      a, _ = noop(a, token2)  # A returned token as an argument again.
      np.testing.assert_array_equal(np.asarray(a), [4.0, 4.0, 4.0])
      assert isinstance(token2, jax._src.core.Token)  # pylint: disable=protected-access
