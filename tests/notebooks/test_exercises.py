"""The notebooks' exercises: their solutions are the shipped sources, and their checks fail.

Each exercise cell (tag "solution") writes a plugin source file. Run as stored, it must write
exactly what the repository holds, or running the notebooks would change the plugin. In
the reader's version (`notebook.strip_solutions`) the cell writes the starting point instead;
built that way, the plugin must fail the notebook's own check cell with its message, so the
check can fail. That build happens in a copy of the repository, objects included, so only
the exercise's file compiles. An exercise answered in its notebook (04's sharding) has no
file: the reader's cell and the check run after the notebook's set-up in a fresh process.
Checks get only what a notebook's first cell defines (`notebook`, `ROOT`) and import the
rest themselves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from jax_plugins.workshop.teach import notebook

ROOT = Path(__file__).resolve().parents[2]


def _exercise_cells():
  """(notebook path, exercise, solution cell source, check cell source) for every exercise.

  The check source is preceded by the notebook's cells tagged "exercise_setup" above it
  (definitions the checks share, e.g. the program an exercise makes run); for an exercise
  answered in the notebook, a placeholder line marks where its solution cell goes.
  """
  found = []
  for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
    cells = json.loads(path.read_text())["cells"]
    for i, cell in enumerate(cells):
      if "solution" in cell.get("metadata", {}).get("tags", []):
        j = next(j for j in range(i + 1, len(cells)) if cells[j]["cell_type"] == "code"
                 and "def check_" in "".join(cells[j]["source"]))
        # An exercise answered in the notebook runs its solution cell between the two.
        placeholder = [] if notebook.EXERCISES[cell["metadata"]["exercise"]] else [
            "# <the solution cell>\n"]
        setup = "".join(["".join(c["source"]) + "\n" for c in cells[:i]
                         if "exercise_setup" in c.get("metadata", {}).get("tags", [])]
                        + placeholder +
                        ["".join(c["source"]) + "\n" for c in cells[i + 1:j]
                         if "exercise_setup" in c.get("metadata", {}).get("tags", [])])
        check = "".join(cells[j]["source"])
        found.append((path, cell["metadata"]["exercise"], "".join(cell["source"]),
                      setup + check))
  return found


EXERCISE_CELLS = _exercise_cells()


def test_every_exercise_is_in_a_notebook():
  assert sorted(e for _, e, _, _ in EXERCISE_CELLS) == sorted(notebook.EXERCISES)


@pytest.mark.parametrize("path,exercise,solution,check", EXERCISE_CELLS,
                         ids=[e for _, e, _, _ in EXERCISE_CELLS])
def test_solution_cell_writes_the_shipped_source(path, exercise, solution, check):
  written = {}

  class Recorder:
    def write_source(self, file, text, root=None):
      written[file] = textwrap.dedent(text).lstrip("\n")

    def rebuild(self, *args, **kwargs):
      return []

    def build_ffi_library(self, source, root=None):
      return ROOT / "build" / "ffi" / Path(source).name

  file = notebook.EXERCISES[exercise]
  if file is None:  # answered in the notebook: its cell is the solution
    assert notebook.starting_point(exercise, ROOT).strip() not in solution
    return
  exec(solution, {"notebook": Recorder(), "ROOT": ROOT})
  assert written[file] == notebook.read_source(file, ROOT), (
      f"{path.name}: the solution cell of {exercise!r} differs from {file}")
  assert notebook.starting_point(exercise, ROOT) != written[file]


@pytest.mark.parametrize("path,exercise,solution,check", EXERCISE_CELLS,
                         ids=[e for _, e, _, _ in EXERCISE_CELLS])
def test_check_fails_on_the_starting_point(tmp_path, monkeypatch, path, exercise, solution,
                                           check):
  library = Path(notebook.__file__).parent.parent
  reader = notebook.strip_solutions(
      {"cells": [{"cell_type": "code", "metadata": {"tags": ["solution"],
                                                    "exercise": exercise},
                  "source": solution, "outputs": []}]}, ROOT)
  reader_cell = "".join(reader["cells"][0]["source"])
  if notebook.EXERCISES[exercise] is None:
    # Answered in the notebook: the notebook's set-up, the reader's cell and the check,
    # in a fresh process (the check needs its own JAX backends).
    script = tmp_path / "exercise.py"
    script.write_text(check.replace("# <the solution cell>", reader_cell))
    run = subprocess.run([sys.executable, str(script)], cwd=ROOT / "notebooks",
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode != 0, run.stdout
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith("AssertionError: "), run.stderr[-2000:]
    assert len(message) > 60 and re.search(r"\w+ \w+ \w+", message)
    return
  if not list(library.glob("_plugin*.so")) or not (ROOT / "build").is_dir():
    pytest.skip("needs an in-place build with its objects in build/")
  copy = tmp_path / "repo"
  _copy_checkout(copy, with_build=True)
  # The reader's version of the exercise cell, run in the copy.
  monkeypatch.chdir(copy)
  # What the notebook's first cell defines; a check imports everything else it uses, so
  # that it runs after a kernel restart.
  namespace = {"notebook": notebook, "ROOT": copy}
  exec(reader_cell, namespace)
  assert notebook.read_source(notebook.EXERCISES[exercise], copy) == \
      notebook.starting_point(exercise, ROOT)
  # The check cell defines check_<name>() and calls it last; it must fail with a message.
  with pytest.raises(AssertionError) as failure:
    exec(check, namespace)
  assert len(str(failure.value)) > 40 and re.search(r"\w+ \w+ \w+", str(failure.value))


def _copy_checkout(dest, with_build):
  """Copies the checkout to `dest` without what a reader keeps beside the sources: git's
  data, caches, notebooks, and any virtual environment (a folder with a pyvenv.cfg, such
  as the README's .venv, 2-3 GB: ten copies of it filled the disk). `with_build`: keep
  build/ (the objects an incremental rebuild of the copy needs)."""
  names = {".git", "bench_results", "__pycache__", ".device", "reader", ".hypothesis",
           ".pytest_cache", ".benchmarks"}
  if not with_build:
    names.add("build")

  def ignore(folder, entries):
    return [e for e in entries
            if e in names or e.endswith((".ipynb", ".egg-info"))
            or (os.path.isdir(os.path.join(folder, e))
                and os.path.exists(os.path.join(folder, e, "pyvenv.cfg")))]

  shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)


# Wrong answers a reader is likely to write, and what the check must say about each (a
# fragment of its message). Python exercises only: a C++ one would rebuild the plugin.
WRONG_ANSWERS = [
    ("average_gradients", 'return jax.lax.all_gather(grads, ("proc", "local"))\n',
     "new weights have shape (4, 4, 3), not that of w, (4, 3)"),
    ("average_gradients", 'return jax.lax.pmean(grads, "i")\n',
     "The mesh axes are 'proc' and 'local'"),
    ("average_gradients",
     'return jax.lax.pmean(grads, "proc") + jax.lax.pmean(grads, "local")\n',
     "all 4 devices ended with different weights"),
    ("approx_top_k_spec",
     'OpSpec("approx_top_k", "approx_top_k", WIDE_FLOATS, IN_F32, cost="sort"),\n',
     "cost='sort' is not a cost class; cost.py knows 'elementwise'"),
    # The rule written but not registered: the check names the registration, not (as the
    # compiler's message for an unknown custom call may) an FFI handler.
    ("approx_top_k_rule",
     notebook.read_source(notebook.EXERCISES["approx_top_k_rule"], ROOT).replace(
         'CUSTOM_CALLS["ApproxTopK"] = _approx_top_k\n', ""),
     'the compiler has no lowering rule for custom_call @ApproxTopK: rules/approx_top_k.py '
     'must define the rule and register it, CUSTOM_CALLS["ApproxTopK"]'),
    ("approx_top_k_rule", "def _approx_top_k(ctx, op)\n",
     "the compiler does not load with rules/approx_top_k.py: SyntaxError"),
]


@pytest.mark.parametrize("exercise,answer,message", WRONG_ANSWERS,
                         ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(WRONG_ANSWERS)])
def test_check_explains_a_wrong_answer(tmp_path, monkeypatch, exercise, answer, message):
  (check,) = [c for _, e, _, c in EXERCISE_CELLS if e == exercise]
  copy = tmp_path / "repo"
  _copy_checkout(copy, with_build=False)
  monkeypatch.chdir(copy / "notebooks")
  notebook.write_source(notebook.EXERCISES[exercise], answer, copy)
  with pytest.raises(AssertionError) as failure:
    exec(check, {"notebook": notebook, "ROOT": copy})
  assert message in str(failure.value)


def test_maximum_check_explains_lost_nans(tmp_path):
  # Notebook 08's exercise, answered with the likely slip: `a > b ? a : b` compiles, runs
  # and is right except where a is NaN; the check must say that. It runs like the reader's
  # cell above (the notebook's set-up, this cell, the check, in a fresh process).
  ((check, solution),) = [(c, s) for _, e, s, c in EXERCISE_CELLS if e == "maximum_op"]
  wrong = solution.replace("return a != a ? a : (a > b ? a : b);", "return a > b ? a : b;")
  assert wrong != solution
  script = tmp_path / "exercise.py"
  script.write_text(check.replace("# <the solution cell>", wrong))
  run = subprocess.run([sys.executable, str(script)], cwd=ROOT / "notebooks",
                       capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert run.returncode != 0, run.stdout
  message = run.stderr.strip().splitlines()[-1]
  assert message.startswith("AssertionError: f32: got "), run.stderr[-2000:]
  assert "a > b is false when a is NaN" in message


def test_a_failed_build_fails_the_check_until_a_build_succeeds(tmp_path):
  # A failed build leaves the previous library in place; the checks must not pass on it.
  source = tmp_path / "kernel.cc"
  source.write_text('extern "C" int Answer() { return 42; }\n')
  library = notebook.build_ffi_library("kernel.cc", tmp_path)
  notebook.check_last_build("kernel.cc", tmp_path)  # built: nothing to say
  source.write_text('extern "C" int Answer() { return 42 }\n')  # the ';' missing
  with pytest.raises(RuntimeError, match="kernel.cc"):
    notebook.build_ffi_library("kernel.cc", tmp_path)
  assert library.exists()  # the earlier library is still there...
  with pytest.raises(AssertionError, match="the last build of kernel.cc failed"):
    notebook.check_last_build("kernel.cc", tmp_path)  # ...and the check says so
  notebook.check_last_build("plugin", tmp_path)  # another target's record is its own
  source.write_text('extern "C" int Answer() { return 42; }\n')
  notebook.build_ffi_library("kernel.cc", tmp_path)
  notebook.check_last_build("kernel.cc", tmp_path)


def test_reader_refuses_to_overwrite_an_attendees_notebooks(capsys):
  # A second `reader` into the same folder would overwrite the attendee's notebooks and
  # reset their exercise sources; it refuses (before writing anything) unless --force.
  root = notebook.repository_root(Path(notebook.__file__).resolve().parent)
  out = Path(tempfile.mkdtemp(prefix=".reader-test-", dir=root))
  try:
    name = sorted((root / "notebooks").glob("*.ipynb"))[0].name
    (out / name).write_text("the attendee's work")
    with pytest.raises(SystemExit):
      notebook.main(["reader", str(out)])
    assert "would overwrite them" in capsys.readouterr().err
    assert (out / name).read_text() == "the attendee's work"
    assert sorted(p.name for p in out.iterdir()) == [name]
  finally:
    shutil.rmtree(out)
