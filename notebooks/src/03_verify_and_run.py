# %% [markdown]
# # 03 · Verify the registration and run programs
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/03_verify_and_run.ipynb)
#
# **Concept: once registered, the plugin is an ordinary JAX backend: its devices, versions and
# attributes are visible from Python, and JAX programs, lowered to StableHLO, run on it.**
# This notebook checks what JAX sees, runs the tests from OpenXLA's integration guide, then a
# small model compared against JAX's own CPU backend, and shows what an unsupported program
# looks like.

# %%
# Colab only (anywhere else this cell does nothing): clone the repository, install the
# workshop's stack and build the plugin, then restart the runtime. After that: run all.
import sys
if "google.colab" in sys.modules:
  import os, subprocess
  if not os.path.isdir("/content/pjrt-workshop"):
    subprocess.run(["git", "clone", "-q", "https://github.com/pjrt-workshop/pjrt-workshop",
                    "/content/pjrt-workshop"], check=True)
  sys.path.insert(0, "/content/pjrt-workshop/notebooks")
  import colab_setup
  colab_setup.main()

# %% [markdown]
# ## Setup
#
# `JAX_PLATFORMS=workshop,cpu` initializes the plugin as the default backend and JAX's CPU
# backend beside it, as the reference. It must be set before JAX creates any backend, so before
# `import jax`.

# %%
import os
import sys
from pathlib import Path

from jax_plugins.workshop import notebook

ROOT = notebook.setup("workshop,cpu")

import jax
import jax.numpy as jnp
import numpy as np

# %% [markdown]
# ## What JAX sees
#
# `jax.devices()` lists the default backend's devices. Each reports its platform (the name the
# plugin registered), a `device_kind` (from `PJRT_DeviceDescription_Kind`) and its process;
# the client reports a platform version string (from `PJRT_Client_PlatformVersion`; jaxlib
# prefixes it with the API it reached the plugin through).

# %%
devices = jax.devices()
print(devices)
print("default backend:", jax.default_backend())
d = devices[0]
print(f"platform={d.platform!r} device_kind={d.device_kind!r} process_index={d.process_index}")
print("platform_version:", repr(d.client.platform_version))

# %% [markdown]
# **Memory kinds.** A PJRT device owns one or more *memories* (`PJRT_Memory`), each with a
# *kind*: accelerators typically have `device` (HBM) plus host memories such as
# `pinned_host`, and JAX can place arrays in any of them through `NamedSharding(...,
# memory_kind=...)`. Our devices have two, `device` (the default, where arrays land) and
# `pinned_host`; both are host RAM, and JAX programs that move data between memory kinds run
# unchanged (notebook 05 traces a `pinned_host` transfer).

# %%
print("memories of device 0:", d.addressable_memories())
print("default memory kind:", d.default_memory().kind)
x = jnp.arange(6.0).reshape(2, 3)
print("x lives on", x.devices(), "in memory kind", x.sharding.memory_kind)

# %% [markdown]
# **Layout.** A buffer's layout says how its elements sit in memory. XLA writes it as
# `minor_to_major` (`{1,0}`: dimension 1 varies fastest), JAX as `major_to_minor`. The plugin
# keeps every buffer dense and row-major, and copies host arrays with other strides into that
# layout.

# %%
print("JAX: ", x.format.layout)
backend = jax._src.xla_bridge.get_backend("workshop")
print("PJRT default layout for f32[2,3]:", backend.get_default_layout(x.dtype, x.shape, d))

# %% [markdown]
# **Plugin attributes.** `PJRT_Plugin_Attributes` tells JAX which StableHLO versions the plugin
# can read. JAX serializes every program it sends at a version the plugin accepts, so an older
# plugin keeps working with a newer JAX. Ours reports the versions of the jaxlib it was built
# against, whose MLIR bindings its compiler uses to read programs.

# %%
from jaxlib.mlir.dialects import stablehlo

for name in ["xla_version", "stablehlo_current_version", "stablehlo_minimum_version"]:
  print(f"{name:<26} {getattr(backend, name)}")
print("same as jaxlib's StableHLO:",
      [*backend.stablehlo_current_version] == [int(v) for v in stablehlo.get_current_version().split(".")],
      [*backend.stablehlo_minimum_version] == [int(v) for v in stablehlo.get_minimum_version().split(".")])

# %% [markdown]
# ## The guide's tests
#
# OpenXLA's guide ends with three checks. An op run eagerly (JAX compiles it as a one-op
# program):

# %%
print(jax.numpy.add(1, 1))

# %% [markdown]
# A jitted function, traced once and compiled by the plugin:

# %%
print(jax.jit(lambda x: x * 2)(1.))

# %% [markdown]
# And a collective across devices: `pmap` runs the function once per device, each on one
# element of `arange(4)`, and `psum` adds the four values across devices (0+1+2+3 = 6), so
# device *i* returns *i* + 6. It needs four devices, our default.

# %%
print(jax.pmap(lambda x: x + jax.lax.psum(x, 'i'), axis_name='i')(jax.numpy.arange(4)))

# %% [markdown]
# With `num_devices:1` the same program runs on the one device and the sum is just its own
# value, `[0]`. A process creates its backends once, so this runs in a fresh Python:

# %%
import subprocess

