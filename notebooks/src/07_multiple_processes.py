# %% [markdown]
# # 07 · Multiple processes: `jax.distributed` with workshop devices in every process
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/07_multiple_processes.ipynb)
#
# **Concept: with several processes, each process's PJRT client owns only its own devices
# but must describe all of them, and its collectives must reach the other processes.**
# Accelerators run on many hosts: one Python process per host, all running the same
# program. `jax.distributed.initialize(...)` connects them through a *coordination
# service* (process 0 runs it) that also offers a key-value store. JAX then passes three
# things to every plugin's `PJRT_Client_Create`: the create options `node_id` (this
# process) and `num_nodes`, and callbacks to get and put keys in that store.
#
# What the workshop plugin does with them
# ([plugin_src/runtime/distributed.h](../plugin_src/runtime/distributed.h) and "Multi-process"
# in [docs/multiprocess.md](../docs/multiprocess.md)):
#
# 1. each process puts its description (plugin build, device count) in the store and
#    checks everyone else's, so mismatched processes fail at start-up;
# 2. the processes connect through **MPI** (the `mpich` wheel's `libmpi`, loaded only when
#    `num_nodes > 1`): process 0 opens an MPI port and publishes its name in the store, the
#    others connect to it in turn;
# 3. the client lists every process's devices (`jax.devices()`), with the process each
#    belongs to, and only its own as addressable (`jax.local_devices()`);
# 4. a collective meets the local devices as in one process, then one device thread per
#    process exchanges the operands with the other processes over MPI.
#
# This notebook starts 2 processes on this machine from a cell, as you would on two hosts,
# and compares everything with JAX's CPU backend run the same way (its collectives use
# gloo).

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
# This notebook's own process runs no JAX program: it only starts others. The helper
# `multiprocess.launch(n, platform, cases)` starts `n` Python processes on 127.0.0.1 with a
# free coordinator port, each running `python -m jax_plugins.workshop.extensions.multiprocess`. Each
# process calls
#
# ```python
# jax.distributed.initialize(coordinator_address="127.0.0.1:PORT",
#                            num_processes=n, process_id=i)
# ```
#
# runs the named *cases* (functions `case_*` in
# [jax_plugins/workshop/extensions/multiprocess.py](../jax_plugins/workshop/extensions/multiprocess.py); read
# them, they are ordinary JAX code) and reports their values. Each process has 2 devices,
# so 2 processes make 4 global devices. The plugin needs the `distributed` extra (part of
# `.[workshop]`).

# %%
import json
import re

from jax_plugins.workshop.teach import notebook

ROOT = notebook.setup()

import jax_plugins.workshop as workshop
from jax_plugins.workshop.extensions import multiprocess

print("MPI library:", "found" if workshop.mpi_library() else "missing: pip install -e '.[distributed]'")

# %% [markdown]
# ## 1. Every process sees every device
#
# One run of 2 processes on each backend, with the cases this notebook looks at (the
# key-value store's on workshop only: the CPU backend's processes put no plugin keys
# there). Each run takes several seconds, most of it importing JAX; `progress=True` prints
# each process's steps as they happen.

# %%
# NBVAL_IGNORE_OUTPUT
CASES = {"workshop": "devices,psum,training_step,kv_store", "cpu": "devices,psum,training_step"}
runs = {platform: multiprocess.launch(2, platform, cases, devices=2, progress=True)
        for platform, cases in CASES.items()}

# %%
for platform, results in runs.items():
  for i, r in enumerate(results):
    assert "output" not in r, f"{platform} process {i} failed:\n{r}"
print("both runs finished")

# %% [markdown]
# Each process reports `jax.process_index()`, the global device count and the process
# each global device belongs to. Both processes see the same 4 devices; the first two are
# process 0's, the last two process 1's, on both backends. (Device *ids* differ: the CPU
# backend numbers process `p`'s devices from `p * 2048`, ours from `p * 2`.)

