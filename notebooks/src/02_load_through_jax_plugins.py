# %% [markdown]
# # 02 · Load the plugin through `jax_plugins`
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/02_load_through_jax_plugins.ipynb)
#
# **Concept: JAX discovers plugins by module name, calls their `initialize()`, and creates the
# backend lazily, for the platforms you select.** This is the second half of OpenXLA's
# integration guide: *install* the plugin for JAX, let JAX *discover* it, *initialize* it,
# *select* it.
#
# ```
# import jax                      nothing happens yet (jax only imports the jax_plugins namespace)
# jax.devices()   ─▶ discover     modules under jax_plugins/  +  entry points in group "jax_plugins"
#                 ─▶ initialize   jax_plugins.workshop.initialize()
#                                   └▶ xla_bridge.register_plugin("workshop", priority, library_path, options)
#                                         dlopen + GetPjrtApi, register a backend factory
#                 ─▶ select       JAX_PLATFORMS / jax_platforms, else every backend by priority
#                 ─▶ create       check the API version, PJRT_Plugin_Initialize,
#                                 PJRT_Client_Create(options) → devices
# ```
#
# A Python process initializes its backends once, so this notebook uses one selection itself
# and shows the others in fresh Python processes.

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
# `notebook.setup()` (from the package, shared by every notebook) finds the repository and
# puts it on `sys.path` **before** `import jax`, as it must be: JAX imports the `jax_plugins`
# namespace package when it is first imported, and the namespace's search path is fixed from
# `sys.path` at that moment.

# %%
import os
import sys
from pathlib import Path

from jax_plugins.workshop.teach import notebook

ROOT = notebook.setup()  # platforms: left to JAX, which is what this notebook studies

# %% [markdown]
# ## Install, route 1: the `jax_plugins` namespace package
#
# `jax_plugins/` has **no `__init__.py`**. That makes it a namespace package: every
# `jax_plugins/` directory on `sys.path`, from any installed distribution, contributes its
# modules to the one package. Each vendor adds a uniquely named module
# (`jax_plugins.workshop` here) without owning the package. JAX lists the package's modules
# with `pkgutil.iter_modules`, as below.

# %%
import pkgutil

import jax_plugins

print("jax_plugins/__init__.py exists:", (ROOT / "jax_plugins" / "__init__.py").exists())
print("jax_plugins is a", type(jax_plugins.__path__).__name__,
      "| __file__:", getattr(jax_plugins, "__file__", None))
print("modules:", [m.name for m in pkgutil.iter_modules(jax_plugins.__path__)])

# %% [markdown]
# ## Install, route 2: the entry point
#
# A packaged plugin also advertises its module as an entry point in the `jax_plugins` group,
# so JAX finds it even when the module does not live under `jax_plugins/` (plugins installed
# from wheels usually use this route). Ours is declared in `setup.py`:

# %%
import ast

