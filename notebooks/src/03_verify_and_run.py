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

from jax_plugins.workshop.teach import notebook

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
# keeps every buffer dense: row-major by default (host arrays with other strides are copied
# into it), in another dimension order when a program or a transfer asks for one (e.g.
# `Format(Layout(major_to_minor=(1, 0)), sharding)`: column-major). Kernels only see
# row-major; the executor transposes arguments and results at a program's edges.

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
# program dilates a boolean mask (binary morphology: a pixel is set when any pixel under a
# 3x3 neighbourhood is), written as a convolution of booleans, which XLA computes as an OR
# of ANDs. XLA:CPU runs it; this plugin's convolution kernel computes integers and floats
# only, and the op table gives `stablehlo.convolution` no kernel for `pred` (booleans), nor
# a wider type to compute them in. The compiler finds that while lowering, before anything
# runs: compilation fails
# inside the plugin, and the error travels back through the C API (`PJRT_Error` with code
# `UNIMPLEMENTED`) to a Python `JaxRuntimeError` that names the op, its dtype and the line of
# user code.

# %%
import re

def dilate(mask):
  """mask: bool [height, width] -> the mask grown by one pixel in every direction."""
  window = jnp.ones((1, 1, 3, 3), bool)  # [out channels, in channels, 3, 3]
  return jax.lax.conv(mask[None, None], window, (1, 1), "SAME")[0, 0]

try:
  jax.jit(dilate)(jnp.eye(4, dtype=bool))
except jax.errors.JaxRuntimeError as e:
  # The location is this cell, whose file name (ipykernel_<pid>/<hash>.py) changes per
  # kernel; shorten it so the output is the same every run.
  print(type(e).__name__ + ":", re.sub(r"\S*ipykernel_\d+/\d+\.py", "<this cell>", str(e)))

# %% [markdown]
# The error is an exception, not a crash: the process and the plugin carry on.

# %%
print(jax.jit(lambda x: (x * 2).sum())(jnp.arange(4.0)))

# %% [markdown]
# ## Exercise: add an op end to end
#
# Programs fail like the one above when they use an op the plugin lacks, and adding one is
# the everyday work of a plugin author. Here is a real one: `jax.lax.approx_max_k` (and
# `approx_min_k`), the top-k search of nearest-neighbour retrieval. On TPU it is an
# approximate search; everywhere else JAX lowers it to `stablehlo.custom_call @ApproxTopK`
# with `is_fallback = true`, which XLA:CPU computes exactly: sort along the reduction
# dimension with the comparator JAX passes (`GT` for max, `LT` for min), stable, and keep
# the first `k`. The program we want to run, in a fresh process each time (this kernel
# loaded the plugin already, and a rebuilt library only reaches a new process):

# %% tags=["exercise_setup"]
import json

APPROX = """
import json, sys
import jax, numpy as np
from jax import lax
from jax_plugins.workshop.compiler.lowering import CUSTOM_CALLS

if "--as-before" in sys.argv:  # the plugin as it was before this exercise
  CUSTOM_CALLS.pop("ApproxTopK", None)
x = np.random.default_rng(0).permutation(3000).reshape(3, 1000).astype(np.float32) / 8
nearest = jax.jit(lambda v: lax.approx_max_k(v, 4))
# The smallest instead (the comparator LT), along the same last dimension.
farthest = jax.jit(lambda v: lax.approx_min_k(v, 4))
# The smallest along dimension 0 of a 3-d array: elements of a row sit 100 apart.
smallest = jax.jit(lambda v: lax.approx_min_k(v, 3, reduction_dimension=0))
y = x.reshape(30, 4, 25)
try:
  values, indices = nearest(x)
  cpu_values, cpu_indices = nearest(jax.device_put(x, jax.devices("cpu")[0]))
  min_last = [np.asarray(r).tolist() for r in farthest(x)]
  cpu_min_last = [np.asarray(r).tolist()
                  for r in farthest(jax.device_put(x, jax.devices("cpu")[0]))]
  along0 = [np.asarray(r).tolist() for r in smallest(y)]
  cpu_along0 = [np.asarray(r).tolist()
                for r in smallest(jax.device_put(y, jax.devices("cpu")[0]))]
  print(json.dumps({"values": np.asarray(values).tolist(),
                    "indices": np.asarray(indices).tolist(),
                    "cpu_values": np.asarray(cpu_values).tolist(),
                    "cpu_indices": np.asarray(cpu_indices).tolist(),
                    "min_last": min_last, "cpu_min_last": cpu_min_last,
                    "along0": along0, "cpu_along0": cpu_along0}))
except Exception as e:
  print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
"""

