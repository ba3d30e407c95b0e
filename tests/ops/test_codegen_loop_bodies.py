"""Loops the tier cannot take whole (values too big for registers) still run their
bodies' elementwise chains as fusions (compiler/fusion.py fuses inside `while` and
`case` regions), compiled to native code when the chain's size times the loop's static
trip count reaches the thresholds (codegen.compile_fusions, loops.trip_count).

Each program runs generated (default setting), interpreted (WORKSHOP_CODEGEN=0), on
JAX's CPU backend and against float64 numpy where the algorithm is simple to restate.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codegen_helpers import plan_of, run_with, serialized_round_trip
from codegen_helpers import private_cache  # noqa: F401  (an autouse fixture: importing it applies it)
from jax_plugins.workshop.compiler import codegen
from jax_plugins.workshop.compiler.codegen import fusions
from jax_plugins.workshop.compiler.codegen import loops
from jax_plugins.workshop.compiler.plan import Plan
from reference import cpu_device, run_on
from test_codegen_memory_loops import decode, decode_numpy

rng = np.random.default_rng(36)
DT = 0.005


@pytest.fixture(autouse=True)
def fresh_emissions():
  codegen._emitted.clear()  # pylint: disable=protected-access
  yield
  codegen._emitted.clear()  # pylint: disable=protected-access


def _ops(plan: Plan) -> list[str]:
  """Every op of `plan`, sub-plans of while/jit_loop/case included."""
  out = []
  for i in plan.instrs:
    out.append(i.op)
    if i.op in ("while", "jit_loop", "case"):
      for v in i.attrs.values():
        if isinstance(v, Plan):
          out += _ops(v)
  return out


def lorenz96(x, steps):
  def f(x):
    return (jnp.roll(x, -1, -1) - jnp.roll(x, 2, -1)) * jnp.roll(x, 1, -1) - x + 8.0

  def rk4(_, x):
    k1 = f(x)
    k2 = f(x + DT / 2 * k1)
    k3 = f(x + DT / 2 * k2)
    k4 = f(x + DT * k3)
    return x + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

  return jax.lax.fori_loop(0, steps, rk4, x)


def lorenz96_numpy(x, steps):
  x = x.astype(np.float64)

  def f(x):
    return (np.roll(x, -1, -1) - np.roll(x, 2, -1)) * np.roll(x, 1, -1) - x + 8.0

  for _ in range(steps):
    k1 = f(x)
    k2 = f(x + DT / 2 * k1)
    k3 = f(x + DT / 2 * k2)
    k4 = f(x + DT * k3)
    x = x + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
  return x


def test_loop_body_chains_are_fused_and_generated_by_trip_count(monkeypatch):
  # 16x256 = 4096 elements per chain, under MIN_ELEMENTS alone; 40 steps make it 163840.
  monkeypatch.setattr(fusions, "MIN_WORK", 0)
  x = (8 + 0.01 * rng.standard_normal((16, 256))).astype(np.float32)
  steps = 40
  f = lambda v: lorenz96(v, steps)  # noqa: E731
  plan = plan_of(f, x)
  loop = next(i for i in plan.instrs if i.op in ("while", "jit_loop"))
  assert loops.trip_count(plan, loop) == steps
  body = _ops(loop.attrs["body"])
  assert "jit_fusion" in body and "fusion" not in body, body
  one_step = _ops(plan_of(lambda v: lorenz96(v, 1), x).instrs[-1].attrs["body"])
  assert "jit_fusion" not in one_step  # 4096 elements once: below the threshold
  generated = run_with(monkeypatch, "1", f, x)
  np.testing.assert_array_equal(generated, run_with(monkeypatch, "0", f, x))
  np.testing.assert_allclose(generated, run_on(cpu_device(), f, x), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(generated, lorenz96_numpy(x, steps), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cheap_loop_body_fusions_are_generated_at_the_default_thresholds(monkeypatch, dtype):
  # A KV-cache decode loop (test_codegen_memory_loops.py): its [64, 1] + [64, 128] update,
  # 8192 elements of one add, is far under MIN_WORK, but the loop runs it 64 times: in a
  # loop body only MIN_LOOP_ELEMENTS (times the trip count) applies.
  assert 8192 * 64 >= fusions.MIN_LOOP_ELEMENTS and 8192 * 64 * 2 < fusions.MIN_WORK
  cache = np.zeros((64, 128), dtype)
  q = rng.standard_normal(128).astype(dtype)
  with jax.enable_x64(dtype == np.float64):
    loop = next(i for i in plan_of(decode, cache, q).instrs if i.op in ("while", "jit_loop"))
    body = _ops(loop.attrs["body"])
    assert "jit_fusion" in body and "fusion" not in body, body
    generated = run_with(monkeypatch, "1", decode, cache, q)
    interpreted = run_with(monkeypatch, "0", decode, cache, q)
    cpu = run_on(cpu_device(), decode, cache, q)
  assert generated.dtype == dtype
  tol = 1e-5 if dtype == np.float32 else 1e-12
  np.testing.assert_allclose(generated, interpreted, rtol=tol, atol=tol)
  np.testing.assert_allclose(generated, cpu, rtol=tol, atol=tol)
  np.testing.assert_allclose(generated, decode_numpy(cache, q), rtol=10 * tol, atol=10 * tol)


def sampler(x, key):
  # A threefry split per step (runs of 2-element ops, under fusion.MIN_REGION_ELEMENTS,
  # with independent instructions between them) next to a 2048-element chain: without
  # the memory pass the loop stays interpreted (the chain is too big for registers), the
  # chain is a fusion and the hash runs as jit_blocks; with it, one jit_loop.
  def step(i, c):
    x, k = c
    k, sub = jax.random.split(k)
    return jnp.tanh(x * 0.9 + jax.random.uniform(sub, x.shape) * 0.1) + 0.01 * i, k

  return jax.lax.fori_loop(0, 8, step, (x, key))


def test_loop_body_fusions_and_blocks_keep_their_order_and_bits(monkeypatch):
  # Interpreted (a loop with values in memory is the default): the hash as jit_blocks.
  monkeypatch.setattr(codegen, "compile_memory_loops", lambda plan: plan)
  x = rng.standard_normal(2048).astype(np.float32)
  key = np.asarray(jax.random.key_data(jax.random.key(3)))
  body = _ops(next(i for i in plan_of(sampler, x, key).instrs if i.op == "while").attrs["body"])
  assert "fusion" in body or "jit_fusion" in body, body
  assert "jit_block" in body, body
  generated = run_with(monkeypatch, "1", sampler, x, key)
  interpreted = run_with(monkeypatch, "0", sampler, x, key)
  cpu = run_on(cpu_device(), sampler, x, key)
  np.testing.assert_array_equal(generated[1], interpreted[1])  # the key: integer ops
  np.testing.assert_array_equal(generated[1], cpu[1])
  np.testing.assert_array_equal(generated[0], interpreted[0])
  np.testing.assert_allclose(generated[0], cpu[0], rtol=2e-6, atol=2e-6)


def test_serialized_jit_block_round_trips_and_falls_back(monkeypatch):
  # A deserialized executable compiles its blocks' source again; without the JIT the
  # blocks run their bodies interpreted, with the same bits.
  monkeypatch.setattr(codegen, "compile_memory_loops", lambda plan: plan)
  key = np.asarray(jax.random.key_data(jax.random.key(5)))
  x = rng.standard_normal(2048).astype(np.float32)
  generated, interpreted = serialized_round_trip(
    monkeypatch, lambda v: sampler(v, key)[0], x, b"jit_block"
  )
  np.testing.assert_array_equal(generated, interpreted)
  np.testing.assert_allclose(
    generated, run_on(cpu_device(), sampler, x, key)[0], rtol=2e-6, atol=2e-6
  )


def buffered(xs, eps):
  # equinox's buffered while_loop in small: scalar bookkeeping (a step size adapted in
  # f32, an index, a conditional on it) around a kernel run on a value too big for
  # registers (the loop stays interpreted; the bookkeeping runs as jit_blocks, also in
  # the conditional's branches).
  def cond(c):
    return c[0] < 40

  def body(c):
    i, xs, eps, total = c
    j = (i * 7 + 3) % xs.shape[0]
    eps = jnp.where(eps > 0.5, eps * 0.5, eps * 1.25 + 0.01)
    total, eps = jax.lax.cond(
      i % 3 == 0,
      lambda t, e: (t + jnp.sqrt(e) * 3 - jnp.abs(t) * 0.125, jnp.minimum(e * 1.5, 2.0)),
      lambda t, e: (t * 0.5 - e / 3 + 1, jnp.maximum(e - 0.0625, 0.01)),
      total,
      eps,
    )
    xs = xs.at[j].set(xs[j] + eps * total)
    return i + 1, jnp.sort(xs), eps, total  # sort: a kernel run on 1024 elements

  return jax.lax.while_loop(cond, body, (0, xs, eps, jnp.float32(0)))


def buffered_numpy(xs, eps):
  xs, eps, total = xs.astype(np.float64), float(eps), 0.0
  for i in range(40):
    j = (i * 7 + 3) % xs.shape[0]
    eps = eps * 0.5 if eps > 0.5 else eps * 1.25 + 0.01
    if i % 3 == 0:
      total, eps = total + np.sqrt(eps) * 3 - abs(total) * 0.125, min(eps * 1.5, 2.0)
    else:
      total, eps = total * 0.5 - eps / 3 + 1, max(eps - 0.0625, 0.01)
    xs[j] += eps * total
    xs = np.sort(xs)
  return xs, eps, total


def test_blocks_in_an_interpreted_loop_and_its_branches(monkeypatch):
  # The loop with its values in memory (codegen.compile_memory_loops) is the default;
  # without that pass it runs interpreted, its small ops as jit_blocks.
  monkeypatch.setattr(codegen, "compile_memory_loops", lambda plan: plan)
  xs = rng.standard_normal(1024).astype(np.float32)
  eps = np.float32(0.3)
  plan = plan_of(buffered, xs, eps)
  loop = next(i for i in plan.instrs if i.op == "while")
  case = next(i for i in loop.attrs["body"].instrs if i.op == "case")
  assert "jit_block" in _ops(loop.attrs["body"])
  assert all("jit_block" in _ops(case.attrs[f"branch_{b}"]) for b in range(2))
  generated = run_with(monkeypatch, "1", buffered, xs, eps)
  for got, want in zip(generated, run_with(monkeypatch, "0", buffered, xs, eps)):
    np.testing.assert_array_equal(got, want)  # the interpreter's bits
  # 40 steps of f32 rounding, each backend its own (XLA may contract or reorder).
  for got, want in zip(generated, run_on(cpu_device(), buffered, xs, eps)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  for got, want in zip(generated[1:], buffered_numpy(xs, eps)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_case_branch_chains_are_fused():
  def f(x, p):
    return jax.lax.cond(p, lambda v: jnp.exp(v) * 2 - v, lambda v: v * v + 1, x)

  x = rng.standard_normal(4096).astype(np.float32)
  case = next(i for i in plan_of(f, x, True).instrs if i.op == "case")
  assert all("fusion" in _ops(case.attrs[f"branch_{b}"]) for b in range(2))
  for p in (True, False):
    want = np.where(p, np.exp(x.astype(np.float64)) * 2 - x, x.astype(np.float64) ** 2 + 1)
    got = run_on(jax.devices("workshop")[0], f, x, p)
    np.testing.assert_allclose(got, run_on(cpu_device(), f, x, p), rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def kv_decode(x, wq, wk, wv):
  t_max, d = 16, x.shape[0]

  def body(t, c):
    x, keys, values = c
    keys = jax.lax.dynamic_update_slice(keys, (x @ wk)[None], (t, 0))
    values = jax.lax.dynamic_update_slice(values, (x @ wv)[None], (t, 0))
    s = jnp.where(jnp.arange(t_max) <= t, keys @ (x @ wq), -1e30)  # reads the new keys
    return jnp.tanh(jax.nn.softmax(s) @ values + x), keys, values

  zeros = jnp.zeros((t_max, d), x.dtype)
  return jax.lax.fori_loop(0, t_max, body, (x, zeros, zeros))


def kv_decode_numpy(x, wq, wk, wv):
  t_max, d = 16, x.shape[0]
  x, wq, wk, wv = (a.astype(np.float64) for a in (x, wq, wk, wv))
  keys, values = np.zeros((t_max, d)), np.zeros((t_max, d))
  for t in range(t_max):
    keys[t], values[t] = x @ wk, x @ wv
    s = np.where(np.arange(t_max) <= t, keys @ (x @ wq), -1e30)
    a = np.exp(s - s.max())
    x = np.tanh(a / a.sum() @ values + x)
  return x, keys, values


def test_kv_cache_read_after_its_update_in_a_generated_loop(monkeypatch):
  # The caches (16x32, too big for registers) stay resident, are updated in place, and
  # the attention's kernel runs read them after the update in the same step.
  x = rng.standard_normal(32).astype(np.float32)
  ws = [(rng.standard_normal((32, 32)) / 6).astype(np.float32) for _ in range(3)]
  assert "jit_loop" in [i.op for i in plan_of(kv_decode, x, *ws).instrs]
  generated = run_with(monkeypatch, "1", kv_decode, x, *ws)
  interpreted = run_with(monkeypatch, "0", kv_decode, x, *ws)
  cpu = run_on(cpu_device(), kv_decode, x, *ws)
  for got, a, b, c in zip(generated, interpreted, cpu, kv_decode_numpy(x, *ws)):
    np.testing.assert_allclose(got, a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, c, rtol=1e-4, atol=1e-4)


def checkpointed(xs, saved):
  # equinox's checkpointed while_loop in small: a buffer written one element a step
  # (native, in place), scalar bookkeeping, and a conditional whose taken branch runs
  # kernels on a value too big for registers (argmax, max over 512 elements) and writes
  # it; the generated loop hands that conditional to the interpreter (a call site).
  n = xs.shape[0]

  def cond(c):
    return c[0] < 60

  def body(c):
    i, xs, saved, acc = c
    acc = acc * 0.75 + jnp.tanh(xs[(i * 5) % n])
    xs = xs.at[i].set(acc)
    saved, acc = jax.lax.cond(
      i % 7 == 0,
      lambda s, a: (s.at[jnp.argmax(s)].set(a - 3), a + jnp.max(s) * 0.125),
      lambda s, a: (s, a - 0.03125),
      saved,
      acc,
    )
    return i + 1, xs, saved, acc

  return jax.lax.while_loop(cond, body, (0, xs, saved, jnp.zeros((), xs.dtype)))


def checkpointed_numpy(xs, saved):
  xs, saved, acc = xs.astype(np.float64), saved.astype(np.float64), 0.0
  for i in range(60):
    acc = acc * 0.75 + np.tanh(xs[(i * 5) % xs.shape[0]])
    xs[i] = acc
    if i % 7 == 0:
      saved[np.argmax(saved)], acc = acc - 3, acc + saved.max() * 0.125
    else:
      acc -= 0.03125
  return 60, xs, saved, acc


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_case_with_kernel_runs_is_a_call_site_of_a_generated_loop(monkeypatch, dtype):
  with jax.enable_x64(dtype == np.float64):
    xs = rng.standard_normal(1024).astype(dtype)
    saved = rng.standard_normal(512).astype(dtype)
    loop = next(i for i in plan_of(checkpointed, xs, saved).instrs if i.op in ("while", "jit_loop"))
    assert loop.op == "jit_loop"
    body = loop.attrs["body"]
    case = next(k for k, i in enumerate(body.instrs) if i.op == "case")
    assert [1, case] in loop.attrs["calls"]
    generated = run_with(monkeypatch, "1", checkpointed, xs, saved)
    for got, want in zip(generated, run_with(monkeypatch, "0", checkpointed, xs, saved)):
      np.testing.assert_array_equal(got, want)  # the interpreter's bits
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in zip(generated, run_on(cpu_device(), checkpointed, xs, saved)):
      np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    for got, want in zip(generated, checkpointed_numpy(xs, saved)):
      np.testing.assert_allclose(got, want, rtol=tol * 10, atol=tol * 10)


def test_serialized_loop_with_a_case_call_site_round_trips(monkeypatch):
  # DeserializeAndLoad prepares the call-site table again (the case among its sites);
  # without generated code the loop and its case run interpreted, with the same bits.
  xs = rng.standard_normal(1024).astype(np.float32)
  saved = rng.standard_normal(512).astype(np.float32)
  generated, interpreted = serialized_round_trip(
    monkeypatch, lambda v: checkpointed(v, saved)[1], xs, b"jit_loop"
  )
  np.testing.assert_array_equal(generated, interpreted)
  np.testing.assert_allclose(generated, checkpointed_numpy(xs, saved)[1], rtol=1e-4, atol=1e-4)


def swapping(a, b, flags):
  # A conditional that passes two resident values through swapped (a call site whose
  # results are each other's buffers), one that sorts one of them (a kernel run, a fresh
  # result copied into the buffer), and a pred buffer updated in place each step.
  def body(i, c):
    a, b, flags = c
    a, b = jax.lax.switch(
      i % 3,
      [lambda a, b: (b, a), lambda a, b: (jnp.sort(a) * 0.5, b + 1), lambda a, b: (a - b, b)],
      a,
      b,
    )
    flags = flags.at[i].set(jnp.sum(a) > jnp.sum(b))  # reductions read the new values
    return a, b, flags

  return jax.lax.fori_loop(0, 20, body, (a, b, flags))


def test_case_call_site_results_that_swap_buffers(monkeypatch):
  a = rng.standard_normal(300).astype(np.float32)
  b = rng.standard_normal(300).astype(np.float32)
  flags = np.zeros(400, bool)
  assert "jit_loop" in [i.op for i in plan_of(swapping, a, b, flags).instrs]
  generated = run_with(monkeypatch, "1", swapping, a, b, flags)
  for got, want in zip(generated, run_with(monkeypatch, "0", swapping, a, b, flags)):
    np.testing.assert_array_equal(got, want)
  want_a, want_b, want_flags = a.astype(np.float64), b.astype(np.float64), flags.copy()
  for i in range(20):
    if i % 3 == 0:
      want_a, want_b = want_b, want_a
    elif i % 3 == 1:
      want_a, want_b = np.sort(want_a) * 0.5, want_b + 1
    else:
      want_a = want_a - want_b
    want_flags[i] = want_a.sum() > want_b.sum()
  cpu = run_on(cpu_device(), swapping, a, b, flags)
  for got, c, want in zip(generated, cpu, (want_a, want_b, want_flags)):
    np.testing.assert_allclose(got, c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def walks(xs, flags, ks):
  # Gathers and scatters the generated code walks element by element (loops.native_walk)
  # on resident buffers: a column (a strided window), a batch of updates at other rows
  # (some out of range: dropped), pred flags, indices out of range of the gather.
  def body(i, c):
    xs, flags, acc = c
    flag = ~flags[0, i]
    col = xs[:, (i * 17) % 450]  # past the end from i = 24: clamped or filled
    acc = col - acc
    xs = xs.at[:, i].set(acc)
    xs = xs.at[jnp.arange(3), ks + i * 13].set(acc + acc)
    flags = flags.at[:, i].set(col > 0)
    flags = flags.at[1, (i * 3) % 400].set(flag)
    return xs, flags, acc

  return jax.lax.fori_loop(0, 30, body, (xs, flags, jnp.zeros(3, xs.dtype)))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_gathers_and_scatters_walked_in_a_generated_loop(monkeypatch, dtype):
  xs = (rng.standard_normal((3, 400)) * 8).astype(dtype)
  flags = rng.random((3, 400)) < 0.5
  ks = np.array([5, 390, 17], np.int32)
  (loop,) = [i for i in plan_of(walks, xs, flags, ks).instrs if i.op in ("while", "jit_loop")]
  assert loop.op == "jit_loop"
  body = loop.attrs["body"]
  walked = [i for i in body.instrs if i.op in ("gather", "scatter")]
  assert walked and all(loops.native_walk(body, i) or loops.native_scatter(body, i) for i in walked)
  called = {body.instrs[k].op for r, k in loop.attrs.get("calls", []) if r == 1}
  assert not called & {"gather", "scatter"}
  generated = run_with(monkeypatch, "1", walks, xs, flags, ks)
  for got, want in zip(generated, run_with(monkeypatch, "0", walks, xs, flags, ks)):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(generated, run_on(cpu_device(), walks, xs, flags, ks)):
    np.testing.assert_array_equal(got, want)  # data movement and exact adds


def test_case_call_site_in_the_condition(monkeypatch):
  # The cond's own case (region 0 of the call-site table) runs a kernel (sort) on one
  # branch; the loop is generated and matches the interpreter, the CPU backend and numpy.
  def f(x):
    def cond(c):
      i, v = c
      top = jax.lax.cond(i % 2 == 0, lambda: jnp.sort(v)[-1], lambda: v[0])
      return (i < 25) & (top < 1e6)

    return jax.lax.while_loop(cond, lambda c: (c[0] + 1, c[1] * 1.25 + 0.5), (0, x))

  x = rng.standard_normal(16).astype(np.float32)
  (loop,) = [i for i in plan_of(f, x).instrs if i.op in ("while", "jit_loop")]
  assert loop.op == "jit_loop"
  assert any(r == 0 and loop.attrs["cond"].instrs[k].op == "case" for r, k in loop.attrs["calls"])
  generated = run_with(monkeypatch, "1", f, x)
  for got, want in zip(generated, run_with(monkeypatch, "0", f, x)):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(generated, run_on(cpu_device(), f, x)):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  want = x.astype(np.float64)
  for _ in range(25):
    want = want * 1.25 + 0.5
  np.testing.assert_allclose(generated[1], want, rtol=1e-5)
