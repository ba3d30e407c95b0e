"""Ahead-of-time compilation for a topology (jax.experimental.topologies), each path JAX
offers, in a fresh process with a timeout so that a hang fails instead of blocking.

Paths: `get_topology_desc` (with and without create options), `make_mesh` from it,
`lower`, `compile` (PJRT_Compile), `serialize` and `deserialize_and_load` on the attached
devices, the executable's results against numpy, the topology's own serialization, and
jaxlib's cross-compile through the real client (`jax::CompileWithTopology`, which holds
the GIL while it waits: the plugin must return an error, not hang).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 120

_PRELUDE = """
import json
import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import topologies
from jax.experimental.serialize_executable import serialize, deserialize_and_load
from jax.sharding import NamedSharding, PartitionSpec as P
out = {}
def done():
  print("RESULT " + json.dumps(out))
"""


def _run(body: str, **env: str) -> dict:
  full = dict(os.environ, JAX_PLATFORMS="workshop,cpu", **env)
  full.pop("XLA_FLAGS", None)
  full["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
  try:
    proc = subprocess.run(
      [sys.executable, "-c", _PRELUDE + textwrap.dedent(body)],
      env=full,
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=TIMEOUT_S,
    )
  except subprocess.TimeoutExpired as e:
    pytest.fail(f"no answer in {TIMEOUT_S} s (a hang): {e.stderr}")
  lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
  assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
  return json.loads(lines[-1][len("RESULT ") :])


def test_compile_for_a_topology_serialize_and_run():
  out = _run("""
    topo = topologies.get_topology_desc(platform="workshop")
    out["topology_devices"] = [repr(d) for d in topo.devices]
    mesh = topologies.make_mesh(topo, (2, 2), ("x", "y"))
    out["mesh"] = dict(mesh.shape)
    spec = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P("x", "y")))
    lowered = jax.jit(lambda x: x * x + 1).lower(spec)
    compiled = lowered.compile()
    out["input_sharding"] = str(compiled.input_shardings[0][0].spec)
    blob, in_tree, out_tree = serialize(compiled)
    out["serialized_bytes"] = len(blob)
    loaded = deserialize_and_load(blob, in_tree, out_tree)
    host = np.arange(256, dtype=np.float32).reshape(16, 16) / 3
    x = jax.device_put(host, NamedSharding(jax.make_mesh((2, 2), ("x", "y")), P("x", "y")))
    y = loaded(x)
    out["platform"] = sorted({d.platform for d in y.devices()})
    out["shards"] = len(y.addressable_shards)
    out["max_error"] = float(np.max(np.abs(np.asarray(y) - (host * host + 1))))
    # The attached topology compiles to the same program.
    attached = topologies.get_attached_topology("workshop")
    mesh2 = topologies.make_mesh(attached, (2, 2), ("x", "y"))
    spec2 = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh2, P("x", "y")))
    text2 = deserialize_and_load(*serialize(jax.jit(lambda x: x * x + 1).lower(spec2).compile())).as_text()
    out["same_text"] = text2 == loaded.as_text()
    done()
    """)
  assert out["topology_devices"] == [f"WorkshopDevice(id={i})" for i in range(4)]
  assert out["mesh"] == {"x": 2, "y": 2}
  assert out["input_sharding"] == "P('x', 'y')"
  assert out["serialized_bytes"] > 0
  assert out["platform"] == ["workshop"] and out["shards"] == 4
  assert out["max_error"] == 0.0
  assert out["same_text"]


def test_topology_with_create_options_and_its_serialization():
  out = _run("""
    from jax._src.lib import _jax
    topo = topologies.get_topology_desc("any name", "workshop", num_devices=8)
    out["devices"] = len(topo.devices)
    mesh = topologies.make_mesh(topo, (8,), ("x",))
    spec = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    compiled = jax.jit(lambda x: jnp.sin(x).sum(0)).lower(spec).compile()
    out["text"] = "sin" in compiled.as_text()
    # Loading a program for 8 devices on a client of 4 is an error that says so.
    blob, in_tree, out_tree = serialize(compiled)
    try:
      deserialize_and_load(blob, in_tree, out_tree)
      out["load_error"] = None
    except Exception as e:
      out["load_error"] = str(e)
    # A misspelt option is refused here as for a client.
    try:
      topologies.get_topology_desc("t", "workshop", num_device=8)
      out["misspelt"] = None
    except Exception as e:
      out["misspelt"] = str(e)
    done()
    """)
  assert out["devices"] == 8
  assert out["text"]
  assert out["load_error"] is not None and "device" in out["load_error"]
  assert out["misspelt"] is not None and "num_devices" in out["misspelt"]


def test_cross_compile_through_the_client_returns_an_error_not_a_hang():
  # JAX's own route is made to go through the compile-only client (jax_plugins.workshop);
  # restoring jax's choice reaches jax::CompileWithTopology, which waits for PJRT_Compile
  # on another thread with the GIL held. The plugin gives up waiting for the GIL.
  out = _run(
    """
    import time
    from jax._src import compiler
    jax.devices()
    compiler._get_cross_compile_backend = compiler._get_cross_compile_backend.__wrapped__
    topo = topologies.get_topology_desc(platform="workshop")
    mesh = topologies.make_mesh(topo, (4,), ("x",))
    spec = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    start = time.monotonic()
    try:
      jax.jit(lambda x: x * 2).lower(spec).compile()
      out["error"] = None
    except Exception as e:
      out["error"] = str(e)
    out["seconds"] = time.monotonic() - start
    out["after"] = float(jax.jit(lambda x: x + 1)(1.0))
    done()
    """,
    WORKSHOP_COMPILE_GIL_WAIT_S="1",
  )
  assert out["error"] is not None and "DEADLINE_EXCEEDED" in out["error"], out
  assert "GIL" in out["error"]
  assert out["after"] == 2.0  # the process goes on compiling
