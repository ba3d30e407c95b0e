"""jax.distributed with workshop devices in every process (docs/multiprocess.md).

Each test starts N processes on 127.0.0.1 (jax_plugins.workshop.extensions.multiprocess.launch; every
process stops by itself, and is killed after the timeout) and compares what the workshop
processes compute with the same cases run by JAX's CPU backend as the same number of
processes with gloo collectives. The tests that need MPI are skipped, saying why, when
the `distributed` extra (the mpich wheel) is not installed; `.[workshop]` includes it.
"""

import re
from pathlib import Path

import numpy as np
import pytest

import jax_plugins.workshop as workshop
from jax_plugins.workshop.extensions import multiprocess

ROOT = Path(__file__).resolve().parents[2]

needs_mpi = pytest.mark.skipif(
  workshop.mpi_library() is None,
  reason="the distributed extra is not installed (pip install -e '.[distributed]' brings "
  "the mpich wheel, whose libmpi the plugin loads for several processes)",
)

# Every case except the ones that time (bench) or kill a process.
CASES = (
  "devices,psum,collectives,grouped_collectives,collective_broadcast,shard_map,"
  "training_step,multihost"
)


def assert_same(got, want, where):
  """Structures equal, numbers within float32 rounding (the CPU backend sums in another
  order)."""
  assert "error" not in (got if isinstance(got, dict) else {}), f"{where}: {got}"
  if isinstance(want, dict):
    assert isinstance(got, dict) and set(got) == set(want), f"{where}: {got} vs {want}"
    for key in want:
      assert_same(got[key], want[key], f"{where}.{key}")
  elif isinstance(want, (list, float, int)) and not isinstance(want, bool):
    np.testing.assert_allclose(
      np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=2e-6, atol=1e-6, err_msg=where
    )
  else:
    assert got == want, f"{where}: {got} vs {want}"


def run_both(num_processes, cases, devices):
  got = multiprocess.launch(
    num_processes, "workshop", cases, devices=devices, timeout=240, keep_log=True
  )
  want = multiprocess.launch(num_processes, "cpu", cases, devices=devices, timeout=240)
  for i, (g, w) in enumerate(zip(got, want)):
    assert "output" not in w, f"CPU reference process {i} failed: {w}"
    assert "output" not in g, f"workshop process {i} failed: {g}"
  return got, want


@needs_mpi
def test_two_processes_match_the_cpu_backend():
  got, want = run_both(2, CASES, devices=2)
  for i in range(2):
    for case in CASES.split(","):
      assert_same(got[i][case], want[i][case], f"process {i} {case}")
  # The example: 2 processes x 2 devices, each contributing process_index + 1.
  assert got[0]["psum"] == [6.0, 6.0]
  assert got[1]["devices"]["process_of_devices"] == [0, 0, 1, 1]
  # collective_broadcast from device 3 (process 1's second, its row 100 + [4, 5, 6]) reaches
  # process 0's devices.
  assert got[0]["collective_broadcast"]["pmap_from_3"] == [[104.0, 105.0, 106.0]] * 2
  # At exit, the plugin destroys the client before JAX shuts jax.distributed down, so
  # jaxlib's watcher of the other processes ends quietly (jax_plugins/workshop/__init__.py,
  # _release_clients_before_distributed_shutdown).
  for i in range(2):
    assert "WatchTasksAsync failed" not in got[i]["_log"], got[i]["_log"][-3000:]


def test_pbroadcast_lowers_to_collective_broadcast():
  """The cross-process comparison above runs jax.lax.pbroadcast on workshop against a masked
  psum on the CPU backend (XLA:CPU has no collective-broadcast); this checks the workshop
  side really is the collective_broadcast op, which initialize() makes JAX emit."""
  import jax

  f = jax.pmap(
    lambda v: jax.lax.pbroadcast(v, "i", 1), axis_name="i", devices=jax.devices("workshop")[:2]
  )
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  assert "stablehlo.collective_broadcast" in f.lower(x).as_text()
  np.testing.assert_array_equal(np.asarray(f(x)), x[[1, 1]])


@needs_mpi
def test_four_processes_match_the_cpu_backend():
  cases = "devices,psum,collectives,collective_broadcast,multihost"
  got, want = run_both(4, cases, devices=1)
  for i in range(4):
    for case in cases.split(","):
      assert_same(got[i][case], want[i][case], f"process {i} {case}")
  assert got[3]["devices"]["process_index"] == 3


@needs_mpi
def test_a_dead_peer_is_an_error_within_the_timeout():
  import time

  start = time.monotonic()
  results = multiprocess.launch(
    2, "workshop", "exit_early", timeout=120, options="distributed_timeout:5"
  )
  elapsed = time.monotonic() - start
  error = results[0]["exit_early"].get("error", "") if "exit_early" in results[0] else ""
  assert "process(es) 1" in error and ("DEADLINE_EXCEEDED" in error or "UNAVAILABLE" in error), (
    results[0]
  )
  assert elapsed < 90, f"the survivor took {elapsed:.0f} s to give up"


