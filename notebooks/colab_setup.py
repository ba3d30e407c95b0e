"""Colab set-up for the workshop notebooks (called by each notebook's first cell on Colab).

Colab comes with another jax, an older g++ and no copy of this repository. The first cell of
every notebook clones the repository to /content/pjrt-workshop and calls `main()`, which:
  1. changes into notebooks/, where the notebooks look for the repository root;
  2. if the plugin is not yet built against jax 0.10: installs g++-12 when the system g++
     is older than 12 (C++20 as the plugin uses it), runs the README's set-up command, and
     restarts the runtime, because the jax Colab had already imported is the old one.
After the restart, run all cells; the first cell then only changes directory.
"""

import os
import re
import subprocess
import sys

ROOT = "/content/pjrt-workshop"
SETUP = [sys.executable, "-m", "pip", "install", "-q", "-e", ".[workshop]"]  # the README's


def _gcc_major(compiler: str) -> int:
  out = subprocess.run([compiler, "-dumpversion"], capture_output=True, text=True).stdout
  return int(re.match(r"\d+", out)[0]) if out else 0


def _ready() -> bool:
  try:
    from importlib.metadata import version
    import importlib.util
    return (version("jaxlib").startswith("0.10.") and
            importlib.util.find_spec("jax_plugins.workshop._plugin") is not None)
  except Exception:  # not installed yet
    return False


def main() -> None:
  os.chdir(os.path.join(ROOT, "notebooks"))
  if _ready():
    print("pjrt-workshop is installed; run the notebook.")
    return
  env = dict(os.environ)
  if _gcc_major("g++") < 12:
    print("installing g++-12 (Colab's g++ is older than 12) ...", flush=True)
    subprocess.run("apt-get -qq update && apt-get -qq install -y g++-12", shell=True,
                   check=True)
    env.update(CC="gcc-12", CXX="g++-12")
  print("installing jax 0.10 and building the plugin (a few minutes) ...", flush=True)
  subprocess.run(SETUP, cwd=ROOT, env=env, check=True)
  print("installed; restarting the runtime: then run all cells.", flush=True)
  os.kill(os.getpid(), 9)  # Colab restarts a killed runtime, with the new jax importable

