"""Test set-up shared by every test file.

The workshop plugin is the default backend and JAX's own CPU backend runs beside it in the
same process as the reference (`JAX_PLATFORMS=workshop,cpu`). The CPU backend gets four
devices too, so pmap/shard_map programs have a reference.
"""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")


@pytest.fixture(scope="module")
def x64():
  """64-bit types on for a whole test module (`pytestmark = usefixtures("x64")`)."""
  import jax  # After the environment above is set.
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  yield
  jax.config.update("jax_enable_x64", previous)