# %%
for platform, results in runs.items():
  for r in results:
    d = r["devices"]
    print(f"{platform:8} process {d['process_index']} of {d['process_count']}: "
          f"{d['device_count']} devices, owned by processes {d['process_of_devices']}, "
          f"{d['local_device_count']} local")

# %% [markdown]
# ## 2. A psum across processes
#
# The first thing to try across processes: every device contributes
# `process_index + 1`, and `jax.pmap(lambda x: jax.lax.psum(x, "i"))` sums over all 4
# devices of both processes: 1 + 1 + 2 + 2 = 6 on each device.

# %%
for platform, results in runs.items():
  print(platform, [r["psum"] for r in results])

# %% [markdown]
# Inside the plugin: on each process, the 2 local devices meet in the launch's rendezvous
# as in notebook 04; the first of them folds the two local operands into one partial sum,
# sends it to the other process with `MPI_Isend` and receives the other process's partial
# with `MPI_Irecv`; both processes add the partials in process order (process 0's first),
# so every device, in every process, gets the same bits. Other collectives (all_gather,
# ppermute, ...) send the local operands themselves.
#
# ## 3. A data-parallel training step
#
# `case_training_step` shards a batch over all 4 devices: each process supplies its own
# rows with `jax.make_array_from_process_local_data`, the parameters are replicated, and
# one `jax.jit` computes the mean squared error and a gradient step. The compiler
# partitions the global program (notebook 04) into per-device code whose gradient sum is
# an `all_reduce` across processes.

# %%
for platform, results in runs.items():
  print(f"{platform:8} loss {results[0]['training_step']['loss']:.6f}  "
        f"w[0] {[round(v, 6) for v in results[0]['training_step']['w'][0]]}")

# %% [markdown]
# ## 4. What passed through the key-value store
#
# `case_kv_store` reads the plugin's keys back through JAX's own client of the store.
# jaxlib prefixes a plugin's keys with its platform name (`workshop:`). The MPI port name
# holds an address of process 0, different in every run, so it is masked here, and so is
# the op table's fingerprint (it changes with every op added to the plugin).

# %%
for key, value in runs["workshop"][0]["kv_store"].items():
  value = re.sub(r"connentry#[0-9A-F]+", "connentry#…", value)
  value = re.sub(r"op table [0-9a-f]+", "op table …", value)
  print(f"{key:32} {value}")

# %% [markdown]
# * `process/<i>`: process i's description. Each process reads every other one before it
#   does anything else; a different plugin build or `num_devices` stops all of them at
#   client creation with a message saying which differs and naming both processes
#   (tests/runtime/test_multiprocess.py starts processes with 2 and 3 devices, and processes of
#   "different versions" through a test hook).
# * `mpi/port`: the MPI port process 0 opened.
# * `mpi/ready/<k>`: the join protocol, one process at a time: newcomer k says it is
#   ready, and the processes already joined accept it. With more than 2 processes, process
#   0 also writes `mpi/turn/<k>` once process k - 1 has joined, and newcomer k waits for
#   it (`plugin_src/runtime/distributed.cc`); with the 2 processes here there is one
#   newcomer, process 1, so the store holds `mpi/ready/1` and no `turn` key.
#
# The CPU backend uses the same store for gloo's rendezvous; the operands themselves never
# pass through it.
#
# ## 5. When a peer dies
#
# Process 1 of this run exits right after start-up; process 0 then runs a psum. With
# `distributed_timeout:5` (seconds; default 120), process 0 gets an error naming process
# 1 instead of waiting forever: the steps show process 1 gone and, about 5 s later, the
# psum failing.

# %%
# NBVAL_IGNORE_OUTPUT
dead = multiprocess.launch(2, "workshop", "exit_early", options="distributed_timeout:5",
                           progress=True)

# %%
message = dead[0]["exit_early"]["error"]
print(re.sub(r" at \S+multiprocess.py:\d+:\d+", " at …", message))

# %% [markdown]
# ## Check
#
# The workshop processes computed what the CPU backend's did.

