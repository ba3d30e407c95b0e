# %% [markdown]
# # 01 · Build the plugin
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/01_build_the_plugin.ipynb)
#
# **Concept: a PJRT plugin is a shared library that exports one C function, `GetPjrtApi`,
# returning a table of function pointers.** JAX never links against a device's runtime; it
# talks to every non-built-in device through that table.
#
# PJRT is the device interface of XLA and JAX. The C API
# (`pjrt_c_api.h`) is its ABI-stable form: every call takes one `..._Args` struct, every
# failure is a `PJRT_Error*` with a code and a message. OpenXLA's guide to integrating a
# device splits the work into two halves; this notebook does the first:
#
# 1. **implement the C API, export `GetPjrtApi`, test it** ← *here*
# 2. install for JAX, discover, initialize, select (notebook 02), then test with JAX (notebook 03).
#
# Where our plugin sits:
#
# ```
#  your program ─▶ jax ─▶ jaxlib ──PJRT C API (function table)──▶ plugin_src/capi/    args structs ⇄ runtime objects, errors
#                                                                  plugin_src/runtime/ client, devices (one worker thread each),
#                                                                                      memories, buffers, events, executables
#                                                                  plugin_src/kernels/ one C++ kernel per StableHLO op family
#        PJRT_Client_Compile ──(takes the GIL)──▶ jax_plugins/workshop/compiler/   StableHLO → plan (Python)
# ```
#
# The device is called `workshop`: N virtual devices whose memory is host memory and whose
# "hardware" is a worker thread running our kernels. jaxlib hands `PJRT_Client_Compile` a
# StableHLO program; instead of generating code, the plugin calls back into a Python compiler
# that lowers it into a *plan* (a list of kernel calls), which the C++ executor runs on each
# device without touching Python.

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
# `jax_plugins.workshop.teach.notebook` holds what every notebook needs first: `setup()` finds the
# repository root (the sources this notebook reads and builds) and, in later notebooks,
# chooses the JAX platforms before the first computation.

# %%
import os
import sys
from pathlib import Path

from jax_plugins.workshop.teach import notebook

ROOT = notebook.setup()  # the repository root; this notebook runs no JAX program

# %% [markdown]
# ## Preflight
#
# Building needs five things. This cell checks each and says how to fix what is missing,
# so a problem shows up here rather than as a compiler error three cells later. (The
# versions it prints are those of your machine, so nbval does not compare them.)

# %%
# NBVAL_IGNORE_OUTPUT
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess

def preflight():
  """[(what, found, ok, fix)] for everything the build cell below needs."""
  checks = []
  python = ".".join(map(str, sys.version_info[:3]))
  checks.append(("Python ≥ 3.11", python, sys.version_info >= (3, 11),
                 "use Python 3.11 or newer for this environment"))
  compiler = os.environ.get("CXX", "g++")
  version = (subprocess.run([compiler, "-dumpfullversion"], capture_output=True, text=True)
             .stdout.strip() if shutil.which(compiler) else "")
  checks.append((f"C++20 compiler ({compiler}, g++ ≥ 12)", version or "not found",
                 bool(version) and int(version.split(".")[0]) >= 12,
                 "install g++ 12 or newer (Debian/Ubuntu: apt install g++-12), "
                 "or point CXX at one"))
  for package, module in [("pybind11", "pybind11"), ("setuptools", "setuptools"),
                          ("scipy-openblas32", "scipy_openblas32")]:
    found = importlib.util.find_spec(module) is not None
    checks.append((package, importlib.metadata.version(package) if found else "missing",
                   found, 'pip install -e ".[workshop]" from the repository root'))
  header = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
  header = header and Path(header.origin).parent / "include" / "pjrt_c_api.h"
  checks.append(("PJRT header (xla-cpu-pjrt)", "found" if header and header.is_file()
                 else "missing", bool(header and header.is_file()),
                 'pip install -e ".[workshop]" (the header comes from xla-cpu-pjrt)'))
  jaxlib = importlib.metadata.version("jaxlib") if importlib.util.find_spec("jaxlib") else ""
  checks.append(("jax/jaxlib 0.10.x", jaxlib or "missing", jaxlib.startswith("0.10."),
                 "pip install 'jax==0.10.*' 'jaxlib==0.10.*'"))
  return checks

