"""Test set-up shared by every test file.

The workshop plugin is the default backend and JAX's own CPU backend runs beside it in the
same process as the reference (`JAX_PLATFORMS=workshop,cpu`). The CPU backend gets four
devices too, so pmap/shard_map programs have a reference.

A module marked `pytestmark = pytest.mark.codegen_settings("0", "force")` runs every test
once per WORKSHOP_CODEGEN value named (test ids end in `[codegen=0]`, `[codegen=force]`):
with "0" every loop and fusion is interpreted, with "force" the code-generation tier
(compiler/codegen) takes every one it covers whatever its size, so between them each
region runs both ways whichever the default would choose.
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


def pytest_configure(config):
  config.addinivalue_line(
    "markers", "codegen_settings(*values): run the module once per WORKSHOP_CODEGEN value"
  )


def pytest_generate_tests(metafunc):
  marker = metafunc.definition.get_closest_marker("codegen_settings")
  if marker is not None:
    metafunc.parametrize(
      "codegen_setting",
      list(marker.args),
      indirect=True,
      scope="module",
      ids=[f"codegen={v}" for v in marker.args],
    )


@pytest.fixture(autouse=True, scope="module")
def codegen_setting(request, tmp_path_factory):
  """WORKSHOP_CODEGEN for the module's tests under the `codegen_settings` marker (the
  setting is read when a program is compiled, so JAX's executable caches are cleared on
  each change), with generated objects in a fresh directory rather than ~/.cache (a warm
  cache would hide what compiling costs); nothing elsewhere."""
  value = getattr(request, "param", None)
  if value is None:
    yield None
    return
  import jax  # After the environment above is set.
  from codegen_helpers import environ

  with environ(
    WORKSHOP_CODEGEN=value, WORKSHOP_CODEGEN_CACHE=str(tmp_path_factory.mktemp("codegen"))
  ):
    jax.clear_caches()
    yield value
  jax.clear_caches()
