"""The documentation names only things that exist.

Every page under docs/ and the README is read as text. Two checks, each able to fail:

* every repository path a page names in backticks or as a link (`plugin_src/...`,
  `jax_plugins/...`, `tests/...`, `tools/...`, `notebooks/...`, `docs/...`) exists, a path
  relative to the package or a docs page included (`compiler/fusion.py`, `runtime/plan.cc`);
* every code identifier a page names in backticks (`snake_case`, `CamelCase`, `a.b.c`, a
  call `f()`) occurs in the repository's sources or in the installed jax/jaxlib, whose API
  the pages describe;

and docs/plan.md, the contract between compiler and executor, names every op of the op
table (`compiler/optable.py`). Text only: a few seconds, no JAX computation.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

# Roots a path in the docs is written relative to, tried in order.
_PATH_BASES = (
  ROOT,
  ROOT / "jax_plugins" / "workshop",
  ROOT / "jax_plugins" / "workshop" / "compiler",
  ROOT / "plugin_src",
  ROOT / "plugin_src" / "kernels",
  ROOT / "tests",
  ROOT / "docs",
  ROOT / "jax_plugins" / "workshop" / "new_device" / "template",  # new_device.md's project
)
# Paths in other projects (JAX's, XLA's sources, an install's site-packages) and ones the
# plugin creates when it runs: named by the pages, not kept here.
_EXTERNAL_PREFIXES = ("jax/", "jaxlib/", "xla/", "site-packages/", "../shared/", "build/")
# JAX's own test files, which docs/known_gaps.md and sharding.md report on (the workspace
# keeps copies in ../shared/jax_tests/), and the key-value store prefix of multiprocess.md.
# new_device copies protowire.py into the project it writes.
_EXTERNAL_PATHS = {
  "tests/pjit_test.py",
  "tests/shard_map_test.py",
  "tests/layout_test.py",
  "workshop/client<k>/",
  "jax_plugins/NAME/protowire.py",
}
# Identifiers of other projects the pages name that no installed source spells out: XLA's C++
# internals (runtime.md), pybind11's GIL guard, tests of JAX's and optax's own suites
# (known_gaps.md), an API JAX removed (known_gaps.md), keys of XLA's cost analysis.
_EXTERNAL_IDENTIFIERS = {
  "ExecuteShardedOnLocalDevicesInternal",
  "gil_scoped_release",
  "PositionalSharding",
  "optimal_seconds",
  "_freezing_test",
  "_schedule_test",
  "alias_test",
  "test_bad_structure_raises",
  "test_clip_by_block_rms",
  "test_debug_print_eager",
  "test_debug_print_jit0",
  "test_debug_print_jit1",
  "test_selective_bad_structure",
}
_PATH = re.compile(r"(?<![\w/.-])((?:\.\./shared/|\.ci/)?[\w.-]+(?:/[\w.*<>{}-]+)+/?)")
_TICKED = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_IDENT = re.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*(?:\(\))?$")
# Extensions of the files the tree keeps; a ticked token with one of these is a file name.
_FILE_SUFFIXES = (
  ".py",
  ".cc",
  ".h",
  ".md",
  ".ipynb",
  ".toml",
  ".cfg",
  ".txt",
  ".sh",
  ".yml",
  ".json",
  ".mlir",
)


def _sources() -> list[Path]:
  """The repository's tracked source files (what a clean clone has, never local scratch)."""
  kinds = ("*.py", "*.cc", "*.h", "*.toml", "*.cfg", "*.sh", "*.yml", "*.txt", "*.ipynb")
  skip = {".venv", "build", ".git", "reader", "node_modules", "bench_results"}
  try:
    listed = (
      subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
      .stdout.decode()
      .split("\0")
    )
    candidates = [ROOT / name for name in listed if name]
  except (OSError, subprocess.CalledProcessError):
    candidates = [p for kind in kinds for p in ROOT.rglob(kind)]
  files = []
  for path in candidates:
    parts = set(path.relative_to(ROOT).parts)
    if (
      path.is_file()
      and any(path.match(kind) for kind in kinds)
      and not parts & skip
      and not any(p.endswith(".egg-info") for p in parts)
    ):
      files.append(path)
  files = [p for p in files if p.resolve() != Path(__file__).resolve()]  # its own strings
  return files + [ROOT / ".ci" / "run"]