def run_approx(*flags):
  """Runs APPROX in a fresh process on workshop and cpu; returns what it printed (a dict),
  or {"error": the end of its stderr} if it failed (a file the exercise wrote may not
  load: the check says so)."""
  code = f"import sys; sys.argv += {list(flags)!r}\n" + APPROX
  try:
    return json.loads(notebook.run_fresh(code, platforms="workshop,cpu"))
  except RuntimeError as e:
    lines = str(e).splitlines()
    return {"error": "\n".join(lines[:1] + lines[-10:])}

print(run_approx("--as-before")["error"])

# %% [markdown]
# That is the plugin without the op (the flag removes this exercise's lowering rule in
# the fresh process, so the error is the same whether or not you have done the exercise).
# The error is raised at compile time by the plugin's compiler, reaches JAX through
# `PJRT_Client_Compile` as `UNIMPLEMENTED`, and names the op, its types and the user's
# line (here `<string>`, the fresh process's code). A `custom_call` can be one of XLA's own
# targets, which the compiler lowers with a rule, or a user's kernel registered through
# `jax.ffi`, so the message says that neither exists; for `ApproxTopK`, XLA's own, the
# lowering rule is what is missing (step 2 below), and the checks say which piece is.
#
# An op takes four pieces, one file each, all named after its *family*, `approx_top_k`:
#
# | piece | file | what it says |
# |---|---|---|
# | op table entry | `jax_plugins/workshop/compiler/optable.py` | the kernel exists, which dtypes it computes, its cost class |
# | lowering rule | `jax_plugins/workshop/compiler/rules/approx_top_k.py` | how the StableHLO op becomes a kernel call in the plan |
# | kernel | `plugin_src/kernels/approx_top_k.cc` | the C++ that computes it |
# | test | `tests/ops/test_approx_top_k.py` | it matches JAX's CPU backend |
#
# Each step below is a cell that writes its file, then a check that says what is wrong.
# The steps are four exercises: `approx_top_k_spec`, `approx_top_k_rule`,
# `approx_top_k_kernel` and `approx_top_k_test`. In the reader's version of the notebooks
# (`python -m jax_plugins.workshop.teach.notebook reader reader`) each writing cell starts from a
# `TODO` (`notebooks/exercises/approx_top_k_*`); in `notebooks/` they hold the worked
# solutions. To start a step over: `notebook.reset_exercise("approx_top_k_rule")` (or
# `_spec`, `_kernel`, `_test`) writes its starting point back into the file, and
# `print(notebook.starting_point("approx_top_k_rule"))` shows it, to paste into the cell;
# to get a worked solution back: `git checkout -- <file>`.
#
# ### Step 1: the op table entry
#
# `optable.py` is the one place that says what each kernel computes on; the C++ build
# generates its checks from it, and the compiler refuses, at compile time, any dtype a
# kernel does not list. An `OpSpec` names the kernel and its family, the dtypes the kernel
# computes on (`kernel`), the dtypes converted to one of those around it (`upcast`: f16,
# bf16 and the 8- and 4-bit floats computed in f32, as XLA:CPU does), the value whose dtype
# selects the kernel (`typed`, default the first operand) and a cost class (`cost`).
# `approx_max_k` takes floats only; sorting f16 or bf16 (or a narrower float) as f32 keeps
# their order and their ties, so the kernel needs f32 and f64. Its cost class is
# `"reduction"` (one flop per input element: cost.py uses it to estimate the op's time; the
# classes are listed in `OpSpec`'s docstring). The entry goes between two markers near the
# end of the list.
#
# What the cell writes is Python: its text replaces the lines between
# `# exercise approx_top_k: begin` and `# exercise approx_top_k: end` in optable.py, inside
# the list `_SPECS`, so each entry is one element of that list, an `OpSpec(...)` call
# followed by a comma, like its neighbours; comment lines may go with it. The cell below
# prints the entry just above the markers, read from the file: a kernel of the family
# `"codegen"` (the kernels that call generated code, `kernels/codegen/`). The family
# names the rule and kernel files (`rules/<family>.py`, `kernels/<family>.cc`), so a new
# family is a new name, and `approx_top_k` gets its own.

