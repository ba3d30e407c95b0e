# %% [markdown]
# # 05 · What JAX asks of the plugin
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/05_what_jax_asks.ipynb)
#
# **Concept: every JAX action is a sequence of PJRT C API calls into the plugin.** `jax.devices()`,
# `device_put`, `jit`, fetching a result, `block_until_ready`, donation and `pmap` each ask
# different things of the plugin, in a fixed order. The plugin records every call it
# receives, so we can watch.
#
# How the recording works: every slot of the `PJRT_Api` table points to one template,
# `trace::Traced<"PJRT_Name", &Name>` ([plugin_src/capi/trace_describe.h](../plugin_src/capi/trace_describe.h)),
# which calls the implementation directly when tracing is off (one atomic load) and
# otherwise times it and appends function, key arguments, result code, duration and thread
# to a lock-protected ring buffer ([plugin_src/capi/trace.cc](../plugin_src/capi/trace.cc)). The table
# in [plugin_src/capi/api_table.cc](../plugin_src/capi/api_table.cc) is built with one macro per slot, so no
# function is traced by hand. From Python, `jax_plugins.workshop.trace()` switches
# recording on for a block and reads the buffer back through `ctypes`; `WORKSHOP_TRACE=1`
# in the environment records from the start and prints each call to stderr.

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
# Only the workshop backend this time (`JAX_PLATFORMS=workshop`), so that what JAX asks at
# start-up is asked of our plugin alone.

# %%
import os
import re
import sys
from itertools import groupby
from pathlib import Path

from jax_plugins.workshop.teach import notebook

ROOT = notebook.setup("workshop")

import jax
import jax.numpy as jnp
import numpy as np

import jax_plugins.workshop as workshop

# %% [markdown]
# Every slot is one line of the table, and each goes through the tracer:

# %%
table = (ROOT / "plugin_src/capi/api_table.cc").read_text()
print(re.search(r"#define WORKSHOP_SLOT.*", table)[0])
print(*re.findall(r"^\s+WORKSHOP_SLOT\((?:Client_Compile|LoadedExecutable_Execute)\),", table, re.M), sep="\n")

# %% [markdown]
# Two helpers print a trace. `where(f)` finds the file of `plugin_src/capi/` whose
# `PJRT_Error* F(...)` answers function `f`, so every line says which code ran. `show`
# prints the calls in order, merging runs of the same function, and leaves out what depends
# on timing rather than on JAX: `Event_Destroy`/`Error_Destroy` (jaxlib destroys an event
# inside its `OnReady` callback, which runs on whichever thread completes the event, at
# that moment), event handle numbers, and sizes that depend on source locations carried in
# the serialized program.

# %%
SOURCES = {path.name: path.read_text()
           for path in sorted((ROOT / "plugin_src/capi").glob("*.cc"))}

def where(function):
  """The plugin_src/capi/ file implementing `function` (without the PJRT_ prefix)."""
  pattern = re.compile(rf"^(?:PJRT_Error\*|void) {function}\(", re.M)
  return next((name for name, text in SOURCES.items() if pattern.search(text)), "?")

FROM_CALLBACKS = {"Event_Destroy", "Error_Destroy"}
VOLATILE = re.compile(r" ?((code_bytes|options_bytes|bytes|bytes_in_use)=\d+|event#\d+)")

def show(trace):
  calls = [c for c in trace.calls if c.name not in FROM_CALLBACKS]
  for name, run in groupby(calls, key=lambda c: c.name):
    run = list(run)
    args = list(dict.fromkeys(VOLATILE.sub("", c.args).strip() for c in run))
    args = "; ".join(args) if len(args) <= 4 else f"{args[0]}; ...; {args[-1]}"
    count = f"x{len(run)}" if len(run) > 1 else ""
    result = "OK" if all(c.code == 0 for c in run) else "ERROR"
    print(f"{name:<42}{count:>4} {result:<5} {where(name):<23} {args}"[:150])


