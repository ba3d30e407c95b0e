"""approx_top_k (jax.lax.approx_max_k / approx_min_k), against JAX's CPU backend."""

import jax
import numpy as np
import pytest
from jax import lax

from reference import cpu_device, run_on

# TODO: tests that run approx_max_k and approx_min_k on the plugin and on the CPU backend
# (run_on(cpu_device(), f, x)) and compare values and indices.