# %%
optable_lines = (ROOT / "jax_plugins/workshop/compiler/optable.py").read_text().splitlines()
begin = next(i for i, line in enumerate(optable_lines) if "exercise approx_top_k: begin" in line)
print(next(line.strip() for line in reversed(optable_lines[:begin]) if line.strip().startswith("OpSpec(")))

# %% [markdown]
# The arguments, in order: `name`, `family`, `kernel` and `upcast`, then by keyword `typed`
# and `cost`. The dtype sets and upcast maps are names defined at the top of optable.py:
# `WIDE_FLOATS` is `{"f32", "f64"}`, `HALF` `{"f16", "bf16"}`, `FLOATS` both, and `INTS`,
# `ALL`, `STORED` more; `IN_F32` maps f16, bf16 and the 8- and 4-bit floats to `"f32"`
# (so the kernel sees f32). The check below reads the entry back from a fresh process and
# says what is missing.

# %% exercise="approx_top_k_spec" tags=["solution"]
notebook.write_source("jax_plugins/workshop/compiler/optable.py#approx_top_k", r'''
# jax.lax.approx_max_k/min_k off TPU: the exact top k along one dimension, of floats
# (f16/bf16 sorted as f32: the conversion keeps their order and ties).
OpSpec("approx_top_k", "approx_top_k", WIDE_FLOATS, IN_F32, cost="reduction"),
''')

# %% exercise="approx_top_k_spec"
def check_spec():
  """Fails with what is wrong, if optable.py has no usable entry for approx_top_k."""
  import json
  found = json.loads(notebook.run_fresh("""
    import json
    try:
      from jax_plugins.workshop.compiler import optable
    except Exception as e:
      print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
      raise SystemExit
    spec = optable.SPECS.get("approx_top_k")
    print(json.dumps(spec and {"family": spec.family, "kernel": sorted(spec.kernel),
                               "dtypes": sorted(spec.dtypes), "typed": spec.typed,
                               "cost": spec.cost}))
    """))
  if found and "error" in found:
    raise AssertionError(f"optable.py does not load: {found['error']}")
  if found is None:
    raise AssertionError("optable.SPECS has no 'approx_top_k': add an OpSpec(\"approx_top_k\", "
                         "\"approx_top_k\", ...) between the markers in optable.py")
  if found["family"] != "approx_top_k":
    raise AssertionError(f"its family is {found['family']!r}: name it 'approx_top_k', the "
                         "name of its rule and kernel files")
  if not {"f32", "f64"} <= set(found["kernel"]) or {"f16", "bf16"} - set(found["dtypes"]):
    raise AssertionError(f"it computes on {found['kernel']} and accepts {found['dtypes']}: "
                         "the kernel needs f32 and f64, and f16/bf16 must be upcast (IN_F32)")
  if found["typed"] != "in0":
    raise AssertionError("the dtype of operand 0, x, selects the kernel: typed='in0'")
  if found["cost"] != "reduction":
    raise AssertionError(f"its cost class is {found['cost']!r}: approx_top_k reads every "
                         "element of x once, cost='reduction' (one flop per input element)")
  print("optable.py: approx_top_k computes on", found["kernel"], "and accepts", found["dtypes"])

check_spec()

# %% [markdown]
# ### Step 2: the lowering rule
#
# The compiler walks the StableHLO program and calls one rule per op; `custom_call`s are
# dispatched on their target name through `CUSTOM_CALLS` (in `lowering.py`). A rule
# reads the op's attributes, checks what it cannot run (raising `errors.unsupported`, which
# becomes the `UNIMPLEMENTED` above), and `ctx.emit`s a kernel call with the attributes
# the kernel needs. Ours reads `top_k` and `reduction_dim` from `mhlo.backend_config`, finds
# the comparator function among the module's functions (`ctx.funcs`) to tell max from min,
# and passes the kernel only `x`: the other three operands (an iota and two initial values)
# serve TPU's approximate algorithm. `aggregate_to_topk=False` asks for the longer
# candidate list TPU's algorithm leaves; off TPU it is the whole dimension, sorted (the
# results' type gives its length, and the rule takes k from there). This is what the rule receives for
# `approx_max_k(x, 4)` (the custom_call and its comparator, from the lowered program):