# %%
def check_multiple_processes():
  import numpy as np

  w, c = runs["workshop"], runs["cpu"]
  for i in range(2):
    assert w[i]["devices"] == c[i]["devices"], (w[i]["devices"], c[i]["devices"])
    assert w[i]["psum"] == c[i]["psum"] == [6.0, 6.0], (w[i]["psum"], c[i]["psum"])
    np.testing.assert_allclose(w[i]["training_step"]["w"], c[i]["training_step"]["w"],
                               rtol=1e-5)
  assert "process(es) 1" in message, message
  print("the workshop processes agree with the CPU backend's")


check_multiple_processes()

# %% [markdown]
# ## 6. Exercise: average the gradients of a data-parallel step
#
# Section 3's training step left the distribution to the compiler. Here you write the one
# line that makes data parallelism work. `case_data_parallel_step` (in
# [multiprocess.py](../jax_plugins/workshop/extensions/multiprocess.py)) runs one SGD step per device
# with `jax.shard_map` over a 2 x 2 mesh: axis `"proc"` has one entry per process, axis
# `"local"` the 2 devices of each. The 8 rows of the batch are split 2 per device; every
# device holds a copy of the weights `w` (4 x 3) and computes the gradient of the mean
# squared error on *its own* rows. Then it calls
#
# ```python
# def average_gradients(grads):   # your code: the lines between the exercise markers
#     ...
# ```
#
# which must return the gradient of the whole batch, of the shape it was given (4 x 3),
# the same on every device of every process, so that all 4 copies of `w` stay equal. Your
# lines are the body of the function: `grads` is its argument, and `jax` and `jnp`
# (`jax.numpy`) are imported above them; the collectives are in `jax.lax`. The process
# axis is a mesh axis like any other: a collective over it is the one that crosses
# processes (over MPI, inside the plugin). The shard_map is written with
# `check_vma=False`, the textbook per-device semantics; with the check on, JAX's autodiff
# would already sum the gradient of the replicated `w` over the devices.
#
# The exercise is named `average_gradients`. In the reader's version of the notebooks the
# next cell starts from `notebooks/exercises/average_gradients.py`, which returns `grads`
# unchanged; in `notebooks/` it holds the worked solution. To start over:
# `notebook.reset_exercise("average_gradients")` writes the starting point back into the
# file, and `print(notebook.starting_point("average_gradients"))` shows it, to paste into
# the cell; `git checkout -- jax_plugins/workshop/extensions/multiprocess.py` brings the solution
# back. Nothing to rebuild: it is Python, and each run starts new processes, which import
# the file as it is on disk.

# %% exercise="average_gradients" tags=["solution"]
notebook.write_source("jax_plugins/workshop/extensions/multiprocess.py#average_gradients", r'''
return jax.lax.pmean(grads, ("proc", "local"))
''')

# %% [markdown]
# Run the step in 2 processes. Each reports its devices' new weights; here is the first
# row of each device's copy.

# %% exercise="average_gradients" tags=["exercise_setup"]
import numpy as np

from jax_plugins.workshop.extensions import multiprocess

steps = multiprocess.launch(2, "workshop", "data_parallel_step", devices=2, root=ROOT)
for i, r in enumerate(steps):
  result = r.get("data_parallel_step", r)
  if "error" in result or "output" in result:
    print(f"process {i} failed (the check below says how)")
    continue
  for device, w in result.items():
    w = np.asarray(w)
    if w.shape == (4, 3):
      print(f"process {i}, device {device}: w[0] = {np.round(w[0], 4).tolist()}")
    else:  # the check below says what went wrong
      print(f"process {i}, device {device}: weights of shape {w.shape}, not (4, 3)")

# %% [markdown]
# The check computes the step on the whole batch with numpy, in this process, and
# compares every device's weights with it. When they differ, the pattern says what went
# wrong: devices of one process that disagree, processes that disagree, or a step of the
# wrong size.