# %% [markdown]
# ## 1. `jax.devices()`: loading, version check, client creation, discovery
#
# Nothing happens at `import jax`. The first call that needs a backend makes jaxlib
# `dlopen` the plugin, call `GetPjrtApi`, check the version, initialize the plugin, create a
# client, and then ask about everything the client has: topology, devices and their
# descriptions, memories and their kinds, plugin attributes.

# %%
with workshop.trace() as init:
  devices = jax.devices()
print(devices)
print(len(init.calls), "calls to", len(init.counts()), "functions")

# %%
show(init)

# %% [markdown]
# Reading it top to bottom:
# * `Plugin_Initialize` and `Client_Create` ([api_core.cc](../plugin_src/capi/api_core.cc),
#   [api_client.cc](../plugin_src/capi/api_client.cc)): the options come from `register_plugin`
#   (`num_devices`).
# * `Client_TopologyDescription` succeeds, so jaxlib also asks the topology for its platform,
#   version and attributes (and serializes it, for the compilation cache key).
# * Then every device: its description (id, process, kind, strings, attributes) and its
#   memories; then every memory, both ways (`Memory_AddressableByDevices`), with its kind
#   and kind id. Each device has two: `device` (the default) and `pinned_host`.
# * `Plugin_Attributes`: the StableHLO versions, which decide how programs are serialized for
#   us (notebook 03).
# * Finally jaxlib builds its Python-side device objects (`LookupDevice`, `LocalHardwareId`,
#   the description strings, default memories).

# %% [markdown]
# ## 2. `device_put`: host to device
#
# A numpy array becomes one `Client_BufferFromHostBuffer`, with `device = NULL` and the
# target *memory* (jaxlib always names the memory), the numpy strides and
# `kImmutableZeroCopy` semantics (`semantics=2`): the host array stays alive until
# `done_with_host_buffer` fires. We copy during the call, so the event is ready at once;
# jaxlib registers `Event_OnReady` and destroys the event straight away. Then it reads
# back where the buffer lives (`Buffer_Device`, `Buffer_Memory`, `Memory_Kind`) to check it
# against the sharding it asked for.

# %%
x_host = np.arange(6, dtype=np.float32).reshape(2, 3)
with workshop.trace() as put:
  x = jax.device_put(x_host, devices[0])
show(put)

# %% [markdown]
# A `pinned_host` put targets the other memory of the same device:

# %%
with workshop.trace() as put_host:
  x_pinned = jax.device_put(x_host, jax.sharding.SingleDeviceSharding(devices[0], memory_kind="pinned_host"))
show(put_host)

# %% [markdown]
# ## 3. `jit`: compile, then execute
#
# The first call of a jitted function traces and lowers it in Python, then compiles:
# `Client_Compile` gets the StableHLO portable artifact and the serialized compile options
# ([api_executable.cc](../plugin_src/capi/api_executable.cc) → the Python compiler in `jax_plugins/workshop/compiler`).
# Around it jaxlib asks for the device's memory statistics (it ignores failures there),
# wraps the result (`GetExecutable`, `AddressableDevices`, `GetDeviceAssignment`), and
# queries it: the optimized program (twice: size, then contents; jaxlib converts it to
# HLO for layouts and shardings), output memory kinds and layouts (the Layouts extension in
# [api_extensions.cc](../plugin_src/capi/api_extensions.cc)), the fingerprint. Only then the
# arguments' placement is checked and `LoadedExecutable_Execute` runs, with one argument row
# per device and one completion event per device, on which jaxlib registers `OnReady`.

# %% exercise="device_memory_stats"
f = jax.jit(lambda a: jnp.sin(a) * 2)
with workshop.trace() as first_call:
  y = f(x)
show(first_call)

# %% [markdown]
# The second call with the same shapes is all execution: jaxlib's C++ fast path checks the
# argument, asks how many outputs to expect, and executes.

# %%
with workshop.trace() as second_call:
  y = f(x)
show(second_call)

# %% [markdown]
# ## 4. Fetching a result
#
# `np.asarray(y)` reads the buffer's type, shape, layout and placement, then
# `Buffer_ToHostBuffer` into a numpy array of jaxlib's. Our `Buffer_IsOnCpu` says no, so
# jaxlib copies rather than aliasing device memory (see the comment in
# [api_buffer.cc](../plugin_src/capi/api_buffer.cc)). The copy completes an event, which jaxlib waits on.