# %%
lowered = jax.jit(lambda v: jax.lax.approx_max_k(v, 4)).lower(np.zeros((3, 1000), np.float32))
for line in lowered.as_text().splitlines():
  if "ApproxTopK" in line or "comparator" in line or "stablehlo.compare" in line:
    print(line.strip())

# %% [markdown]
# `mhlo.backend_config` holds `top_k`, `reduction_dim`, `aggregate_to_topk`, ...;
# `called_computations` names the comparator function; the four operands are `x`, an
# iota and the two initial values. In the rule, `ir.DictAttr(op.attributes["mhlo.backend_config"])`
# gives the dictionary, `ir.IntegerAttr(...).value` a number, and
# `ctx.emit(op, {"k": ..., "dim": ..., "largest": ...}, operands=op.operands[:1],
# kernel="approx_top_k")` the kernel call.

# %% exercise="approx_top_k_rule" tags=["solution"]
notebook.write_source("jax_plugins/workshop/compiler/rules/approx_top_k.py", r'''
"""approx_top_k: `jax.lax.approx_max_k` / `approx_min_k` off TPU (notebook 03's exercise).

Family `approx_top_k`: plugin_src/kernels/approx_top_k.cc.

Off TPU, JAX lowers them to `stablehlo.custom_call @ApproxTopK` with `is_fallback = true`,
which XLA:CPU computes exactly: the first `top_k` along `reduction_dim` in the order of
the comparator (its TopK kernel, or a sort). So do we, in one kernel
(kernels/approx_top_k.cc), equal values by lower index first.

  operands: x (float), iota (s32, x's shape), init value (-inf or +inf), init index (-1);
            only x matters for the exact result, the rest is for TPU's approximate one.
  results:  values (x's dtype), indices (s32), both x's shape with `top_k` along
            `reduction_dim` (the whole dimension, sorted, with aggregate_to_topk=false).
  comparator (called_computations[0]): `compare GT` (max_k) or `LT` (min_k) of its first
            two arguments.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .. import errors
from ..lowering import CUSTOM_CALLS, Lowering


def _approx_top_k(ctx: Lowering, op: ir.Operation) -> None:
  """Emits kernel approx_top_k; attrs: k, dim (the reduction dimension), largest (1|0)."""
  config = ir.DictAttr(op.attributes["mhlo.backend_config"])
  dim = ir.IntegerAttr(config["reduction_dim"]).value
  x = ir.RankedTensorType(op.operands[0].type)
  if not 0 <= dim < x.rank:
    raise errors.malformed(op, f"approx_top_k along dimension {dim} of {x}")
  k = ir.IntegerAttr(config["top_k"]).value
  if not ir.BoolAttr(config["aggregate_to_topk"]).value:
    # The candidates TPU's approximate algorithm leaves, not cut to top_k: off TPU,
    # XLA:CPU returns the whole dimension sorted, and the results' type says how many.
    k = ir.RankedTensorType(op.results[0].type).shape[dim]
  if not 0 < k <= x.shape[dim]:
    raise errors.malformed(op, f"approx_top_k k={k} along dimension {dim} of {x}")
  callee = ir.FlatSymbolRefAttr(ir.ArrayAttr(op.attributes["called_computations"])[0]).value
  ctx.emit(op, {"k": k, "dim": dim, "largest": int(_direction(op, ctx.funcs[callee]) == "GT")},
           operands=op.operands[:1], kernel="approx_top_k")


def _direction(op: ir.Operation, comparator: ir.Operation) -> str:
  """GT or LT: the comparator must be one compare of its first two arguments."""
  block = comparator.regions[0].blocks[0]
  body = [o.operation for o in block.operations]
  if len(body) == 2 and body[0].name == "stablehlo.compare":
    compare = body[0]
    direction = stablehlo.ComparisonDirectionAttr(
        compare.attributes["comparison_direction"]).value
    if (direction in ("GT", "LT") and compare.operands[0] == block.arguments[0]
        and compare.operands[1] == block.arguments[1]):
      return direction
  raise errors.unsupported(op, "unsupported approx_top_k comparator (want GT or LT of the "
                           "values)")


CUSTOM_CALLS["ApproxTopK"] = _approx_top_k
''')

