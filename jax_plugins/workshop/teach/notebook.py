"""What every workshop notebook needs before its first lesson, in one place.

    from jax_plugins.workshop.teach import notebook
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
    "its notebooks/ folder (git clone, then pip install -e '.[workshop]')"
  )


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
  A failed build leaves the previous library in place, so it is recorded
  (`check_last_build`): an exercise's check must not pass on the library of an earlier
  good attempt.

  Raises:
    RuntimeError: the build failed (its error lines are printed as they come; with
      `quiet`, the message holds the compiler's output).
  """
  root = repository_root() if root is None else root
  start = time.perf_counter()
  build = subprocess.Popen(
    [sys.executable, "setup.py", "build_ext", "--inplace"],
    cwd=root,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  compiled, log, linked = [], [], False
  for line in build.stdout:
    log.append(line)
    if source := re.search(r" -c (\S+\.cc) ", line):
      compiled.append(source[1])
      if not quiet:
        print(f"[{time.perf_counter() - start:5.1f} s] compiling {source[1]}", flush=True)
    elif re.search(r" -shared .* -o \S+", line):
      linked = True
      if not quiet:
        print(f"[{time.perf_counter() - start:5.1f} s] linking", flush=True)
    elif (
      re.search(r"\berror\b", line) and not line.startswith("error: Command") and not quiet
    ):  # the compiler's errors, not setuptools' repeat of the command
      print(line.rstrip(), flush=True)
  if build.wait() != 0:
    _record_build(root, "plugin", failed=True)
    # The error lines are on screen already; the message repeats them only when quiet.
    raise RuntimeError(
      "the build failed"
      + (":\n" + "".join(log[-60:]) if quiet else ": the compiler's errors are printed above")
    )
  _record_build(root, "plugin", failed=False)
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
  proc = subprocess.run(
    [sys.executable, "-c", textwrap.dedent(code)],
    env=env,
    cwd=root,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  if proc.returncode != 0:
    raise RuntimeError(f"the fresh process failed (exit {proc.returncode}):\n{proc.stderr}")
  return proc.stdout


def build_ffi_library(source: str, root: Path | None = None) -> Path:
  """Compiles one C++ file of XLA FFI handlers into a shared library; returns its path.

  `source` is relative to the repository. The library is build/ffi/<stem>-<hash>.so, the
  hash that of the source: a changed source is a new file, which a process that loaded the
  old one can load too (dlopen of a path already loaded returns the loaded copy). Flags:
  C++17, -O3, the FFI headers of the installed jaxlib (jax.ffi.include_dir()).

  Raises:
    RuntimeError: the compiler failed; the message holds its output.
  """
  import hashlib

  import jax

  root = repository_root() if root is None else root
  path = root / source
  digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
  library = root / "build" / "ffi" / f"{path.stem}-{digest}.so"
  if library.exists():
    _record_build(root, source, failed=False)
    return library
  library.parent.mkdir(parents=True, exist_ok=True)
  command = [
    os.environ.get("CXX", "g++"),
    "-std=c++17",
    "-O3",
    "-shared",
    "-fPIC",
    "-I",
    jax.ffi.include_dir(),
    str(path),
    "-o",
    str(library),
  ]
  build = subprocess.run(command, capture_output=True, text=True)
  if build.returncode != 0:
    library.unlink(missing_ok=True)
    _record_build(root, source, failed=True)
    raise RuntimeError(f"compiling {source} failed:\n{build.stderr[-4000:]}")
  _record_build(root, source, failed=False)
  return library


def _build_marker(root: Path, target: str) -> Path:
  """The file whose presence says the last build of `target` failed ("plugin", or an
  FFI source's path)."""
  return root / "build" / "failed" / re.sub(r"[^\w.-]", "_", target)


def _record_build(root: Path, target: str, *, failed: bool) -> None:
  marker = _build_marker(root, target)
  if failed:
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
  else:
    marker.unlink(missing_ok=True)


def check_last_build(target: str = "plugin", root: Path | None = None) -> None:
  """Raises AssertionError if the last build of `target` failed.

  `target` is "plugin" (`rebuild`) or the source given to `build_ffi_library`. The library
  of an earlier good build is still on disk then, and an exercise's check would pass on it.
  """
  root = repository_root() if root is None else root
  if _build_marker(root, target).exists():
    what = "the plugin" if target == "plugin" else target
    raise AssertionError(
      f"the last build of {what} failed: fix the compiler error above and rerun the build cell"
    )


# ---- exercises ----
#
# An exercise is a part of the plugin's sources that the reader writes: a whole file, or
# the lines of a file between the markers `# exercise NAME: begin` and `# exercise NAME:
# end` (a block, for a shared file such as the op table), named "path#NAME". The
# repository holds the worked solution in place (so the plugin is complete and CI runs the
# notebooks with it) and the reader's starting point in notebooks/exercises/<exercise><ext>.
# In a notebook, the cell that writes it carries the cell tag "solution" and the cell
# metadata "exercise"; `strip_solutions` turns a notebook into the reader's version, whose
# cell writes the starting point instead. An exercise with no file (None below) is answered
# in the notebook itself: its solution cell is replaced by the starting point as a whole.

EXERCISES = {
  # exercise name: the plugin source the reader writes (notebook)
  "device_attributes": "plugin_src/capi/device_attributes.cc",  # 01
  "initialize_guard": "jax_plugins/workshop/__init__.py#initialize_guard",  # 02
  "approx_top_k_spec": "jax_plugins/workshop/compiler/optable.py#approx_top_k",  # 03
  "approx_top_k_rule": "jax_plugins/workshop/compiler/rules/approx_top_k.py",  # 03
  "approx_top_k_kernel": "plugin_src/kernels/approx_top_k.cc",  # 03
  "approx_top_k_test": "tests/ops/test_approx_top_k.py",  # 03
  "matmul_sharding": None,  # 04: a PartitionSpec chosen in the notebook
  "device_memory_stats": "plugin_src/capi/device_memory_stats.cc",  # 05
  "hard_silu_kernel": "notebooks/ffi_kernels/hard_silu.cc",  # 06
  "average_gradients": "jax_plugins/workshop/extensions/multiprocess.py#average_gradients",  # 07
  "maximum_op": None,  # 08: the op's pieces, written into the generated project
}


def _block(lines: list[str], name: str, path: str) -> tuple[int, int, str]:
  """(first line, end line, indentation) of block `name`'s contents in `lines`."""
  begin = [
    i
    for i, line in enumerate(lines)
    if re.fullmatch(rf"# exercise {name}: begin\b.*", line.strip())
  ]
  end = [i for i, line in enumerate(lines) if line.strip() == f"# exercise {name}: end"]
  if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
    raise ValueError(
      f"{path} must hold one '# exercise {name}: begin' line and one "
      f"'# exercise {name}: end' line after it"
    )
  marker = lines[begin[0]]
  return begin[0] + 1, end[0], marker[: len(marker) - len(marker.lstrip())]


def read_source(path: str, root: Path | None = None) -> str:
  """The text of `path` (relative to the repository), or of its block "path#NAME"
  (dedented)."""
  file, _, name = path.partition("#")
  text = ((repository_root() if root is None else root) / file).read_text()
  if not name:
    return text
  lines = text.splitlines(keepends=True)
  first, end, _ = _block(lines, name, file)
  return textwrap.dedent("".join(lines[first:end]))


def write_source(path: str, text: str, root: Path | None = None) -> None:
  """Writes `text` to `path` (relative to the repository) unless it already holds it.

  `path` "file#NAME" replaces the lines between the file's markers of block NAME, indented
  as the begin marker. Leaving an unchanged file alone keeps its timestamp, so the next
  rebuild has nothing to compile. Returns None, so that a cell ending with this call shows
  nothing.

  Raises:
    ValueError: the file lacks block NAME's markers.
  """
  root = repository_root() if root is None else root
  file, _, name = path.partition("#")
  target = root / file
  text = textwrap.dedent(text).lstrip("\n")
  if name:
    lines = target.read_text().splitlines(keepends=True)
    first, end, indent = _block(lines, name, file)
    block = [indent + line if line.strip() else line for line in text.splitlines(keepends=True)]
    text = "".join(lines[:first] + block + lines[end:])
  if target.exists() and target.read_text() == text:
    return
  target.write_text(text)


def starting_point(exercise: str, root: Path | None = None) -> str:
  """The reader's starting point for `exercise` (notebooks/exercises/<exercise><ext>)."""
  root = repository_root() if root is None else root
  path = EXERCISES[exercise]
  suffix = Path(path.partition("#")[0]).suffix if path else ".py"  # None: a notebook cell
  return (root / "notebooks" / "exercises" / f"{exercise}{suffix}").read_text()


def reset_exercise(exercise: str, root: Path | None = None) -> None:
  """Puts the starting point of `exercise` back in the plugin's sources (then rebuild).

  To get the worked solution back instead: `git checkout -- <file>` in the repository, or
  `python -m jax_plugins.workshop.teach.notebook solutions` for all of them.

  Raises:
    ValueError: `exercise` is answered in its notebook (no file to reset).
  """
  root = repository_root() if root is None else root
  if EXERCISES[exercise] is None:
    raise ValueError(
      f"{exercise!r} has no file: its starting point is "
      f"notebooks/exercises/{exercise}.py, to paste into its cell"
    )
  write_source(EXERCISES[exercise], starting_point(exercise, root), root)


# The call a solution cell makes: notebook.write_source("path", r'''<newline>text''').
_WRITE = re.compile(r"""notebook\.write_source\((['"])(.+?)\1, r'''\n(.*?)'''\)""", re.S)


def strip_solutions(nb: dict, root: Path | None = None) -> dict:
  """The reader's version of a notebook (nbformat dict).

  Each cell tagged "solution" writes its exercise's starting point instead of the
  solution (the rest of the cell, e.g. the rebuild, stays) and its first line becomes an
  invitation to write the exercise; the cell of an exercise without a file becomes its
  starting point. The tag goes. Outputs and execution counts that depend on the
  solutions are dropped: those of every code cell with "exercise" metadata (the solution
  cells, their checks, cells whose output shows the solved plugin).

  Raises:
    ValueError: a solution cell does not call write_source on its exercise's path.
  """
  import copy
  import json

  nb = copy.deepcopy(nb)
  for cell in nb["cells"]:
    metadata = cell.get("metadata", {})
    metadata.pop("execution", None)  # nbconvert's timestamps of the solution's run
    if "exercise" in metadata and cell["cell_type"] == "code":
      cell["outputs"] = []
      cell["execution_count"] = None
    if "solution" not in metadata.get("tags", []):
      continue
    metadata["tags"] = [tag for tag in metadata["tags"] if tag != "solution"]
    if not metadata["tags"]:
      del metadata["tags"]
    exercise = metadata["exercise"]
    start = starting_point(exercise, root)
    source = "".join(cell["source"])
    if EXERCISES[exercise] is None:
      source = start.rstrip("\n")
    else:
      found = _WRITE.search(source)
      if found is None or found[2] != EXERCISES[exercise]:
        raise ValueError(
          f"the solution cell of {exercise!r} must call "
          f"notebook.write_source({EXERCISES[exercise]!r}, r'''...''')"
        )
      source = (
        f"# Write your version of {EXERCISES[exercise]} here, then run this cell.\n"
        f"notebook.write_source({EXERCISES[exercise]!r}, r'''\n{start}''')" + source[found.end() :]
      )
    cell["source"] = source.splitlines(keepends=True)
    json.dumps(cell)  # still serializable
  return nb


def _exercise_files() -> list[str]:
  """The files the exercises write, each once, relative to the repository."""
  return sorted({path.partition("#")[0] for path in EXERCISES.values() if path})


def main(argv: list[str] | None = None) -> None:
  """The reader's version of the workshop, and the way back.

  `reader OUT_DIR` writes the reader's version of every notebook (solutions replaced by
  starting points) into OUT_DIR, which must be inside the repository (the notebooks find
  it from their folder) and outside notebooks/ (the README's test command runs every
  notebook there), and puts every exercise's starting point in the sources, so that the
  checkout no longer shows the answers. The plugin builds in that state (notebook 01's
  build cell builds it) and each notebook runs up to its exercises. A second `reader` into
  the same OUT_DIR refuses (it would overwrite the attendee's work) unless --force.

  `solutions` puts the worked solutions back in the sources (`git checkout` of the
  exercises' files; rebuild afterwards).
  """
  import argparse
  import json

  parser = argparse.ArgumentParser(
    description=main.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument("command", choices=["reader", "solutions"])
  parser.add_argument("out_dir", type=Path, nargs="?")
  parser.add_argument(
    "--force",
    action="store_true",
    help="reader: overwrite notebooks already in OUT_DIR and reset every "
    "exercise's source to its starting point (your edits are lost)",
  )
  args = parser.parse_args(argv)
  root = repository_root(Path(__file__).resolve().parent)
  if args.command == "solutions":
    files = _exercise_files()
    subprocess.run(["git", "checkout", "--", *files], cwd=root, check=True)
    print("the worked solutions are back in:", *files, sep="\n  ")
    print('rebuild the plugin: notebook.rebuild() in a notebook, or pip install -e ".[workshop]"')
    return
  if args.out_dir is None:
    parser.error("reader needs OUT_DIR (e.g. `reader`)")
  out = args.out_dir.resolve()
  if root not in out.parents or (root / "notebooks") in (out, *out.parents):
    parser.error(
      f"{args.out_dir} must be inside {root} and outside its notebooks/ folder (e.g. `reader`)"
    )
  existing = sorted(
    p.name for p in (root / "notebooks").glob("*.ipynb") if (args.out_dir / p.name).exists()
  )
  if existing and not args.force:
    # A second `reader` would overwrite an attendee's notebooks and exercise sources.
    parser.error(
      f"{args.out_dir} already holds {', '.join(existing)}: running `reader` again "
      "would overwrite them and reset your exercise sources. To reset one exercise, "
      "see reset_exercise in the notebook; to start over, add --force"
    )
  args.out_dir.mkdir(parents=True, exist_ok=True)
  for path in sorted((root / "notebooks").glob("*.ipynb")):
    nb = strip_solutions(json.loads(path.read_text()), root)
    (args.out_dir / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    print("notebook", args.out_dir / path.name)
  for exercise, path in EXERCISES.items():
    if path:
      reset_exercise(exercise, root)
      print(f"starting point of {exercise} in {path}")
  print(
    f"Open the notebooks in {args.out_dir} (jupyter lab {args.out_dir}); run notebook 01 "
    "first, its build cell builds the plugin without the solutions. To get the worked "
    "solutions back: `python -m jax_plugins.workshop.teach.notebook solutions` (or "
    "`git checkout -- .`), then rebuild."
  )


if __name__ == "__main__":
  main()