@needs_mpi
def test_a_recreated_client_joins_the_other_processes_again():
  """jax.extend.backend.clear_backends() and a new client in every process: its start-up
  keys must not collide with the first client's (the store refuses to overwrite). No CPU
  reference: XLA:CPU's second client fails there (ALREADY_EXISTS: cpu:global_topology)."""
  results = multiprocess.launch(
    2, "workshop", "recreated_client", devices=2, timeout=120, options="distributed_timeout:30"
  )
  for i, result in enumerate(results):
    assert "recreated_client" in result, f"process {i}: {result}"
    # Each device contributes process_index + 1: 1 + 1 + 2 + 2.
    assert result["recreated_client"] == {"first": [6.0, 6.0], "again": [6.0, 6.0], "devices": 4}, (
      result
    )


def mismatch_errors(results):
  """Each process's client creation error ("devices" case), or fails saying what came."""
  errors = []
  for i, result in enumerate(results):
    assert "devices" in result and "error" in result["devices"], (
      f"process {i} did not fail at client creation: {result}"
    )
    errors.append(result["devices"]["error"])
  return errors


def description(version, devices):
  """A regex for what a process publishes: "workshop <version> (op table <hex>) with <n>
  devices"."""
  return rf"workshop {version} \(op table \w+\) with {devices} devices"


def assert_both_named(errors, what, descriptions):
  """Every process's error says `what` the processes disagree on and gives its own
  description first, then the other's (`descriptions[i]`: a regex for process i's)."""
  for i, error in enumerate(errors):
    assert "FAILED_PRECONDITION" in error and f"processes disagree on {what}" in error, error
    sides = [f"process {p} runs {descriptions[p]}" for p in (i, 1 - i)]
    assert re.search(", ".join(sides), error), error


@needs_mpi
def test_a_device_count_mismatch_names_both_processes():
  """A real difference: process 0 is created with num_devices 2, process 1 with 3."""
  results = multiprocess.launch(
    2, "workshop", "devices", devices=[2, 3], timeout=120, options="distributed_timeout:30"
  )
  errors = mismatch_errors(results)
  assert_both_named(errors, "the device count", [description(r"\S+", 2), description(r"\S+", 3)])
  assert all("num_devices" in error for error in errors), errors


@needs_mpi
def test_a_plugin_version_mismatch_names_both_processes():
  """Process 1 reports another version through the test hook WORKSHOP_TEST_PRETEND_VERSION
  (capi/api_client.cc; building a second plugin would take minutes)."""
  results = multiprocess.launch(
    2,
    "workshop",
    "devices",
    devices=2,
    timeout=120,
    options="distributed_timeout:30",
    env=[{}, {"WORKSHOP_TEST_PRETEND_VERSION": "0.0.1-old"}],
  )
  assert_both_named(
    mismatch_errors(results),
    "the plugin build",
    [description(r"(?!0\.0\.1-old)\S+", 2), description(r"0\.0\.1-old", 2)],
  )


def test_num_nodes_without_jax_distributed_is_an_error():
  """Without jax.distributed, jaxlib's key-value callback fields are garbage: num_nodes set
  by hand must be refused, not followed into them."""
  import subprocess
  import sys

  code = (
    "import jax\n"
    "jax.config.update('jax_pjrt_client_create_options', 'num_nodes:2;node_id:0')\n"
    "try:\n  jax.devices()\nexcept RuntimeError as e:\n  print(e)\n"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=ROOT,
    env=dict(__import__("os").environ, JAX_PLATFORMS="workshop"),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "jax.distributed.initialize" in proc.stdout, proc.stdout


@needs_mpi
def test_mpich_abi_constants_match_the_wheel_header():
  """runtime/distributed.cc declares MPICH's handles and constants by hand (no mpi.h at
  build time); they must be the installed wheel's."""
  from importlib import metadata

  header = next(f for f in metadata.distribution("mpich").files if f.name == "mpi.h")
  text = Path(header.locate()).read_text()
  # The ABI block: everything before the function table.
  source = (ROOT / "plugin_src/runtime/distributed.cc").read_text().split("struct Mpi {")[0]
  ours = dict(re.findall(r"constexpr \w+ k(\w+) = (0x[0-9a-f]+|\d+);", source))
  names = {
    "CommSelf": "MPI_COMM_SELF",
    "InfoNull": "MPI_INFO_NULL",
    "Byte": "MPI_BYTE",
    "ErrorsReturn": "MPI_ERRORS_RETURN",
    "TagUb": "MPI_TAG_UB",
    "ThreadMultiple": "MPI_THREAD_MULTIPLE",
    "MaxPortName": "MPI_MAX_PORT_NAME",
    "MaxErrorString": "MPI_MAX_ERROR_STRING",
    "Success": "MPI_SUCCESS",
  }
  assert set(ours) == set(names), sorted(ours)
  for ours_name, mpi_name in names.items():
    match = re.search(rf"#define {mpi_name}\s+\(?(?:\(\w+\))?(0x[0-9a-f]+|\d+)\)?", text)
    assert match, mpi_name
    assert int(match.group(1), 0) == int(ours[ours_name], 0), mpi_name
  assert "typedef int MPI_Comm;" in text and "typedef int MPI_Request;" in text
