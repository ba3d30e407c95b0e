"""rng_bit_generator and jax.random against XLA:CPU: random bits must match bit for bit.

Programs that also need ops outside this family (bitcast_convert, sort, while, ...) are
skipped, naming the op, while those ops are missing; they run once they exist.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from family_helpers import workshop_device
from reference import cpu_device, run_on, run_stablehlo

ALGORITHMS = [
  lax.RandomAlgorithm.RNG_THREE_FRY,
  lax.RandomAlgorithm.RNG_PHILOX,
  lax.RandomAlgorithm.RNG_DEFAULT,
]
# Scalar; even and odd dims (THREE_FRY's 32-bit layout splits the first even dim, else the
# largest); an empty array.
SHAPES = [(), (7,), (3, 5), (5, 4, 3), (2, 0)]
# The ops this family implements: their absence is a failure, never a skip.
KEY = np.array([0x0123456789ABCDEF, 0xFEDCBA9876543210], np.uint64)


@pytest.fixture(autouse=True)
def x64():
  with jax.enable_x64(True):  # u64 keys and bits stay 64-bit.
    yield


def assert_same_on_both(f, *args, rtol=0.0):
  """f on workshop == f on CPU (exactly unless rtol); skips on ops other families own."""
  ours = run_on(workshop_device(), f, *args)
  ref = run_on(cpu_device(), f, *args)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
    assert a.dtype == b.dtype and a.shape == b.shape
    if rtol and a.dtype.kind == "f":
      np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    else:
      np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
@pytest.mark.parametrize(
  "dtype", [np.uint8, np.uint16, np.uint32, np.uint64], ids=lambda d: np.dtype(d).name
)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rng_bit_generator(algorithm, dtype, shape):
  assert_same_on_both(
    lambda k: lax.rng_bit_generator(k, shape, dtype=dtype, algorithm=algorithm), KEY
  )


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.name)
def test_rng_bit_generator_chained_state_and_counter_wrap(algorithm):
  # The counter word starts 2 below 2**64, so the generated counters wrap around.
  key = np.array([7, 2**64 - 2], np.uint64)

  def f(k):
    k, a = lax.rng_bit_generator(k, (3, 3), dtype=np.uint32, algorithm=algorithm)
    k, b = lax.rng_bit_generator(k, (5,), dtype=np.uint64, algorithm=algorithm)
    return k, a, b

  assert_same_on_both(f, key)


PHILOX_3_WORD_STATE = """
func.func public @main(%state: tensor<3xui64>) -> (tensor<3xui64>, tensor<5x2xui32>,
                                                   tensor<3xui64>, tensor<3xui64>) {
  %s1, %a = stablehlo.rng_bit_generator %state, algorithm = PHILOX
      : (tensor<3xui64>) -> (tensor<3xui64>, tensor<5x2xui32>)
  %s2, %b = stablehlo.rng_bit_generator %s1, algorithm = PHILOX
      : (tensor<3xui64>) -> (tensor<3xui64>, tensor<3xui64>)
  return %s2, %a, %s1, %b : tensor<3xui64>, tensor<5x2xui32>, tensor<3xui64>, tensor<3xui64>
}
"""


@pytest.mark.parametrize("state", [[5, 2**64 - 2, 7], [1, 2, 3]], ids=["carry", "plain"])
def test_philox_three_word_state(state):
  # JAX only makes 2-word states; the third word is the high half of a 128-bit counter
  # (the "carry" case overflows the low half into it).
  state = np.array(state, np.uint64)
  ours = run_stablehlo(PHILOX_3_WORD_STATE, state)
  ref = run_stablehlo(PHILOX_3_WORD_STATE, state, platform="cpu")
  for a, b in zip(ours, ref, strict=True):
    np.testing.assert_array_equal(a, b)


def test_three_fry_rejects_three_word_state():
  text = PHILOX_3_WORD_STATE.replace("PHILOX", "THREE_FRY")
  with pytest.raises(
    Exception, match="THREE_FRY needs a state of 2 u64 words, got 3.*rng_bit_generator"
  ):
    run_stablehlo(text, np.zeros(3, np.uint64))


RANDOM_FUNCTIONS = {
  "bits": lambda k: jax.random.bits(k, (4, 3)),
  "randint": lambda k: jax.random.randint(k, (7,), -5, 10),
  "choice_with_replacement": lambda k: jax.random.choice(k, 10, (3,)),
  "uniform": lambda k: jax.random.uniform(k, (4, 5)),
  "uniform_f64": lambda k: jax.random.uniform(k, (9,), dtype=jnp.float64),
  "normal": lambda k: jax.random.normal(k, (3, 3)),
  "bernoulli": lambda k: jax.random.bernoulli(k, 0.3, (16,)),
  "categorical": lambda k: jax.random.categorical(k, jnp.log(jnp.arange(1.0, 5.0)), shape=(6,)),
  "permutation": lambda k: jax.random.permutation(k, 10),
  "choice_without_replacement": lambda k: jax.random.choice(k, 10, (3,), replace=False),
  "split": lambda k: jax.random.key_data(jax.random.split(k, 3)),
  "fold_in": lambda k: jax.random.key_data(jax.random.fold_in(k, 17)),
  "truncated_normal": lambda k: jax.random.truncated_normal(k, -1.0, 2.0, (5,)),
  "exponential": lambda k: jax.random.exponential(k, (5,)),
  "gamma": lambda k: jax.random.gamma(k, 2.5, (5,)),
}


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
@pytest.mark.parametrize("name", list(RANDOM_FUNCTIONS))
def test_jax_random(impl, name):
  # threefry2x32 lowers to plain u32 arithmetic, rbg/unsafe_rbg to rng_bit_generator. The
  # bits agree exactly; float distributions go through transcendental functions (log, erf
  # inverse), where libm and XLA's approximations differ by an ulp or two.
  f = RANDOM_FUNCTIONS[name]
  raw = jax.random.key_data(jax.random.key(42, impl=impl))
  assert_same_on_both(lambda r: f(jax.random.wrap_key_data(r, impl=impl)), raw, rtol=1e-6)
