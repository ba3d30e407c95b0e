# %% [markdown]
# # 08 · Your own device: a plugin project of your own
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/08_your_own_device.ipynb)
#
# **Concept: everything JAX needs from a device fits in a small project you can start from:
# a `PJRT_Api` table, a runtime of devices, memories, buffers, events and queues, a
# compiler from StableHLO, and the `jax_plugins` registration.** The workshop plugin does
# all of that at full size. `python -m jax_plugins.workshop.new_device NAME DIR` writes the
# same skeleton for a platform of your own, at a size you can read in an afternoon (about
# 2,200 lines, C++ and Python). Its "device" is still the host CPU, and each place where a
# real accelerator does something else is marked `REAL ACCELERATOR` in the code. This
# notebook generates a project, builds it, lets JAX find it, runs OpenXLA's checks and the
# C API conformance harness on it, and adds an op to it end to end. It ends with a map of
# what you replace for real hardware. [docs/new_device.md](../docs/new_device.md) has the same
# map in brief.

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
# This notebook runs JAX only in fresh processes (`new_device.run`), each of which loads
# the new plugin as it is on disk at that moment, so the kernel itself never imports JAX. The
# project goes into `build/new_device/mydevice` in the repository (git ignores `build/`).
# Its platform, and its Python package, is `mydevice`.

# %% tags=["exercise_setup"]
import json
import re

from jax_plugins.workshop import new_device
from jax_plugins.workshop.teach import conformance, notebook

ROOT = notebook.setup()
PROJECT = ROOT / "build" / "new_device" / "mydevice"
print(PROJECT.relative_to(ROOT))

# %% [markdown]
# ## 1. Generate the project
#
# `new_device.generate` does what the command line does. It fills the platform name into
# the template (`jax_plugins/workshop/new_device/template/`) and copies two files from this
# repository: `build_support.py`, through which the workshop's own `setup.py` finds
# `pjrt_c_api.h`, reads jaxlib's StableHLO versions and lists the `PJRT_Api` slots, and the
# compiler's `protowire.py`. Both projects therefore build the same way. `overwrite=True`
# starts over from the template on every run of this cell, which also undoes the op added
# in section 5.

# %% tags=["exercise_setup"]
new_device.generate("mydevice", PROJECT, overwrite=True)
lines = new_device.size(PROJECT)
for path, n in lines.items():
  print(f"{n:5d}  {path}")
print(f"{sum(lines.values()):5d}  lines in all")

# %% [markdown]
# What each file is, in the order worth reading them:
#
# | file | what it holds |
# |---|---|
# | `jax_plugins/mydevice/__init__.py` | `initialize()`: `register_plugin("mydevice", library_path=...)`; setup.py advertises the module as a `jax_plugins` entry point |
# | `src/runtime.h` | the runtime's objects: `Event`, `Allocation` (device memory), `Queue` (one worker thread per device), `Rendezvous` (collectives), the compiled `Program`, and the C API's opaque types (`PJRT_Client`, `PJRT_Device`, `PJRT_Buffer`, ...) |
# | `src/capi.cc` | `GetPjrtApi` and the table: the checked `Entry` every slot goes through, then one `IMPLEMENT(Name)` per function it implements |
# | `src/runtime.cc` | events, queues, the rendezvous, `Compile` (calls `compiler.py` under the GIL), the plan executor, strided copies |
# | `jax_plugins/mydevice/compiler.py` | StableHLO → plan: parse (jaxlib's MLIR bindings), Shardy's `sdy-convert-global-to-local` for pmap/shard_map, `RULES` from op to kernel |
# | `src/kernels.cc` | the kernels, in one table `kKernels` of (name, dtype, function) |
# | `setup.py`, `pyproject.toml`, `build_support.py` | the build: pybind11 + setuptools, `pjrt_c_api.h` from the `xla-cpu-pjrt` wheel, the slot list from that header |

# %% [markdown]
# ## 2. Build it
#
# `python setup.py build_ext --inplace` in the project compiles `src/*.cc` into
# `jax_plugins/mydevice/_plugin*.so`. `new_device.build` runs it and prints each file as it
# compiles. The first build takes about a minute on two cores. After that, only the files that
# changed are compiled again.

# %% tags=["exercise_setup"]
# NBVAL_IGNORE_OUTPUT
new_device.build(PROJECT);