# %%
with workshop.trace() as fetch:
  y_host = np.asarray(y)
show(fetch)
# Five digits: the last bits of sin depend on the CPU's vector width (SSE or AVX2).
print(np.array2string(y_host, precision=5))
print("matches numpy:", np.allclose(y_host, np.sin(x_host) * 2, rtol=1e-6, atol=1e-6))

# %% [markdown]
# ## 5. `block_until_ready`
#
# Waiting for a result asks whether the buffer still exists, for its ready event, and
# whether that is ready. Here it is not: the product of two 1024x1024 matrices is still
# running on device 0's worker thread when we ask (Execute only queued it). So jaxlib
# registers an `OnReady` callback and blocks in Python until our worker completes the event
# ([runtime/executable.cc](../plugin_src/runtime/executable.cc) sets it when the partition
# finishes).

# %%
big = jax.device_put(np.ones((1024, 1024), np.float32), devices[0])
matmul = jax.jit(lambda a: a @ a)
matmul(big).block_until_ready()  # compile and run once outside the trace
product = matmul(big)
with workshop.trace() as ready:
  product.block_until_ready()
show(ready)

# %% [markdown]
# Asked again, jaxlib remembers that the array is ready and only checks it still exists:

# %%
with workshop.trace() as ready_again:
  product.block_until_ready()
show(ready_again)

# %% [markdown]
# ## 6. Donation
#
# With `donate_argnums`, JAX marks the parameter `tf.aliasing_output` in the program (for
# platforms on its donation list, which `jax_plugins.workshop` extends with ours). Execute
# takes the input's storage and marks it deleted, which JAX observes through
# `Buffer_IsDeleted`; the Python array is then unusable.

# %%
g = jax.jit(lambda a: a + 1, donate_argnums=0)
w = jax.device_put(np.ones(4, np.float32), devices[0])
g(jax.device_put(np.ones(4, np.float32), devices[0])).block_until_ready()  # compile outside the trace
with workshop.trace() as donation:
  w2 = g(w)
show(donation)
print("donated input deleted:", w.is_deleted())

# %% [markdown]
# ## 7. `pmap`: one Execute, four devices
#
# `jax.pmap` is `jit` of a `shard_map` over a mesh of the devices: one program with
# `num_partitions = 4`, compiled once, and **one** `Execute` with four argument rows, one per
# device, in the order `LoadedExecutable_AddressableDevices` gave. A numpy input is
# transferred shard by shard, one `BufferFromHostBuffer` per device.

# %% exercise="device_memory_stats"
p = jax.pmap(lambda v: v * 2 + jax.lax.psum(v, "i"), axis_name="i")
v = np.arange(8, dtype=np.float32).reshape(4, 2)
with workshop.trace() as pmap_trace:
  out = p(v)
show(pmap_trace)
print(np.asarray(out))

# %% [markdown]
# ## 8. When did it happen? A timeline
#
# Durations and threads (this cell's output depends on the machine, so it is not checked).
# Compilation dominates the first call of a jitted function; everything else is a few
# microseconds. The figure has one row per thread that made a C API call, named as the
# trace records it. The notebook's Python thread makes nearly all of them (its name is the
# interpreter's, `python3` or `python`: Linux names a process's main thread after its
# executable), `Client_Compile` included: jaxlib compiles on the thread that calls the
# jitted function.
# A device worker (`workshop-devN`) gets a row only when jaxlib's `OnReady` callback ran
# there: when the transfer or execution was still in flight as jaxlib registered the
# callback, the worker that completes the event runs it, and the callback destroys events
# (`Event_Destroy`) on that thread, which is why the C API requires events to survive
# destruction by any thread. When the work had finished first, the callback runs at once
# on the Python thread and the figure has that row alone; the cell prints which threads
# called. The kernels a worker runs are not C API calls, so the tracer does not
# see them.

