"""Lowering rules, one module per op family; importing this package registers them all."""

from . import collectives, control, elementwise, indexing, nn, reduce, shape, sort  # noqa: F401
from . import chlo, composite, fft, linalg, random, shardy  # noqa: F401
from . import callback, ffi, lapack  # noqa: F401
from . import approx_top_k  # noqa: F401  (notebook 03's exercise)