# %% [markdown]
# The check compiles the program with the plugin's compiler alone (no C++ involved: it
# runs in Python, like `PJRT_Client_Compile`'s callback) and looks for the kernel call in
# the plan.

# %% exercise="approx_top_k_rule"
def check_rule():
  """Fails with what is wrong, if approx_max_k/min_k don't lower to one approx_top_k."""
  import json
  found = json.loads(notebook.run_fresh("""
    import json
    import jax, numpy as np
    from jax import lax
    try:
      from jax_plugins.workshop.compiler import compile_program
      from jax_plugins.workshop.compiler.lowering import CUSTOM_CALLS
    except Exception as e:  # e.g. a syntax error in the rule's file
      print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
      raise SystemExit
    x = np.zeros((5, 7), np.float32)
    found = {"registered": "ApproxTopK" in CUSTOM_CALLS}
    for name, f in [("max", lax.approx_max_k), ("min", lax.approx_min_k)]:
      text = jax.jit(lambda v: f(v, 3, reduction_dimension=0)).lower(x).as_text()
      try:
        plan = compile_program(text.encode(), "mlir", b"", 1).plan
        found[name] = [[i.op, i.attrs] for i in plan.instrs if i.op == "approx_top_k"]
      except Exception as e:
        found[name] = str(e)
    print(json.dumps(found, default=str))
    """))
  if "error" in found:
    raise AssertionError(f"the compiler does not load with rules/approx_top_k.py: "
                         f"{found['error']}")
  if not found["registered"]:
    raise AssertionError("the compiler has no lowering rule for custom_call @ApproxTopK: "
                         "rules/approx_top_k.py must define the rule and register it, "
                         "CUSTOM_CALLS[\"ApproxTopK\"] = <the rule function>")
  for name, largest in [("max", 1), ("min", 0)]:
    if isinstance(found[name], str):
      raise AssertionError(f"approx_{name}_k does not compile: {found[name]}")
    if len(found[name]) != 1:
      raise AssertionError(f"approx_{name}_k's plan has {len(found[name])} approx_top_k "
                           "calls: the rule must emit exactly one (kernel='approx_top_k')")
    attrs = found[name][0][1]
    want = {"k": 3, "dim": 0, "largest": largest}
    if {a: attrs.get(a) for a in want} != want:
      raise AssertionError(f"approx_{name}_k(x, 3, reduction_dimension=0) emits attributes "
                           f"{attrs}; the kernel reads {want}")
  print("approx_max_k and approx_min_k lower to one approx_top_k call each:",
        found["max"][0][1], found["min"][0][1])

check_rule()

# %% [markdown]
# ### Step 3: the kernel
#
# A kernel gets its operands and outputs as `Tensor`s (dtype, dims, data), already
# allocated with the shapes the compiler inferred, and the attributes the rule emitted
# (`ctx.instr.attr<int64_t>("k")`); it checks what it relies on, returns a `Status` naming
# what is wrong, and never allocates its outputs. `WORKSHOP_REGISTER_KERNEL` registers it
# under the name in the op table. Along dimension `dim` of size `n`, element `i` of a row
# sits `inner` elements from the next (the product of the later dims), so each of the
# `outer * inner` rows is copied out, its first `k` ranks found with `std::partial_sort`
# (equal values by lower index first), and written back with the same
# strides. The rebuild compiles this file and `registry.cc` (which includes the generated
# op table, changed by step 1), then links.
#
# What the kernel uses, and where it is declared:
#
# | name | header | what |
# |---|---|---|
# | `KernelContext` (`ctx.ins`, `ctx.outs`, `ctx.instr`), `Tensor` (`dtype`, `*dims`, `rank()`, `num_elements()`, `as<T>()`), `WORKSHOP_REGISTER_KERNEL` | `kernels/core/kernel.h` | a kernel's arguments and its registration |
# | `ctx.instr.attr<int64_t>("k")`, `ctx.instr.loc` | `runtime/plan.h` | the rule's attributes, the user's source line |
# | `DispatchFloat(dtype, [&](auto tag) {...}, fallback)`, `UnsupportedDType(ctx, dtype)` | `kernels/core/dispatch.h` | one instantiation per float dtype (`using T = decltype(tag)`) |
# | `Status()`, `InvalidArgument(...)` | `runtime/status.h` | success, and an error naming what is wrong |
# | `ShapeString(dtype, dims)` | `runtime/dtype.h` | `f32[3,1000]`, for messages |

