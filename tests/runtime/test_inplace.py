"""In-place updates: scatter and dynamic_update_slice writing into their operand's buffer.

The executor hands a `reuses_operand0` kernel operand 0's storage as its output only when
nobody else can observe it (runtime/executor.cc, TakeOperand0). These tests pin down every
way someone could observe it: a caller's parameter (must stay unchanged), a value used
again later in the program, a value that is also a result, the same value passed twice to
the instruction, a reshape sharing the storage, a loop-invariant value, a loop carry that
is also returned. Each program is compared with JAX's CPU backend; parameters are also checked
against their numpy copy afterwards. Donation is the one case where the caller gives the
buffer away: there the result must live in the donated buffer (checked by address).

Tolerances: reference.py's defaults. Data movement and "set" are exact; "add" of
duplicate indices accumulates in batch order on both backends.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from reference import assert_matches_cpu

SHAPES = [(7, 13), (64, 33), (1000, 256)]  # Odd sizes; the last splits over threads.
DTYPES = [np.float32, np.int32, ml_dtypes.bfloat16, np.int8, np.float64, np.complex64]


def workshop():
  return jax.devices("workshop")[0]


def _array(rng, shape, dtype):
  dtype = np.dtype(dtype)
  if dtype.kind in "iu":
    return rng.integers(-20, 20, shape).astype(dtype)
  if dtype.kind == "c":
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


def _x64(dtype):
  return jax.enable_x64(np.dtype(dtype).itemsize == 8)


def _rows(rng, shape, k):
  """k row indices into shape[0] rows, with duplicates and one out of range (dropped)."""
  idx = rng.integers(0, shape[0], k).astype(np.int32)
  idx[0] = idx[-1]
  idx[1] = shape[0] + 3
  return idx


def _check_param_unchanged(f, *args):
  """Runs jit(f) on workshop and CPU; the workshop inputs must be unchanged afterwards."""
  copies = [np.array(a) for a in args]
  placed = jax.device_put(args, workshop())
  ours = jax.tree.map(np.asarray, jax.jit(f)(*placed))
  for before, after in zip(copies, placed):
    np.testing.assert_array_equal(np.asarray(after), before)
  assert_matches_cpu(f, *args)
  return ours


# ---- scatter ----


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["add", "set"])
def test_scatter_of_parameter_leaves_it_unchanged(shape, mode):
  rng = np.random.default_rng(0)
  x = _array(rng, shape, np.float32)
  idx = _rows(rng, shape, 11)
  u = _array(rng, (11, shape[1]), np.float32)
  _check_param_unchanged(lambda x, i, u: getattr(x.at[i], mode)(u), x, idx, u)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["add", "set", "max"])
def test_scatter_of_intermediate(dtype, mode):
  # x * 2 dies at the scatter: it is updated in place.
  rng = np.random.default_rng(1)
  shape = (64, 33)
  if mode == "max" and dtype == np.complex64:
    pytest.skip("complex numbers have no order: JAX refuses max")
  with _x64(dtype):
    x = _array(rng, shape, dtype)
    u = _array(rng, (9, shape[1]), dtype)
    idx = _rows(rng, shape, 9)
    _check_param_unchanged(lambda x, i, u: getattr((x * 2).at[i], mode)(u), x, idx, u)


@pytest.mark.parametrize("shape", SHAPES)
def test_scatter_of_elements_in_place(shape):
  # Element scatter (2-component indices), on an intermediate.
  rng = np.random.default_rng(2)
  x = _array(rng, shape, np.int32)
  r = rng.integers(0, shape[0], 50)
  c = rng.integers(0, shape[1], 50)
  v = rng.integers(-5, 5, 50).astype(np.int32)
  _check_param_unchanged(lambda x, r, c, v: (x + 1).at[r, c].add(v), x, r, c, v)


def test_scatter_donated_updates_the_donated_buffer():
  rng = np.random.default_rng(3)
  x = _array(rng, (1000, 256), np.float32)
  idx = _rows(rng, x.shape, 300)
  u = _array(rng, (300, 256), np.float32)
  xw = jax.device_put(x, workshop())
  address = xw.unsafe_buffer_pointer()
  y = jax.jit(lambda x, i, u: x.at[i].add(u), donate_argnums=0)(xw, idx, u).block_until_ready()
  assert xw.is_deleted()
  assert y.unsafe_buffer_pointer() == address  # No copy: the scatter ran in place.
  ref = np.asarray(
    jax.jit(lambda x, i, u: x.at[i].add(u))(*jax.device_put((x, idx, u), jax.devices("cpu")[0]))
  )
  np.testing.assert_allclose(np.asarray(y), ref, rtol=2e-5, atol=2e-5)


def test_scatter_operand_used_again_afterwards():
  # x * 2 is read again after the scatter: the scatter must work on a copy.
  rng = np.random.default_rng(4)
  x = _array(rng, (64, 33), np.float32)
  idx = _rows(rng, x.shape, 9)
  u = _array(rng, (9, 33), np.float32)
  assert_matches_cpu(lambda x, i, u: (y := x * 2).at[i].add(u) + y, x, idx, u)
  # A parameter used twice.
  _check_param_unchanged(lambda x, i, u: x.at[i].add(u) - x, x, idx, u)


def test_scatter_operand_used_before_only():
  rng = np.random.default_rng(5)
  x = _array(rng, (64, 33), np.float32)
  idx = _rows(rng, x.shape, 9)
  u = _array(rng, (9, 33), np.float32)

  def f(x, i, u):
    y = x * 2
    s = y.sum(axis=0)
    return y.at[i].add(u) * s

  assert_matches_cpu(f, x, idx, u)


def test_scatter_operand_that_is_also_a_result():
  rng = np.random.default_rng(6)
  x = _array(rng, (64, 33), np.float32)
  idx = _rows(rng, x.shape, 9)
  u = _array(rng, (9, 33), np.float32)
  y, z = _check_param_unchanged(lambda x, i, u: ((y := x * 2), y.at[i].set(u)), x, idx, u)
  np.testing.assert_array_equal(y, x * 2)


def test_scatter_operand_that_is_also_the_updates():
  # scatter(y, perm, y): in place, later windows would read rows already overwritten.
  rng = np.random.default_rng(7)
  x = _array(rng, (257,), np.float32)
  perm = rng.permutation(257).astype(np.int32)
  assert_matches_cpu(lambda x, p: (y := x * 2).at[p].set(y), x, perm)
  assert_matches_cpu(lambda x, p: (y := x * 2).at[p].add(y), x, perm)


def test_scatter_operand_sharing_storage_with_a_reshape():
  # The reshape aliases y's storage; y is also returned, so it must not change.
  rng = np.random.default_rng(8)
  x = _array(rng, (8, 12), np.float32)
  idx = np.array([0, 5, 5, 95], np.int32)
  u = np.array([1, 2, 3, 4], np.float32)

  def f(x, i, u):
    y = x * 2
    return y, y.reshape(-1).at[i].add(u)

  y, z = assert_matches_cpu(f, x, idx, u)
  np.testing.assert_array_equal(y, x * 2)


# ---- dynamic_update_slice ----


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_update_slice_of_parameter_and_intermediate(dtype):
  rng = np.random.default_rng(9)
  with _x64(dtype):
    x = _array(rng, (7, 13), dtype)
    u = _array(rng, (3, 5), dtype)
    for start in [(0, 0), (2, 4), (6, 12), (-1, 20)]:  # The last two clamp.
      _check_param_unchanged(lambda x, u: lax.dynamic_update_slice(x, u, start), x, u)
      _check_param_unchanged(lambda x, u: lax.dynamic_update_slice(x + x, u, start), x, u)


def test_dynamic_update_slice_operand_that_is_also_the_update():
  rng = np.random.default_rng(10)
  x = _array(rng, (16, 16), np.float32)
  assert_matches_cpu(lambda x: lax.dynamic_update_slice(y := x * 2, y, (0, 0)), x)
  assert_matches_cpu(lambda x: lax.dynamic_update_slice(y := x * 2, y[::-1], (0, 0)) + y, x)


def test_dynamic_update_slice_donated_updates_the_donated_buffer():
  x = np.zeros((1000, 256), np.float32)
  xw = jax.device_put(x, workshop())
  address = xw.unsafe_buffer_pointer()
  f = jax.jit(lambda x, r: lax.dynamic_update_slice(x, r[None], (17, 0)), donate_argnums=0)
  y = f(xw, np.arange(256, dtype=np.float32)).block_until_ready()
  assert y.unsafe_buffer_pointer() == address
  expected = x.copy()
  expected[17] = np.arange(256)
  np.testing.assert_array_equal(np.asarray(y), expected)


# ---- loops: the carry is updated in place, captures and returned carries are not ----


@pytest.mark.parametrize("shape", SHAPES)
def test_scan_writes_rows_into_carry(shape):
  x = _array(np.random.default_rng(11), shape, np.float32)

  def f(c):
    def body(carry, _):
      i, buf = carry
      row = jnp.full((1, shape[1]), i, jnp.float32) + buf[i]
      return (i + 1, lax.dynamic_update_slice(buf, row, (i, 0))), None

    return lax.scan(body, (0, c), None, length=shape[0])[0][1]

  _check_param_unchanged(f, x)


@pytest.mark.parametrize("shape", SHAPES)
def test_scan_stacks_outputs(shape):
  x = _array(np.random.default_rng(12), shape, np.float32)

  def f(xs):
    def body(h, x):
      h = jnp.tanh(h * 0.5 + x)
      return h, h * 2

    return lax.scan(body, jnp.zeros(shape[1], jnp.float32), xs)

  _check_param_unchanged(f, x)


def test_fori_loop_scatter_into_carry():
  x = _array(np.random.default_rng(13), (100, 7), np.float32)
  f = lambda c: lax.fori_loop(0, 100, lambda i, b: b.at[(i * 37) % 100].add(b[i] + 1.0), c)
  _check_param_unchanged(f, x)


def test_fori_loop_does_not_update_a_loop_invariant():
  # JAX passes c through the loop as an unchanged carry (a body result): every iteration
  # must see the original c.
  x = _array(np.random.default_rng(14), (50, 8), np.float32)

  def f(x):
    c = x * 3
    total = lax.fori_loop(0, 50, lambda i, acc: acc + c.at[i].set(0.0).sum(), jnp.float32(0))
    return total, c

  _check_param_unchanged(f, x)


def test_loop_carry_that_is_also_carried_as_previous():
  # The body returns the old carry next to its update: the update must copy.
  x = _array(np.random.default_rng(15), (20, 4), np.float32)

  def f(x):
    def body(i, state):
      cur, prev = state
      return cur.at[i].add(1.0 + prev[i]), cur

    return lax.fori_loop(0, 20, body, (x, x * 0))

  _check_param_unchanged(f, x)


def test_loop_initial_carry_used_after_the_loop():
  x = _array(np.random.default_rng(16), (30, 5), np.float32)

  def f(x):
    y = x + 1
    out = lax.fori_loop(0, 30, lambda i, b: lax.dynamic_update_slice(b, b[i][None] * 2, (i, 0)), y)
    return out - y

  _check_param_unchanged(f, x)


def test_cond_branch_updates_operand_used_afterwards():
  x = _array(np.random.default_rng(17), (6, 6), np.float32)

  def f(x, p):
    y = x * 2
    z = lax.cond(p, lambda b: b.at[0].set(100.0), lambda b: b.at[1].add(1.0), y)
    return z + y

  for p in (True, False):
    _check_param_unchanged(f, x, np.bool_(p))


def test_repeated_calls_with_same_parameter():
  # The executable runs many times on the same (non-donated) input; it must never change.
  x = _array(np.random.default_rng(18), (100, 16), np.float32)
  xw = jax.device_put(x, workshop())
  f = jax.jit(lambda x, i: x.at[i].add(1.0))
  for i in range(5):
    np.testing.assert_array_equal(np.asarray(f(xw, i)), x + (np.arange(100) == i)[:, None])
  np.testing.assert_array_equal(np.asarray(xw), x)


# A program's constants (arrays it closes over) are made once per executable and shared by
# every call (kernels/shape.cc): no call may write into them, whichever way it could.
_W = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 7


def test_update_of_a_constant_leaves_it_for_the_next_call():
  f = jax.jit(lambda i, r: lax.dynamic_update_slice(jnp.asarray(_W), r[None], (i, 0)))
  g = jax.jit(lambda i: jnp.asarray(_W).at[i].add(1.0))
  row = np.full(48, -1.0, np.float32)
  for i in (3, 9, 3):
    want = _W.copy()
    want[i] = row
    np.testing.assert_array_equal(np.asarray(f(i, row)), want)
    want = _W.copy()
    want[i] += 1.0
    np.testing.assert_array_equal(np.asarray(g(i)), want)


def test_loop_carry_starting_at_a_constant():
  f = jax.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c.at[i].mul(-2.0), jnp.asarray(_W)))
  for _ in range(2):
    want = _W.copy()
    want[:5] *= -2.0
    np.testing.assert_array_equal(np.asarray(f(5)), want)


def test_constant_result_donated_elsewhere():
  # The constant returned as it is: the caller gets a buffer of its own (a copy), which it
  # may then donate to a program that updates it in place.
  make = jax.jit(lambda: jnp.asarray(_W))
  reshaped = jax.jit(lambda: jnp.asarray(_W).reshape(48, 64))
  poke = jax.jit(lambda x: x.at[0, 0].set(-5.0), donate_argnums=0)
  for _ in range(2):
    a, b = make(), reshaped()
    poke(a).block_until_ready()
    poke(b).block_until_ready()
    np.testing.assert_array_equal(np.asarray(make()), _W)
    np.testing.assert_array_equal(np.asarray(reshaped()), _W.reshape(48, 64))