# %% [markdown]
# The table in `src/capi.cc` never lists the slots itself. Each build writes
# `build/generated/pjrt_api_slots.inc` from the `pjrt_c_api.h` being compiled against, one
# `PJRT_API_SLOT(Name)` per slot, in the header's order. A slot whose function the file
# implements points at it. Any other slot answers `UNIMPLEMENTED` and names itself. No slot
# is NULL, and the declared version is the header's own, so jaxlib never reads past the
# table or calls through a NULL pointer. How many of each:

# %%
slots = re.findall(r"PJRT_API_SLOT\((\w+)\)",
                   (PROJECT / "build" / "generated" / "pjrt_api_slots.inc").read_text())
capi = (PROJECT / "src" / "capi.cc").read_text()
implemented = set(re.findall(r"^IMPLEMENT\((\w+)\)", capi, re.M)) | set(
    re.findall(r"^struct Impl<PJRT_(\w+)_Args>", capi, re.M))
print(f"{len(slots)} slots in the table: {len(implemented & set(slots))} implemented, "
      f"{len(set(slots) - implemented)} answer UNIMPLEMENTED")
print("for example:", ", ".join(sorted(set(slots) - implemented)[:6]), "...")

# %% [markdown]
# ## 3. JAX finds it
#
# A fresh process with the project on `PYTHONPATH` and `JAX_PLATFORMS=mydevice` runs the
# checks that notebook 03 runs on the workshop plugin: the library loads on its own, JAX
# lists the four devices, and OpenXLA's guide programs run, `jnp.add(1, 1)`, a `jit`, and
# a `pmap` with `psum` over all four devices (the collective goes through the
# `Rendezvous`).

# %%
print(new_device.run(PROJECT, """
    from jax_plugins.workshop.teach import check
    check.main(["--platform", "mydevice"])
"""))

# %% [markdown]
# ## 4. The C API conformance harness
#
# Notebook 01 runs the harness (`tests/capi_harness/harness.cc`) on the workshop plugin
# and on XLA's CPU plugin. `conformance.run_plugin` runs it on any plugin. Here the
# embedded Python gets the project on its path, because this plugin compiles through
# `compiler.py`. The harness builds and runs in about a minute. Every case should pass
# except those that call an optional function the template leaves `UNIMPLEMENTED`, which
# count as skips.

# %%
import tempfile

print("building the harness and its inputs, then running every case ...", flush=True)
results = conformance.run_plugin(tempfile.mkdtemp(), str(next(
    (PROJECT / "jax_plugins" / "mydevice").glob("_plugin*.so"))), "mydevice",
    python_path=str(PROJECT))
outcomes = [outcome for outcome, _ in results.values()]
print({o: outcomes.count(o) for o in ("PASS", "FAIL", "SKIP")})
for case, (outcome, why) in results.items():
  if outcome != "PASS":
    print(f"{outcome} {case}: {why.split(': ')[-1][:90]}")

# %% [markdown]
# ## 5. Add an op end to end: `negate`
#
# `jnp.negative` lowers to `stablehlo.negate`, which the template has no rule for. The
# compiler refuses it at compile time with `UNIMPLEMENTED`, naming the op, and nothing is
# ever discovered missing during execution:

# %% tags=["exercise_setup"]
NEGATE = """
    import numpy as np, jax, jax.numpy as jnp
    x = np.array([1.5, -2.0, 0.0, 3.25], np.float32)
    try:
      got = np.asarray(jax.jit(jnp.negative)(x))
      print("negate:", got, "matches numpy:", np.array_equal(got, np.negative(x)))
    except Exception as e:
      print(type(e).__name__, str(e).splitlines()[0])
"""
print(new_device.run(PROJECT, NEGATE))

# %% [markdown]
# An op takes two pieces. The first is a **rule** in `compiler.py`'s `RULES`, which names the
# kernel that runs the op. `elementwise` suits any op whose operands and result share a shape.
# The second is a **kernel** in `kernels.cc`'s `kKernels`, one entry per dtype. `Unary<T, Op>`
# applies a functor to every element, and `std::negate<>` is that functor. The compiler
# checks the rule's kernel against the table that the C++ side passes it at every compile,
# so a dtype without an entry is also refused at compile time. `add_op` inserts the pieces
# above the marker lines in the two files (once: running it again changes nothing) and
# rebuilds the project, which compiles only `kernels.cc`.