# %% exercise="approx_top_k_kernel" tags=["solution"]
# NBVAL_IGNORE_OUTPUT
notebook.write_source("plugin_src/kernels/approx_top_k.cc", r'''
// approx_top_k: the k largest (or smallest) elements along one dimension, with their
// indices, as XLA:CPU computes `custom_call @ApproxTopK` (jax.lax.approx_max_k/min_k off
// TPU): exactly and sorted, equal values by lower index first. XLA:CPU gives the same
// values; its order among equal values depends on the dtype, the direction and the size
// (its TopK kernel for f32 max_k, a sort otherwise: tests/ops/test_approx_top_k.py), and
// approx_max_k promises nothing about it.
// Notebook 03's exercise writes this file; compiler/rules/approx_top_k.py emits it.
//
//   ins:   x f32|f64 [d0, ..., n, ..., dr]   (n at dimension `dim`)
//   outs:  values  x's dtype [d0, ..., k, ..., dr]
//          indices s32       [d0, ..., k, ..., dr]
//   attrs: k (1 <= k <= n), dim, largest (1: GT as in approx_max_k, 0: LT)
//
// NaN is unordered under the comparator JAX emits (GT or LT), so where XLA:CPU puts NaNs
// is not specified; here they come last.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"

namespace workshop {
namespace {

Status ApproxTopK(KernelContext& ctx) {
  const Tensor& x = ctx.ins[0];
  const Tensor& values = ctx.outs[0];
  const Tensor& indices = ctx.outs[1];
  const int64_t k = ctx.instr.attr<int64_t>("k");
  const int64_t dim = ctx.instr.attr<int64_t>("dim");
  const bool largest = ctx.instr.attr<int64_t>("largest") != 0;
  if (dim < 0 || dim >= x.rank()) {
    return InvalidArgument("workshop: approx_top_k dim=", dim, " of ",
                           ShapeString(x.dtype, *x.dims), " at ", ctx.instr.loc);
  }
  const int64_t n = (*x.dims)[dim];
  // Elements between two neighbours along `dim`, and rows before it.
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.rank(); ++d) inner *= (*x.dims)[d];
  const int64_t outer = n == 0 || inner == 0 ? 0 : x.num_elements() / (n * inner);
  if (k < 1 || k > n || n > std::numeric_limits<int32_t>::max() ||
      values.dtype != x.dtype || indices.dtype != DType::kS32 ||
      values.num_elements() != outer * k * inner ||
      indices.num_elements() != values.num_elements()) {
    return InvalidArgument("workshop: approx_top_k k=", k, " along dimension ", dim, " of ",
                           ShapeString(x.dtype, *x.dims), " at ", ctx.instr.loc);
  }
  return DispatchFloat(
      x.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        std::vector<T> row(n);
        std::vector<int32_t> order(n);
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t j = 0; j < inner; ++j) {
            const T* in = x.as<T>() + o * n * inner + j;
            for (int64_t i = 0; i < n; ++i) row[i] = in[i * inner];
            std::iota(order.begin(), order.end(), 0);
            // Better first, then the lower index. NaN counts as worse than every number,
            // which keeps the order a strict weak ordering (std::partial_sort needs one)
            // whatever the data.
            std::partial_sort(order.begin(), order.begin() + k, order.end(),
                              [&](int32_t a, int32_t b) {
                                const T u = row[a], w = row[b];
                                if (u != u || w != w) return w != w && (u == u || a < b);
                                if (u != w) return largest ? u > w : u < w;
                                return a < b;
                              });
            T* v = values.as<T>() + o * k * inner + j;
            int32_t* idx = indices.as<int32_t>() + o * k * inner + j;
            for (int64_t i = 0; i < k; ++i) {
              v[i * inner] = row[order[i]];
              idx[i * inner] = order[i];
            }
          }
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, x.dtype); });
}

}  // namespace

WORKSHOP_REGISTER_KERNEL("approx_top_k", ApproxTopK);

}  // namespace workshop
''')
compiled = notebook.rebuild(ROOT)