# %% exercise="average_gradients"
def check_average_gradients():
  """Fails saying what is wrong unless every device of both processes took the step of the
  whole batch, computed here with numpy."""
  import numpy as np
  from jax_plugins.workshop.extensions import multiprocess

  for i, r in enumerate(steps):
    if "output" in r:
      raise AssertionError(f"process {i} did not finish:\n{r['output'][-1500:]}")
    if "error" in r["data_parallel_step"]:
      error = r["data_parallel_step"]["error"]
      hint = ("\nThe mesh axes are 'proc' and 'local'." if "unbound axis name" in error
              else "\naverage_gradients must return a gradient of the shape it was given, "
              "(4, 3), that of w." if "incompatible shapes" in error else "")
      raise AssertionError(f"the step failed in process {i}: {error[:1000]}{hint}")
  by_device = {int(d): np.asarray(w) for r in steps
               for d, w in r["data_parallel_step"].items()}
  w, x, y = (a.astype(np.float64)
             for a in multiprocess.data_parallel_problem(len(by_device)))
  # The new weights are w - 0.1 * average_gradients(grad): of w's shape only if the
  # gradient returned has the shape of the one given (that of w, 4 x 3).
  shapes = sorted({by_device[d].shape for d in by_device})
  if shapes != [w.shape]:
    raise AssertionError(
        f"the devices' new weights have shape {' and '.join(map(str, shapes))}, not that of "
        f"w, {w.shape}: average_gradients returned a gradient of shape {shapes[-1]} (or one "
        f"that broadcasts with w to it), where it must return the shape it was given, "
        f"{w.shape}. A gather (all_gather) stacks the devices' gradients along a new axis; "
        f"an average (pmean) keeps the shape")
  got = np.array([by_device[d] for d in sorted(by_device)])  # device 2 * proc + local
  grad = 2 * x.T @ (x @ w - y) / y.size  # the gradient of mean((x @ w - y) ** 2)
  close = lambda a, b: np.allclose(a, b, rtol=1e-5, atol=1e-6)
  same_in_process = all(close(got[2 * p], got[2 * p + 1]) for p in (0, 1))
  same_across = all(close(got[l], got[2 + l]) for l in (0, 1))
  if not same_in_process and not same_across:
    raise AssertionError(
        "all 4 devices ended with different weights, so the gradient returned was not the "
        "same on every device (returning grads unchanged, for one, leaves each device with "
        "the gradient of its own 2 rows). Average the gradients over every device of every "
        "process, that is over both mesh axes at once (jax.lax.pmean takes a tuple of axis "
        "names)")
  if not same_in_process:
    raise AssertionError(
        "the processes agree with each other, but the 2 devices of each process do not: "
        "the average went across processes only (axis \"proc\"). Include the process's own "
        "devices too (axis \"local\")")
  if not same_across:
    raise AssertionError(
        "the devices of each process agree, but process 0 and process 1 do not: the "
        "average stayed inside each process (axis \"local\"). The other process's "
        "gradients arrive only through the \"proc\" axis: average over both")
  if close(got[0], w - 0.1 * 4 * grad):
    raise AssertionError(
        "every device took a step 4 times too large: the gradients were summed (psum), "
        "not averaged. Use jax.lax.pmean, or divide the sum by the device count")
  if not close(got[0], w - 0.1 * grad):
    worst = np.abs(got[0] - (w - 0.1 * grad)).max()
    raise AssertionError(
        f"every device agrees, but their weights differ from the step on the whole batch "
        f"(numpy) by up to {worst:.3g}: return the mean of the devices' gradients")
  print("all 4 devices of both processes took the step of the whole batch (numpy's)")

check_average_gradients()

# %% [markdown]
# ## What is left
#
# Measured bandwidth of `psum` between 2 processes, against gloo:
# `python -m jax_plugins.workshop.bench.allreduce` (numbers in docs/multiprocess.md: several
# times faster up to 1 MiB per device, even at 4 MiB). Every process sends to every other
# process of a launch; for many processes a ring would send less.
