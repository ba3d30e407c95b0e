# %% [markdown]
# # 04 · Sharded programs: Shardy and automatic SPMD partitioning
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/04_sharded_programs.ipynb)
#
# **Concept: a sharded `jit` reaches the plugin as one *global* program with sharding
# annotations; the compiler must turn it into the *per-device* program each device runs.**
# JAX does not split the program for the plugin: it sends global shapes, a mesh and
# `sdy.sharding` annotations (Shardy, OpenXLA's sharding dialect). Our compiler runs Shardy's
# own passes (from jaxlib's MLIR bindings) to propagate the shardings, insert the
# collectives, and rewrite every op to its local shard
# ([jax_plugins/workshop/compiler/spmd/partition.py](../jax_plugins/workshop/compiler/spmd/partition.py),
# and "Sharded programs" in [docs/sharding.md](../docs/sharding.md)). This notebook follows one
# small program through those passes, runs it, trains a data-parallel MLP, and checks
# everything against JAX's CPU backend with the same 4 devices.

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
# `JAX_PLATFORMS=workshop,cpu`: the plugin (4 devices by default) and JAX's CPU backend as
# the reference. The CPU backend has one device unless told otherwise; `jax_num_cpu_devices`
# gives it 4, so both backends run the same programs on the same mesh shape. Like the
# platforms, it must be set before JAX creates its backends.

# %% tags=["exercise_setup"]
import collections
import re

from jax_plugins.workshop.teach import notebook

ROOT = notebook.setup("workshop,cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.config.update("jax_num_cpu_devices", 4)
print("workshop:", jax.devices("workshop"))
print("cpu:     ", jax.devices("cpu"))

# %% [markdown]
# ## 1. A sharded array
#
# A `Mesh` arranges devices in a named grid; here one axis `"i"` over the 4 devices. A
# `NamedSharding(mesh, P("i"))` splits an array's first dimension over `"i"` (the
# `PartitionSpec` names one mesh axis, or `None`, per dimension) and replicates the rest.
# We make the same mesh on each backend, so every result can be compared.

# %% tags=["exercise_setup"]
meshes = {platform: Mesh(np.array(jax.devices(platform)), ("i",))
          for platform in ("workshop", "cpu")}
mesh = meshes["workshop"]
print(mesh)

data = np.arange(32, dtype=np.float32).reshape(8, 4)
x = jax.device_put(data, NamedSharding(mesh, P("i")))
x_cpu = jax.device_put(data, NamedSharding(meshes["cpu"], P("i")))
print(x.sharding)

# %% [markdown]
# `device_put` sent each device only its shard: an `8x4` array split along rows gives every
# device a `2x4` block. `addressable_shards` lists them, with the slice of the global array
# each holds (`jax.debug.visualize_array_sharding` draws the same, if `rich` is installed).

# %%
for shard in x.addressable_shards:
  rows = shard.index[0]
  print(f"{shard.device}: rows {rows.start}:{rows.stop}, shape {shard.data.shape}")
print("the shards put together are the array:",
      np.array_equal(np.concatenate([np.asarray(s.data) for s in x.addressable_shards]), data))

# %% [markdown]
# An eager op on a sharded array is a small jitted program over the sharded input. An
# elementwise op keeps the rows where they are; a sum over the sharded rows needs every
# device's partial sum, and the result is replicated. Each result is compared with the CPU
# backend's: values, and the output sharding's `PartitionSpec`.

# %% tags=["exercise_setup"]
def compare(name, ours, ref, atol=1e-5):
  """Prints whether `ours` (workshop) and `ref` (cpu) agree in values and sharding."""
  same_values = np.allclose(np.asarray(ours), np.asarray(ref), atol=atol)
  print(f"{name}: spec {ours.sharding.spec} (cpu {ref.sharding.spec}), "
        f"values match cpu: {same_values}")

compare("sin(x) * 2", jnp.sin(x) * 2, jnp.sin(x_cpu) * 2)
compare("x.sum(axis=0)", x.sum(axis=0), x_cpu.sum(axis=0))
compare("x.T", x.T, x_cpu.T)

# %% [markdown]
# ## 2. What the plugin receives
#
# A small program: a matmul with a batch-sharded `x` and a replicated weight `w`, a
# `tanh`, then a *sharding constraint* asking for the activations split along their
# columns instead, and a sum over those columns. The constraint names a mesh, so the
# function is made per backend.

# %%
def program(mesh):
  def f(x, w):
    h = jnp.tanh(x @ w)
    h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "i")))
    return h.sum(axis=1)
  return jax.jit(f)

