"""Hostile compile input through JAX: unknown compile options, the device memory limit.

Each test runs in a child process: the memory limit is a client create option, fixed when
the backend starts."""

from __future__ import annotations

import textwrap

from conftest import run_child

PRELUDE = """
import os
os.environ["JAX_PLATFORMS"] = "workshop"
import jax, jax.numpy as jnp, numpy as np
"""


def run(body, **env):
  proc = run_child(["-c", PRELUDE + textwrap.dedent(body)], **env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


def test_unknown_compile_option_is_an_error_naming_it():
  out = run("""
      lowered = jax.jit(lambda x: x + 1).lower(jnp.ones(3))
      for options in [{"bad": 1}, {"xla_cpu_enable_fast_math": "notabool"}]:
        try:
          lowered.compile(options)
          print("ACCEPTED", options)
        except jax.errors.JaxRuntimeError as e:
          print(e)
      # A real XLA option with the right type changes nothing here and is accepted.
      print(lowered.compile({"xla_cpu_enable_fast_math": False})(jnp.ones(3)))
      """)
  lines = out.strip().splitlines()
  assert lines[0] == "INVALID_ARGUMENT: No such compile option: 'bad'"
  assert lines[1].startswith("INVALID_ARGUMENT: While setting option xla_cpu_enable_fast_math")
  assert lines[2] == "[2. 2. 2.]"


def test_compile_options_are_judged_as_on_the_cpu_backend():
  """Each option set gives the same error (or none) on workshop and XLA:CPU in one process."""
  out = run("""
      jax.config.update("jax_platforms", "workshop,cpu")
      cases = [{"xla_no_such_option": 1}, {"xla_cpu_enable_fast_math": "true"},
               {"xla_cpu_enable_fast_math": True}, {"xla_backend_optimization_level": "2"},
               {"xla_gpu_autotune_level": 2.5}, {"xla_dump_to": 3},
               {"xla_dump_hlo_as_text": 1}, {"xla_dump_max_hlo_modules": "3"},
               {"xla_detailed_logging": False, "xla_bogus": 2},
               {"xla_disable_hlo_passes": "hlo-verifier"}]
      for options in cases:
        said = []
        for platform in ("workshop", "cpu"):
          with jax.default_device(jax.devices(platform)[0]):
            lowered = jax.jit(lambda x: x + 1).lower(1.0)
          try:
            lowered.compile(options)
            said.append("accepted")
          except jax.errors.JaxRuntimeError as e:
            said.append(str(e))
        print(said[0] == said[1], options, said)
      # XLA:CPU's code generation aborts the process on this one (std::length_error); the
      # plugin's check stops XLA before code generation, and the option changes nothing.
      with jax.default_device(jax.devices("workshop")[0]):
        lowered = jax.jit(lambda x: x + 1).lower(1.0)
      print(lowered.compile({"xla_cpu_parallel_codegen_split_count": -5})(1.0))
      print(lowered.compile({"xla_disable_hlo_passes": "hlo-verifier",
                             "xla_cpu_parallel_codegen_split_count": -5})(1.0))
      """)
  lines = out.strip().splitlines()
  assert lines[-2:] == ["2.0", "2.0"], out
  lines = lines[:-2]
  assert len(lines) == 10 and all(line.startswith("True") for line in lines), out
  assert "No such compile option: 'xla_no_such_option'" in lines[0]
  assert "'true' is not a valid bool value" in lines[1]
  assert "No such compile option: 'xla_bogus'" in lines[8]


def test_memory_limit_is_reported_and_enforced():
  out = run("""
      jax.config.update("jax_pjrt_client_create_options", "device_memory_limit:4000000")
      d = jax.devices()[0]
      print(d.memory_stats()["bytes_limit"])
      # Needs 8 MB at its peak: refused when compiled, naming the program and the need.
      try:
        jax.jit(lambda x: x * 2).lower(jax.ShapeDtypeStruct((1_000_000,), jnp.float32)).compile()
        print("ACCEPTED")
      except jax.errors.JaxRuntimeError as e:
        print(str(e)[:200])
      # Fits alone, but not beside a 3.5 MB buffer: the op that allocates fails.
      held = jax.device_put(np.ones(875_000, np.float32), d)
      x = jax.device_put(np.ones(100_000, np.float32), d)
      try:
        np.asarray(jax.jit(lambda x: x * 2 + 1)(x))
        print("ACCEPTED")
      except jax.errors.JaxRuntimeError as e:
        print(str(e)[:300])
      del held
      print(np.asarray(jax.jit(lambda x: x * 2 + 1)(x))[:2])  # room again
      # Over the limit from the host side too.
      try:
        jax.device_put(np.ones(2_000_000, np.float32), d).block_until_ready()
        print("ACCEPTED")
      except Exception as e:
        print(type(e).__name__, str(e)[:200])
      """)
  lines = out.strip().splitlines()
  assert lines[0] == "4000000"
  assert (
    lines[1].startswith("RESOURCE_EXHAUSTED:") and "jit__lambda needs 8000000 bytes" in lines[1]
  )  # x and x * 2: the constants 2 and 1 are the executable's, no call's temporaries
  assert lines[2].startswith("RESOURCE_EXHAUSTED:") and "device memory limit 4000000" in lines[2]
  assert "for '" in lines[2]  # names the op
  assert lines[3] == "[3. 3.]"
  assert "RESOURCE_EXHAUSTED" in lines[4], lines[4]


def test_default_memory_limit_is_a_share_of_physical_memory():
  out = run("""
      import os
      physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGESIZE")
      print(jax.devices()[0].memory_stats()["bytes_limit"] / physical)
      """)
  assert abs(float(out.strip().splitlines()[-1]) - 0.75) < 0.01


def test_scatter_into_an_empty_operand_returns_it():
  # XLA:CPU drops every window (all out of range) and returns the empty operand.
  out = run("""
      op = jnp.zeros((0, 3), jnp.float32)
      idx = jnp.zeros((2,), jnp.int32)
      upd = jnp.ones((2, 3), jnp.float32)
      for r in [op.at[idx].set(upd), op.at[idx].add(upd), op.at[idx].max(upd)]:
        r = np.asarray(r)
        print(r.shape, r.dtype)
      """)
  assert out.strip().splitlines() == ["(0, 3) float32"] * 3


def test_kernel_scratch_counts_against_the_limit():
  # A 1-D sort of n elements holds 32n bytes of scratch (order, keys, entries) beside its
  # 4n-byte operand; scatter with a general body 8 bytes per operand and 16 per update
  # element. Both are charged to the device memory (kernels/core/subplan.h, ScratchCharge), so
  # the limit refuses them by name instead of letting the host absorb them unbounded.
  out = run("""
      jax.config.update("jax_pjrt_client_create_options", "device_memory_limit:2000000")
      d = jax.devices()[0]
      rng = np.random.default_rng(0)
      x = jax.device_put(rng.standard_normal(100_000).astype(np.float32), d)
      try:
        jnp.sort(x).block_until_ready()
        print("ACCEPTED")
      except jax.errors.JaxRuntimeError as e:
        print(str(e)[:300])
      op = jax.device_put(np.zeros(100_000, np.float32), d)
      idx = jax.device_put(np.array([1, 5, 5], np.int32), d)
      try:
        op.at[idx].apply(lambda v: v * 2 + 1).block_until_ready()
        print("ACCEPTED")
      except jax.errors.JaxRuntimeError as e:
        print(str(e)[:300])
      del op
      # Rows of 100,000 but none of them: no scratch, as the CPU backend answers.
      print(jnp.sort(jax.device_put(np.zeros((0, 100_000), np.float32), d), axis=1).shape)
      # Within the limit: the same kernels, checked against numpy, and every charge
      # credited back afterwards.
      small = rng.standard_normal(10_000).astype(np.float32)
      y = jax.device_put(small, d)
      before = d.memory_stats()["bytes_in_use"]
      print(np.array_equal(np.asarray(jnp.sort(y)), np.sort(small)))
      z = jax.device_put(np.zeros(1_000, np.float32), d)
      expected = np.zeros(1_000, np.float32)
      expected[1], expected[5] = 1, 3  # 5 is updated twice: (0 * 2 + 1) * 2 + 1
      print(np.array_equal(np.asarray(z.at[idx].apply(lambda v: v * 2 + 1)), expected))
      del z
      print(d.memory_stats()["bytes_in_use"] == before)
      """)
  lines = out.strip().splitlines()
  assert lines[0].startswith("RESOURCE_EXHAUSTED:") and "'sort' at" in lines[0], lines[0]
  assert "needs 4800000 bytes of scratch, past the device memory limit 2000000" in lines[0]
  assert lines[1].startswith("RESOURCE_EXHAUSTED:") and "'scatter_general' at" in lines[1]
  assert "bytes of scratch" in lines[1], lines[1]
  assert lines[2] == "(0, 100000)", lines[2]
  assert lines[3:] == ["True", "True", "True"], lines
