"""What every workshop notebook needs before its first lesson, in one place.

    from jax_plugins.workshop import notebook
    ROOT = notebook.setup("workshop,cpu")   # the repository root, platforms chosen

``rebuild()`` recompiles the plugin from a cell (only the files that changed, with
progress), and ``run_fresh()`` runs code in a new Python process, which is how a notebook
sees a rebuilt library without restarting its kernel: a process loads a shared library
once, and ``dlopen`` of the same path returns the copy already loaded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path


def repository_root(start: Path | None = None) -> Path:
  """The pjrt-workshop checkout containing `start` (default: the working directory).

  Raises:
    FileNotFoundError: `start` is not inside a checkout (a wheel install has no sources:
      the notebooks need the repository).
  """
  start = Path.cwd() if start is None else start
  for path in (start, *start.parents):
    if (path / "setup.py").is_file() and (path / "plugin_src").is_dir():
      return path
  raise FileNotFoundError(
      f"{start} is not inside the pjrt-workshop repository: open the notebooks from "
      "its notebooks/ folder (git clone, then pip install -e '.[workshop]')")


def setup(platforms: str | None = None) -> Path:
  """Finds the repository and selects JAX platforms; returns the repository root.

  Args:
    platforms: the value for JAX_PLATFORMS ("workshop", "workshop,cpu"), or None to leave
      JAX's choice alone (notebook 02 shows what that choice is). Must run before the
      first JAX computation, which fixes the platforms of the process.
  """
  root = repository_root()
  if str(root) not in sys.path:
    sys.path.insert(0, str(root))
  if platforms is not None:
    os.environ["JAX_PLATFORMS"] = platforms
    if "jax" in sys.modules:  # imported already: the config read the old value
      sys.modules["jax"].config.update("jax_platforms", platforms)
  return root


def rebuild(root: Path | None = None, *, quiet: bool = False) -> list[str]:
  """Recompiles the plugin in place (`setup.py build_ext --inplace`) with progress.

  Only the .cc files newer than their objects, or including a changed header, compile
  (setup.py's needs_recompile); then the library is linked again. Prints one line per
  compiled file with the time since the start, and a summary.

  Returns:
    The sources that were compiled (empty when the library was up to date).
  Raises:
    RuntimeError: the build failed; the message holds the compiler's output.
  """
  root = repository_root() if root is None else root
  start = time.perf_counter()
  build = subprocess.Popen([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  compiled, log, linked = [], [], False
  for line in build.stdout:
    log.append(line)
    if (source := re.search(r" -c (\S+\.cc) ", line)):
      compiled.append(source[1])
      if not quiet:
        print(f"[{time.perf_counter() - start:5.1f} s] compiling {source[1]}", flush=True)
    elif re.search(r" -shared .* -o \S+", line):
      linked = True
      if not quiet:
        print(f"[{time.perf_counter() - start:5.1f} s] linking", flush=True)
    elif re.search(r"\berror\b", line) and not quiet:
      print(line.rstrip(), flush=True)
  if build.wait() != 0:
    raise RuntimeError("the build failed:\n" + "".join(log[-60:]))
  seconds = time.perf_counter() - start
  if not quiet:
    if compiled or linked:
      print(f"compiled {len(compiled)} file(s), linked the plugin in {seconds:.1f} s")
    else:
      print(f"up to date: no source or header is newer than the library ({seconds:.1f} s)")
  return compiled


def run_fresh(code: str, *, platforms: str = "workshop", timeout: float = 300) -> str:
  """Runs `code` in a new Python process with JAX_PLATFORMS=`platforms`; returns stdout.

  The new process loads the library as it is on disk now. Raises RuntimeError with the
  process's stderr if it fails.
  """
  env = dict(os.environ, JAX_PLATFORMS=platforms)
  root = repository_root()
  env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in [env.get("PYTHONPATH")] if p])
  proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=root,
                        capture_output=True, text=True, timeout=timeout)
  if proc.returncode != 0:
    raise RuntimeError(f"the fresh process failed (exit {proc.returncode}):\n{proc.stderr}")
  return proc.stdout


# ---- exercises ----
#
# An exercise is a source file of the plugin that the reader writes. The repository holds
# the worked solution in place (so the plugin is complete and CI runs the notebooks with it)
# and the reader's starting point in notebooks/exercises/<same file name>. In a notebook, the
# cell that writes the file carries the cell tag "solution"; `strip_solutions` turns a
# notebook into the reader's version, whose cell writes the starting point instead.

EXERCISES = {
    # exercise name: the plugin source the reader writes
    "device_attributes": "plugin_src/capi/device_attributes.cc",
}


def write_source(path: str, text: str, root: Path | None = None) -> bool:
  """Writes `text` to `path` (relative to the repository) unless it already holds it.

  Leaving an unchanged file alone keeps its timestamp, so the next rebuild has nothing to
  compile. Returns whether the file changed.
  """
  target = (repository_root() if root is None else root) / path
  text = textwrap.dedent(text).lstrip("\n")
  if target.exists() and target.read_text() == text:
    return False
  target.write_text(text)
  return True


def starting_point(exercise: str, root: Path | None = None) -> str:
  """The reader's starting point for `exercise` (notebooks/exercises/...)."""
  root = repository_root() if root is None else root
  return (root / "notebooks" / "exercises" / Path(EXERCISES[exercise]).name).read_text()


def reset_exercise(exercise: str, root: Path | None = None) -> None:
  """Puts the starting point of `exercise` back in the plugin's sources (then rebuild).

  To get the worked solution back instead: `git checkout -- <file>` in the repository.
  """
  root = repository_root() if root is None else root
  write_source(EXERCISES[exercise], starting_point(exercise, root), root)


def strip_solutions(nb: dict, root: Path | None = None) -> dict:
  """The reader's version of a notebook (nbformat dict): each cell tagged "solution"
  writes its exercise's starting point instead of the solution. The cell's metadata
  "exercise" names the exercise; its first line (a comment) is kept."""
  import copy
  import json

  nb = copy.deepcopy(nb)
  for cell in nb["cells"]:
    if "solution" not in cell.get("metadata", {}).get("tags", []):
      continue
    exercise = cell["metadata"]["exercise"]
    start = starting_point(exercise, root)
    source = (f"# Write your version of {EXERCISES[exercise]} here, then run this cell.\n"
              f"notebook.write_source({EXERCISES[exercise]!r}, r'''\n{start}''')\n"
              "compiled = notebook.rebuild(ROOT)")
    cell["source"] = source.splitlines(keepends=True)
    cell["outputs"] = []
    json.dumps(cell)  # still serializable
  return nb


def main(argv: list[str] | None = None) -> None:
  """`python -m jax_plugins.workshop.notebook reader OUT_DIR`: writes the reader's version
  of every notebook (solutions replaced by starting points) into OUT_DIR, which must be
  inside the repository (the notebooks find it from their folder) and outside notebooks/
  (the README's test command runs every notebook there, and a reader's version would put
  the exercises' starting points into the plugin's sources)."""
  import argparse
  import json

  parser = argparse.ArgumentParser(description=main.__doc__)
  parser.add_argument("command", choices=["reader"])
  parser.add_argument("out_dir", type=Path)
  args = parser.parse_args(argv)
  root = repository_root(Path(__file__).resolve().parent)
  out = args.out_dir.resolve()
  if root not in out.parents or (root / "notebooks") in (out, *out.parents):
    parser.error(f"{args.out_dir} must be inside {root} and outside its notebooks/ folder "
                 "(e.g. `reader`)")
  args.out_dir.mkdir(parents=True, exist_ok=True)
  for path in sorted((root / "notebooks").glob("*.ipynb")):
    nb = strip_solutions(json.loads(path.read_text()), root)
    (args.out_dir / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    print(args.out_dir / path.name)


if __name__ == "__main__":
  main()