# %% [markdown]
# Now the program from the start of this section, in a fresh process that loads the rebuilt
# library, on the plugin and on the CPU backend:

# %% exercise="approx_top_k_kernel"
def check_kernel():
  """Fails with what is wrong, if approx_max_k doesn't run or differs from the CPU backend."""
  notebook.check_last_build()
  found = run_approx()
  if "error" in found:
    error = found["error"]
    if "custom_call target 'ApproxTopK'" in error:
      cause = ("the compiler has no lowering rule for it: step 2's rule "
               "(rules/approx_top_k.py, CUSTOM_CALLS[\"ApproxTopK\"]) is missing")
    elif "no kernel for op" in error:
      cause = ("the plugin has no kernel \"approx_top_k\": the kernel file must end with "
               "WORKSHOP_REGISTER_KERNEL(\"approx_top_k\", <the kernel function>), and the "
               "rebuild above must have compiled and linked it")
    elif "has no kernel for dtype" in error:
      cause = "step 1's op table entry does not list this dtype"
    else:
      cause = "the kernel returned this error, or the process failed (the message says which)"
    raise AssertionError(f"approx_max_k does not run on the plugin: {cause}.\n{error}")
  if found["values"] != found["cpu_values"]:
    raise AssertionError(f"the values differ from the CPU backend's: {found['values'][0]} "
                         f"against {found['cpu_values'][0]} in row 0")
  if found["indices"] != found["cpu_indices"]:
    raise AssertionError(f"the indices differ from the CPU backend's: {found['indices'][0]} "
                         f"against {found['cpu_indices'][0]} in row 0")
  if found["min_last"] != found["cpu_min_last"]:
    (got, got_at), (cpu, cpu_at) = found["min_last"], found["cpu_min_last"]
    raise AssertionError(f"approx_min_k(x, 4) differs from the CPU backend's: {got[0]} at "
                         f"{got_at[0]} against {cpu[0]} at {cpu_at[0]} in row 0 "
                         "(approx_max_k is right): with attribute largest=0 the kernel must "
                         "keep the k smallest, smallest first")
  if found["along0"] != found["cpu_along0"]:
    raise AssertionError("approx_min_k(y, 3, reduction_dimension=0) of a [30, 4, 25] array "
                         "differs from the CPU backend's (approx_max_k and approx_min_k along "
                         "the last dimension are right): along dimension `dim`, a row's "
                         "elements sit `inner` apart, the product of the later dims, in x and "
                         "in both outputs")
  for row in range(3):
    print(f"row {row}: values {found['values'][row]} at {found['indices'][row]}")
  print("the same values and indices as the CPU backend: approx_max_k and approx_min_k "
        "along the last dimension, approx_min_k along dimension 0")

check_kernel()

# %% [markdown]
# ### Step 4: the test
#
# The notebook checked one case; the test suite keeps the op working. Tests compare with a
# reference that is not our code: here the CPU backend in the same process
# (`JAX_PLATFORMS=workshop,cpu`, `run_on(cpu_device(), f, x)`) and numpy's stable sort,
# over shapes, reduction dimensions, dtypes and both directions. Writing it turns up a
# fact the single check above could not: with equal values, XLA:CPU's order of the indices
# depends on the dtype, direction and size, so the test compares indices with the CPU
# backend on distinct values, and with numpy's stable sort (our rule) on values with ties.