def inputs(platform):
  """f's arguments on `platform`: x (8x4, rows split over "i", scaled), w (4x4, replicated)."""
  m = meshes[platform]
  return (jax.device_put(data / 32, NamedSharding(m, P("i"))),
          jax.device_put(np.full((4, 4), 0.25, np.float32), NamedSharding(m, P())))

lowered = program(mesh).lower(*inputs("workshop"))
print(lowered.as_text())

# %% [markdown]
# What to read in it:
#
# * `mhlo.num_partitions = 4`: one SPMD program for 4 devices.
# * `sdy.mesh @mesh = <["i"=4]>`: the mesh, by axis names and sizes (which device is which
#   comes separately, in the compile options' device assignment).
# * `sdy.sharding<@mesh, [{"i"}, {}]>` on `%arg0`: dim 0 split over `"i"`, dim 1 whole;
#   `[{}, {}]` on `%arg1`: replicated. The result has none: JAX leaves its sharding to the
#   compiler.
# * `sdy.sharding_constraint`: the `with_sharding_constraint`, in the middle of the program.
# * Every shape is **global** (`tensor<8x4xf32>`), although each device holds `2x4` of `x`.
#
# The plugin's direct lowering (one plan per device for `pmap`/`shard_map` bodies) can't run
# this: which part of `dot_general` does device 2 compute? It raises `NeedsPartitioning` and
# hands the module to `partition.partition`.

# %% [markdown]
# ## 3. What Shardy's passes turn it into
#
# `partition.partition` runs four Shardy passes, with steps of our own around them that this
# program does not need (inlining calls, the fallback of section 5, checks for what Shardy
# gets wrong; its docstring lists them). We run the same four here, one at a time, through
# jaxlib's MLIR `PassManager`, and print the module after each:
#
# 1. `sdy-propagation-pipeline`: every op gets a sharding, from the annotations and each
#    op's sharding rule.
# 2. `sdy-insert-explicit-reshards`: where an operand's sharding differs from what its op
#    needs, an `sdy.reshard`; where an op leaves partial results (a sum over a sharded dim),
#    an `sdy.all_reduce`.
# 3. `sdy-reshard-to-collectives`: each reshard becomes a collective (`all_gather`,
#    `all_slice`, `all_to_all`, `collective_permute`, ...).
# 4. `sdy-convert-global-to-local`: local shapes everywhere, StableHLO collectives with
#    explicit device groups.

# %% tags=["exercise_setup"]
from jax._src.interpreters import mlir as jax_mlir
from jaxlib.mlir import ir, passmanager

STEPS = {
    "propagation": "sdy-propagation-pipeline",
    "explicit reshards": "func.func(sdy-insert-explicit-reshards{enable-full-version=true})",
    "collectives": "func.func(sdy-reshard-to-collectives)",
    "global to local": "sdy-convert-global-to-local",
}

def partition_steps(lowered):
  """The module JAX sends for `lowered`, and after each of Shardy's passes, as text."""
  with jax_mlir.make_ir_context():
    module = ir.Module.parse(lowered.as_text())
    stages = {"received": str(module)}
    for name, pipeline in STEPS.items():
      passmanager.PassManager.parse(f"builtin.module({pipeline})").run(module.operation)
      stages[name] = str(module)
  return stages

def main_body(text):
  """@main's signature and ops: the module minus its header, mesh and closing lines."""
  lines = text.splitlines()
  start = next(i for i, line in enumerate(lines) if "func.func public @main" in line)
  return "\n".join(line[2:] for line in lines[start:-2])

# %%
stages = partition_steps(lowered)
print(main_body(stages["propagation"]))