problems = 0
for what, found, ok, fix in preflight():
  print(f"{'ok ' if ok else 'NO '} {what:<36} {found}" + ("" if ok else f"\n    fix: {fix}"))
  problems += not ok
assert not problems, f"{problems} preflight check(s) failed: fix them, then run this cell again"

# %% [markdown]
# ## The C API surface, from the header
#
# The header ships in the `xla-cpu-pjrt` wheel (we build against it and never copy it into the
# repository). Its `PJRT_Api` struct is the table a plugin fills: a size, an extension chain,
# the API version the plugin was compiled against, then one pointer per function. New
# functions are only ever appended, and `struct_size` tells jaxlib how many the plugin knows,
# so an older plugin keeps working with a newer jaxlib.

# %%
import re

import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

header = (Path(xla_cpu_pjrt.__file__).parent / "include" / "pjrt_c_api.h").read_text()
MAJOR = int(re.search(r"#define PJRT_API_MAJOR (\d+)", header)[1])
MINOR = int(re.search(r"#define PJRT_API_MINOR (\d+)", header)[1])
api_struct = re.search(r"typedef struct PJRT_Api \{(.*?)\} PJRT_Api;", header, re.S)[1]
FUNCTIONS = re.findall(r"_PJRT_API_STRUCT_FIELD\((\w+)\)", api_struct)

print(f"PJRT C API version {MAJOR}.{MINOR}")
print(f"PJRT_Api holds {len(FUNCTIONS)} functions, {FUNCTIONS[0]} ... {FUNCTIONS[-1]}")


# %% [markdown]
# Every function has the same shape: `PJRT_Error* PJRT_X(PJRT_X_Args* args)`. The caller sets
# `struct_size` (so the plugin can tell which fields an older or newer caller knows about) and
# the inputs; the plugin fills the fields marked *out*. A `nullptr` result means success. Here
# is one, summarised from the header:

# %%
def signature(function):
  """The fields of `function`'s Args struct, from the header: (declaration, is output)."""
  body = re.search(rf"struct {function}_Args \{{(.*?)\}};", header, re.S)[1]
  fields = []
  for line in body.splitlines():
    declaration, _, comment = line.partition("//")
    if declaration.strip().endswith(";"):
      fields.append((declaration.strip().rstrip(";"), comment.strip().startswith("out")))
  return fields

print(f"PJRT_Error* PJRT_Client_PlatformName(PJRT_Client_PlatformName_Args* args)")
for declaration, out in signature("PJRT_Client_PlatformName"):
  print(f"  {declaration:<40} {'out' if out else 'in'}")

# %% [markdown]
# ## Build
#
# `setup.py` compiles every `plugin_src/**/*.cc` into one shared library,
# `jax_plugins/workshop/_plugin*.so`, with the header's directory on the include path, C++20,
# `-O3 -Wall -Wextra`, and OpenBLAS (from `scipy-openblas32`) for matrix products. It also
# bakes in the StableHLO versions of the installed jaxlib, which the plugin reports to JAX
# (notebook 03). The `.so` is loaded by jaxlib with `dlopen`, not imported by Python.
#
# The cell runs the same command you would in a terminal (`python setup.py build_ext
# --inplace`, from the repository root) through `notebook.rebuild`, which prints each file as
# it compiles. Only files whose source or included headers changed since their object was
# built are compiled again (`setup.py` keeps the objects in `build/` and asks the compiler for
# each object's header dependencies with `-MMD`), so after editing one `.cc` file a rebuild
# compiles that file and links, in seconds. A full
# build takes a few minutes (docs/developing.md, "How long things take", has the measured time);
# if no source changed since the last build, setuptools skips it and the cell says so.
#
# **After editing a `.cc` file, run this cell again**, then restart the kernel of any notebook
# that already uses the plugin: a process loads a shared library once, and `dlopen` of the
# same path returns the copy already loaded.

# %%
# NBVAL_IGNORE_OUTPUT
import subprocess  # (used by the cells below)

compiled = notebook.rebuild(ROOT)

