"""The __NAME__ PJRT plugin: registration with JAX.

JAX imports every module of the ``jax_plugins`` namespace package and every
``jax_plugins`` entry point (setup.py), and calls ``initialize()`` once per name.
``initialize()`` registers the library with ``register_plugin``; JAX creates the client
(PJRT_Client_Create) when the platform is first used. Select it with
``JAX_PLATFORMS=__NAME__`` (or ``__NAME__,cpu``) or ``jax.devices("__NAME__")``.

Client create option: ``num_devices`` (default 4; ``__NAME_UPPER___NUM_DEVICES`` overrides).
"""

import importlib.util
import os

PLATFORM_NAME = "__NAME__"
# Below the built-in CPU backend (0): the plugin is used when asked for, not by default.
# REAL ACCELERATOR: a priority above 0 makes it JAX's default backend; check the installed
# jaxlib's version here too (the workshop plugin's initialize() shows how).
PRIORITY = -100


def library_path() -> str:
  """Absolute path of the built library (the shared object exporting GetPjrtApi).

  Raises:
    FileNotFoundError: the plugin is not built (``python setup.py build_ext --inplace``).
  """
  spec = importlib.util.find_spec("jax_plugins.__NAME__._plugin")
  if spec is None or spec.origin is None:
    raise FileNotFoundError("the __NAME__ plugin is not built: run `python setup.py "
                            "build_ext --inplace` in its project (or `pip install .`)")
  return spec.origin


_registered = False


def initialize() -> None:
  """Registers the plugin with JAX (called by JAX's plugin discovery; idempotent)."""
  global _registered
  if _registered:
    return
  from jax._src import xla_bridge

  num_devices = int(os.environ.get("__NAME_UPPER___NUM_DEVICES", "4"))
  xla_bridge.register_plugin(PLATFORM_NAME, priority=PRIORITY, library_path=library_path(),
                             options={"num_devices": num_devices})
  # JAX lowers donation (donate_argnums: tf.aliasing_output on the parameter) only for the
  # platforms it lists; the runtime consumes donated buffers (src/capi.cc Execute).
  from jax._src.interpreters import mlir
  if PLATFORM_NAME not in mlir._platforms_with_donation:
    mlir._platforms_with_donation.append(PLATFORM_NAME)
  _registered = True