# %% [markdown]
# Propagation worked *backwards* from the constraint: the dot and the `tanh` produce
# column-sharded values (`[{}, {"i"}]`), so the constraint is already met (it became an
# `sdy.reshard` to the same sharding, a no-op). Shardy preferred that to computing
# row-sharded and moving the activations afterwards. But the dot's operands don't match
# yet: to produce columns, each device needs all rows of `x` and its columns of `w`.

# %%
print(main_body(stages["explicit reshards"]))

# %% [markdown]
# Now the operands are resharded explicitly (`%arg0` to replicated, `%arg1` to columns), and
# after the sum over the column-sharded dim each device holds a *partial* sum: the
# `sdy.all_reduce {"i"}` completes it. Next, each reshard becomes the collective that
# performs it:

# %% tags=["exercise_setup"]
COLLECTIVES = ("all_gather", "all_slice", "all_reduce", "all_to_all",
               "collective_permute", "reduce_scatter")

def collectives(text):
  """Counts the Shardy collectives in a module's text, by op name."""
  found = re.findall(r"\bsdy\.(\w+)", text)
  return dict(sorted(collections.Counter(n for n in found if n in COLLECTIVES).items()))

# %%
print(main_body(stages["collectives"]))
print("\ncollectives inserted:", collectives(stages["collectives"]))

# %% [markdown]
# Replicated → rows whole is an `all_gather` (communication); replicated → columns is an
# `all_slice`, which needs none: each device keeps its slice. The last pass writes the
# program each device runs: local types (`%arg0` is now the `2x4` shard, the dot produces
# `8x1`), `all_gather`/`all_reduce` over the device group `[[0, 1, 2, 3]]`, and the
# all-slice as `partition_id` → offset → `dynamic_slice`.

# %%
print(main_body(stages["global to local"]))

# %%
def signature(text):
  """@main's parameter and result types."""
  line = next(line for line in text.splitlines() if "func.func public @main" in line)
  return re.findall(r"tensor<[^>]*>", line)

print("global types:", signature(stages["received"]))
print("local types: ", signature(stages["global to local"]))

# %% [markdown]
# That is what the plugin does for this program: `partition.partition`, given the module
# and the compile options (4 partitions on devices 0–3; JAX lets the compiler choose the
# unannotated output's sharding), produces exactly the last module above. The plugin's
# lowering then compiles it like a `shard_map` body, and the collectives run on the same
# kernels as `psum` in a `pmap`.

# %%
import dataclasses

from jax_plugins.workshop.compiler import options as options_lib
from jax_plugins.workshop.compiler.spmd import partition

with jax_mlir.make_ir_context():
  module = ir.Module.parse(lowered.as_text())
  options = options_lib.parse(b"", num_devices=4, module_replicas=1, module_partitions=4)
  options = dataclasses.replace(options, propagate_to_outputs=(True,))
  replicated_ops = partition.partition(module, options)
  print("ops run replicated (fallback):", replicated_ops)
  print("partition.partition gives the module of the step-by-step passes:",
        str(module) == stages["global to local"])

# %% [markdown]
# ## 4. Run it
#
# Compiled and run on `workshop`, and on the CPU backend for reference. The output sharding
# `out.sharding` is the one the partitioned program declares (here replicated, after the
# all-reduce); it should be the one XLA:CPU chooses.

# %%
compiled = lowered.compile()
out = compiled(*inputs("workshop"))
compiled_cpu = program(meshes["cpu"]).lower(*inputs("cpu")).compile()
ref = compiled_cpu(*inputs("cpu"))
print(np.array2string(np.asarray(out), precision=4))
compare("f(x, w)", out, ref)

# %% [markdown]
# `compiled.as_text()` is the optimized program the plugin reports (as HLO text, what JAX
# shows for any backend): the per-device program, with local shapes and the collectives.

# %%
for line in compiled.as_text().splitlines():
  if re.search(r"parameter\(\d\), sharding|all-gather\(|all-reduce\(|dynamic-slice\(|dot\(", line):
    print(re.sub(r", metadata=\{.*\}", "", line.strip()))

