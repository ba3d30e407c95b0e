"""Sort vs JAX's CPU backend, bit-exact (sorting only moves elements, so -0.0/0.0 and NaN
signs must match too): jnp.sort/argsort with NaNs, signed zeros and ties on every axis,
every dtype width, stability, multi-operand lax.sort with two keys, top_k (a composite
whose decomposition sorts), vmap, and comparators JAX never emits (the sort_general
sorting-network kernel). Family: sort.
"""

import contextlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from jax._src.lax import lax as lax_internal

from reference import cpu_device, run_on
from compiler_helpers import compile_fn


# Every test twice: loops and fusions interpreted, and compiled whatever their size.
pytestmark = pytest.mark.codegen_settings("0", "force")  # conftest.py

rng = np.random.default_rng(0)


# ---- sort ----


def _floats_with_specials(shape, dtype=np.float32):
  x = rng.integers(-4, 5, shape).astype(dtype)  # Many ties.
  flat = x.reshape(-1)
  specials = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf], dtype)
  idx = rng.choice(flat.size, size=min(flat.size, 3 * len(specials)), replace=False)
  flat[idx] = np.resize(specials, idx.size)
  return x


def _bits(a):
  """Bit patterns, so -0.0 vs 0.0 and NaN signs must match exactly too."""
  a = np.asarray(a)
  return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind in "fV" else a


def assert_sort_matches_cpu(f, *args):
  """Bit-exact: sorting only moves elements."""
  ours = jax.tree.leaves(run_on(jax.devices("workshop")[0], f, *args))
  ref = jax.tree.leaves(run_on(cpu_device(), f, *args))
  assert len(ours) == len(ref)
  for a, b in zip(ours, ref):
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sort_and_argsort_floats_nan_signed_zero_ties(axis):
  x = _floats_with_specials((9, 12))
  assert_sort_matches_cpu(lambda x: (jnp.sort(x, axis=axis), jnp.argsort(x, axis=axis)), x)


def test_sort_3d_middle_axis_and_stability():
  x = _floats_with_specials((3, 40, 5))
  assert_sort_matches_cpu(lambda x: jnp.argsort(x, axis=1, stable=True), x)


@pytest.mark.parametrize(
  "dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32, np.bool_]
)
def test_sort_integer_and_bool_dtypes(dtype):
  info = np.iinfo(dtype) if dtype != np.bool_ else None
  lo, hi = (0, 2) if info is None else (max(info.min, -100), min(info.max, 100))
  x = rng.integers(lo, hi, (5, 33), endpoint=True).astype(dtype)
  if info is not None:
    x[0, :2] = [info.min, info.max]
  assert_sort_matches_cpu(lambda x: (jnp.sort(x), jnp.argsort(x, axis=0)), x)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_sort_16_bit_floats(dtype):
  x = _floats_with_specials((4, 17), dtype)
  assert_sort_matches_cpu(lambda x: (jnp.sort(x), jnp.argsort(x)), x)


def test_sort_64_bit_dtypes():
  with jax.enable_x64(True):
    x = _floats_with_specials((6, 21), np.float64)
    i = rng.integers(-(2**62), 2**62, (6, 21))
    i[0, :2] = [np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    u = rng.integers(0, 2**64 - 1, (6, 21), dtype=np.uint64, endpoint=True)
    assert_sort_matches_cpu(
      lambda x, i, u: (jnp.sort(x), jnp.argsort(x), jnp.sort(i), jnp.sort(u)), x, i, u
    )


def test_lax_sort_multi_operand_two_keys():
  keys = rng.integers(0, 3, (4, 30)).astype(np.int32)
  keys2 = _floats_with_specials((4, 30))
  payload = np.arange(4 * 30, dtype=np.float32).reshape(4, 30)
  f = lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=2)
  assert_sort_matches_cpu(f, keys, keys2, payload)


def test_sort_along_axis_0_of_2d():
  x = _floats_with_specials((25, 3))
  assert_sort_matches_cpu(lambda x: lax.sort((x, x.astype(jnp.int32)), dimension=0), x)


def test_sort_rows_split_over_the_pool():
  # Enough rows that the cost model splits them over the thread pool (sort.cc): each part
  # sorts its own rows with its own scratch; along the last axis and a middle one.
  keys = rng.integers(0, 4, (60, 7, 300)).astype(np.int32)
  x = _floats_with_specials((60, 7, 300))
  f = lambda k, x: (lax.sort((k, x), dimension=2, num_keys=2), jnp.argsort(x, axis=1))
  assert_sort_matches_cpu(f, keys, x)


def test_top_k_composite_inlines_its_decomposition():
  # lax.top_k is a stablehlo.composite whose decomposition sorts with GT TOTALORDER.
  x = _floats_with_specials((5, 31))
  assert_sort_matches_cpu(lambda x: lax.top_k(x, 4), x)


def test_vmap_of_sort_and_argsort():
  x = _floats_with_specials((4, 6, 7))
  assert_sort_matches_cpu(jax.vmap(lambda x: (jnp.sort(x, axis=0), jnp.argsort(x))), x)


# ---- 8- and 4-bit float keys and values ----