# %% exercise="device_memory_stats"
# NBVAL_IGNORE_OUTPUT
with workshop.trace() as timed:
  h = jax.jit(lambda a: jnp.tanh(a @ a.T))
  r = h(jax.device_put(np.ones((256, 256), np.float32), devices[0]))
  np.asarray(r)
print(timed.table(timing=True, width=140))

# %%
# NBVAL_IGNORE_OUTPUT
import matplotlib.pyplot as plt

threads = {c.thread for c in timed.calls}
for thread in sorted(threads):
  calls = [c.name for c in timed.calls if c.thread == thread]
  names = ", ".join(dict.fromkeys(calls))
  print(f"{thread}: {len(calls)} calls ({names if len(names) < 90 else names[:90] + '...'})")
fig, ax = plt.subplots(figsize=(12, 1.4 + 0.5 * len(threads)))
timed.timeline(ax=ax, min_ms=0.02)
ax.set_title("jit of a 256x256 matmul + tanh: compile, transfer, execute, fetch")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 9. What JAX used
#
# All the actions above together, against the table: how many of the plugin's functions
# JAX actually called (the rest are used by other actions, by the conformance tests in
# `tests/conformance/test_conformance.py`, or by other callers of the C API), and which
# calls returned an error. The count depends on both. A call that fails hands jaxlib a
# `PJRT_Error`, which it reads and frees with three more functions (`Error_GetCode`,
# `Error_Message`, `Error_Destroy`): before the exercise below is done,
# `Device_MemoryStats` fails around every compile, and the count is three higher than
# after. Timing changes the calls too: a wait that finds its event already complete makes
# fewer of them (section 5). The cell says which failed and what the count is without the
# error functions (`teach.claims.api_usage`).

# %%
# NBVAL_IGNORE_OUTPUT
from jax_plugins.workshop.teach import claims

traces = [init, put, put_host, first_call, second_call, fetch, ready, ready_again, donation, pmap_trace]
print(claims.api_usage(traces))

# %% [markdown]
# ## Exercise: answer `PJRT_Device_MemoryStats`
#
# Section 3 showed jaxlib asking for the device's memory statistics around every compile;
# `jax.Device.memory_stats()` asks the same. The answer is one C API function,
# `Device_MemoryStats` in `plugin_src/capi/device_memory_stats.cc`, and it is yours to
# write: fill in the `PJRT_Device_MemoryStats_Args` fields from the device memory's
# counters (`const MemoryStats& stats = *args->device->device->memory()->stats();`,
# `runtime/memory_stats.h`: `bytes_in_use()`, `peak_bytes_in_use()`, `num_allocs()`,
# `largest_alloc_size()`, `bytes_limit()`). The argument checks happen before your
# function runs (`capi/check.h`: the struct size, a NULL device).
#
# The fields of `PJRT_Device_MemoryStats_Args` (`pjrt_c_api.h`), all outputs but the
# first three: `bytes_in_use` (always reported), then pairs of an `int64_t` and a
# `bool ..._is_set`: `peak_bytes_in_use`, `num_allocs`, `largest_alloc_size`,
# `bytes_limit`, `bytes_reserved`, `peak_bytes_reserved`, `bytes_reservable_limit`,
# `largest_free_block_bytes`, `pool_bytes`, `peak_pool_bytes`. Report the first four (the
# limit only when it is > 0, i.e. set by the client option `device_memory_limit`) and set
# every `*_is_set`: true for what you report, false for the rest. jaxlib does not zero the
# struct, so an `*_is_set` left unwritten holds whatever was in memory. jaxlib 0.10.2 puts
# a field whose `*_is_set` is false in the dict as -1 (`bytes_reserved: -1`), and leaves
# out only some of them.
#
# The solution below also reports the memory pool that recycles the device's blocks
# (`runtime/memory_pool.h`, one per process: `MemoryPool::Global().counters()`) as
# `pool_bytes`, `peak_pool_bytes` and `largest_free_block_bytes`; the check asks only for the
# first four.
#
# The exercise is named `device_memory_stats`. In the reader's version of the notebooks
# (`python -m jax_plugins.workshop.teach.notebook reader reader`) the cell starts from
# `notebooks/exercises/device_memory_stats.cc`, which returns `UNIMPLEMENTED`; jaxlib
# ignores that around a compile, and `memory_stats()` then has nothing to report. In
# `notebooks/` it holds the worked solution. To start over:
# `notebook.reset_exercise("device_memory_stats")` writes the starting point back into the
# file, and `print(notebook.starting_point("device_memory_stats"))` shows it, to paste into
# the cell; to get the worked solution back:
# `git checkout -- plugin_src/capi/device_memory_stats.cc`. The cell rebuilds (this file
# compiles, then the library links).