# %% [markdown]
# The cost analysis counts the flops of *one device's* program. On a one-device mesh the
# same program does the whole `8x4 @ 4x4` matmul (256 flops) and the whole sum;
# partitioned, each device does an `8x4 @ 4x1` (64 flops), a quarter, plus its part of the
# sum and the all-reduce's additions. XLA:CPU partitions this program the same way (its
# `as_text()` shows the same all-gather of `x`, slice of `w` and all-reduce) and counts
# slightly differently.

# %%
one_device = program(Mesh(np.array(jax.devices("workshop")[:1]), ("i",))).lower(
    data / 32, np.full((4, 4), 0.25, np.float32)).compile()
flops, flops_one = compiled.cost_analysis()["flops"], one_device.cost_analysis()["flops"]
print(f"flops per device: {flops:g}, on one device: {flops_one:g}, ratio {flops / flops_one:.2f}")
print(f"XLA:CPU's flops per device: {compiled_cpu.cost_analysis()['flops']:g}")

# %% [markdown]
# ## 5. A data-parallel training step
#
# Data parallelism: the batch is split over the devices, the parameters replicated. Each
# device computes the loss and gradients of its quarter of the batch; the gradients are
# summed across devices (an all-reduce the partitioner inserts, as in the sum above), and
# every device applies the same update. Nothing in the code says so: it follows from the
# input shardings.

# %%
def mlp_step(params, x, y):
  def loss(params):
    h = x
    for w, b in params[:-1]:
      h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)

  value, grads = jax.value_and_grad(loss)(params)
  return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), value

rng = np.random.default_rng(0)
sizes = [32, 64, 64, 8]
params = [(rng.standard_normal((a, b), np.float32) / np.sqrt(a), np.zeros(b, np.float32))
          for a, b in zip(sizes, sizes[1:])]
batch_x = rng.standard_normal((64, 32), np.float32)
batch_y = rng.standard_normal((64, 8), np.float32)

def train_step(platform):
  """One step on `platform`: (new params, loss, the compiled step)."""
  m = meshes[platform]
  args = (jax.device_put(params, NamedSharding(m, P())),
          jax.device_put(batch_x, NamedSharding(m, P("i"))),
          jax.device_put(batch_y, NamedSharding(m, P("i"))))
  step = jax.jit(mlp_step).lower(*args).compile()
  return (*step(*args), step)

new_params, loss, step = train_step("workshop")
new_params_cpu, loss_cpu, step_cpu = train_step("cpu")
print(f"loss: workshop {float(loss):.4f}, cpu {float(loss_cpu):.4f}, "
      f"agree to 1e-5: {abs(float(loss) - float(loss_cpu)) < 1e-5}")
print("updated parameters match cpu:",
      all(np.allclose(a, b, atol=1e-5) for a, b in zip(jax.tree.leaves(new_params),
                                                        jax.tree.leaves(new_params_cpu))))
print("parameter shardings match cpu:",
      [p.sharding.spec for p in jax.tree.leaves(new_params)]
      == [p.sharding.spec for p in jax.tree.leaves(new_params_cpu)])

# %% [markdown]
# Each device did about a quarter of the work (the one-device step compiled for comparison),
# as on XLA:CPU. The optimized program holds 7 all-reduces, one per gradient (3 weights, 3
# biases) and one for the loss, and no op computed whole:

# %%
step_one = jax.jit(mlp_step).lower(params, batch_x, batch_y).compile()
ratio = step.cost_analysis()["flops"] / step_one.cost_analysis()["flops"]
ratio_cpu = step_cpu.cost_analysis()["flops"] / step_one.cost_analysis()["flops"]
print(f"per-device flops / one-device flops: workshop {ratio:.3f}, cpu {ratio_cpu:.3f}")
text = step.as_text()
print("all-reduces:", len(re.findall(r"all-reduce\(", text)),
      "| ops computed whole:", text.count("workshop_partitioning"))

# %% [markdown]
# **The fallback.** Some ops can't run on their shard with the passes we use: a cumulative
# sum *along* the sharded dim needs the values of the devices before it. For such ops
# (listed in partition.py's docstring) the compiler gathers the operand to replicated,
# computes the op whole, and slices the result back: slower, but correct. The optimized
# program names each such op with the frontend attribute `workshop_partitioning`.

