"""Several processes on one machine, as jax.distributed runs them (docs/multiprocess.md, "Multi-process").

``launch(n, platform, cases)`` starts n Python processes on 127.0.0.1, each running this
module as a script, and returns what each reported. A process initializes
jax.distributed, runs the named cases (the ``case_*`` functions below) and prints one line
``RESULT <json>`` with {case: value}; arrays become nested lists (float64). Every case runs
the same program on both platforms and its values depend only on the process index and
the global device count, so a ``workshop`` run and a ``cpu`` run (JAX's CPU backend with
gloo collectives, the reference) compare number by number. tests/runtime/test_multiprocess.py,
notebook 07 and the all-reduce bandwidth bench (``bench/allreduce.py``) use it.

As a script: ``python -m jax_plugins.workshop.extensions.multiprocess PLATFORM PROCESS_ID
NUM_PROCESSES PORT DEVICES CASES`` (CASES comma-separated, or "all").
"""

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def free_port():
  """A TCP port on 127.0.0.1 that nobody listens on now (for the coordinator)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def launch(
  num_processes,
  platform,
  cases="all",
  devices=2,
  timeout=180,
  options=None,
  env=None,
  root=None,
  keep_log=False,
  progress=False,
):
  """Runs `cases` in `num_processes` new processes and returns one entry per process: its
  results dict, or {"returncode": ..., "output": ...} for one that reported none.

  Each process has `devices` devices (or devices[i] for process i). `options`: extra
  client create options for workshop ("name:value;..."); `env`: extra environment
  variables, for every process (a dict) or per process (a list of dicts). Processes
  still running `timeout` seconds after the start are killed (their output says so).
  `root`: the checkout whose jax_plugins the processes import (default: this module's;
  tests/notebooks/test_exercises.py runs notebook 07's check in a copy holding the exercise's
  starting point). `keep_log`: a process's results also hold "_log", the rest of its
  output (stdout and stderr). `progress`: print each process's steps as they happen
  (initialized, each case done, exited), with the seconds since the start, for a
  notebook cell that would otherwise be silent for its whole run.
  """
  environment = dict(os.environ, **(env if isinstance(env, dict) else {}))
  environment["PYTHONPATH"] = os.pathsep.join(
    [str(root or ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
  )
  environment.pop("JAX_PLATFORMS", None)
  environment.pop("XLA_FLAGS", None)
  if options:
    environment["WORKSHOP_MULTIPROCESS_OPTIONS"] = options
  if progress:
    environment["WORKSHOP_MULTIPROCESS_PROGRESS"] = "1"
  port = free_port()
  names = cases if isinstance(cases, str) else ",".join(cases)
  start = time.monotonic()

  def say(text):
    if progress:
      print(f"[{time.monotonic() - start:5.1f} s] {platform} {text}", flush=True)

  say(f"starting {num_processes} processes (coordinator 127.0.0.1:{port}, cases {names})")
  procs = [
    subprocess.Popen(
      [
        sys.executable,
        "-m",
        "jax_plugins.workshop.extensions.multiprocess",
        platform,
        str(i),
        str(num_processes),
        str(port),
        str(devices[i] if isinstance(devices, (list, tuple)) else devices),
        names,
      ],
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
      env=dict(environment, **(env[i] if isinstance(env, (list, tuple)) else {})),
    )
    for i in range(num_processes)
  ]
  # One reader thread per process, so that no pipe fills while another process is waited
  # for; the lines reach this thread through a queue (a notebook shows only what the
  # cell's own thread prints).
  lines = queue.Queue()

  def read(i, proc):
    for line in proc.stdout:
      lines.put((i, line))
    lines.put((i, None))

  for i, proc in enumerate(procs):
    threading.Thread(target=read, args=(i, proc), daemon=True).start()
  outputs = [[] for _ in procs]
  open_pipes, killed = len(procs), set()
  deadline = start + timeout
  while open_pipes:
    try:
      i, line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
    except queue.Empty:
      if killed or all(proc.poll() is not None for proc in procs):
        break  # a pipe held open after its process ended (by a child of it)
      # The deadline passed: kill whoever is still running, read what is left.
      for j, proc in enumerate(procs):
        if proc.poll() is None:
          proc.kill()
          killed.add(j)
      deadline = time.monotonic() + 10
      continue
    if line is None:
      open_pipes -= 1
      say(f"process {i}: exited with code {procs[i].wait()}")
    elif line.startswith("STEP "):
      say(f"process {i}: {line[len('STEP ') :].rstrip()}")
    else:
      outputs[i].append(line)
  results = []
  for i, proc in enumerate(procs):
    proc.wait()
    output = "".join(outputs[i])
    if i in killed:
      output = f"killed after {timeout} s\n{output}"
    found = [line for line in output.splitlines() if line.startswith("RESULT ")]
    if found:
      results.append(json.loads(found[-1][len("RESULT ") :]))
      if keep_log:
        results[-1]["_log"] = "".join(
          line for line in output.splitlines(keepends=True) if not line.startswith("RESULT ")
        )
    else:
      results.append({"returncode": proc.returncode, "output": output[-4000:]})
  return results


# ---- The cases: each returns JSON-able values (lists of float64 for arrays).


def _local_rows(width):
  """This process's pmap input: one row per local device, distinct across processes."""
  import jax

  local, me = jax.local_device_count(), jax.process_index()
  return np.arange(local * width, dtype=np.float32).reshape(local, width) + 100 * me + 1