# %% [markdown]
# ## The library exports `GetPjrtApi`
#
# jaxlib finds the plugin with `dlopen(path)` and `dlsym(handle, "GetPjrtApi")`, so that
# symbol must be in the library's *dynamic* symbol table, unmangled and visible:
# `api_table.cc` declares it `extern "C" __attribute__((visibility("default")))`, and
# everything else is compiled with hidden visibility. `nm -D` lists the dynamic symbols; `T`
# marks a global function. Besides `GetPjrtApi`, the plugin exports a few `Workshop*`
# functions that its own Python package reaches through `ctypes`, outside the C API: the
# call tracer's `WorkshopTrace*` (`jax_plugins.workshop.trace()`, notebook 05), the
# registration of users' FFI handlers, the calls into generated code (notebook 06), the op
# table's fingerprint and kernel names (which `tests/compiler/test_optable.py` checks against
# `optable.py`), and the wait for programs still queued when Python exits. (The table also holds
# weak copies of C++ standard-library templates, `W`/`V`, which the loader may share
# between libraries.)

# %%
import jax_plugins.workshop as workshop

LIBRARY = Path(workshop.library_path())
print(LIBRARY.relative_to(ROOT))
dynamic = subprocess.run(["nm", "-D", "--defined-only", LIBRARY], capture_output=True,
                         text=True, check=True).stdout
print("global functions exported:",
      [line.split()[2] for line in dynamic.splitlines() if line.split()[1] == "T"])

# %% [markdown]
# ## Read the table through `ctypes`
#
# Now do what jaxlib does: load the library, call `GetPjrtApi`, and read the `PJRT_Api` it
# returns. The `ctypes` layout is generated from the header's field list, so it cannot drift
# from it. Nothing is initialized by loading: the table is a constant.

# %%
import ctypes

class PJRT_Api_Version(ctypes.Structure):
  _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
              ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int)]

class PJRT_Api(ctypes.Structure):
  _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
              ("pjrt_api_version", PJRT_Api_Version),
              *((name, ctypes.c_void_p) for name in FUNCTIONS)]

plugin = ctypes.CDLL(str(LIBRARY))
plugin.GetPjrtApi.restype = ctypes.POINTER(PJRT_Api)
api = plugin.GetPjrtApi().contents
slots = {name: getattr(api, name) for name in FUNCTIONS}  # address, or None for NULL

print("struct_size:", api.struct_size, "== sizeof(PJRT_Api) in the header:",
      api.struct_size == ctypes.sizeof(PJRT_Api))
print(f"version: {api.pjrt_api_version.major_version}.{api.pjrt_api_version.minor_version}")
print("non-NULL slots:", sum(address is not None for address in slots.values()), "of",
      len(FUNCTIONS))

# %% [markdown]
# Every slot is set. That matters: jaxlib reads the table up to the version the plugin
# declares and calls some functions without checking for `NULL`, so an empty slot is a crash
# rather than an error. What we don't support yet is a *stub* that returns `UNIMPLEMENTED`
# with a message saying why.
#
# Which slots are real and which are stubs? The addresses tell us, once we know the names of
# the functions at those addresses. Every slot points to the call tracer's wrapper for its
# function, `trace::Traced<"PJRT_Name", &Name>` (notebook 05), whose symbol names the
# function it forwards to. The library's full symbol table (`nm` without `-D`, which
# also lists the hidden, local functions) gives each function's offset in the file; the load
# address of the library is the runtime address of `GetPjrtApi` minus its offset.

# %%
from collections import defaultdict

symbols = {}  # offset in the file -> demangled name
for line in subprocess.run(["nm", "-C", "--defined-only", LIBRARY], capture_output=True,
                           text=True, check=True).stdout.splitlines():
  offset, kind, name = line.split(" ", 2)
  if kind in "tT":
    symbols.setdefault(int(offset, 16), name)
base = (ctypes.cast(plugin.GetPjrtApi, ctypes.c_void_p).value -
        next(offset for offset, name in symbols.items() if name == "GetPjrtApi"))