setup_call = next(node for node in ast.walk(ast.parse((ROOT / "setup.py").read_text()))
                  if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup")
print(ast.literal_eval(next(k.value for k in setup_call.keywords if k.arg == "entry_points")))

# %% [markdown]
# It exists at run time only once the package is installed (`pip install -e .`), as metadata
# that `importlib.metadata` reads, which is what JAX does. (The output of this cell depends on
# whether you installed the package, so the tests don't compare it.)

# %%
# NBVAL_IGNORE_OUTPUT
from importlib.metadata import entry_points

found = [f"{ep.name} = {ep.value}  (from {ep.dist.name} {ep.dist.version})"
         for ep in entry_points(group="jax_plugins")]
print(found or "no jax_plugins entry point: not pip-installed, JAX finds the plugin by path")

# %% [markdown]
# When the package is installed in editable mode **both routes find the same module name**,
# `jax_plugins.workshop`. JAX collects the names in a set, imports each module once and calls
# its `initialize()`. `initialize()` is still written to be idempotent, because nothing stops
# a second call: you may call it yourself (to register before JAX's discovery runs, as shown
# below), and another JAX version or another install layout may reach the module twice.
# Registering a PJRT plugin twice is an error (`ALREADY_EXISTS`); calling `initialize()` twice
# is not.
#
# ## Initialize: what `initialize()` registers
#
# `jax_plugins/workshop/__init__.py` keeps the registration light, as the guide asks (JAX calls
# `initialize()` for every installed plugin, selected or not): it loads OpenBLAS (which the
# library links), lets JAX lower buffer donation for the `workshop` platform, and calls
#
# ```python
# xla_bridge.register_plugin("workshop", priority=PRIORITY, library_path=library_path(),
#                            options=client_options)
# ```
#
# `register_plugin` `dlopen`s the library, calls `GetPjrtApi` and registers a backend
# *factory*. Everything else waits until the backend is first used: jaxlib checks the plugin's
# API version, calls `PJRT_Plugin_Initialize`, and creates the client with
# `PJRT_Client_Create`, which receives the options as a list of named values. `options` may
# be a function, called when the client is created: ours returns `DEFAULT_OPTIONS`, plus two
# more when `jax.distributed` connects several processes (notebook 07).

# %%
import jax_plugins.workshop as workshop

print("platform:", workshop.PLATFORM_NAME)
print("priority:", workshop.PRIORITY, "(JAX's built-in cpu backend has priority 0)")
print("client create options:", workshop.DEFAULT_OPTIONS)
print("library:", Path(workshop.library_path()).relative_to(ROOT))
print("registered:", workshop._registered)

# %% [markdown]
# ## Discovery is lazy
#
# Importing JAX does not discover plugins; the first call that needs a backend
# (`jax.devices()`, the first array, the first `jit`) does. Select the platforms first:
# `jax.config.update("jax_platforms", ...)` is the in-program form of the `JAX_PLATFORMS`
# environment variable. `"workshop,cpu"` initializes both, with `workshop` as the default
# device and JAX's own CPU backend beside it (the tests use this to compare results).

# %%
import jax
from jax._src import xla_bridge

jax.config.update("jax_platforms", "workshop,cpu")
print("after import jax: plugins discovered:", xla_bridge._plugins_registered,
      "| workshop registered:", workshop._registered)

# %% [markdown]
# The first `jax.devices()` runs discovery, `initialize()`, and creates the clients. The
# warning is expected: JAX calls every plugin outside its own short list experimental.

# %%
print(jax.devices())
print("plugins discovered:", xla_bridge._plugins_registered,
      "| workshop registered:", workshop._registered)
print("default backend:", jax.default_backend(), "| backends:", sorted(xla_bridge.backends()))

# %% [markdown]
# From now on the selection is fixed for this process: changing `jax_platforms` again has no
# effect on the backends that exist.

# %%
jax.config.update("jax_platforms", "cpu")
print("default backend:", jax.default_backend())

# %% [markdown]
# ## Select: other choices, each in a fresh process
#
# `run_python` runs a snippet in a new interpreter with a clean environment (no inherited
# `JAX_*`/`XLA_*` variables) plus the variables given, and prints what it prints (and the last
# line of the error, if it fails).

# %%
import subprocess
import textwrap

def environment(**env):
  """This process's environment without JAX_/XLA_/PJRT_ variables, plus `env`."""
  clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "PJRT_"))}
  path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
  return clean | {"PYTHONPATH": os.pathsep.join(path)} | env

def run_python(source, **env):
  """Runs `source` in a fresh Python with the repository on its path and `env` set."""
  result = subprocess.run([sys.executable, "-c", textwrap.dedent(source)],
                          env=environment(**env), capture_output=True, text=True)
  print(result.stdout, end="")
  if result.returncode:
    print("error:", result.stderr.strip().splitlines()[-1])

SHOW = """
import jax
from jax._src import xla_bridge
print(f"default: {jax.default_backend():<8} backends: {sorted(xla_bridge.backends())}, "
      f"{jax.device_count()} default devices")
"""

# %% [markdown]
# **Nothing selected**: JAX initializes every backend it can and makes the one with the highest
# priority the default. Our priority (500) is above the CPU backend's (0), so simply installing
# the plugin makes it JAX's default device.

# %%
run_python(SHOW)

# %% [markdown]
# **`JAX_PLATFORMS`** names the backends to initialize, in order of preference; the order
# overrides the priorities. Unlisted plugins are still discovered and registered, but their
# clients are never created.

# %%
for platforms in ["workshop", "workshop,cpu", "cpu,workshop", "cpu"]:
  print(f"JAX_PLATFORMS={platforms:<13}", end=" ")
  run_python(SHOW, JAX_PLATFORMS=platforms)