def _pmapped(fn, x):
  import jax

  return np.asarray(jax.pmap(fn, axis_name="i")(x), dtype=np.float64).tolist()


def case_devices():
  """What every process sees: process index/count, global and local devices."""
  import jax

  me = jax.process_index()
  return {
    "process_index": me,
    "process_count": jax.process_count(),
    "device_count": jax.device_count(),
    "local_device_count": jax.local_device_count(),
    "process_of_devices": [d.process_index for d in jax.devices()],
    "local_are_mine": all(d.process_index == me for d in jax.local_devices()),
  }


def case_psum():
  """The issue's example: each process contributes process_index + 1 on every device."""
  import jax

  x = np.full((jax.local_device_count(),), jax.process_index() + 1.0, np.float32)
  return _pmapped(lambda v: jax.lax.psum(v, "i"), x)


def case_collectives():
  """Every collective JAX's pmap emits, over all devices of all processes."""
  import jax

  n = jax.device_count()
  x = _local_rows(2 * n)
  ring = [(j, (j + 1) % n) for j in range(n)]
  return {
    "psum": _pmapped(lambda v: jax.lax.psum(v, "i"), x),
    "pmax": _pmapped(lambda v: jax.lax.pmax(v, "i"), x),
    "pmin": _pmapped(lambda v: jax.lax.pmin(v, "i"), x),
    "psum_int": _pmapped(lambda v: jax.lax.psum(v, "i"), x.astype(np.int32)),
    "all_gather": _pmapped(lambda v: jax.lax.all_gather(v, "i"), x),
    "psum_scatter": _pmapped(lambda v: jax.lax.psum_scatter(v, "i", tiled=True), x),
    "all_to_all": _pmapped(lambda v: jax.lax.all_to_all(v.reshape(n, 2), "i", 0, 0), x),
    "ppermute": _pmapped(lambda v: jax.lax.ppermute(v, "i", ring), x),
    "axis_index": _pmapped(lambda v: v * 0 + jax.lax.axis_index("i"), x),
  }


def _broadcast(v, axis, source):
  """jax.lax.pbroadcast on workshop (StableHLO collective_broadcast). XLA:CPU cannot run
  collective-broadcast, so the CPU reference computes what pbroadcast's docstring defines
  it as: a psum of the source's value and zeros (exact: one term is nonzero)."""
  import jax
  import jax.numpy as jnp

  if jax.default_backend() == "workshop":
    return jax.lax.pbroadcast(v, axis, source)
  return jax.lax.psum(jnp.where(jax.lax.axis_index(axis) == source, v, 0), axis)


