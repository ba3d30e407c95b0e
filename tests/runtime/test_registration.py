"""How JAX finds, selects and configures the workshop plugin, each case in a fresh process.

Backend selection happens once per process, so every scenario is a small script run with
`sys.executable` and PYTHONPATH set to this repository; it prints one JSON object that the
tests check. The scenarios are independent, so they start together (a few at a time) the
first time any test needs one.

The expected strings for `jnp.add(1, 1)`, `jax.jit(lambda x: x * 2)(1.)` and the pmap/psum
example are those the OpenXLA "develop a new PJRT plugin" guide prints for a working plugin.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 180  # a hang fails the test instead of blocking the suite

_PRELUDE = """
import json, sys
import jax
out = {"imported_by_import_jax": "jax_plugins.workshop" in sys.modules}
def done():
  print("RESULT " + json.dumps(out))
def error_of(f):
  try:
    f()
  except Exception as e:
    return [type(e).__name__, str(e)]
  return None
"""

# name: (script body, extra environment; None deletes the variable)
SCENARIOS = {
  # JAX_PLATFORMS=workshop: the guide's checks, device and backend attributes.
  "explicit": (
    """
        import jax.numpy as jnp
        from jax._src import xla_bridge
        from jaxlib.mlir.dialects import stablehlo
        devices = jax.devices()
        out["devices"] = [repr(d) for d in devices]
        out["platforms"] = sorted({d.platform for d in devices})
        out["ids"] = [d.id for d in devices]
        out["kinds"] = sorted({d.device_kind for d in devices})
        out["default_backend"] = jax.default_backend()
        out["imported_after_devices"] = "jax_plugins.workshop" in sys.modules
        out["add"] = str(jax.numpy.add(1, 1))
        out["add_platform"] = [d.platform for d in jnp.add(1, 1).devices()]
        out["jit"] = str(jax.jit(lambda x: x * 2)(1.))
        out["pmap"] = str(jax.pmap(lambda x: x + jax.lax.psum(x, "i"), axis_name="i")(
            jnp.arange(4)))
        backend = xla_bridge.get_backend("workshop")
        out["platform_version"] = backend.platform_version
        out["device_client_version"] = devices[0].client.platform_version
        out["stablehlo_current_version"] = list(backend.stablehlo_current_version)
        out["jaxlib_stablehlo_current"] = stablehlo.get_current_version()
        out["xla_version"] = backend.xla_version
        out["cpu_error"] = error_of(lambda: jax.devices("cpu"))
        done()
        """,
    {"JAX_PLATFORMS": "workshop"},
  ),
  "config_update": (
    """
        jax.config.update("jax_platforms", "workshop")
        out["devices"] = [repr(d) for d in jax.devices()]
        out["default_backend"] = jax.default_backend()
        out["cpu_error"] = error_of(lambda: jax.devices("cpu"))
        done()
        """,
    {"JAX_PLATFORMS": None},
  ),
  # Nothing set: the plugin's priority makes it the default, the CPU backend stays.
  "default": (
    """
        import jax.numpy as jnp
        out["default_backend"] = jax.default_backend()
        out["devices"] = [repr(d) for d in jax.devices()]
        out["cpu_devices"] = [d.platform for d in jax.devices("cpu")]
        out["add_platform"] = [d.platform for d in jnp.add(1, 1).devices()]
        done()
        """,
    {"JAX_PLATFORMS": None},
  ),
  # initialize() by hand before and after JAX's discovery, discovery run again, and the
  # plugin advertised through both routes (namespace package and an entry point).
  "twice": (
    """
        from importlib.metadata import entry_points
        from jax._src import xla_bridge
        import jax_plugins.workshop as workshop
        out["entry_points"] = [e.value for e in entry_points(group="jax_plugins")]
        workshop.initialize()
        workshop.initialize()
        out["devices"] = [repr(d) for d in jax.devices()]
        workshop.initialize()
        xla_bridge.discover_pjrt_plugins()
        out["devices_after"] = [repr(d) for d in jax.devices()]
        out["backends"] = sorted(xla_bridge.backends())
        out["add"] = str(jax.numpy.add(1, 1))
        done()
        """,
    {"JAX_PLATFORMS": "workshop,cpu", "_ENTRY_POINT": "1"},
  ),
  "num_devices_2": (
    """
        import jax.numpy as jnp
        jax.config.update("jax_pjrt_client_create_options", "num_devices:2")
        out["devices"] = [repr(d) for d in jax.devices()]
        out["pmap"] = str(jax.pmap(lambda x: x + jax.lax.psum(x, "i"), axis_name="i")(
            jnp.arange(2)))
        done()
        """,
    {"JAX_PLATFORMS": "workshop"},
  ),
  "num_devices_1": (
    """
        import jax.numpy as jnp
        jax.config.update("jax_pjrt_client_create_options", "num_devices:1")
        out["devices"] = [repr(d) for d in jax.devices()]
        out["add"] = str(jax.numpy.add(1, 1))
        try:
          out["pmap"] = str(jax.pmap(lambda x: x + jax.lax.psum(x, "i"), axis_name="i")(
              jnp.arange(1)))
        except Exception as e:
          out["pmap"] = f"{type(e).__name__}: {e}"
        done()
        """,
    {"JAX_PLATFORMS": "workshop"},
  ),
  # A misspelling of one of our options is refused, naming it and what it looks like.
  "misspelt_option": (
    """
        jax.config.update("jax_pjrt_client_create_options", "num_device:2")
        out["error"] = error_of(jax.devices)
        done()
        """,
    {"JAX_PLATFORMS": "workshop"},
  ),
  # What JAX sets for every plugin on a Cloud TPU host (jax/_src/cloud_tpu_init.py), and
  # a name meant for another plugin: ignored (WORKSHOP_DEBUG=1 logs them).
  "foreign_options": (
    """
        import jax.numpy as jnp
        jax.config.update("jax_pjrt_client_create_options",
                          "ml_framework_name:JAX;ml_framework_version:0.10.2;"
                          "bogus_option:3;num_devices:2")
        out["devices"] = [repr(d) for d in jax.devices()]
        out["add"] = str(jnp.add(1, 1))
        done()
        """,
    {"JAX_PLATFORMS": "workshop", "WORKSHOP_DEBUG": "1"},
  ),
  # The per-plugin way: WORKSHOP_NUM_DEVICES reaches the workshop's options only (the
  # CPU backend beside it keeps its one device).
  "env_num_devices": (
    """
        import jax.numpy as jnp
        from jax._src import xla_bridge
        out["devices"] = [repr(d) for d in jax.devices("workshop")]
        out["cpu_devices"] = len(jax.devices("cpu"))
        out["cpu_options"] = sorted(xla_bridge._options_from_jax_configs("cpu"))
        out["pmap"] = str(jax.pmap(lambda x: x + jax.lax.psum(x, "i"), axis_name="i")(
            jnp.arange(3)))
        done()
        """,
    {"JAX_PLATFORMS": "workshop,cpu", "WORKSHOP_NUM_DEVICES": "3"},
  ),
  "bad_env_num_devices": (
    """
        out["error"] = error_of(jax.devices)
        done()
        """,
    {"JAX_PLATFORMS": "workshop", "WORKSHOP_NUM_DEVICES": "three"},
  ),
  # An unsupported jaxlib (pretended: the installed version string is replaced before
  # discovery): the plugin is not registered, JAX logs why, the CPU backend still works.
  "unsupported_jaxlib": (
    """
        from jaxlib import version
        version.__version__ = "0.9.2"
        out["devices"] = [d.platform for d in jax.devices()]
        done()
        """,
    {"JAX_PLATFORMS": None},
  ),
  "bad_num_devices": (
    """
        jax.config.update("jax_pjrt_client_create_options", "num_devices:0")
        out["error"] = error_of(jax.devices)
        done()
        """,
    {"JAX_PLATFORMS": "workshop"},
  ),
}


def _make_entry_point_dir(root: str) -> str:
  """Writes a dist-info into `root` advertising jax_plugins.workshop as an entry point."""
  info = os.path.join(root, "pjrt_workshop_test-0.0.0.dist-info")
  os.makedirs(info)
  with open(os.path.join(info, "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: pjrt-workshop-test\nVersion: 0.0.0\n")
  with open(os.path.join(info, "entry_points.txt"), "w") as f:
    f.write("[jax_plugins]\nworkshop = jax_plugins.workshop\n")
  return root


def _run(name: str, entry_point_dir: str) -> dict:
  body, extra = SCENARIOS[name]
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)
  path = [REPO]
  for key, value in extra.items():
    if key == "_ENTRY_POINT":
      path.append(entry_point_dir)
    elif value is None:
      env.pop(key, None)
    else:
      env[key] = value
  env["PYTHONPATH"] = os.pathsep.join(path + [p for p in [env.get("PYTHONPATH")] if p])
  script = _PRELUDE + textwrap.dedent(body)
  proc = subprocess.run(
    [sys.executable, "-c", script],
    env=env,
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=TIMEOUT_S,
  )
  lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
  assert proc.returncode == 0 and lines, (
    f"scenario {name!r} failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
  )
  result = json.loads(lines[-1][len("RESULT ") :])
  result["_stderr"] = proc.stderr
  return result


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
  entry_point_dir = _make_entry_point_dir(str(tmp_path_factory.mktemp("entry_point")))
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
  futures = {name: pool.submit(_run, name, entry_point_dir) for name in SCENARIOS}
  yield lambda name: futures[name].result()
  pool.shutdown(wait=True)


# ---- the guide's checks ----


def test_guide_outputs(scenario):
  out = scenario("explicit")
  assert out["add"] == "2"
  assert out["jit"] == "2.0"
  assert out["pmap"] == "[6 7 8 9]"
  assert out["add_platform"] == ["workshop"]


def test_jax_platforms_env_selects_four_devices(scenario):
  out = scenario("explicit")
  assert out["devices"] == [f"WorkshopDevice(id={i})" for i in range(4)]
  assert out["ids"] == [0, 1, 2, 3]
  assert out["platforms"] == ["workshop"]
  assert out["default_backend"] == "workshop"
  # Only the requested platform is initialized.
  assert out["cpu_error"] is not None and out["cpu_error"][0] == "RuntimeError"


def test_discovery_is_lazy(scenario):
  # `import jax` does not import plugins; the first backend query does.
  out = scenario("explicit")
  assert out["imported_by_import_jax"] is False
  assert out["imported_after_devices"] is True


def test_device_and_backend_attributes(scenario):
  from jaxlib.mlir.dialects import stablehlo

  out = scenario("explicit")
  assert out["kinds"] == ["workshop-cpu"]
  # jaxlib prefixes the plugin's PJRT_Client_PlatformVersion with "PJRT C API\n".
  assert out["platform_version"].splitlines()[-1].startswith("workshop 0.")
  assert "4 virtual CPU devices" in out["platform_version"]
  assert out["device_client_version"] == out["platform_version"]
  current = [int(v) for v in stablehlo.get_current_version().split(".")]
  assert out["jaxlib_stablehlo_current"] == stablehlo.get_current_version()
  assert out["stablehlo_current_version"] == current
  assert isinstance(out["xla_version"], int) and out["xla_version"] >= 1


def test_config_update_selects_workshop(scenario):
  out = scenario("config_update")
  assert out["devices"] == [f"WorkshopDevice(id={i})" for i in range(4)]
  assert out["default_backend"] == "workshop"
  assert out["cpu_error"] is not None


def test_default_backend_without_jax_platforms(scenario):
  out = scenario("default")
  assert out["default_backend"] == "workshop"
  assert out["devices"] == [f"WorkshopDevice(id={i})" for i in range(4)]
  assert out["cpu_devices"] and set(out["cpu_devices"]) == {"cpu"}
  assert out["add_platform"] == ["workshop"]


def test_registering_twice_is_harmless(scenario):
  out = scenario("twice")
  assert "jax_plugins.workshop" in out["entry_points"]  # both discovery routes active
  expected = [f"WorkshopDevice(id={i})" for i in range(4)]
  assert out["devices"] == expected
  assert out["devices_after"] == expected
  assert out["backends"] == ["cpu", "workshop"]
  assert out["add"] == "2"
  # JAX's discovery logs (and swallows) exceptions from initialize(): none may appear.
  assert "configuration error" not in out["_stderr"], out["_stderr"]


# ---- client create options ----


def test_num_devices_option(scenario):
  out = scenario("num_devices_2")
  assert out["devices"] == ["WorkshopDevice(id=0)", "WorkshopDevice(id=1)"]
  assert out["pmap"] == "[1 2]"


def test_pmap_psum_on_one_device(scenario):
  assert scenario("num_devices_1")["pmap"] == "[0]"


def test_one_device(scenario):
  out = scenario("num_devices_1")
  assert out["devices"] == ["WorkshopDevice(id=0)"]
  assert out["add"] == "2"


def test_misspelt_option_is_an_error_naming_it(scenario):
  kind, message = scenario("misspelt_option")["error"]
  assert kind == "RuntimeError"
  assert "INVALID_ARGUMENT" in message
  assert "'num_device' (did you mean 'num_devices'?)" in message
  assert "device_memory_limit" in message  # the known options are listed


def test_options_meant_for_other_plugins_are_ignored(scenario):
  out = scenario("foreign_options")
  assert out["devices"] == ["WorkshopDevice(id=0)", "WorkshopDevice(id=1)"]
  assert out["add"] == "2"
  for name in ("ml_framework_name", "ml_framework_version", "bogus_option"):
    assert f"ignoring client create option '{name}'" in out["_stderr"]


def test_num_devices_from_the_environment_reaches_workshop_only(scenario):
  out = scenario("env_num_devices")
  assert out["devices"] == [f"WorkshopDevice(id={i})" for i in range(3)]
  assert out["pmap"] == "[3 4 5]"
  assert out["cpu_devices"] == 1
  assert "num_devices" not in out["cpu_options"]


def test_bad_num_devices_from_the_environment_is_an_error(scenario):
  kind, message = scenario("bad_env_num_devices")["error"]
  assert kind == "RuntimeError"
  assert "num_devices" in message and "INVALID_ARGUMENT" in message


def test_out_of_range_num_devices_is_an_error(scenario):
  kind, message = scenario("bad_num_devices")["error"]
  assert kind == "RuntimeError"
  assert "num_devices" in message and "INVALID_ARGUMENT" in message


# ---- the jaxlib version guard ----


def test_unsupported_jaxlib_is_named_and_skipped(scenario):
  out = scenario("unsupported_jaxlib")
  assert out["devices"] == ["cpu"]
  # The message names the installed and the supported versions, and the fix.
  assert "supports jax/jaxlib 0.10.x, but jaxlib 0.9.2 is installed" in out["_stderr"]
  assert "pip install 'jax==0.10.*' 'jaxlib==0.10.*'" in out["_stderr"]


def test_jaxlib_version_check():
  import jax_plugins.workshop as workshop

  workshop.check_jaxlib_version("0.10.2")
  workshop.check_jaxlib_version("0.10.7.dev20270101")
  for version in ("0.9.2", "0.11.0", "1.10.0"):
    with pytest.raises(RuntimeError, match=f"but jaxlib {version} is installed"):
      workshop.check_jaxlib_version(version)
