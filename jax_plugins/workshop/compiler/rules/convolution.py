"""Family `convolution` (convolution): kernels/convolution.cc.

The rule turns convolution's dimension numbers into canonical orders and its optional
window attributes into explicit per-dimension lists (defaults filled in, read as
reduce_window.py reads its window), so the kernel never deals with missing attributes or
named layouts. Only the low padding is passed on: with the result shape (which the
verifier checked) it determines the rest.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from ..attrs import ints_per_dim, pad_lo
from ..lowering import Lowering, register
from ..upcast import emit_converted


@register("stablehlo.convolution")
def _convolution(ctx: Lowering, op: ir.Operation) -> None:
  """ins: lhs, rhs. Attrs: canonical dim orders and the window (see docs/plan.md).

  `lhs_layout` lists lhs's [batch, feature, spatial...] dims, `rhs_layout` rhs's
  [output feature, input feature, spatial...] dims and `out_layout` the result's
  [batch, feature, spatial...] dims; the window lists run over the spatial dims in that
  order. precision_config is a hint exact f32/f64 kernels don't need.

  Operands of another element type than the result (preferred_element_type, s8 x s8 ->
  s32) are converted to it first, as dot_general's.
  """
  dn = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
  n = len(dn.input_spatial_dimensions)
  emit_converted(
    ctx,
    op,
    {
      "lhs_layout": [
        dn.input_batch_dimension,
        dn.input_feature_dimension,
        *dn.input_spatial_dimensions,
      ],
      "rhs_layout": [
        dn.kernel_output_feature_dimension,
        dn.kernel_input_feature_dimension,
        *dn.kernel_spatial_dimensions,
      ],
      "out_layout": [
        dn.output_batch_dimension,
        dn.output_feature_dimension,
        *dn.output_spatial_dimensions,
      ],
      "strides": ints_per_dim(op, "window_strides", n, 1),
      "pad_lo": pad_lo(op, n),
      "lhs_dilation": ints_per_dim(op, "lhs_dilation", n, 1),
      "rhs_dilation": ints_per_dim(op, "rhs_dilation", n, 1),
      "reversal": [int(r) for r in ints_per_dim(op, "window_reversal", n, 0)],
      "feature_groups": op.attributes["feature_group_count"].value,
      "batch_groups": op.attributes["batch_group_count"].value,
    },
  )