# %% [markdown]
# Selecting only `workshop` means there is no CPU backend to fall back on or to compare with:

# %%
run_python("""
import jax
print(jax.devices())
jax.devices("cpu")
""", JAX_PLATFORMS="workshop")

# %% [markdown]
# **Priority** decides the default when nothing is selected. A plugin registered below the CPU
# backend is available but not the default (here we lower `PRIORITY` before JAX's discovery
# calls `initialize()`):

# %%
run_python("""
import jax_plugins.workshop as workshop
workshop.PRIORITY = -100
""" + SHOW)

# %% [markdown]
# **Client create options** reach `PJRT_Client_Create` as named values. The defaults come from
# `register_plugin(options=...)`, which reads `WORKSHOP_NUM_DEVICES`: set the device count
# that way, as it reaches this plugin only. `jax_pjrt_client_create_options` (or the
# environment variable `JAX_PJRT_CLIENT_CREATE_OPTIONS`), `"key:value;key:value"`, overrides
# them, but for every plugin of the process (a TPU plugin refuses `num_devices`). Ours takes
# two for one process, `num_devices` and `device_memory_limit` (bytes per device memory, 0
# for none), and the ones `jax.distributed` sets for several processes (notebook 07). Other
# names are ignored (JAX sets some for every plugin on a Cloud TPU host); a near miss of ours
# is an error that names it and lists the supported ones, raised when the backend is
# created (the last run below).

# %%
run_python(SHOW, JAX_PLATFORMS="workshop", WORKSHOP_NUM_DEVICES="2")
run_python("""
import jax
jax.config.update("jax_pjrt_client_create_options", "num_devices:8")
print(jax.devices())
""", JAX_PLATFORMS="workshop")
run_python(SHOW, JAX_PLATFORMS="workshop", JAX_PJRT_CLIENT_CREATE_OPTIONS="num_devices:2;num_devics:3")

# %% [markdown]
# ## Why `initialize()` must be idempotent
#
# Calling `initialize()` yourself registers the plugin before JAX's discovery; discovery then
# calls it again, which does nothing. Calling `register_plugin` a second time for the same
# platform fails: jaxlib keeps one `PJRT_Api` per platform name. JAX's discovery catches
# what an `initialize()` raises and only logs it ("Jax plugin configuration error", on
# stderr), so the cell below shows JAX's warnings in its output: without the guard, the
# discovery's call logs that error, though the devices look the same.

# %%
run_python("""
import logging, sys
import jax
from jax._src import xla_bridge
import jax_plugins.workshop as workshop

class ShowWarning(logging.Handler):  # JAX's warnings here, first line only
  def emit(self, record):
    error = f" ({str(record.exc_info[1]).splitlines()[0]})" if record.exc_info else ""
    print("JAX logged:", record.getMessage() + error)

logging.getLogger("jax._src.xla_bridge").addHandler(ShowWarning(logging.WARNING))
workshop.initialize()   # registers now
print(jax.devices())    # discovery calls initialize() again: a no-op
try:
  xla_bridge.register_plugin("workshop", library_path=workshop.library_path())
except Exception as e:
  print(type(e).__name__, e)
""", JAX_PLATFORMS="workshop")

# %% [markdown]
# ## Exercise: make `initialize()` idempotent
#
# The guard that makes the second call a no-op is yours to write: the lines between the
# markers `# exercise initialize_guard` at the top of `initialize()`
# (`jax_plugins/workshop/__init__.py`). The module-level flag `_registered` is set at the
# end of a successful registration (the function declares it `global` just above the
# markers); a call that fails half-way leaves it false, so that a later call tries again.
# Without the guard the plugin still works when JAX alone calls `initialize()` once, but a
# user's early call followed by JAX's discovery registers twice (the cell above then
# shows JAX's "Jax plugin configuration error").
#
# The exercise is named `initialize_guard`. In the reader's version of the notebooks
# (`python -m jax_plugins.workshop.teach.notebook reader reader`) the cell starts from
# `notebooks/exercises/initialize_guard.py`, a `TODO`; in `notebooks/` it holds the worked
# solution. To start over: `notebook.reset_exercise("initialize_guard")` writes the
# starting point back into the file, and `print(notebook.starting_point("initialize_guard"))`
# shows it, to paste into the cell; to get the worked solution back:
# `git checkout -- jax_plugins/workshop/__init__.py`.