# %% tags=["exercise_setup"]
def add_op(rule: str, functions: str, kernels: str) -> None:
  """Puts an op's rule (compiler.py RULES), C++ functions (above kKernels) and kernel
  entries (in kKernels) into the project, then rebuilds it."""
  new_device.insert_above(PROJECT, "jax_plugins/mydevice/compiler.py",
                          "# New rules go above this line.", rule)
  new_device.insert_above(PROJECT, "src/kernels.cc", "// New functions go above this line.",
                          functions)
  new_device.insert_above(PROJECT, "src/kernels.cc", "// New kernels go above this line.",
                          kernels)
  new_device.build(PROJECT)

# %%
# NBVAL_IGNORE_OUTPUT
add_op(rule='"stablehlo.negate": elementwise("negate"),',
       functions="",
       kernels="""
           {"negate", F32, Unary<float, std::negate<>>},
           {"negate", S32, Unary<int32_t, std::negate<>>},
       """)

# %% [markdown]
# A fresh process loads the rebuilt library. The same program now compiles, runs on the
# device, and gives numpy's result:

# %%
print(new_device.run(PROJECT, NEGATE))

# %% [markdown]
# ## 6. Exercise: `maximum`, and with it `jax.nn.relu`
#
# `jnp.maximum(x, y)` lowers to `stablehlo.maximum`. `jax.nn.relu(x)` lowers to the same op,
# against a zero broadcast by `broadcast_in_dim`, which the template already has. **Make
# both run on `mydevice` for f32 and s32.** You need the rule, a functor for the kernel
# (a `struct` with a templated `operator()`, put above `kKernels`), and an entry per dtype.
# One detail of StableHLO's `maximum` decides whether your answer passes: if either operand
# is NaN, the result is NaN, as with `np.maximum`. `a > b ? a : b` gives `b` when `a` is NaN.
#
# The exercise is named `maximum_op`, and the next cell is yours. In the reader's version of
# the notebooks, the cell starts with three empty strings
# (`notebooks/exercises/maximum_op.py`), and in `notebooks/` it holds the worked solution.
# If a try goes wrong, rerun the cells from section 1, which regenerate the project from the
# template. `print(notebook.starting_point("maximum_op"))` shows the starting point.

# %% exercise="maximum_op" tags=["solution"]
# NBVAL_IGNORE_OUTPUT
add_op(rule='"stablehlo.maximum": elementwise("maximum"),',
       functions="""
           // StableHLO's maximum: NaN if either operand is NaN (a != a only for NaN).
           struct Max {
             template <typename T>
             T operator()(T a, T b) const { return a != a ? a : (a > b ? a : b); }
           };
       """,
       kernels="""
           {"maximum", F32, Binary<float, Max>},
           {"maximum", S32, Binary<int32_t, Max>},
       """)

# %% [markdown]
# The check runs `jnp.maximum` on f32 (NaN and infinities included) and s32 (the int32
# extremes included), and `jax.nn.relu`, in a fresh process on `mydevice`, and compares
# each with numpy.

# %% exercise="maximum_op"
def check_maximum():
  """Fails with what is wrong, if jnp.maximum (f32, s32) or jax.nn.relu do not run on
  mydevice or differ from numpy."""
  import numpy as np

  notebook.check_last_build("plugin", PROJECT)
  x = [-2.0, -0.5, 0.0, 1.5, float("nan"), 3.0, float("-inf"), float("inf"), 7.0]
  y = [1.0, -1.0, -0.0, float("nan"), 2.0, 3.0, 0.0, -1.0, float("nan")]
  i, j = [-5, 3, 7, -2**31, 2**31 - 1], [2, 3, -7, 0, 0]
  out = json.loads(new_device.run(PROJECT, f"""
      import json, numpy as np, jax, jax.numpy as jnp
      x = np.array(json.loads('{json.dumps(x)}'), np.float32)
      y = np.array(json.loads('{json.dumps(y)}'), np.float32)
      i, j = np.array({i}, np.int32), np.array({j}, np.int32)
      out = {{}}
      for name, f, args in [("f32", jnp.maximum, (x, y)), ("s32", jnp.maximum, (i, j)),
                            ("relu", jax.nn.relu, (x,))]:
        try:
          out[name] = np.asarray(jax.jit(f)(*args)).tolist()
        except Exception as e:
          out[name] = str(e).splitlines()[0]
      print(json.dumps(out))
  """).strip().splitlines()[-1])
  for name in ("f32", "s32", "relu"):
    if isinstance(out[name], str):
      if "no rule for stablehlo.maximum" in out[name]:
        raise AssertionError(
            f"jnp.maximum does not compile on mydevice: {out[name]}. compiler.py needs a "
            "rule for stablehlo.maximum: the `rule` of add_op, as negate's.")
      raise AssertionError(
          f"{name}: {out[name]}. The rule is there; kernels.cc needs a `maximum` entry in "
          "kKernels for this dtype (the `kernels` of add_op, one line per dtype).")
  want = {"f32": np.maximum(np.float32(x), np.float32(y)), "s32": np.maximum(i, j),
          "relu": np.maximum(np.float32(x), 0)}
  for name, expected in want.items():
    got = np.array(out[name], expected.dtype)
    if not np.array_equal(got, expected, equal_nan=name != "s32"):
      nan_lost = name != "s32" and np.isnan(expected).sum() > np.isnan(got).sum()
      raise AssertionError(
          f"{name}: got {got.tolist()}, numpy gives {expected.tolist()}."
          + (" Where an operand is NaN the result must be NaN: a > b is false when a is "
             "NaN, so `a > b ? a : b` returns b." if nan_lost else ""))
  print("Right: stablehlo.maximum has a rule and a kernel for f32 and s32, NaN propagates "
        "as in numpy, and jax.nn.relu (maximum against a broadcast zero) runs on mydevice.")