@functools.cache
def _known_words() -> frozenset[str]:
  """Every identifier-like word of the repository's sources and of the installed jax/jaxlib."""
  words: set[str] = set()
  token = re.compile(r"[A-Za-z_]\w*")
  texts = [p for p in _sources()]
  import jax
  import jaxlib

  for package in (jax, jaxlib):
    base = Path(package.__file__).parent
    texts += list(base.rglob("*.py")) + list(base.rglob("*.pyi")) + list(base.rglob("*.h"))
  from jax_plugins.workshop import build_support

  texts.append(Path(build_support.pjrt_header_dir()) / "pjrt_c_api.h")
  for path in texts:
    try:
      words.update(token.findall(path.read_text(errors="replace")))
    except OSError:
      continue
  # The pages name C API functions without their prefix (`Executable_OutputMemoryKinds`,
  # `OutputMemoryKinds` for PJRT_Executable_OutputMemoryKinds).
  for word in [w for w in words if w.startswith("PJRT_")]:
    parts = word.split("_")
    words.update("_".join(parts[i:]) for i in range(1, len(parts)))
  return frozenset(words)


def _exists(path: str, page: Path) -> bool:
  if path in _EXTERNAL_PATHS or path.startswith(_EXTERNAL_PREFIXES):
    return True
  path = path.rstrip("/").replace("/NAME/", "/__NAME__/")
  candidates = [page.parent / path] + [base / path for base in _PATH_BASES]
  for candidate in candidates:
    if any(ch in path for ch in "*<>{}"):
      pattern = re.sub(r"\*+", "*", re.sub(r"<[^>]*>|\{[^}]*\}", "*", path))
      anchor = candidate.parents[len(Path(path).parts) - 1]
      if "**" not in pattern and list(anchor.glob(pattern)):
        return True
    elif candidate.exists():
      return True
  return False


def _named_paths(text: str) -> set[str]:
  found = set()
  for ticked in _TICKED.findall(text):
    for word in ticked.split():
      word = word.strip(".,;:()'\"")
      if _PATH.fullmatch(word) and not word.startswith(("http", "www.")):
        if "/" in word and (word.endswith(_FILE_SUFFIXES) or word.endswith("/")):
          found.add(word)
  for link in _LINK.findall(text):
    if not link.startswith(("http", "mailto")) and not link.endswith((".svg", ".png")):
      found.add(link)
  return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_paths_exist(page):
  text = page.read_text()
  missing = sorted(p for p in _named_paths(text) if not _exists(p, page))
  assert not missing, f"{page.name} names paths that do not exist: {missing}"


def _named_identifiers(text: str) -> set[str]:
  found = set()
  for ticked in _TICKED.findall(text):
    ticked = ticked.strip()
    if not _IDENT.match(ticked) or ticked.endswith(_FILE_SUFFIXES):
      continue
    name = ticked.removesuffix("()")
    last = name.split(".")[-1]
    # A plain lowercase word (`while`, `copy`) is prose or an op name, not an identifier.
    if (
      "_" in last.strip("_")
      or re.search(r"[a-z][A-Z]", last)
      or "." in name
      or ticked.endswith("()")
    ):
      found.add(last)
  return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_identifiers_exist(page):
  known = _known_words()
  names = _named_identifiers(page.read_text()) - _EXTERNAL_IDENTIFIERS
  missing = sorted(n for n in names if n not in known)
  assert not missing, f"{page.name} names identifiers found in no source: {missing}"


def test_plan_page_names_every_op_of_the_table():
  from jax_plugins.workshop.compiler import optable

  text = (ROOT / "docs" / "plan.md").read_text()
  words = set(re.findall(r"[A-Za-z_]\w*", text))
  missing = sorted(name for name in optable.SPECS if name not in words)
  assert not missing, f"docs/plan.md does not name these ops of the op table: {missing}"


def test_the_checks_can_fail(tmp_path):
  page = tmp_path / "page.md"
  page.write_text("See `plugin_src/kernels/no_such_family.cc` and `no_such_helper_name()`.")
  assert _named_paths(page.read_text()) == {"plugin_src/kernels/no_such_family.cc"}
  assert not _exists("plugin_src/kernels/no_such_family.cc", page)
  assert _exists("plugin_src/kernels", page)
  assert "no_such_helper_name" in _named_identifiers(page.read_text())
  assert "no_such_helper_name" not in _known_words()