# %% exercise="device_memory_stats" tags=["solution"]
# NBVAL_IGNORE_OUTPUT
notebook.write_source("plugin_src/capi/device_memory_stats.cc", r'''
// PJRT_Device_MemoryStats: what `jax.Device.memory_stats()` reports for a workshop device.
//
// The device's default ("device") memory: the bytes of the buffers in it plus the
// temporaries of running executions, the peak of that, the number of allocations and the
// largest one (runtime/memory_stats.h counts them), and its limit (create option
// device_memory_limit) when there is one. Then the memory pool that recycles their
// blocks (runtime/memory_pool.h; one per process, shared by the devices): pool_bytes is
// what it holds from the system (blocks handed out plus cached), peak_pool_bytes the peak
// of that, largest_free_block_bytes its largest cached block. A field the plugin does not
// know keeps its `*_is_set = false`, which jaxlib reports as -1. Notebook 05's exercise
// writes this file (its starting point is notebooks/exercises/device_memory_stats.cc);
// the argument checks (struct_size, a null device) happen before, in capi/check.h.
#include "capi/api.h"
#include "capi/wrappers.h"
#include "runtime/memory_pool.h"

namespace workshop::capi {

PJRT_Error* Device_MemoryStats(PJRT_Device_MemoryStats_Args* args) {
  const MemoryStats& stats = *args->device->device->memory()->stats();
  args->bytes_in_use = stats.bytes_in_use();
  args->peak_bytes_in_use = stats.peak_bytes_in_use();
  args->peak_bytes_in_use_is_set = true;
  args->num_allocs = stats.num_allocs();
  args->num_allocs_is_set = true;
  args->largest_alloc_size = stats.largest_alloc_size();
  args->largest_alloc_size_is_set = true;
  args->bytes_limit = stats.bytes_limit();
  args->bytes_limit_is_set = stats.bytes_limit() > 0;
  args->bytes_reserved_is_set = false;
  args->peak_bytes_reserved_is_set = false;
  args->bytes_reservable_limit_is_set = false;
  const MemoryPool::Counters pool = MemoryPool::Global().counters();
  args->largest_free_block_bytes = static_cast<int64_t>(pool.largest_cached);
  args->largest_free_block_bytes_is_set = true;
  args->pool_bytes = static_cast<int64_t>(pool.bytes_in_use + pool.bytes_cached);
  args->pool_bytes_is_set = true;
  args->peak_pool_bytes = static_cast<int64_t>(pool.peak_bytes_held);
  args->peak_pool_bytes_is_set = true;
  return nullptr;
}

}  // namespace workshop::capi
''')
compiled = notebook.rebuild(ROOT)

# %% [markdown]
# The check runs in a fresh process (this one keeps the library it loaded): it puts 1 MiB
# on device 0, traces `memory_stats()`, and compares the answer with what it put there.

