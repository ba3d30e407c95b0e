"""Start a PJRT plugin for your own device: ``python -m jax_plugins.workshop.new_device NAME DIR``.

Writes a small, separate plugin project for platform NAME into DIR (template/ here, with
NAME filled in): setup.py and pyproject.toml, the ``jax_plugins.NAME`` package
(``initialize()``, the ``jax_plugins`` entry point, the compile callback compiler.py) and
the C++ plugin in src/ (the full PJRT_Api table, a runtime of N devices with a memory and
a queue each, buffers, events, a few kernels). Two files come from this project's own
code rather than from the template: build_support.py (how pjrt_c_api.h is found, the
StableHLO versions, the PJRT_Api slot list read from the header) and the compiler's
protowire.py, so the template builds and reads options exactly as the workshop plugin.

Then, in DIR: ``python setup.py build_ext --inplace`` (about a minute on 2 cores) and
``PYTHONPATH=DIR python -m jax_plugins.workshop.teach.check --platform NAME``. docs/new_device.md
says what to replace for real hardware.
"""

from __future__ import annotations

import keyword
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "template"
_PACKAGE = Path(__file__).resolve().parent.parent  # jax_plugins/workshop
# Files written from the workshop's own sources (one source of truth): target -> source.
SHARED = {
  "build_support.py": _PACKAGE / "build_support.py",
  "jax_plugins/__NAME__/protowire.py": _PACKAGE / "compiler" / "protowire.py",
}
# Platform names JAX or jaxlib already use, and this workshop's own.
RESERVED = {"cpu", "gpu", "cuda", "rocm", "tpu", "metal", "interpreter", "workshop", "host"}


def check_name(name: str) -> None:
  """Raises ValueError unless `name` can be a platform and a Python package name."""
  if not re.fullmatch(r"[a-z][a-z0-9_]{0,30}", name):
    raise ValueError(
      f"{name!r}: a platform name is lowercase letters, digits and _, "
      "starting with a letter (it is also the Python package name)"
    )
  if keyword.iskeyword(name):
    raise ValueError(
      f"{name!r} is a Python keyword: `import jax_plugins.{name}` could not "
      "be written; choose another"
    )
  if name in RESERVED:
    raise ValueError(f"{name!r} is taken (JAX or this workshop uses it): choose another")


def files(name: str) -> dict[str, str]:
  """The project for platform `name`: relative path -> text."""
  check_name(name)
  out = {}
  for path in sorted(TEMPLATE.rglob("*")):
    if path.is_file() and "__pycache__" not in path.parts:
      out[_fill(str(path.relative_to(TEMPLATE)), name)] = _fill(path.read_text(), name)
  for target, source in SHARED.items():
    out[_fill(target, name)] = source.read_text()
  return out


def generate(name: str, directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
  """Writes the project for platform `name` into `directory`; returns its path.

  Files that already hold the right text are left alone (their timestamps decide what a
  rebuild compiles).

  Raises:
    ValueError: a bad `name`; `directory` is a file, or holds a directory where the
      project has a file; or it holds a file of the project with other text (your edits)
      and `overwrite` is False.
  """
  root = Path(directory).resolve()
  project = files(name)
  if root.exists() and not root.is_dir():
    raise ValueError(f"{root} is a file, not a directory: generate into a directory")
  clashes = [p for p in project if (root / p).exists() and not (root / p).is_file()]
  if clashes:
    raise ValueError(
      f"{root} holds {', '.join(clashes)} as directories, where the project "
      "has files: generate into another directory"
    )
  changed = [
    p for p, text in project.items() if (root / p).exists() and (root / p).read_text() != text
  ]
  if changed and not overwrite:
    raise ValueError(
      f"{root} already holds {', '.join(changed)} with other contents: "
      "generate into another directory, or pass overwrite=True (--force)"
    )
  for path, text in project.items():
    target = root / path
    if target.exists() and target.read_text() == text:
      continue
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
  return root


def build(project: str | os.PathLike, *, quiet: bool = False) -> list[str]:
  """Builds the project's plugin in place (`setup.py build_ext --inplace`), showing each
  file as it compiles; returns the sources compiled. Raises RuntimeError if it fails."""
  from ..teach import notebook

  return notebook.rebuild(Path(project), quiet=quiet)


def run(
  project: str | os.PathLike, code: str, *, platforms: str | None = None, timeout: float = 300
) -> str:
  """Runs `code` in a new Python process that finds the project's plugin (the project on
  PYTHONPATH; JAX_PLATFORMS=`platforms`, default the platform alone); returns stdout.

  Raises:
    RuntimeError: the process failed (the message holds its stderr).
  """
  project = Path(project).resolve()
  name = platform_of(project)
  env = dict(os.environ, JAX_PLATFORMS=platforms or name)
  env["PYTHONPATH"] = os.pathsep.join([str(project), *filter(None, [env.get("PYTHONPATH")])])
  proc = subprocess.run(
    [sys.executable, "-c", textwrap.dedent(code)],
    env=env,
    cwd=project,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  if proc.returncode != 0:
    raise RuntimeError(f"the fresh process failed (exit {proc.returncode}):\n{proc.stderr}")
  return proc.stdout


def platform_of(project: str | os.PathLike) -> str:
  """The platform name of a generated project (its one package under jax_plugins/)."""
  (package,) = [
    p.name for p in (Path(project) / "jax_plugins").iterdir() if (p / "__init__.py").exists()
  ]
  return package


def insert_above(project: str | os.PathLike, path: str, marker: str, text: str) -> None:
  """Inserts `text` (dedented, then indented as the marker line) above the line holding
  `marker` in the project's file `path`, unless the file holds it already.

  Raises:
    ValueError: no line, or more than one, holds `marker`.
  """
  target = Path(project) / path
  lines = target.read_text().splitlines(keepends=True)
  at = [i for i, line in enumerate(lines) if marker in line]
  if len(at) != 1:
    raise ValueError(f"{path} must hold one line with {marker!r} ({len(at)} do)")
  indent = lines[at[0]][: len(lines[at[0]]) - len(lines[at[0]].lstrip())]
  block = [
    indent + line if line.strip() else line
    for line in textwrap.dedent(text).strip("\n").splitlines(keepends=True)
  ]
  block = [line if line.endswith("\n") else line + "\n" for line in block]
  if "".join(block) in "".join(lines):
    return
  target.write_text("".join(lines[: at[0]] + block + lines[at[0] :]))


def size(project: str | os.PathLike) -> dict[str, int]:
  """Lines of each source of a generated project (what a reader reads), by path."""
  project = Path(project)
  return {
    str(p.relative_to(project)): len(p.read_text().splitlines())
    for p in sorted(project.rglob("*"))
    if p.is_file()
    and p.suffix in (".py", ".cc", ".h", ".toml")
    and "build" not in p.relative_to(project).parts[:1]
  }


def _fill(text: str, name: str) -> str:
  return (
    text.replace("__NAME_UPPER__", name.upper())
    .replace("__Name__", _camel(name))
    .replace("__NAME__", name)
  )


def _camel(name: str) -> str:
  return "".join(part.capitalize() for part in name.split("_"))
