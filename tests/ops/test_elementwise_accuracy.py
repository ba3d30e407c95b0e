"""f32 transcendentals at least as accurate as XLA:CPU's, against float64 (family
elementwise; the cases and the rule are jax_plugins.workshop.bench.accuracy's second table:
workshop's max ulp error <= XLA:CPU's + 0.25, over 2^18 fixed-seed inputs per function),
and the plugin's own f32 sin, cos and log (kernels/math/vector_math.cc) within half an ulp
and a little, on both code paths (interpreted, generated) with the same bits.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from codegen_helpers import ops, run_with
from f32_ulps import floats_around, on_workshop, ulp_error
from reference import cpu_device, run_on
from jax_plugins.workshop.bench import accuracy

# f64 evaluation rounded once: the correctly rounded result but within ~2^-14 ulp of a
# midpoint (vector_math.cc).
HALF_ULP = 0.5 + 2.0**-10


@pytest.mark.parametrize("case", accuracy.ulp_cases(), ids=lambda c: c.name)
def test_as_accurate_as_xla_cpu(case):
  row = accuracy.measure_ulps(case)
  assert np.isfinite(row.cpu), "the reference backend failed"
  assert row.ok, f"{case.name}: workshop {row.workshop:.2f} ulp, XLA:CPU {row.cpu:.2f} ulp"


def _log_sweep() -> np.ndarray:
  # Every 9973rd positive normal float32, around 1 (where log x is small and the reduction
  # must keep its relative accuracy), around sqrt(1/2) and sqrt(2) (where k steps).
  top = int(np.array(np.finfo(np.float32).max, np.float32).view(np.int32))
  x = np.arange(1 << 23, top, 9973, dtype=np.int32).view(np.float32)
  return np.concatenate(
    [x, floats_around(1.0, 8192), floats_around(0.70710677, 2048), floats_around(1.4142135, 2048)]
  )


@pytest.mark.parametrize(
  "fn,ref,x",
  [
    (jnp.log, np.log, _log_sweep()),
    (jnp.sin, np.sin, np.linspace(-200, 200, 400_001, dtype=np.float32)),
    (jnp.cos, np.cos, np.linspace(-200, 200, 400_001, dtype=np.float32)),
  ],
  ids=["log", "sin", "cos"],
)
def test_own_sin_cos_log_within_half_an_ulp(fn, ref, x):
  y = on_workshop(fn, x)
  err = ulp_error(y, ref(x.astype(np.float64)))
  worst = int(err.argmax())
  assert err[worst] <= HALF_ULP, f"{fn.__name__}({x[worst]!r}) = {y[worst]!r}: {err[worst]:.4f} ulp"


def test_log_special_values():
  tiny = np.finfo(np.float32).tiny
  x = np.array([0, -0.0, tiny / 2, -tiny / 2, -1, -np.inf, np.inf, np.nan, 1, tiny], np.float32)
  y = on_workshop(jnp.log, x)
  # Subnormals are read as +-0, as DAZ would (log of 0), as the other kernels treat them
  # (XLA:CPU: -inf too, but NaN for a negative one in arrays of a few elements).
  np.testing.assert_array_equal(y[:4], [-np.inf] * 4)
  assert np.isnan(y[4:6]).all() and y[6] == np.inf and np.isnan(y[7])
  assert y[8] == 0 and y[9] == np.float32(np.log(np.float64(tiny)))


def test_generated_log_and_cos_have_the_interpreters_bits(monkeypatch):
  # f32 log and cos in a compiled fusion call the plugin's own vector functions
  # (fusions.LIBMVEC "workshop_*"), as the interpreter's kernels do.
  x = np.concatenate([_log_sweep()[:300_000], np.array([0, -1, np.inf, np.nan], np.float32)])
  f = lambda v: (jnp.log(v) * 2 + 1, jnp.cos(v) - 1)  # noqa: E731
  assert "jit_fusion" in ops(f, x)
  generated = run_with(monkeypatch, "1", f, x)
  interpreted = run_with(monkeypatch, "0", f, x)
  for g, i in zip(generated, interpreted, strict=True):
    np.testing.assert_array_equal(g.view(np.uint32), i.view(np.uint32))


@pytest.mark.parametrize("fn", [jnp.sin, jnp.tanh], ids=["sin", "tanh"])
@pytest.mark.parametrize("n", [4, 100_003])
def test_sin_and_tanh_of_subnormals_are_themselves_as_on_cpu(fn, n):
  # sin and tanh pass subnormals through, as XLA:CPU's do; the kernels run under DAZ,
  # where a subnormal compares equal to 0, so the test is on the bits (sin flushed them).
  tiny = np.finfo(np.float32).tiny
  x = np.resize(np.array([1e-40, -1e-45, tiny / 2, -tiny / 3, 0.0, -0.0, 0.5], np.float32), n)
  y = on_workshop(fn, x)
  ref = run_on(cpu_device(), fn, x)
  np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))
