"""Single ops and small idioms at shapes the model programs rarely reach (`bench.heldout`'s
group "ops").

Probed from outside the repo, as a user's one-liners: reductions and argmax over rows of
2-8 or along a leading axis, masks from iotas (jnp.tril), rounding and integer remainders
in elementwise chains, scatter/gather idioms, batched tiny dots. A kernel that pays per
row or per element where XLA:CPU vectorizes shows here as a ratio of 5-20, where a model
program would hide it among its other kernels (docs/performance.md, "Single ops").
Each `make` returns (function to jit, numpy arguments), 1M elements or so.
"""

from __future__ import annotations

import numpy as np


def _r(seed: int) -> np.random.Generator:
  return np.random.default_rng(seed)


def _normal(seed: int, *shape: int) -> np.ndarray:
  return _r(seed).standard_normal(shape).astype(np.float32)


def _ints(seed: int, high: int, *shape: int) -> np.ndarray:
  return _r(seed).integers(0, high, shape).astype(np.int32)


def _argmax_max_rows_4():
  import jax.numpy as jnp

  return lambda a: (jnp.argmax(a, -1), jnp.max(a, -1)), (_normal(301, 100000, 4),)


def _argmin_rows_7():
  import jax.numpy as jnp

  return lambda a: jnp.argmin(a, -1), (_normal(302, 100000, 7),)


def _argmax_axis0():
  import jax.numpy as jnp

  return lambda a: jnp.argmax(a, 0), (_normal(303, 4, 100000),)


def _min_rows_2():
  import jax.numpy as jnp

  return lambda a: jnp.min(a, -1), (_normal(304, 200000, 2),)


def _any_rows_10():
  import jax.numpy as jnp

  return lambda a: jnp.any(a > 2.5, -1), (_normal(305, 100000, 10),)


def _tril_mask():
  import jax.numpy as jnp

  return lambda a: jnp.tril(a), (_normal(306, 2000, 2000),)


def _round_to_cents():
  import jax.numpy as jnp

  return lambda a: jnp.round(jnp.clip(a, -1, 1) * 100) / 100, (_normal(307, 1000000),)


def _int_remainder():
  return lambda a: (a * 7 + 3) % 11 >> 1, (_ints(308, 1000, 1000000),)


def _take_along_axis():
  import jax.numpy as jnp

  return lambda a, i: jnp.take_along_axis(a, i, 1), (
    _normal(309, 10000, 64),
    _ints(310, 64, 10000, 8),
  )


def _scatter_add_rows():
  return lambda a, i, u: a.at[i].add(u), (
    _normal(311, 1000, 64),
    _ints(312, 1000, 50000),
    _normal(313, 50000, 64),
  )


def _segment_max():
  import jax

  return lambda d, s: jax.ops.segment_max(d, s, 100), (
    _normal(314, 100000, 8),
    _ints(315, 100, 100000),
  )


def _vmap_dot_16():
  import jax
  import jax.numpy as jnp

  return jax.vmap(jnp.dot), (_normal(316, 10000, 16), _normal(317, 10000, 16))


def _complex_multiply():
  r = _r(318)
  a = (r.standard_normal(500000) + 1j * r.standard_normal(500000)).astype(np.complex64)
  b = (r.standard_normal(500000) + 1j * r.standard_normal(500000)).astype(np.complex64)
  return lambda a, b: (a * b).real, (a, b)


def _cumsum_rows_8():
  import jax.numpy as jnp

  return lambda a: jnp.cumsum(a, -1), (_normal(319, 100000, 8),)


def _gelu_erf():
  import jax

  return lambda a: jax.nn.gelu(a, approximate=False), (_normal(320, 1000000),)


def _bincount():
  import jax.numpy as jnp

  return lambda i: jnp.bincount(i, length=256), (_ints(321, 256, 1000000),)


def _int8_quantize():
  import jax.numpy as jnp

  return lambda a: jnp.clip(jnp.round(a / 0.05), -128, 127).astype(jnp.int8), (
    _normal(322, 1000000),
  )


def _gather_2d_points():
  return lambda img, y, x: img[y, x], (
    _normal(323, 512, 512),
    _ints(324, 512, 100000),
    _ints(325, 512, 100000),
  )


def _associative_scan_add():
  import jax
  import jax.numpy as jnp

  return lambda a: jax.lax.associative_scan(jnp.add, a), (_normal(326, 100000),)


def _log_softmax_rows_10():
  import jax

  return lambda a: jax.nn.log_softmax(a, -1), (_normal(327, 100000, 10),)


def _polyval_8():
  import jax.numpy as jnp

  return lambda x: jnp.polyval(jnp.arange(8.0, dtype=jnp.float32), x), (_normal(328, 1000000),)


def _popcount():
  import jax

  return jax.lax.population_count, (_ints(329, 1 << 30, 1000000),)


# (name, what, make, rtol), as heldout_third.THIRD.
OPS = [
  ("argmax_max_rows_4", "argmax + max over rows of 4, 100000x4", _argmax_max_rows_4, 1e-6),
  ("argmin_rows_7", "argmin over rows of 7, 100000x7", _argmin_rows_7, 0.0),
  ("argmax_axis0", "argmax along axis 0, 4x100000", _argmax_axis0, 0.0),
  ("min_rows_2", "min over rows of 2, 200000x2", _min_rows_2, 0.0),
  ("any_rows_10", "any(x > 2.5) over rows of 10", _any_rows_10, 0.0),
  ("tril_mask", "jnp.tril of 2000x2000", _tril_mask, 0.0),
  ("round_to_cents", "round(clip(x) * 100) / 100, 1M", _round_to_cents, 1e-6),
  ("int_remainder", "(7a + 3) % 11 >> 1, 1M int32", _int_remainder, 0.0),
  ("take_along_axis", "take_along_axis 8 of 64 per row, 10000 rows", _take_along_axis, 0.0),
  ("scatter_add_rows", "50000 rows of 64 added into 1000", _scatter_add_rows, 1e-5),
  ("segment_max", "segment_max of 100000x8 into 100", _segment_max, 0.0),
  ("vmap_dot_16", "vmap(dot) of 10000 pairs of 16", _vmap_dot_16, 1e-5),
  ("complex_multiply", "(a * b).real, 500000 c64", _complex_multiply, 1e-6),
  ("cumsum_rows_8", "cumsum over rows of 8, 100000x8", _cumsum_rows_8, 1e-5),
  ("gelu_erf", "exact GELU (erf), 1M", _gelu_erf, 1e-5),
  ("bincount_256", "bincount of 1M into 256", _bincount, 0.0),
  ("int8_quantize", "clip(round(x / 0.05)) as int8, 1M", _int8_quantize, 0.0),
  ("gather_2d_points", "img[y, x] of 100000 points, 512x512", _gather_2d_points, 0.0),
  ("associative_scan_add", "associative_scan(add) of 100000", _associative_scan_add, 1e-5),
  ("log_softmax_rows_10", "log_softmax over rows of 10, 100000x10", _log_softmax_rows_10, 1e-5),
  ("polyval_8", "polyval of 8 coefficients, 1M", _polyval_8, 1e-5),
  ("popcount", "population_count of 1M int32", _popcount, 0.0),
]