# %% exercise="device_memory_stats"
def check_memory_stats():
  """Fails with what is wrong, if memory_stats() doesn't count a 1 MiB buffer."""
  import json
  notebook.check_last_build()
  found = json.loads(notebook.run_fresh("""
    import json, jax, numpy as np
    import jax_plugins.workshop as workshop
    device = jax.devices()[0]
    x = jax.device_put(np.ones(1 << 18, np.float32), device).block_until_ready()
    with workshop.trace() as t:
      stats = device.memory_stats()
    calls = [(c.name, c.code, c.args) for c in t.select("Device_MemoryStats")]
    print(json.dumps({"stats": stats, "calls": calls}))
    """))
  calls, stats = found["calls"], found["stats"]
  if not calls:
    raise AssertionError("memory_stats() made no PJRT_Device_MemoryStats call: is the slot "
                         "still WORKSHOP_SLOT(Device_MemoryStats) in api_table.cc?")
  if calls[-1][1] != 0:
    raise AssertionError(f"PJRT_Device_MemoryStats returned error code {calls[-1][1]} "
                         f"({calls[-1][2]}): return nullptr on success")
  if not stats or stats.get("bytes_in_use", 0) < 1 << 20:
    raise AssertionError(f"memory_stats() is {stats}: bytes_in_use must count the 1 MiB "
                         "buffer on the device (stats.bytes_in_use())")
  wanted = ("peak_bytes_in_use", "num_allocs", "largest_alloc_size")
  unset = [key for key in wanted if stats.get(key, -1) == -1]
  if unset:
    raise AssertionError(f"memory_stats() reports {[f'{k}: -1' for k in unset]}, what jaxlib "
                         f"reports for a field whose *_is_set is false: fill in {unset} and set "
                         "their *_is_set fields to true")
  if (stats["peak_bytes_in_use"] < stats["bytes_in_use"] or stats["num_allocs"] < 1
      or not 1 << 20 <= stats["largest_alloc_size"] <= stats["peak_bytes_in_use"]):
    raise AssertionError(
        f"inconsistent statistics {stats}: the peak is at least what is in use, a 1 MiB "
        "buffer was allocated, and it is no larger than the peak. A value no counter could "
        "give comes from an *_is_set field left unwritten (jaxlib then reads whatever was "
        "in memory): set every *_is_set, false for the fields you don't report")
  print("PJRT_Device_MemoryStats answers OK; memory_stats() reports bytes_in_use (at least "
        "the 1 MiB buffer),", ", ".join(wanted), "consistently")

check_memory_stats()

# %% [markdown]
# ## 10. What JAX withholds from a platform it doesn't know, won back
#
# JAX keys some lowerings on the platform *name*: host callbacks (`jax.debug.print`,
# `pure_callback`, `io_callback`) and the LAPACK family (`eigh`, `svd`, `eig`, ...) lower
# only for the platforms it knows (cpu, cuda, rocm, tpu), and a user's FFI kernel reaches
# only a platform that installed a custom call handler. What a device did shows in a
# `jax.profiler` trace only if its plugin reports it (PJRT's profiler extension).
# `jax_plugins.workshop.initialize()` registers its own lowerings for `workshop`
# (`mlir.register_lowering(prim, rule, platform="workshop")`) and a handler for FFI
# targets, and the plugin runs what they emit: a callback is a `host_callback` kernel
# that takes the GIL and calls the Python function; an FFI target is called through an
# `XLA_FFI_CallFrame`; the profiler extension records every kernel (docs/extensions.md, "What
# JAX withholds from unknown platforms").
#
# First `jax.debug.print` (an ordered effect: JAX threads a token through the program) and a
# `pure_callback`, inside `jit`. JAX's callback implementations put the arguments on a CPU
# device before calling the Python function (on GPUs too), so callbacks need `cpu` among
# the platforms; this notebook runs with `JAX_PLATFORMS=workshop` alone, so the demo runs in
# a fresh process with `JAX_PLATFORMS=workshop,cpu` (workshop stays the default backend):

# %%
import os, subprocess, sys, textwrap

callback_demo = textwrap.dedent("""
    import os
    os.environ["JAX_PLATFORMS"] = "workshop,cpu"
    import jax, jax.numpy as jnp, numpy as np

    def noisy(x):
      jax.debug.print("x = {x}, sum = {s}", x=x, s=x.sum(), ordered=True)
      flipped = jax.pure_callback(lambda a: np.sort(a)[::-1].copy(),
                                  jax.ShapeDtypeStruct(x.shape, x.dtype), x)
      return flipped * 2

    result = jax.jit(noisy)(jnp.array([3.0, 1.0, 2.0]))
    print(result, "on", result.devices())
""")
demo = subprocess.run([sys.executable, "-c", callback_demo], capture_output=True, text=True)
print(demo.stdout or demo.stderr[-2000:])

