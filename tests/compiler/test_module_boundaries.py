"""No module of the plugin (jax_plugins/workshop) uses a private name of another of its
modules: `from .x import _name`, or `x._name` on a module `x` imported from the package.
A name one module shares with another is public (no leading underscore), so what a module
may change without looking elsewhere is what its underscore says."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "jax_plugins" / "workshop"


def _is_private(name: str) -> bool:
  return name.startswith("_") and not name.startswith("__")


def private_uses(source: str, filename: str = "<source>") -> list[str]:
  """`source`'s uses of private names of the package's other modules, one line each
  ("line: what"). Relative imports and absolute ones of jax_plugins.workshop count;
  other packages' private names (jax._src) are theirs to break."""
  tree = ast.parse(source, filename)
  modules: set[str] = set()  # local names bound to the package's modules
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      modules.update(
        alias.asname
        for alias in node.names
        if alias.asname and alias.name.startswith("jax_plugins.")
      )
    if not isinstance(node, ast.ImportFrom):
      continue
    ours = node.level > 0 or (node.module or "").startswith("jax_plugins.workshop")
    if not ours:
      continue
    for alias in node.names:
      if _is_private(alias.name):
        found.append(
          f"{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}"
        )
      else:
        modules.add(alias.asname or alias.name)
  for node in ast.walk(tree):
    if (
      isinstance(node, ast.Attribute)
      and isinstance(node.value, ast.Name)
      and node.value.id in modules
      and _is_private(node.attr)
    ):
      found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
  return found


def test_the_check_finds_private_names():
  source = (
    "from .reduce_window import _ints, pad_lo\n"
    "from .. import lowering\n"
    "from jax._src.lib import _jax\n"  # not ours
    "import jax_plugins.workshop.compiler.codegen as cg\n"
    "rules = lowering._RULES\n"
    "x = lowering.__name__\n"
    "cg._loaded.clear()\n"
  )
  assert private_uses(source) == [
    "1: from .reduce_window import _ints",
    "5: lowering._RULES",
    "7: cg._loaded",
  ]


def test_no_module_uses_another_modules_private_names():
  found = [
    f"{path.relative_to(PACKAGE)}:{use}"
    for path in sorted(PACKAGE.rglob("*.py"))
    for use in private_uses(path.read_text(), str(path))
  ]
  assert not found, "private names used across modules:\n" + "\n".join(found)
