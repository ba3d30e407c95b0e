"""The new-device template (`python -m jax_plugins.workshop.new_device NAME DIR`).

A project is generated into a temporary directory and built in place there (`setup.py
build_ext --inplace`: nothing is installed into this environment); then, in fresh
processes with the project on PYTHONPATH, JAX must find the platform and run the guide's
checks (elementwise add, a jit, a pmap with psum over its 4 devices) with numpy's results,
and the C API conformance harness must pass on it, every case that is not a PASS being a
SKIP of an optional function the template leaves UNIMPLEMENTED (named in the message).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from pjrt_header import ApiVersion, Header, header_text

from jax_plugins.workshop import build_support, new_device
from jax_plugins.workshop.teach import conformance

NAME = "testdev"

# What the template leaves out, and how the harness reports it: case -> the PJRT function
# (or extension) it answers UNIMPLEMENTED for. Every other case must PASS.
SKIPPED = {
  "DeviceDescriptionAndMemoryDescriptions": "no MemoryDescriptions extension",
  "OnReadyAfterDestroy": "PJRT_Client_CreateBuffersForAsyncHostToDevice is not implemented",
  "ExecutableCostAndMemoryStats": "PJRT_Executable_GetCompiledMemoryStats is not implemented",
  "SerializeAndDeserialize": "PJRT_Executable_Serialize is not implemented",
  "CopyRawToHost": "PJRT_Buffer_CopyRawToHost is not implemented",
  "HostLayoutColumnMajor": "host_layout is not the row-major layout",
  "ViewOfDeviceBuffer": "PJRT_Client_CreateViewOfDeviceBuffer is not implemented",
  "TopologyDescription": "PJRT_Client_TopologyDescription is not implemented",
  "CompileAgainstTopology": "PJRT_TopologyDescription_Create is not implemented",
  "DeviceMemoryStats": "PJRT_Device_MemoryStats is not implemented",
  "LayoutsExtension": "no Layouts extension",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
  root = new_device.generate(NAME, tmp_path_factory.mktemp("new_device") / NAME)
  build = subprocess.run(
    [sys.executable, "setup.py", "build_ext", "--inplace"],
    cwd=root,
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
  return root


def _library(project) -> str:
  (library,) = (project / "jax_plugins" / NAME).glob("_plugin*.so")
  return str(library)


def test_generated_files_come_from_the_template_and_the_shared_sources(tmp_path):
  root = new_device.generate("abc_dev", tmp_path / "p")
  assert (root / "jax_plugins" / "abc_dev" / "__init__.py").read_text().count('"abc_dev"') >= 1
  assert (root / "build_support.py").read_text() == open(build_support.__file__).read()
  for path in root.rglob("*"):
    if path.is_file():
      assert "__NAME" not in path.read_text() and "__Name__" not in path.read_text(), path
  assert "AbcDevDevice(id=" in (root / "src" / "capi.cc").read_text()
  # Regenerating is a no-op; over an edited file it refuses unless asked to overwrite.
  new_device.generate("abc_dev", root)
  (root / "src" / "kernels.cc").write_text("// my edits\n")
  with pytest.raises(ValueError, match="kernels.cc"):
    new_device.generate("abc_dev", root)
  new_device.generate("abc_dev", root, overwrite=True)
  assert "kKernels" in (root / "src" / "kernels.cc").read_text()


def test_the_template_is_package_data(tmp_path):
  # A wheel holds what build_py copies: the template's files must be among them (they are
  # package data, not modules: setup.py's package_data), and nothing of __pycache__.
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  run = subprocess.run(
    [sys.executable, "setup.py", "-q", "build_py", "-d", str(tmp_path)],
    cwd=repo,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert run.returncode == 0, run.stderr[-3000:]
  shipped = tmp_path / "jax_plugins" / "workshop" / "new_device" / "template"
  want = sorted(
    str(p.relative_to(new_device.TEMPLATE))
    for p in new_device.TEMPLATE.rglob("*")
    if p.is_file() and "__pycache__" not in p.parts
  )
  assert sorted(str(p.relative_to(shipped)) for p in shipped.rglob("*") if p.is_file()) == want
  assert (tmp_path / "jax_plugins" / "workshop" / "build_support.py").is_file()


@pytest.mark.parametrize(
  "name", ["cpu", "workshop", "My-Device", "my-device", "9lives", "import", ""]
)
def test_bad_platform_names_are_refused(tmp_path, name):
  with pytest.raises(ValueError):
    new_device.generate(name, tmp_path / "p")


def test_a_file_or_a_directory_in_the_way_is_refused(tmp_path):
  (tmp_path / "file").write_text("mine\n")
  with pytest.raises(ValueError, match="is a file, not a directory"):
    new_device.generate("abc_dev", tmp_path / "file")
  (tmp_path / "p" / "src" / "capi.cc").mkdir(parents=True)
  with pytest.raises(ValueError, match="src/capi.cc as directories"):
    new_device.generate("abc_dev", tmp_path / "p")
  assert (tmp_path / "file").read_text() == "mine\n"


def test_api_table_is_full(project):
  # The table was generated from the header's slot list at build time: all of them set,
  # the header's version, nothing beyond the header's size.
  header = Header(header_text())
  assert build_support.api_slots(os.path.join(build_support.pjrt_header_dir(), "pjrt_c_api.h")) == [
    s.removeprefix("PJRT_") for s in header.slots
  ]
  mirror = type(
    "PJRT_Api",
    (ctypes.Structure,),
    {
      "_fields_": [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("pjrt_api_version", ApiVersion),
        *[(n, ctypes.c_void_p) for n in header.slots],
      ]
    },
  )
  get_api = ctypes.CDLL(_library(project)).GetPjrtApi
  get_api.restype = ctypes.POINTER(mirror)
  api = get_api().contents
  assert api.struct_size == ctypes.sizeof(mirror)
  assert (api.pjrt_api_version.major_version, api.pjrt_api_version.minor_version) == (
    header.major,
    header.minor,
  )
  assert [n for n in header.slots if not getattr(api, n)] == []


_PROGRAMS = r"""
import json, os
import numpy as np
import jax, jax.numpy as jnp

