"""jax.profiler traces show the workshop devices' timelines (PJRT profiler extension).

The trace JAX writes (trace.json.gz, Chrome trace format) must hold, per device, a
"Programs" track with one event per execution and a "Kernels" track with one event per
executed kernel, named "<op> @ <location>" so a reader can find the StableHLO op.
"""

import collections
import glob
import gzip
import json
import os

import jax
import jax.numpy as jnp
import numpy as np


def device_events(trace_dir):
  (path,) = glob.glob(os.path.join(trace_dir, "plugins", "profile", "*", "*.trace.json.gz"))
  with gzip.open(path) as f:
    events = json.load(f)["traceEvents"]
  processes = {
    e["pid"]: e["args"]["name"]
    for e in events
    if e.get("ph") == "M" and e.get("name") == "process_name"
  }
  threads = {
    (e["pid"], e["tid"]): e["args"]["name"]
    for e in events
    if e.get("ph") == "M" and e.get("name") == "thread_name"
  }
  counts = collections.Counter()
  for e in events:
    process = processes.get(e.get("pid"), "")
    if e.get("ph") == "X" and process.startswith("/device:CUSTOM:"):
      counts[process, threads.get((e["pid"], e.get("tid"))), e["name"]] += 1
  return counts


def test_one_event_per_program_and_kernel(tmp_path):
  f = jax.jit(lambda x, y: jnp.sin(x) @ y)
  x = np.ones((32, 32), np.float32)
  f(x, x).block_until_ready()  # Compiled outside the trace.
  with jax.profiler.trace(str(tmp_path)):
    for _ in range(3):
      f(x, x).block_until_ready()
  counts = device_events(tmp_path)
  programs = {k: n for k, n in counts.items() if k[1] == "Programs"}
  kernels = {k: n for k, n in counts.items() if k[1] == "Kernels"}
  assert programs == {("/device:CUSTOM:0", "Programs", "jit__lambda"): 3}
  names = sorted(k[2].split(" @ ")[0] for k in kernels)
  assert names == ["dot_general", "sine"]
  assert set(kernels.values()) == {3}
  assert all("test_profiler.py" in k[2] for k in kernels)  # The op's source location.


def test_each_device_has_its_timeline(tmp_path):
  g = jax.pmap(lambda v: v * 2 + 1, devices=jax.devices("workshop"))
  x = np.ones((4, 8), np.float32)
  g(x).block_until_ready()
  with jax.profiler.trace(str(tmp_path)):
    g(x).block_until_ready()
  counts = device_events(tmp_path)
  planes = {k[0] for k in counts}
  assert planes == {f"/device:CUSTOM:{i}" for i in range(4)}
  for plane in planes:
    assert sum(n for k, n in counts.items() if k[0] == plane and k[1] == "Programs") == 1
    assert sum(n for k, n in counts.items() if k[0] == plane and k[1] == "Kernels") >= 1


def test_nothing_is_recorded_outside_a_trace(tmp_path):
  f = jax.jit(lambda v: v + 1)
  f(np.ones(3)).block_until_ready()
  with jax.profiler.trace(str(tmp_path)):
    pass
  f(np.ones(3)).block_until_ready()
  assert device_events(tmp_path) == collections.Counter()