# %% exercise="initialize_guard" tags=["solution"]
notebook.write_source("jax_plugins/workshop/__init__.py#initialize_guard", r'''
if _registered:  # JAX's discovery or a user called this before: nothing to do
    return
''')

# %% [markdown]
# This process has registered the plugin already, with the module as it was when JAX
# imported it, so the check runs in fresh processes: one calls `initialize()` twice by hand
# and then lets JAX discover the plugin (a third call); one makes the first call fail
# half-way (as a missing library would) and then lets JAX's discovery call it again, which
# must register.

# %% exercise="initialize_guard"
def check_initialize_guard():
  """Fails with what is wrong, if initialize() is not idempotent or no longer registers."""
  import json
  twice = json.loads(notebook.run_fresh("""
    import json, jax
    import jax_plugins.workshop as workshop
    found = {}
    for call in ("first", "second"):
      try:
        workshop.initialize()
        found[call] = workshop._registered
      except Exception as e:
        found[call] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        break
    found["devices"] = [d.platform for d in jax.devices()] if found.get("second") else []
    print(json.dumps(found))
    """, platforms="workshop"))
  if isinstance(twice["first"], str):
    raise AssertionError(f"the first initialize() fails ({twice['first']}): the guard must "
                         "let the first call through to register_plugin")
  if twice["first"] is not True:
    raise AssertionError("the first initialize() returned without registering (_registered "
                         "is still false): return only when _registered is already true")
  if isinstance(twice["second"], str):
    raise AssertionError(f"the second initialize() fails ({twice['second']}): return at once "
                         "when _registered is already true")
  if twice["devices"] != ["workshop"] * 4:
    raise AssertionError(f"after two calls JAX sees {twice['devices']}")
  retry = json.loads(notebook.run_fresh("""
    import json, jax
    import jax_plugins.workshop as workshop
    library_path = workshop.library_path
    def missing():
      raise FileNotFoundError("the library is not built (simulated)")
    workshop.library_path = missing
    try:
      workshop.initialize()
    except FileNotFoundError:
      pass
    workshop.library_path = library_path
    try:
      print(json.dumps([d.platform for d in jax.devices()]))  # discovery calls it again
    except Exception as e:
      print(json.dumps(f"{type(e).__name__}: {str(e).splitlines()[0]}"))
    """, platforms="workshop"))
  if retry != ["workshop"] * 4:
    raise AssertionError(f"after a first initialize() that failed, JAX's discovery gets "
                         f"{retry}: a failed call must leave _registered false (set it only "
                         "after register_plugin succeeded, as the code below the markers "
                         "does), so that the next call registers")
  print("initialize() twice, then JAX's discovery: one registration, devices",
        twice["devices"], "; after a failed first call, the next one registers")

check_initialize_guard()

# %% [markdown]
# ## Watch it happen
#
# With `JAX_LOGGING_LEVEL=DEBUG`, JAX logs each step, and jaxlib's C++ side reports the PJRT API
# versions: the plugin was built against 0.81 and jaxlib against a newer header; jaxlib accepts
# the older plugin and uses only what a 0.81 table has. (Timestamps and process ids are stripped; the
# entry-point line, which appears only when the package is installed, is left out.)

# %%
import re

STEPS = ("Discovered path based", "Loading plugin module", "registering PJRT plugin",
         "GetPjrtApi was found", "PJRT API version", "Initializing backend 'workshop'",
         "Backend 'workshop' initialized")
log = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                     env=environment(JAX_PLATFORMS="workshop", JAX_LOGGING_LEVEL="DEBUG"),
                     capture_output=True, text=True, check=True).stderr
for line in log.splitlines():
  if any(step in line for step in STEPS):
    message = re.split(r"^\w+:\S+ \S+:[\w.]+:\d+: |^[IWE]\d{4} \S+ +\d+ \S+\] ", line)[-1]
    print(message.replace(str(ROOT), "<repo>"))

# %% [markdown]
# Next, notebook **03** checks what JAX sees of the plugin and runs the guide's tests.