out = {"platforms": sorted({d.platform for d in jax.devices("NAME")}),
       "ids": [d.id for d in jax.devices("NAME")]}
dev = jax.devices("NAME")[0]
rng = np.random.default_rng(0)
x = rng.standard_normal((3, 5)).astype(np.float32)
y = rng.standard_normal((3, 5)).astype(np.float32)
i = rng.integers(-1000, 1000, (7,)).astype(np.int32)

def result(value):
  value = jax.block_until_ready(value)
  assert {d.platform for d in value.devices()} == {"NAME"}, value.devices()
  return np.asarray(value)

a, b = jax.device_put(x, dev), jax.device_put(y, dev)
out["add"] = bool(np.array_equal(result(jnp.add(a, b)), x + y))
out["add_int"] = bool(np.array_equal(
    result(jnp.add(jax.device_put(i, dev), jax.device_put(i[::-1], dev))), i + i[::-1]))
f = jax.jit(lambda u, v: u * v + 2.0 * u + 1.0)
got = result(f(a, b))
# f32 ops are IEEE: the same order in numpy's float32 gives the same bits; float64 bounds it.
out["jit"] = bool(np.array_equal(got, x * y + np.float32(2) * x + np.float32(1)))
exact = x.astype(np.float64) * y + 2 * x.astype(np.float64) + 1
out["jit_f64_error"] = float(np.max(np.abs(got - exact) / np.maximum(np.abs(exact), 1)))
n = len(jax.devices("NAME"))
xs = rng.standard_normal((n, 6)).astype(np.float32)
p = result(jax.pmap(lambda v: v + jax.lax.psum(v, "i"), axis_name="i",
                    devices=jax.devices("NAME"))(xs))
total = np.zeros(6, np.float32)
for row in xs:  # psum adds the devices' values in device order
  total += row
out["pmap"] = bool(np.array_equal(p, xs + total))
ar = np.arange(n * 2, dtype=np.int32).reshape(n, 2)
ip = result(jax.pmap(lambda v: jax.lax.psum(v, "i") * v, axis_name="i",
                     devices=jax.devices("NAME"))(ar))
out["pmap_int"] = bool(np.array_equal(ip, ar.sum(0) * ar))
# Eager arithmetic with a Python scalar converts the weak-typed scalar on the device.
out["eager_scalar"] = bool(np.array_equal(result(a + 2.0), x + np.float32(2)))
# convert as XLA:CPU does it (truncation, saturation, NaN -> 0), in the same process.
c = np.array([1.5, -2.7, np.nan, 3e9, -3e9, -0.0, np.inf], np.float32)
to_int = jax.jit(lambda v: (v.astype(jnp.int32), v.astype(jnp.int32).astype(jnp.float32)))
cpu = jax.devices("cpu")[0]
out["convert"] = all(np.array_equal(np.asarray(r), np.asarray(e))
                     for r, e in zip(to_int(jax.device_put(c, dev)),
                                     to_int(jax.device_put(c, cpu))))
# Donation: the donated argument is deleted, the result right.
d = jax.device_put(x, dev)
g = jax.jit(lambda u: u + 1.0, donate_argnums=0)
out["donate"] = bool(np.array_equal(result(g(d)), x + 1)) and d.is_deleted()
# A donated buffer passed twice is an error, not a crash (the donation would free it).
e = jax.device_put(x, dev)
try:
  jax.jit(lambda u, v: u + v, donate_argnums=0)(e, e)
  out["donate_twice"] = "ran"
except Exception as err:
  out["donate_twice"] = str(err)
# What the plugin cannot run fails at compile time, naming the op.
try:
  jax.jit(jnp.sin)(a)
  out["sin"] = "ran"
except Exception as e:
  out["sin"] = str(e)
