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
# in [docs/design.md](../docs/design.md)):
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
# free coordinator port, each running `python -m jax_plugins.workshop.multiprocess`. Each
# process calls
#
# ```python
# jax.distributed.initialize(coordinator_address="127.0.0.1:PORT",
#                            num_processes=n, process_id=i)
# ```
#
# runs the named *cases* (functions `case_*` in
# [jax_plugins/workshop/multiprocess.py](../jax_plugins/workshop/multiprocess.py); read
# them, they are ordinary JAX code) and reports their values. Each process has 2 devices,
# so 2 processes make 4 global devices. The plugin needs the `distributed` extra (part of
# `.[workshop]`).

# %%
import json
import re

from jax_plugins.workshop import notebook

ROOT = notebook.setup()

import jax_plugins.workshop as workshop
from jax_plugins.workshop import multiprocess

print("MPI library:", "found" if workshop.mpi_library() else "missing: pip install -e '.[distributed]'")

# %% [markdown]
# ## 1. Every process sees every device
#
# One run of 2 processes on each backend, with the cases this notebook looks at.

# %%
CASES = "devices,psum,training_step,kv_store"
runs = {platform: multiprocess.launch(2, platform, CASES, devices=2)
        for platform in ("workshop", "cpu")}
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
# The example of the issue that started this: every device contributes
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
#   does anything else; a different build or `num_devices` stops all of them with a
#   message naming both (tests/test_multiprocess.py starts processes with 2 and 3 devices).
# * `mpi/port`: the MPI port process 0 opened.
# * `mpi/ready/<k>`, `mpi/turn/<k>`: the join protocol, one process at a time: process 0
#   says whose turn it is, the newcomer says it is ready, the members accept it.
#
# The CPU backend uses the same store for gloo's rendezvous; the operands themselves never
# pass through it.
#
# ## 5. When a peer dies
#
# Process 1 of this run exits right after start-up; process 0 then runs a psum. With
# `distributed_timeout:5` (seconds; default 120), process 0 gets an error naming process
# 1 instead of waiting forever.

# %%
dead = multiprocess.launch(2, "workshop", "exit_early", options="distributed_timeout:5")
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
# ## What is left
#
# Measured bandwidth of `psum` between 2 processes, against gloo:
# `python -m jax_plugins.workshop.bench.allreduce` (numbers in docs/design.md: several
# times faster up to 1 MiB per device, even at 4 MiB). Every process sends to every other
# process of a launch; for many processes a ring would send less.
