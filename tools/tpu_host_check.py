"""Checks the workshop plugin beside the TPU plugin, on a Cloud TPU host (issue 34).

There JAX sets the process-wide client create options
``ml_framework_name:JAX;ml_framework_version:<version>`` for every plugin
(``jax/_src/cloud_tpu_init.py``); the workshop must start anyway, and its device count comes
from ``WORKSHOP_NUM_DEVICES`` without reaching the TPU plugin.

Run on the TPU host (the device tool, after ``bash ../shared/device/stage.sh``)::

  bash .device/run.sh python tools/tpu_host_check.py

It runs, each in a fresh process:

1. the guide's checks, ``python -m jax_plugins.workshop.teach.check`` (workshop alone);
2. with ``JAX_PLATFORMS=workshop,tpu,cpu`` and ``WORKSHOP_NUM_DEVICES=2``: every backend's
   devices, the process-wide create options JAX set, the guide's programs on workshop, a
   ``device_put`` of an array from a workshop device to a TPU device and back (values
   compared with numpy), and a jit on each.

Prints one line per check (``ok``/``FAIL``) and exits with status 1 if any failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BESIDE_TPU = textwrap.dedent(
  """
  import traceback
  import numpy as np
  failures = 0
  def report(name, fn):
    global failures
    try:
      print(f"ok   {name}: {fn()}", flush=True)
    except Exception:
      failures += 1
      print(f"FAIL {name}:\\n" + traceback.format_exc(), flush=True)

  import jax
  import jax.numpy as jnp
  from jax._src import config
  report("process-wide create options",
         lambda: repr(config.jax_pjrt_client_create_options.value))
  report("backends", lambda: sorted(jax._src.xla_bridge.backends()))
  report("workshop devices", lambda: jax.devices("workshop"))
  report("tpu devices", lambda: jax.devices("tpu"))
  report("cpu devices", lambda: jax.devices("cpu"))
  report("default backend", jax.default_backend)

  def on_workshop():
    d = jax.devices("workshop")
    assert len(d) == 2, d  # WORKSHOP_NUM_DEVICES=2
    add = jax.jit(jnp.add)(jax.device_put(1, d[0]), 1)
    pmap = jax.pmap(lambda x: x + jax.lax.psum(x, "i"), axis_name="i", devices=d)(
        jnp.arange(2))
    assert str(add) == "2" and str(pmap) == "[1 2]", (add, pmap)
    return f"add {add}, pmap {pmap}"
  report("the guide's programs on workshop", on_workshop)

  def round_trip():
    w, t = jax.devices("workshop")[0], jax.devices("tpu")[0]
    host = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    x = jax.device_put(host, w)
    y = jax.device_put(x, t)
    assert y.devices() == {t}, y.devices()
    y2 = jax.jit(lambda v: v * 2 + 1)(y)
    z = jax.device_put(y2, w)
    assert z.devices() == {w}, z.devices()
    z2 = jax.jit(lambda v: v - 1)(z)
    np.testing.assert_allclose(np.asarray(z2), host * 2, rtol=1e-6)
    return f"workshop -> {t} -> workshop, values equal numpy's"
  report("device_put workshop <-> tpu", round_trip)
  print("RESULT", "failures", failures)
  raise SystemExit(1 if failures else 0)
  """
)


def run(name: str, argv: list[str], env: dict[str, str]) -> bool:
  print(f"== {name}", flush=True)
  full = dict(os.environ, **env)
  full["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
  try:
    proc = subprocess.run(argv, env=full, cwd=REPO, capture_output=True, text=True, timeout=300)
  except subprocess.TimeoutExpired:
    print(f"FAIL {name}: no answer in 300 s")
    return False
  print(proc.stdout, end="")
  tail = proc.stderr.strip().splitlines()[-15:]
  if tail:
    print("  stderr (last lines):\n    " + "\n    ".join(tail))
  print(f"== {name}: exit status {proc.returncode}", flush=True)
  return proc.returncode == 0


def main() -> None:
  ok = run("the guide's checks", [sys.executable, "-m", "jax_plugins.workshop.teach.check"], {})
  ok &= run(
    "workshop beside tpu",
    [sys.executable, "-c", BESIDE_TPU],
    {"JAX_PLATFORMS": "workshop,tpu,cpu", "WORKSHOP_NUM_DEVICES": "2", "WORKSHOP_DEBUG": "1"},
  )
  print("ALL OK" if ok else "SOME CHECKS FAILED")
  sys.exit(0 if ok else 1)


if __name__ == "__main__":
  main()
