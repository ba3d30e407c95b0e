"""The C API features as JAX uses them, on the workshop platform.

compiled.as_text(), cost_analysis(), memory_analysis(), device.memory_stats(), output and
parameter shardings a multi-device jit leaves unspecified, donation, memory kinds
("pinned_host" puts, outputs and device_put inside jit), the persistent compilation cache
across processes, and the call tracer. References are numpy or JAX's CPU backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import jax_plugins.workshop as workshop

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(script: str, env: dict | None = None) -> subprocess.CompletedProcess:
  """Runs `script` in a fresh interpreter with this repository first on the path."""
  env = dict(os.environ, **(env or {}))
  env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])
  return subprocess.run(
    [sys.executable, "-c", textwrap.dedent(script)],
    env=env,
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )


@pytest.fixture
def device():
  return jax.devices("workshop")[0]


@pytest.fixture
def mesh():
  return Mesh(np.array(jax.devices("workshop")), ("i",))


# ---- Executable queries.


def test_as_text_is_the_compiled_program():
  compiled = jax.jit(lambda a: jnp.sin(a) * 2).lower(jnp.ones((2, 3))).compile()
  text = compiled.as_text()
  assert text.startswith("HloModule jit__lambda")
  assert "sine(" in text and "multiply(" in text


def test_cost_analysis_counts_flops_and_transcendentals():
  m, k, n = 8, 16, 4
  a, b = jnp.ones((m, k)), jnp.ones((k, n))
  cost = jax.jit(jnp.matmul).lower(a, b).compile().cost_analysis()
  assert cost["flops"] == 2 * m * n * k
  assert cost["bytes accessed"] == 4 * (m * k + k * n + m * n)
  cost = jax.jit(jnp.exp).lower(jnp.ones(10)).compile().cost_analysis()
  assert cost["transcendentals"] == 10 and cost["flops"] == 0
  # NHWC 3x3 convolution, 4 -> 6 features in 2 groups: each output sums 3 * 3 * 2 products.
  x, w = jnp.ones((2, 6, 6, 4)), jnp.ones((3, 3, 2, 6))
  conv = lambda x, w: jax.lax.conv_general_dilated(
    x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2
  )
  cost = jax.jit(conv).lower(x, w).compile().cost_analysis()
  assert cost["flops"] == 2 * (3 * 3 * 2) * (2 * 4 * 4 * 6)


def test_memory_analysis_sizes():
  compiled = (
    jax.jit(lambda a, b: (a + b, a), donate_argnums=0).lower(jnp.ones(8), jnp.ones(8)).compile()
  )
  stats = compiled.memory_analysis()
  assert stats.argument_size_in_bytes == 64
  assert stats.output_size_in_bytes == 64
  assert stats.alias_size_in_bytes == 32  # the donated a
  assert stats.generated_code_size_in_bytes == 0


def test_memory_stats_track_buffers(device):
  before = device.memory_stats()["bytes_in_use"]
  x = jax.device_put(np.ones(1 << 16, np.float32), device)
  assert device.memory_stats()["bytes_in_use"] >= before + (1 << 18)
  x.delete()
  assert device.memory_stats()["bytes_in_use"] == before
  assert device.memory_stats()["peak_bytes_in_use"] >= before + (1 << 18)


# ---- Multi-device jit without explicit shardings (shardings from OptimizedProgram).


def test_shard_map_jit_gets_output_and_parameter_shardings(mesh):
  f = jax.jit(
    jax.shard_map(
      lambda x: x * 2 + jax.lax.psum(x, "i"), mesh=mesh, in_specs=P("i"), out_specs=P("i")
    )
  )
  x = np.arange(16, dtype=np.float32)
  compiled = f.lower(x).compile()
  assert compiled.output_shardings.spec == P("i")
  # JAX reads the parameter sharding back as a GSPMDSharding.
  assert compiled.input_shardings[0][0].is_equivalent_to(NamedSharding(mesh, P("i")), 1)
  y = f(x)  # x lives on one device: JAX lays it out as the compiled program asks
  assert y.sharding.spec == P("i")
  expected = x * 2 + np.tile(x.reshape(4, 4).sum(0), 4)
  np.testing.assert_array_equal(np.asarray(y), expected)


# ---- Donation.


def test_donation_deletes_the_input(device):
  x = jax.device_put(jnp.arange(4.0), device)
  y = jax.jit(lambda a: a + 1, donate_argnums=0)(x)
  assert x.is_deleted()
  np.testing.assert_array_equal(np.asarray(y), [1, 2, 3, 4])
  with pytest.raises(RuntimeError, match="deleted"):
    jax.jit(lambda a: a + 1)(x)


# ---- Memory kinds.


def test_devices_have_device_and_pinned_host_memories(device):
  assert {m.kind for m in device.addressable_memories()} == {"device", "pinned_host"}
  assert device.default_memory().kind == "device"


def test_pinned_host_put_jit_and_back(device):
  host = SingleDeviceSharding(device, memory_kind="pinned_host")
  x = jax.device_put(np.arange(4, dtype=np.float32), host)
  assert x.sharding.memory_kind == "pinned_host"
  f = jax.jit(lambda a: a * 2, out_shardings=host)
  y = f(x)
  assert y.sharding.memory_kind == "pinned_host"
  np.testing.assert_array_equal(np.asarray(y), [0, 2, 4, 6])
  stats = f.lower(x).compile().memory_analysis()
  assert stats.host_argument_size_in_bytes == 16 and stats.host_output_size_in_bytes == 16
  back = jax.device_put(y, SingleDeviceSharding(device, memory_kind="device"))
  assert back.sharding.memory_kind == "device"
  np.testing.assert_array_equal(np.asarray(back), [0, 2, 4, 6])


def test_device_put_to_host_inside_jit(device):
  host = SingleDeviceSharding(device, memory_kind="pinned_host")
  z = jax.jit(lambda a: jax.device_put(a * 3, host))(jnp.ones(3))
  assert z.sharding.memory_kind == "pinned_host"
  np.testing.assert_array_equal(np.asarray(z), [3, 3, 3])


def test_sharded_pinned_host_put(mesh):
  x = jax.device_put(
    np.arange(8, dtype=np.float32), NamedSharding(mesh, P("i"), memory_kind="pinned_host")
  )
  assert x.sharding.memory_kind == "pinned_host"
  assert {s.data.sharding.memory_kind for s in x.addressable_shards} == {"pinned_host"}
  np.testing.assert_array_equal(np.asarray(x), np.arange(8))


def test_layouts_are_row_major(device):
  x = jax.device_put(np.ones((2, 3, 4), np.float32), device)
  assert x.format.layout.major_to_minor == (0, 1, 2)
  compiled = jax.jit(lambda a: a.T).lower(x).compile()
  assert compiled.output_formats.layout.major_to_minor == (0, 1, 2)


# ---- The persistent compilation cache, across processes.


def test_persistent_cache_hit_in_a_second_process(tmp_path):
  script = f"""
      import os
      os.environ["JAX_PLATFORMS"] = "workshop"
      import jax, jax.numpy as jnp
      from jax._src import monitoring
      jax.config.update("jax_compilation_cache_dir", {str(tmp_path)!r})
      jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
      jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
      events = []
      monitoring.register_event_listener(lambda name, **kw: events.append(name))
      y = jax.jit(lambda a: jnp.sin(a) * 2 + a)(jnp.arange(4.0))
      print(y.tolist())
      print(sorted(e.rsplit("/", 1)[1] for e in events if "compilation_cache/cache_" in e))
      """
  first, second = run_python(script), run_python(script)
  assert first.returncode == 0, first.stderr
  assert second.returncode == 0, second.stderr
  assert "cache_misses" in first.stdout and "cache_hits" not in first.stdout
  assert "cache_hits" in second.stdout and "cache_misses" not in second.stdout
  assert first.stdout.splitlines()[0] == second.stdout.splitlines()[0]
  assert any(name.endswith("-cache") for name in os.listdir(tmp_path))


# ---- The call tracer.


def test_trace_records_calls_with_arguments_and_errors(device):
  x = jax.device_put(np.ones(4, np.float32), device)
  with workshop.trace() as t:
    y = jax.jit(lambda a: a * 5)(x)
    np.asarray(y)
  names = t.functions()
  assert names.index("Client_Compile") < names.index("LoadedExecutable_Execute")
  assert names.index("LoadedExecutable_Execute") < names.index("Buffer_ToHostBuffer")
  (execute,) = t.select("LoadedExecutable_Execute")
  assert "name=jit__lambda devices=1 args=1" in execute.args
  assert all(c.code == 0 and c.duration_ms >= 0 for c in t.calls)
  # Handles are renumbered in order of appearance.
  assert "executable#1" in execute.args
  # A boolean convolution (a binary dilation): the op table gives convolution no pred
  # kernel, so the compile fails (notebook 03's example).
  image = jax.device_put(np.ones((1, 1, 4, 4), bool), device)
  with workshop.trace() as failed:
    with pytest.raises(jax.errors.JaxRuntimeError):
      jax.jit(lambda a: jax.lax.conv(a, jnp.ones((1, 1, 3, 3), bool), (1, 1), "SAME"))(image)
  (compile_call,) = [c for c in failed.calls if c.name == "Client_Compile"]
  assert compile_call.code == 12 and "error=" in compile_call.args


def test_trace_nests_and_stops(device):
  with workshop.trace() as outer:
    jax.device_put(np.ones(2, np.float32), device).block_until_ready()
    with workshop.trace() as inner:
      jax.device_put(np.ones(3, np.float32), device).block_until_ready()
  assert inner.select("Client_BufferFromHostBuffer")[0].args.startswith("shape=f32[3]")
  assert len(outer.select("Client_BufferFromHostBuffer")) == 2
  with workshop.trace() as after:
    pass
  assert after.calls == []


def test_workshop_trace_environment_variable():
  script = """
      import os
      os.environ["JAX_PLATFORMS"] = "workshop"
      import jax
      jax.devices()
      """
  proc = run_python(script, env={"WORKSHOP_TRACE": "1"})
  assert proc.returncode == 0, proc.stderr
  lines = [l for l in proc.stderr.splitlines() if l.startswith("[workshop trace]")]
  assert lines[0].split()[2] == "PJRT_Plugin_Initialize"
  assert any(" PJRT_Client_Create " in l for l in lines)