# %%
cols = {p: jax.device_put(data, NamedSharding(meshes[p], P(None, "i"))) for p in meshes}
cumsum = jax.jit(lambda x: jnp.cumsum(x, axis=1))
fallback = cumsum.lower(cols["workshop"]).compile()
for line in fallback.as_text().splitlines():
  if "workshop_partitioning" in line:
    print(re.sub(r", metadata=\{.*\}", "", line.strip()))
compare("cumsum along the sharded dim", cumsum(cols["workshop"]), cumsum(cols["cpu"]))

# %% [markdown]
# ## Exercise: a matmul without an all-gather
#
# Tensor parallelism splits the *weights*. Here `w` (`16x4`) is split by rows: each device
# holds 4 of the 16 input features' weights. Choose the sharding of `x` (`8x16`) so that
# `x @ w` needs **no all-gather** (nobody collects a whole operand) and **exactly one
# all-reduce**.
#
# Hint: in `x @ w` the dim of `x` that meets `w`'s rows is its columns. If each device holds
# the matching columns of `x`, what does it compute, and what is missing?

# %% tags=["exercise_setup"]
w_rows = np.random.default_rng(1).standard_normal((16, 4), np.float32)
x_in = np.random.default_rng(2).standard_normal((8, 16), np.float32)
w_spec = P("i", None)  # fixed: w's rows split over "i"

# %% [markdown]
# The exercise is named `matmul_sharding`; the next cell is yours. In the reader's version
# of the notebooks (`python -m jax_plugins.workshop.teach.notebook reader reader`) it starts
# from `x_spec = P()` (replicated, `notebooks/exercises/matmul_sharding.py`); in
# `notebooks/` it holds the worked solution. Try `P("i")` (rows, as in data parallelism) and
# `P()` too, and read what the check says about them. To start over:
# `print(notebook.starting_point("matmul_sharding"))` shows the starting point (it lives in
# this cell only, so there is no file to reset).

# %% exercise="matmul_sharding" tags=["solution"]
x_spec = P(None, "i")

# %% [markdown]
# The check lowers `x @ w` with your sharding, runs Shardy's passes as in section 3, counts
# the collectives, and runs the program on both backends.

# %% exercise="matmul_sharding"
def check_matmul_collectives(x_spec):
  """Fails with what is wrong, if `x @ w` with x sharded as `x_spec` needs more than one
  all-reduce, or differs from the CPU backend."""
  matmul = jax.jit(lambda x, w: x @ w)
  args = {p: (jax.device_put(x_in, NamedSharding(meshes[p], x_spec)),
              jax.device_put(w_rows, NamedSharding(meshes[p], w_spec))) for p in meshes}
  inserted = collectives(partition_steps(matmul.lower(*args["workshop"]))["collectives"])
  print(f"x sharded as {x_spec}: collectives {inserted}")
  ours, ref = matmul(*args["workshop"]), matmul(*args["cpu"])
  if not np.allclose(np.asarray(ours), np.asarray(ref), atol=1e-4):
    raise AssertionError(f"x @ w with x sharded as {x_spec} differs from the CPU backend's")
  if inserted.get("all_gather"):
    raise AssertionError(
        "an all-gather collects a whole operand on every device. The mesh axis \"i\" "
        "already splits w's rows (the contracted dim); x split over \"i\" along another "
        "dim can't use it too, so one operand is gathered.")
  if inserted != {"all_reduce": 1}:
    raise AssertionError(
        f"wanted exactly one all_reduce and nothing else, got {inserted}. With x "
        "replicated, each device first slices x to the columns matching its rows of w "
        "(all_slice): which sharding of x would give each device those columns already?")
  print("Right: each device multiplies its 4 columns of x by its 4 rows of w, a partial "
        "8x4 product over a quarter of the contraction; one all-reduce sums the four. "
        "No operand moves, only the 8x4 result; the values match the CPU backend's.")

check_matmul_collectives(x_spec)

# %% [markdown]
# What you have seen: JAX sends the plugin one global program with shardings, and the
# plugin's compiler, not JAX, decides what each device computes and which collectives it
# needs, using Shardy's passes; the result is an SPMD program like a `shard_map` body. Next,
# 05 watches every PJRT call JAX makes, and 06 times the plugin against the CPU backend.