# %% exercise="approx_top_k_test" tags=["solution"]
notebook.write_source("tests/ops/test_approx_top_k.py", r'''
"""approx_top_k (jax.lax.approx_max_k / approx_min_k), against JAX's CPU backend and numpy.

Off TPU both backends compute the exact top k, sorted, so values must be equal, not close.
Indices are equal too where no two values tie. Among equal values the plugin puts the
lower index first (numpy's stable argsort checks that); XLA:CPU's order among equals
depends on the dtype, the direction and the size (its TopK kernel for f32 max_k, a sort
otherwise), and approx_max_k promises nothing about it. Notebook 03's exercise writes this
file.
"""

import jax
import numpy as np
import pytest
from jax import lax

from reference import cpu_device, run_on

CASES = [
    # (shape, k, reduction_dimension)
    ((10,), 3, -1),
    ((4, 33), 5, 1),
    ((33, 4), 33, 0),
    ((2, 7, 3), 2, 1),
]


def _run(x, k, dim, is_max_k):
  top_k = lax.approx_max_k if is_max_k else lax.approx_min_k

  def f(v):
    return top_k(v, k, reduction_dimension=dim)

  with jax.enable_x64(x.dtype == np.float64):
    ours = [np.asarray(r) for r in jax.jit(f)(x)]
    ref = [np.asarray(r) for r in run_on(cpu_device(), f, x)]
  assert [(r.dtype, r.shape) for r in ours] == [(r.dtype, r.shape) for r in ref]
  return ours, ref


@pytest.mark.parametrize("is_max_k", [True, False], ids=["max_k", "min_k"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape,k,dim", CASES)
def test_distinct_values_match_cpu(shape, k, dim, dtype, is_max_k):
  rng = np.random.default_rng(1)
  x = (rng.permutation(np.prod(shape)).reshape(shape) - 20).astype(dtype)
  ours, ref = _run(x, k, dim, is_max_k)
  np.testing.assert_array_equal(ours[0], ref[0])
  np.testing.assert_array_equal(ours[1], ref[1])


@pytest.mark.parametrize("is_max_k", [True, False], ids=["max_k", "min_k"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape,k,dim", CASES)
def test_ties_go_to_the_lower_index(shape, k, dim, dtype, is_max_k):
  # Values rounded to a few levels, so that ties occur (-0 and +0 among them).
  x = np.round(np.random.default_rng(0).normal(size=shape) * 2).astype(dtype)
  ours, ref = _run(x, k, dim, is_max_k)
  np.testing.assert_array_equal(ours[0], ref[0])
  stable = np.argsort(-x if is_max_k else x, axis=dim, kind="stable")
  np.testing.assert_array_equal(ours[1], np.take(stable, np.arange(k), axis=dim))
  np.testing.assert_array_equal(np.take_along_axis(x, ours[1], axis=dim), ours[0])


@pytest.mark.parametrize("is_max_k", [True, False], ids=["max_k", "min_k"])
def test_aggregate_to_topk_false_sorts_the_whole_dimension(is_max_k):
  # Off TPU, XLA:CPU returns every candidate: the whole dimension, sorted.
  x = np.random.default_rng(2).permutation(4 * 64).reshape(4, 64).astype(np.float32)
  top_k = lax.approx_max_k if is_max_k else lax.approx_min_k
  f = jax.jit(lambda v: top_k(v, 2, aggregate_to_topk=False))
  ours = [np.asarray(r) for r in f(x)]
  ref = [np.asarray(r) for r in run_on(cpu_device(), f, x)]
  order = np.argsort(-x if is_max_k else x, axis=1, kind="stable")
  np.testing.assert_array_equal(ours[1], order)
  np.testing.assert_array_equal(ours[1], ref[1])
  np.testing.assert_array_equal(ours[0], np.take_along_axis(x, order, axis=1))
''')

# %% exercise="approx_top_k_test"
def check_test():
  """Fails with what is wrong, if tests/ops/test_approx_top_k.py has no tests or they fail."""
  import re, subprocess, sys
  run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--color=no", "-p",
                        "no:cacheprovider", "tests/ops/test_approx_top_k.py"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
  summary = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
  if run.returncode == 5:
    raise AssertionError("tests/ops/test_approx_top_k.py has no tests: write test_* functions "
                         "that compare approx_max_k/min_k with the CPU backend")
  if run.returncode != 0:
    raise AssertionError(f"tests/ops/test_approx_top_k.py fails: {summary}\n" +
                         "\n".join(run.stdout.splitlines()[-30:]))
  print("tests/ops/test_approx_top_k.py:", re.sub(r" in [\d.]+s.*", "", summary))

check_test()

# %% [markdown]
# The plugin now runs an op it could not, JAX picked it up without a change on its side,
# and the four pieces are where the next person looks for them.

# %% [markdown]
# That completes the guide: the plugin is built and exports `GetPjrtApi` (01), JAX discovers,
# initializes and selects it (02), and it passes the guide's tests and runs a model (03).
# Next, notebook **04** runs programs over sharded arrays on all four devices.
