"""Lowering rules, one module per op family (the op table's `family`, optable.py), each
named after it; importing this package registers them all."""

from . import collectives, control_flow, elementwise, indexing, reduce, shape, sort  # noqa: F401
from . import convolution, dot, gather_scatter, reduce_window  # noqa: F401
from . import chlo, composite, fft, linalg, random, shardy  # noqa: F401
from . import callback, ffi, lapack  # noqa: F401
from . import approx_top_k  # noqa: F401  (notebook 03's exercise)