def case_collective_broadcast():
  """collective_broadcast over every device (pmap, from the first and the last device, so
  each process is the source once), and on a (process, local device) mesh over "proc"
  (groups across processes) and "local" (groups within each)."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  n = jax.device_count()
  x = _local_rows(3)
  out = {
    f"pmap_from_{source}": _pmapped(lambda v: _broadcast(v, "i", source), x)
    for source in (0, n - 1)
  }
  mesh = Mesh(np.array(jax.devices()).reshape(jax.process_count(), -1), ("proc", "local"))
  spec = P(("proc", "local"))
  xs = jax.make_array_from_process_local_data(NamedSharding(mesh, spec), x)

  def body(v):
    # Axis names as tuples: shard_map's check of a bare name iterates its letters
    # ("unbound axis name: p", jax 0.10.2).
    return jnp.concatenate(
      [_broadcast(v, ("proc",), jax.process_count() - 1), _broadcast(v, ("local",), 0)], axis=1
    )

  f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
  shards = sorted(f(xs).addressable_shards, key=lambda s: s.device.id)
  out["shard_map"] = [np.asarray(s.data, np.float64).tolist() for s in shards]
  return out


def _global_mesh():
  import jax
  from jax.sharding import Mesh

  return Mesh(np.array(jax.devices()), ("data",))


def case_training_step():
  """A data-parallel step of a linear model: the batch sharded over every process's devices
  (make_array_from_process_local_data), parameters replicated, jit partitions."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import NamedSharding, PartitionSpec as P

  mesh = _global_mesh()
  rng = np.random.default_rng(0)
  w = rng.standard_normal((4, 3)).astype(np.float32)
  per_process = 2 * jax.local_device_count()
  xs = rng.standard_normal((per_process * jax.process_count(), 4)).astype(np.float32)
  ys = rng.standard_normal((per_process * jax.process_count(), 3)).astype(np.float32)
  mine = slice(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)
  batch = NamedSharding(mesh, P("data"))
  x = jax.make_array_from_process_local_data(batch, xs[mine])
  y = jax.make_array_from_process_local_data(batch, ys[mine])
  w = jax.device_put(w, NamedSharding(mesh, P()))

  @jax.jit
  def step(w, x, y):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return loss, w - 0.1 * grad

  loss, new_w = step(w, x, y)
  return {"loss": float(loss), "w": np.asarray(new_w, np.float64).tolist()}


def case_shard_map():
  """shard_map over the global mesh: a psum across processes inside a jit."""
  import jax
  from jax.sharding import NamedSharding, PartitionSpec as P

  mesh = _global_mesh()
  x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), _local_rows(3))
  f = jax.jit(
    jax.shard_map(lambda v: jax.lax.psum(v, "data"), mesh=mesh, in_specs=P("data"), out_specs=P())
  )
  return np.asarray(f(x), np.float64).tolist()