_MINIFLOATS = [
  ml_dtypes.float8_e5m2,
  ml_dtypes.float8_e4m3fn,
  ml_dtypes.float8_e4m3b11fnuz,
  ml_dtypes.float8_e5m2fnuz,
  ml_dtypes.float8_e4m3fnuz,
  ml_dtypes.float8_e4m3,
  ml_dtypes.float8_e3m4,
  ml_dtypes.float8_e8m0fnu,
  ml_dtypes.float4_e2m1fn,
]


def _every_bit_pattern(t, copies=2):
  """Every value of minifloat type t, `copies` times (ties), shuffled: [copies * 2^bits]."""
  n = 16 if np.dtype(t).name.startswith("float4") else 256
  return np.concatenate([rng.permutation(n) for _ in range(copies)]).astype(np.uint8).view(t)


def _fnuz(t) -> bool:
  return np.dtype(t).name.endswith("fnuz")


@pytest.mark.parametrize("t", _MINIFLOATS, ids=lambda t: np.dtype(t).name)
def test_sort_minifloats_every_bit_pattern(t):
  """Every bit pattern as keys (jnp.sort/argsort both ways, two keys, a 2-d axis 0, top_k)
  and as values carried by f32 keys: bit-exact with XLA:CPU, which sorts them as f16 and
  compares keys on their bits (FNUZ NaN below every value, NaNs of one sign tied, -0 tied
  with +0); the results' NaNs come back as XLA's f16 round trip leaves them."""
  x = _every_bit_pattern(t)
  if t == ml_dtypes.float8_e5m2fnuz:
    # XLA:CPU's sort comparator ties +-2^-15 * {1, 1.25, 1.5, 1.75} with +-2^-14 in this
    # type only (its f16 -> f8E5M2FNUZ convert there; plain converts are exact): left out
    # here, and ordered by value in the numpy check below (docs/known_gaps.md).
    x = x[~np.isin(x.view(np.uint8), [4, 5, 6, 7, 0x84, 0x85, 0x86, 0x87])]
  n = x.shape[0]

  def f(x):
    out = (
      jnp.sort(x),
      jnp.sort(x, descending=True),
      jnp.argsort(x),
      jnp.argsort(x, descending=True),
      jnp.sort(x.reshape(-1, 4), axis=0),
      lax.sort((x, x[::-1]), num_keys=2),
      lax.sort((jnp.arange(n, 0, -1, dtype=jnp.float32), x), num_keys=1),
    )
    # XLA:CPU's verifier rejects top_k of f4E2M1FN ("custom element sizes").
    return out if "float4" in np.dtype(t).name else (*out, lax.top_k(x, 9))

  assert_sort_matches_cpu(f, x)


@pytest.mark.parametrize("t", _MINIFLOATS, ids=lambda t: np.dtype(t).name)
def test_sort_minifloats_order_against_numpy(t):
  """jnp.argsort of every bit pattern (with ties) against numpy: ascending by value, -0 tied
  with +0, NaNs after every value (before them in the FNUZ types), ties by index."""
  x = _every_bit_pattern(t, copies=3)
  order = run_on(jax.devices("workshop")[0], jnp.argsort, x)
  values = x.astype(np.float32)
  nan = np.isnan(values)
  # Sort key: NaN first (FNUZ) or last, then by value (-0 == +0), then by index.
  rank = np.where(nan, -np.inf if _fnuz(t) else np.inf, values)
  group = np.where(nan, 0 if _fnuz(t) else 2, 1)
  expected = np.lexsort((np.arange(x.size), rank, group))
  np.testing.assert_array_equal(order, expected)


@contextlib.contextmanager
def comparator(fn):
  """Makes lax.sort lower `fn(lhs_0, rhs_0, lhs_1, rhs_1, ..., num_keys)` as comparator."""
  saved = lax_internal._sort_lt_comparator  # pylint: disable=protected-access
  lax_internal._sort_lt_comparator = fn  # pylint: disable=protected-access
  try:
    yield
  finally:
    lax_internal._sort_lt_comparator = saved  # pylint: disable=protected-access


@pytest.mark.parametrize("n", [1, 2, 7, 64, 100])
def test_sort_general_comparator_stable(n):
  # Descending by |key|: not a comparator JAX emits, so the sorting-network kernel runs.
  keys = rng.integers(-5, 6, (3, n)).astype(np.int32)
  payload = np.arange(3 * n, dtype=np.float32).reshape(3, n)
  with comparator(lambda a, b, *_, num_keys: jnp.abs(a) > jnp.abs(b)):
    f = lambda k, p: lax.sort((k, p), dimension=1, is_stable=True, num_keys=1)
    assert_sort_matches_cpu(f, keys, payload)
    assert "sort_general" in [i.op for i in compile_fn(f, keys, payload).plan.instrs]


def test_sort_general_comparator_unstable_along_axis_0():
  # Distinct keys, so an unstable sort has only one right answer.
  keys = rng.permutation(60).reshape(20, 3).astype(np.float32) - 30
  with comparator(lambda a, b, *_, num_keys: (a + 0.25) * (a + 0.25) < (b + 0.25) * (b + 0.25)):
    f = lambda k: lax.sort((k, -k), dimension=0, is_stable=False, num_keys=1)
    assert_sort_matches_cpu(f, keys)