print(json.dumps(out))
"""


def test_jax_runs_the_guides_programs(project):
  stdout = new_device.run(project, _PROGRAMS.replace("NAME", NAME), platforms=f"{NAME},cpu")
  out = json.loads(stdout.strip().splitlines()[-1])
  assert out["platforms"] == [NAME] and out["ids"] == [0, 1, 2, 3]
  for check in ("add", "add_int", "jit", "pmap", "pmap_int", "eager_scalar", "convert", "donate"):
    assert out[check] is True, check
  assert out["jit_f64_error"] < 1e-6
  assert "UNIMPLEMENTED" in out["sin"] and "stablehlo.sine" in out["sin"], out["sin"]
  assert "INVALID_ARGUMENT" in out["donate_twice"] and "donated" in out["donate_twice"]


def test_the_check_module_passes(project):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(project), *sys.path]))
  run = subprocess.run(
    [sys.executable, "-m", "jax_plugins.workshop.teach.check", "--platform", NAME],
    capture_output=True,
    text=True,
    env=env,
    timeout=300,
  )
  assert run.returncode == 0, run.stdout + run.stderr[-3000:]
  assert f"ok   jnp.add(1, 1): ('2', '{NAME}')" in run.stdout
  assert "ok   pmap(x + psum(x)) over 4 devices: [6 7 8 9]" in run.stdout


def test_conformance_harness(project, tmp_path):
  results = conformance.run_plugin(str(tmp_path), _library(project), NAME, python_path=str(project))
  assert set(results) == set(conformance.case_names())
  assert set(SKIPPED) <= set(results)
  for case, (outcome, why) in sorted(results.items()):
    if case in SKIPPED:
      assert outcome == "SKIP" and SKIPPED[case] in why, (case, outcome, why)
    elif outcome == "SKIP" and re.fullmatch(r"no (Layouts|MemoryDescriptions) extension", why):
      continue  # a case of an extension the template does not have
    else:
      assert outcome == "PASS", (case, why)


_SHARD_MAP = """
import json, numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
out = {}
x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
for platform in ("NAME", "cpu"):
  mesh = Mesh(np.array(jax.devices(platform)[:4]), ("x",))
  sharding = NamedSharding(mesh, P("x"))
  f = jax.shard_map(lambda v: v + jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"),
                    out_specs=P("x"))
  got = jax.jit(f, out_shardings=sharding)(jax.device_put(x, sharding))
  assert {d.platform for d in got.devices()} == {platform}
  out[platform] = np.asarray(got).tolist()
out["x"] = x.tolist()
try:
  mesh = Mesh(np.array(jax.devices("NAME")), ("x",))
  g = jax.shard_map(lambda v: v + jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"),
                    out_specs=P("x"))
  jax.jit(g)(jax.device_put(x, NamedSharding(mesh, P("x"))))
  out["unsharded"] = "ran"
except Exception as e:
  out["unsharded"] = str(e).splitlines()[0]
print(json.dumps(out))
"""


def test_shard_map_with_out_shardings_matches_cpu(project, monkeypatch):
  # jit(shard_map) with the results' sharding given runs through sdy-convert-global-to-local;
  # without it the compiler would have to choose one (propagation, left out): the error
  # says what to give, instead of blaming a jit outside shard_map.
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
  stdout = new_device.run(project, _SHARD_MAP.replace("NAME", NAME), platforms=f"{NAME},cpu")
  out = json.loads(stdout.strip().splitlines()[-1])
  assert out[NAME] == out["cpu"]
  shards = np.array(out["x"], np.float32).reshape(4, 2)  # each shard + the shards' sum
  total = np.zeros(2, np.float32)
  for shard in shards:
    total += shard
  assert out[NAME] == (shards + total).ravel().tolist()
  assert "out_shardings" in out["unsharded"] and "UNIMPLEMENTED" in out["unsharded"], out


def test_a_dtype_added_at_the_marker_keeps_the_kernels_dtypes(project, tmp_path):
  # kKernels entries of one name need not be adjacent: `add` for u8 added at the marker
  # line (as notebook 08 adds kernels) must not hide add's f32 and s32 entries. A copy of
  # the built project, so only kernels.cc recompiles and the other tests keep theirs.
  copy = tmp_path / NAME
  shutil.copytree(project, copy)
  new_device.insert_above(
    copy,
    "src/kernels.cc",
    "// New kernels go above this line.",
    '{"add", PJRT_Buffer_Type_U8, Binary<uint8_t, std::plus<>>},',
  )
  new_device.build(copy, quiet=True)
  stdout = new_device.run(
    copy,
    """
      import json, numpy as np, jax.numpy as jnp
      f, u = np.array([1.5, -2.0], np.float32), np.array([200, 7], np.uint8)
      print(json.dumps([np.asarray(jnp.add(f, f)).tolist(), np.asarray(jnp.add(u, u)).tolist()]))
  """,
  )
  got_f, got_u = json.loads(stdout.strip().splitlines()[-1])
  assert got_f == (np.array([1.5, -2.0], np.float32) * 2).tolist()
  assert got_u == (np.array([200, 7], np.uint8) + np.array([200, 7], np.uint8)).tolist()