def case_grouped_collectives():
  """Collectives over one axis of a (process, local device) mesh: groups across processes
  ("proc") and groups within each process ("local"), in one shard_map."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  mesh = Mesh(np.array(jax.devices()).reshape(jax.process_count(), -1), ("proc", "local"))
  spec = P(("proc", "local"))
  x = jax.make_array_from_process_local_data(NamedSharding(mesh, spec), _local_rows(4))

  def body(v):
    return jnp.concatenate(
      [
        jax.lax.psum(v, "proc"),
        jax.lax.psum(v, "local"),
        jax.lax.pmax(v, "proc"),
        jax.lax.pmin(v, "local"),
        jax.lax.psum(v, ("proc", "local")),
      ],
      axis=1,
    )

  f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
  shards = sorted(f(x).addressable_shards, key=lambda s: s.device.id)
  return [np.asarray(s.data, np.float64).tolist() for s in shards]


def case_multihost():
  """jax.experimental.multihost_utils over the processes."""
  import jax
  from jax.experimental import multihost_utils

  me = jax.process_index()
  gathered = multihost_utils.process_allgather(np.full((2,), me, np.float32))
  broadcast = multihost_utils.broadcast_one_to_all(np.full((3,), me + 7.0, np.float32))
  multihost_utils.sync_global_devices("workshop multiprocess")
  return {
    "process_allgather": np.asarray(gathered, np.float64).tolist(),
    "broadcast_one_to_all": np.asarray(broadcast, np.float64).tolist(),
  }


# ---- Notebook 07's exercise: the gradient average of a data-parallel step.


def average_gradients(grads):
  """The data-parallel step's gradient sync (case_data_parallel_step), run inside
  shard_map over the mesh axes ("proc", "local"): one process per "proc" index, its
  devices along "local".

  Args:
    grads: this device's gradient of the loss on its own rows of the batch (the weights'
      gradient, float32 4x3; any pytree of arrays works).
  Returns:
    The gradient of the loss on the whole batch, the same on every device of every
    process (equal-size shards: the mean of the devices' gradients).
  """
  import jax
  import jax.numpy as jnp  # noqa: F401 (for the exercise's answer)

  # exercise average_gradients: begin
  return jax.lax.pmean(grads, ("proc", "local"))
  # exercise average_gradients: end


def data_parallel_problem(num_devices, rows_per_device=2):
  """The data of case_data_parallel_step: (w float32 4x3, x float32 Nx4, y float32 Nx3)
  with N = num_devices * rows_per_device; device d holds rows [d*rows, (d+1)*rows)."""
  rng = np.random.default_rng(7)
  n = num_devices * rows_per_device
  return (
    rng.standard_normal((4, 3)).astype(np.float32),
    rng.standard_normal((n, 4)).astype(np.float32),
    rng.standard_normal((n, 3)).astype(np.float32),
  )


def case_data_parallel_step():
  """One SGD step (learning rate 0.1) of a linear model with mean squared error, written per
  device with shard_map: each device differentiates the loss on its rows of the batch,
  average_gradients combines the gradients, each device updates its copy of the weights.
  Returns {global device index: that device's new weights} for this process's devices."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

  mesh = Mesh(np.array(jax.devices()).reshape(jax.process_count(), -1), ("proc", "local"))
  w, xs, ys = data_parallel_problem(jax.device_count())
  per_process = len(xs) // jax.process_count()
  mine = slice(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)
  rows = NamedSharding(mesh, P(("proc", "local")))
  x = jax.make_array_from_process_local_data(rows, xs[mine])
  y = jax.make_array_from_process_local_data(rows, ys[mine])

  def step(w, x, y):
    grad = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return (w - 0.1 * average_gradients(grad))[None]  # one copy per device

  # check_vma=False: a device's gradient is that of its own rows only, the textbook
  # data-parallel step. With the check on, JAX's AD sums the gradient of the replicated
  # `w` over the devices by itself (the transpose of its implicit pvary is a psum).
  f = jax.jit(
    jax.shard_map(
      step,
      mesh=mesh,
      in_specs=(P(), P(("proc", "local")), P(("proc", "local"))),
      out_specs=P(("proc", "local")),
      check_vma=False,
    )
  )
  index = {d: i for i, d in enumerate(jax.devices())}
  return {
    str(index[s.device]): np.asarray(s.data[0], np.float64).tolist()
    for s in f(w, x, y).addressable_shards
  }


def case_recreated_client():
  """A psum, then JAX's clients dropped (jax.extend.backend.clear_backends) and created
  again in every process, then the psum again: the second client joins the others as
  the first did."""
  import gc

  import jax
  from jax.extend import backend

  first = case_psum()
  backend.clear_backends()
  gc.collect()
  return {"first": first, "again": case_psum(), "devices": jax.device_count()}


def case_kv_store():
  """What the plugin put in jax.distributed's key-value store while the clients started,
  read back through JAX's own client: {key: value}. jaxlib prefixes a plugin's keys with
  its platform name and ":"."""
  import jax
  from jax._src import distributed

  jax.devices()  # Creates the client, which fills the store.
  client = distributed.global_state.client
  keys = [f"workshop/process/{i}" for i in range(jax.process_count())]
  keys += ["workshop/mpi/port"]
  keys += [
    f"workshop/mpi/{what}/{k}"
    for k in range(1, jax.process_count())
    for what in ("turn", "ready")
    if what == "ready" or k > 1
  ]
  return {f"workshop:{key}": client.blocking_key_value_get(f"workshop:{key}", 5000) for key in keys}


def case_allreduce_bandwidth():
  """psum bandwidth: seconds per all-reduce of one f32 array per device, by size (bytes
  per device), median of repeats after a warm-up. Bus bandwidth is the caller's."""
  import jax

  out = {}
  for size in (1 << 12, 1 << 16, 1 << 20, 1 << 22):
    f = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")
    # The first call's output is already on the devices: later calls move no host data.
    x = f(np.full((jax.local_device_count(), size // 4), 1e-3, np.float32))
    f(x).block_until_ready()
    times = []
    for _ in range(7 if size < (1 << 22) else 5):
      start = time.perf_counter()
      f(x).block_until_ready()
      times.append(time.perf_counter() - start)
    out[str(size)] = float(np.median(times))
  return out


def case_exit_early():
  """Process 1 exits without a word after start-up; the others then try a psum (the dead
  peer case: they must fail within the timeout, naming process 1)."""
  import jax

  if jax.process_index() == 1:
    os._exit(0)
  time.sleep(0.5)
  return case_psum()


CASES = {
  name[len("case_") :]: fn for name, fn in dict(globals()).items() if name.startswith("case_")
}


def _main():
  platform, process_id, num_processes, port, devices, cases = sys.argv[1:7]
  start = time.monotonic()

  def step(text):  # launch(progress=True) prints these as they come
    if os.environ.get("WORKSHOP_MULTIPROCESS_PROGRESS") == "1":
      print(f"STEP {text} ({time.monotonic() - start:.1f} s in this process)", flush=True)

  step("started, importing jax")
  os.environ["JAX_PLATFORMS"] = platform
  if platform == "cpu":
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  import jax

  if platform == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  else:
    options = f"num_devices:{devices}"
    if os.environ.get("WORKSHOP_MULTIPROCESS_OPTIONS"):
      options += ";" + os.environ["WORKSHOP_MULTIPROCESS_OPTIONS"]
    jax.config.update("jax_pjrt_client_create_options", options)
  jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}",
    num_processes=int(num_processes),
    process_id=int(process_id),
    initialization_timeout=60,
  )
  step("jax.distributed initialized")
  results = {}
  for name in list(CASES) if cases == "all" else cases.split(","):
    if cases == "all" and name in (
      "allreduce_bandwidth",
      "exit_early",
      "kv_store",
      "recreated_client",
    ):
      continue
    try:
      results[name] = CASES[name]()
      step(f"case {name} done")
    except Exception as e:  # noqa: BLE001  (reported; the caller names it)
      results[name] = {"error": f"{type(e).__name__}: {e}"[:3000]}
      step(f"case {name} failed: {type(e).__name__}")
  print("RESULT " + json.dumps(results), flush=True)
  if "exit_early" in cases:
    os._exit(0)  # jax.distributed.shutdown's barrier would wait for the dead peer.
  # No jax.distributed.shutdown() here: JAX's exit hook calls it after the plugin's has
  # destroyed the PJRT client (jax_plugins/workshop/__init__.py); called now, it would
  # pull the coordination service from under the client's watcher thread, which logs
  # "WatchTasksAsync failed".


if __name__ == "__main__":
  _main()