# %% [markdown]
# A user's C++ kernel through the XLA FFI, as in JAX's FFI tutorial: the handler is built
# against `jax.ffi.include_dir()`, registered with `platform="workshop"` and called with
# `jax.ffi.ffi_call`. (Compiling `ffi.h` takes a few seconds.)

# %%
import ctypes, os, subprocess, tempfile

RMS_NORM_CC = r"""
#include <cmath>
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;

// Each row of x divided by its root mean square.
ffi::Error RmsNorm(float eps, ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  auto dims = x.dimensions();
  if (dims.size() == 0) return ffi::Error::InvalidArgument("rms_norm needs an array");
  const int64_t n = dims.back();
  for (int64_t r = 0; r < static_cast<int64_t>(x.element_count()); r += n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += x.typed_data()[r + i] * x.typed_data()[r + i];
    const float scale = 1 / std::sqrt(sum / n + eps);
    for (int64_t i = 0; i < n; ++i) y->typed_data()[r + i] = x.typed_data()[r + i] * scale;
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormHandler, RmsNorm,
    ffi::Ffi::Bind().Attr<float>("eps").Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
"""
build_dir = tempfile.mkdtemp()
with open(os.path.join(build_dir, "rms_norm.cc"), "w") as f:
  f.write(RMS_NORM_CC)
subprocess.run(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-I", jax.ffi.include_dir(),
                "rms_norm.cc", "-o", "librms_norm.so"], cwd=build_dir, check=True,
               capture_output=True)
librms = ctypes.CDLL(os.path.join(build_dir, "librms_norm.so"))
jax.ffi.register_ffi_target("rms_norm", jax.ffi.pycapsule(librms.RmsNormHandler),
                            platform="workshop")

def rms_norm(x, eps=1e-5):
  return jax.ffi.ffi_call("rms_norm", jax.ShapeDtypeStruct(x.shape, x.dtype))(
      x, eps=np.float32(eps))

xs = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
normed = np.asarray(jax.jit(rms_norm)(xs))
print(normed)
print("matches numpy:", np.allclose(normed, xs / np.sqrt(np.mean(xs**2, -1, keepdims=True) + 1e-5)))

# %% [markdown]
# The device timeline: with the profiler extension, a `jax.profiler` trace gets one plane
# per workshop device (`/device:CUSTOM:<id>`) with a `Programs` track (each execution) and a
# `Kernels` track (each kernel of the plan, named `<op> @ <source location>`). The events
# below are read back from the trace JAX wrote (durations depend on the machine). To look at
# it, open the `.trace.json.gz` file at https://ui.perfetto.dev ("Open trace file"), or the
# `.xplane.pb` with TensorBoard's profile plugin / XProf.

# %%
# NBVAL_IGNORE_OUTPUT
import glob, gzip, json

trace_dir = tempfile.mkdtemp()
step = jax.jit(lambda a: jnp.tanh(a @ a.T).sum())
square = np.ones((128, 128), np.float32)
step(square).block_until_ready()  # compile outside the trace
with jax.profiler.trace(trace_dir):
  for _ in range(2):
    step(square).block_until_ready()
  rms_norm(xs).block_until_ready()

(trace_file,) = glob.glob(f"{trace_dir}/plugins/profile/*/*.trace.json.gz")
events = json.load(gzip.open(trace_file))["traceEvents"]
device_pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
               and e["args"]["name"].startswith("/device:CUSTOM:")}
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
          if e.get("ph") == "M" and e.get("name") == "thread_name"}
for e in sorted((e for e in events if e.get("ph") == "X" and e["pid"] in device_pids),
                key=lambda e: e["ts"]):
  print(f"{tracks[e['pid'], e['tid']]:9s} {e['dur']:9.1f} us  {e['name'][:90]}")
print("trace file:", trace_file)