def target(function):
  """The C++ function a slot forwards to, e.g. 'Client_Compile' or 'Stub_Compile'.

  The slot holds trace::Traced<"PJRT_...", &workshop::capi::Name>; the name is its last
  template argument (stubs live in an anonymous namespace).
  """
  wrapper = symbols[slots[function] - base]
  return re.search(r"&[\w:]*?(?:\(anonymous namespace\)::)?(\w+)>\(", wrapper)[1]

stubbed = [f for f in FUNCTIONS if target(f).startswith("Stub_")]
implemented = [f for f in FUNCTIONS if f not in stubbed]
# Each slot points to the implementation or stub named after it.
assert all(target(f) == f.removeprefix("PJRT_") for f in implemented)
assert all(target(f) == "Stub_" + f.removeprefix("PJRT_") for f in stubbed)

def area(function):  # PJRT_Buffer_ToHostBuffer -> Buffer
  return function.removeprefix("PJRT_").split("_")[0]

by_area = defaultdict(lambda: [0, 0])
for f in FUNCTIONS:
  by_area[area(f)][f in stubbed] += 1
print(f"{'area':<34}{'implemented':>12}{'stubbed':>9}")
for name, (done, stubs) in by_area.items():
  print(f"{name:<34}{done:>12}{stubs:>9}")
print(f"{'total':<34}{len(implemented):>12}{len(stubbed):>9}")

# %% [markdown]
# Almost everything is implemented: errors and events, the client and its devices, memories
# (`device` and `pinned_host`) and topology, buffers (host ⇄ device transfers in every layout,
# device-to-device and memory-to-memory copies, views of external memory, the async transfer
# manager, alias buffers), compile (also ahead of time against a topology), executable queries
# (optimized program, cost and memory analysis), serialization and execute, and the
# multi-process client of notebook 07. The stubs are the five `CopyToDeviceStream` functions
# (a stream exists only inside a recv callback of a program with send/recv, and such programs
# don't compile here).
#
# The same split is written down in the source: `plugin_src/capi/api.h` declares every
# implementation, `api_table.cc` defines the stubs. Check that the source and the binary agree:

# %%
api_h = (ROOT / "plugin_src/capi/api.h").read_text()
declared = set(re.findall(r"^(?:WORKSHOP_DECLARE\(|void )(\w+)", api_h, re.M))
stubs_in_source = set(re.findall(r"^WORKSHOP_STUB\((\w+),",
                                 (ROOT / "plugin_src/capi/api_table.cc").read_text(), re.M))
print("api.h declares exactly the implemented slots:",
      declared == {f.removeprefix("PJRT_") for f in implemented})
print("api_table.cc stubs exactly the other slots:  ",
      stubs_in_source == {f.removeprefix("PJRT_") for f in stubbed})


# %% [markdown]
# ## Call the plugin through the C API
#
# Finally, call a stub the way jaxlib would, and handle its error with the plugin's own error
# functions: `PJRT_Error_GetCode`, `PJRT_Error_Message` (the message lives as long as the
# error) and `PJRT_Error_Destroy` (the caller owns the error). Every failure in the plugin,
# from a bad argument to an unsupported op, travels this way and becomes a Python exception
# in JAX; the process never crashes on bad input.

# %%
def args_struct(*fields):
  """A ctypes Args struct: struct_size and extension_start, then `fields`."""
  class Args(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                *fields]
  return Args

def call(function, args):
  """Calls a PJRT_Api slot; returns the PJRT_Error* (None on success)."""
  args.struct_size = ctypes.sizeof(args)
  return ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(slots[function])(
      ctypes.byref(args))

TotalBytes = args_struct(("stream", ctypes.c_void_p), ("total_bytes", ctypes.c_int64))
GetCode = args_struct(("error", ctypes.c_void_p), ("code", ctypes.c_int))
Message = args_struct(("error", ctypes.c_void_p), ("message", ctypes.c_void_p),
                      ("message_size", ctypes.c_size_t))
Destroy = args_struct(("error", ctypes.c_void_p))

error = call("PJRT_CopyToDeviceStream_TotalBytes", TotalBytes())
code, message = GetCode(error=error), Message(error=error)
assert call("PJRT_Error_GetCode", code) is None
call("PJRT_Error_Message", message)  # returns void
print("code:", code.code, "(PJRT_Error_Code_UNIMPLEMENTED is",
      re.search(r"PJRT_Error_Code_UNIMPLEMENTED = (\d+)", header)[1] + ")")
