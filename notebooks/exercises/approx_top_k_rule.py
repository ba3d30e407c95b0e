"""approx_top_k: `jax.lax.approx_max_k` / `approx_min_k` off TPU (notebook 03's exercise).

Off TPU, JAX lowers them to `stablehlo.custom_call @ApproxTopK` with `is_fallback = true`,
which XLA:CPU computes exactly: the first `top_k` along `reduction_dim` in the order of
the comparator (its TopK kernel, or a sort).

  operands: x (float), iota (s32, x's shape), init value (-inf or +inf), init index (-1).
  results:  values (x's dtype), indices (s32), both x's shape with `top_k` along
            `reduction_dim` (the whole dimension, sorted, with aggregate_to_topk=false).
  comparator (called_computations[0]): `compare GT` (max_k) or `LT` (min_k) of its first
            two arguments.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import CUSTOM_CALLS, Lowering

# TODO: a rule that emits kernel "approx_top_k" with the attributes its kernel reads
# (k, dim, largest), registered as CUSTOM_CALLS["ApproxTopK"].