def run_python(source, **env):
  """Runs `source` in a fresh Python with the repository on its path and `env` set."""
  clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "PJRT_"))}
  path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
  result = subprocess.run([sys.executable, "-c", source],
                          env=clean | {"PYTHONPATH": os.pathsep.join(path)} | env,
                          capture_output=True, text=True)
  print(result.stdout, end="")
  if result.returncode:
    print("error:", result.stderr.strip().splitlines()[-1])

run_python("""
import jax
print(jax.devices())
print(jax.pmap(lambda x: x + jax.lax.psum(x, 'i'), axis_name='i')(jax.numpy.arange(1)))
""", JAX_PLATFORMS="workshop", JAX_PJRT_CLIENT_CREATE_OPTIONS="num_devices:1")

# %% [markdown]
# ## What the plugin receives
#
# JAX lowers each program to a StableHLO module and hands it to `PJRT_Client_Compile`
# (serialized as a versioned, portable artifact). `lower(...).as_text()` prints that module.
# A jitted function is one function, `@main`, on one device:

# %%
print(jax.jit(lambda x: x * 2 + 1).lower(jnp.ones(3)).as_text())

# %% [markdown]
# The `pmap` program carries its distribution in the module. `mhlo.num_replicas` and
# `mhlo.num_partitions`: JAX runs `pmap` as one SPMD program with 4 *partitions*, one per
# device, rather than as 4 *replicas*. A Shardy mesh `@mesh` with one axis `i` of size 4, and
# the `sdy.sharding` of the parameter and the result: split along `i`, each device holds one
# element of the global `tensor<4xi32>`. Inside `sdy.manual_computation` (how `shard_map`, and
# `pmap` with it, is expressed) the body sees one device's shard, `tensor<1xi32>`, and
# `all_reduce` over the replica group `[0, 1, 2, 3]` is the `psum`. The plugin's compiler turns
# this into one per-partition plan; the device assignment in the compile options says which
# device runs which partition.

# %%
pmapped = jax.pmap(lambda x: x + jax.lax.psum(x, 'i'), axis_name='i')
print(pmapped.lower(jnp.arange(4)).as_text())


# %% [markdown]
# ## A small model, checked against the CPU backend
#
# A three-layer MLP forward pass (matrix products, bias broadcasts, ReLU, log-softmax), run on
# the default `workshop` device and, for reference, on JAX's CPU backend in the same process
# (inputs committed to the CPU device make `jit` run there).

# %%
def mlp(params, x):
  for w, b in params[:-1]:
    x = jax.nn.relu(x @ w + b)
  w, b = params[-1]
  return jax.nn.log_softmax(x @ w + b)

rng = np.random.default_rng(0)
sizes = [16, 64, 64, 10]
params = [(rng.normal(0, m ** -0.5, (m, n)).astype(np.float32),
           rng.normal(0, 0.1, n).astype(np.float32)) for m, n in zip(sizes, sizes[1:])]
batch = rng.normal(size=(32, sizes[0])).astype(np.float32)

cpu = jax.devices("cpu")[0]
out = jax.jit(mlp)(params, batch)
ref = jax.jit(mlp)(jax.device_put(params, cpu), jax.device_put(batch, cpu))
print("workshop:", out.shape, out.dtype, out.devices())
print("cpu:     ", ref.shape, ref.dtype, ref.devices())

# %% [markdown]
# The two backends sum the 16- and 64-term dot products in different orders (OpenBLAS vs XLA's
# CPU kernels), so float32 results may differ in the last bits; on log-probabilities of
# magnitude ~1–5, an absolute difference below 1e-5 means they agree.

# %%
diff = float(np.max(np.abs(np.asarray(out) - np.asarray(ref))))
print("max |workshop - cpu| < 1e-5:", diff < 1e-5)
print("rows sum to probability 1:", bool(np.allclose(np.exp(np.asarray(out)).sum(axis=1), 1, atol=1e-5)))

# %% [markdown]
# ## When a program is not supported
#
# A plugin does not need to support every op and dtype, but it must fail cleanly. Here the
# program converts to `float4_e2m1fn` (a 4-bit float used for quantized weights), which the
# plugin has no buffers or kernels for. Compilation fails inside the plugin, and the error
# travels back through the C API (`PJRT_Error` with code `UNIMPLEMENTED`) to a Python
# `JaxRuntimeError` that names the op, its dtypes and the line of user code.

# %%
import re

def quantize_roundtrip(x):
  return x.astype(jnp.float4_e2m1fn).astype(jnp.float32)

try:
  jax.jit(quantize_roundtrip)(jnp.ones(3))
except jax.errors.JaxRuntimeError as e:
  # The location is this cell, whose file name (ipykernel_<pid>/<hash>.py) changes per
  # kernel; shorten it so the output is the same every run.
  print(type(e).__name__ + ":", re.sub(r"\S*ipykernel_\d+/\d+\.py", "<this cell>", str(e)))

# %% [markdown]
# The error is an exception, not a crash: the process and the plugin carry on.

# %%
print(jax.jit(lambda x: (x * 2).sum())(jnp.arange(4.0)))

# %% [markdown]
# That completes the guide: the plugin is built and exports `GetPjrtApi` (01), JAX discovers,
# initializes and selects it (02), and it passes the guide's tests and runs a model (03).
# Next, notebook **04** runs programs over sharded arrays on all four devices.