print("message:", ctypes.string_at(message.message, message.message_size).decode())
call("PJRT_Error_Destroy", Destroy(error=error))

# %% [markdown]
# ## Test the C API: the conformance harness
#
# The guide's last step of this half is to test the implementation. XLA has a C API test
# suite (`pjrt_c_api_test.cc`) that a plugin links against; this repository has a standalone
# harness with the same cases and inputs (`tests/capi_harness/harness.cc`), more cases for
# what JAX relies on, and no XLA build needed. It `dlopen`s a plugin and drives it only
# through the `PJRT_Api` table, as jaxlib does. Running it against XLA's own CPU plugin too
# (`xla_cpu_pjrt.so` from the `xla-cpu-pjrt` wheel) tells a bug in our plugin from a case
# where the reference behaves differently. The cell compiles the harness with g++, asks
# JAX for the programs it compiles, and runs every case on both plugins (it prints how long
# that took).

# %%
# NBVAL_IGNORE_OUTPUT
import tempfile
import time

from jax_plugins.workshop.teach import conformance

start = time.perf_counter()
with tempfile.TemporaryDirectory() as workdir:
  results = conformance.run_both(workdir)
workshop_results, xla_results = results["workshop"], results["cpu"]
width = max(map(len, conformance.case_names())) + 2  # the longest name sets the column
print(f"{'case':<{width}}{'workshop':>8}{'XLA CPU':>9}")
for case in conformance.case_names():
  ours, theirs = workshop_results[case][0], xla_results[case][0]
  print(f"{case:<{width}}{ours:>8}{theirs:>9}" + ("   *" if ours != theirs else ""))
print(f"{len(conformance.case_names())} cases on both plugins, harness build included, in "
      f"{time.perf_counter() - start:.0f} s")

# %% [markdown]
# With the worked solutions in place (the notebooks in `notebooks/`), every case passes on
# the workshop plugin. In the reader's version, a case that tests a later exercise is
# skipped until you write it, with the starting point's message `not written yet (notebook
# NN)`: `DeviceMemoryStats` calls `PJRT_Device_MemoryStats`, notebook 05's exercise. The
# cell names the cases left for later exercises and checks that every other case passes.
# Where XLA's CPU plugin differs (`*`), the reason is known and written down in
# `conformance.XLA_CPU_DIFFERENCES`:

# %%
# A case whose message is a starting point's "not written yet (notebook NN)" waits for
# that notebook's exercise; every other case must pass.
later = {case: found[1] for case, (_, why) in workshop_results.items()
         if (found := re.search(r"not written yet \((notebook \d+)\)", why))}
print("cases left for later exercises:",
      ", ".join(f"{case} ({where})" for case, where in later.items()) or "none")
failed = [case for case, (outcome, _) in workshop_results.items()
          if outcome != "PASS" and case not in later]
print("every other case passes on workshop:", not failed, failed or "")
differs = {case for case in conformance.case_names()
           if xla_results[case][0] != "PASS"}
print("XLA's CPU plugin differs exactly where listed:",
      differs == set(conformance.XLA_CPU_DIFFERENCES))
for case, (outcome, reason) in conformance.XLA_CPU_DIFFERENCES.items():
  print(f"\n{case} ({outcome} on XLA's CPU plugin):\n  {reason}")