check_maximum()

# %% [markdown]
# ## 7. What to replace for real hardware
#
# The template runs on the host, but its structure is that of an accelerator plugin. The
# steps of OpenXLA's PJRT plugin guide (implement the C API and `GetPjrtApi`, test it;
# install for JAX, discover, initialize, select, test) map onto its files like this. Each
# file marks its spots with `REAL ACCELERATOR`.
#
# | what | where in the template | what real hardware puts there | guide step |
# |---|---|---|---|
# | device enumeration | `capi.cc` `Client_Create`, `DeviceDescription_*` | open the driver, list devices and their attributes (kind, core count, versions) | implement the C API |
# | device memory | `runtime.h` `Allocation`, one `PJRT_Memory` per device | the driver's allocator; memories the host cannot read; more kinds (`pinned_host`) | implement the C API: buffers |
# | host ↔ device transfers | `capi.cc` `BufferFromHostBuffer`, `ToHostBuffer`, `CopyToMemory` | DMA through staging or pinned memory, the ready events set when the DMA completes | implement the C API: transfers |
# | streams and events | `runtime.h` `Queue` (a worker thread per device), `Event` | the device's streams / command queues, events recorded on them, completion callbacks from the driver | implement the C API: async work |
# | compiler | `compiler.py` (StableHLO → plan), `runtime.cc` `Compile` | your compiler from StableHLO (MLIR-based, or XLA's passes) to a device binary; refuse what it cannot do at compile time | implement the C API: compile |
# | kernels | `kernels.cc` `kKernels` | device kernels, or none when the compiler generates the code | – |
# | collectives | `runtime.h` `Rendezvous`, `AllReduceSum` | a collective library over the interconnect, communicators per replica group | – |
# | registration | `jax_plugins/mydevice/__init__.py`, setup.py entry point | a priority above the CPU backend's (becomes JAX's default), a jaxlib version check, create options | install for JAX, discover, initialize, select |
# | tests | `python -m jax_plugins.workshop.teach.check --platform mydevice`, `conformance.run_plugin` | the same, and your ops against JAX's CPU backend (the workshop's tests/ show how) | test |
#
# What the template leaves out, next to the workshop plugin, in case you need it: handle
# checks (use after destroy, in `plugin_src/capi/check.h`), layouts and the Layouts
# extension, serialized executables (the persistent compilation cache), the async
# host-to-device transfer manager, memory statistics, automatic sharding propagation
# (`compiler/spmd/partition.py`), host callbacks and FFI, the profiler extension, and several
# processes.

# %% [markdown]
# What you have seen: a plugin of your own, separate from this repository, that JAX finds
# through the `jax_plugins` entry point, that passes OpenXLA's checks and the conformance
# harness, and that grows one op at a time, each a rule, a kernel and a rebuild of one file.
# To keep the project, generate it outside the repository
# (`python -m jax_plugins.workshop.new_device mydevice ~/mydevice`), put it under version
# control, and `pip install .` it; JAX then finds it in any process.