# %% [markdown]
# ## Exercise: give the device an attribute
#
# Time to change the plugin. jaxlib asks each device description for its attributes once, at
# start-up (`PJRT_DeviceDescription_Attributes`: a list of `PJRT_NamedValue`s, each a name and
# an int64, float, bool, string or int64 list), and a Python `Device` resolves any attribute
# it does not know itself through that list. Ours report one today, `num_devices`:
# `jax.devices()[0].num_devices` is 4.
#
# The slot returns a list that `plugin_src/capi/device_attributes.cc` builds. **Your task:** add
# an attribute `core_count`, the number of cores a device's kernels run on, which is the
# machine's hardware thread count (`std::thread::hardware_concurrency()`, at least 1): the
# plugin's thread pool has one thread per hardware thread. (JAX's GPU devices report their
# multiprocessor count under the same name.)
#
# The next cell writes the file and rebuilds; only that file compiles, then the library is
# linked. The exercise is named `device_attributes`. In the reader's version of the
# notebooks (`python -m jax_plugins.workshop.teach.notebook reader reader`) the cell starts from
# `notebooks/exercises/device_attributes.cc`, the file with a `TODO` in place of the
# answer; in the version in `notebooks/` it holds the worked solution. To start over:
# `notebook.reset_exercise("device_attributes")` writes the starting point back into the
# file, and `print(notebook.starting_point("device_attributes"))` shows it, to paste into
# the cell; to get the worked solution back:
# `git checkout -- plugin_src/capi/device_attributes.cc`. If the build fails, the
# compiler's error is printed; the check below then says so too, rather than testing the
# library of an earlier build.

# %% exercise="device_attributes" tags=["solution"]
# NBVAL_IGNORE_OUTPUT
notebook.write_source("plugin_src/capi/device_attributes.cc", r'''
// The named attributes of every workshop device (PJRT_DeviceDescription_Attributes).
//
// jaxlib reads them once, when the client starts, and a Python `Device` resolves any
// attribute it does not know itself through them: `jax.devices()[0].num_devices` is the
// first entry below. Notebook 01's exercise adds one (its starting point is
// notebooks/exercises/device_attributes.cc).
#include <algorithm>
#include <thread>
#include <vector>

#include "capi/wrappers.h"

namespace workshop {

std::vector<PJRT_NamedValue> DeviceAttributes(int num_devices) {
  // Names are string literals: a PJRT_NamedValue points to its name, and the attributes
  // live as long as the client.
  return {
      Int64Value("num_devices", num_devices),
      // The cores a device's kernels run on: large kernels split over the shared thread
      // pool, which has one thread per hardware thread (runtime/thread_pool.cc). GPU
      // devices in JAX report their multiprocessor count under the same name.
      Int64Value("core_count", std::max(1u, std::thread::hardware_concurrency())),
  };
}

}  // namespace workshop
''')
compiled = notebook.rebuild(ROOT)

# %% [markdown]
# ### Check
#
# This process can't see the new library: it has not loaded the plugin yet, but once it has,
# `dlopen` of the same path returns the copy already in memory, so every check of a rebuilt
# plugin runs in a fresh process (`notebook.run_fresh`). The check says what is wrong, if
# anything.

# %% exercise="device_attributes"
def check_core_count():
  """Fails with what is wrong, if `jax.devices()[0].core_count` isn't the machine's cores."""
  import json, os
  notebook.check_last_build()
  found = json.loads(notebook.run_fresh("""
    import json, jax
    device = jax.devices()[0]
    print(json.dumps({"core_count": getattr(device, "core_count", None),
                      "num_devices": device.num_devices}))
    """))
  if found["core_count"] is None:
    raise AssertionError(
        "jax.devices()[0] has no attribute core_count: DeviceAttributes() in "
        "plugin_src/capi/device_attributes.cc must also return "
        "Int64Value(\"core_count\", ...)")
  if found["core_count"] != os.cpu_count():
    raise AssertionError(
        f"core_count is {found['core_count']}, but this machine has {os.cpu_count()} "
        "hardware threads (std::thread::hardware_concurrency())")
  if found["num_devices"] != 4:
    raise AssertionError("num_devices went missing: keep the attribute that was there")
  print("core_count == os.cpu_count(): the new attribute reaches JAX")

check_core_count()

# %% [markdown]
# ## What's next
#
# The library is built and its table is complete. One more piece of the contract is in
# Python: `PJRT_Client_Compile` calls back into
# `jax_plugins.workshop.compiler.compile_program` (under the GIL) with the serialized
# StableHLO program, its format, the serialized `CompileOptions` (which carry the number of
# replicas and partitions and the device assignment) and the number of devices:

# %%
import inspect

from jax_plugins.workshop.compiler import compile_program

print(f"compile_program{inspect.signature(compile_program)}")

# %% [markdown]
# Notebook **02** makes JAX find and load the plugin; notebook **03** checks the
# registration and runs programs on it.
