"""Each notebook and its paired text source (notebooks/src/*.py, see jupytext.toml) agree.

The .py files are what reviews read and diffs show; the .ipynb files hold the outputs nbval
compares. A change made to one side only fails here, with the command that syncs them.
"""

from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
from jupytext.config import load_jupytext_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_every_notebook_has_a_text_source():
  sources = sorted(p.stem for p in (ROOT / "notebooks" / "src").glob("*.py"))
  assert sources == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_text_source_matches_notebook(notebook):
  config = load_jupytext_config(str(notebook))
  assert config is not None, "jupytext.toml not found"
  expected = jupytext.writes(jupytext.read(notebook), fmt="py:percent", config=config)
  source = ROOT / "notebooks" / "src" / f"{notebook.stem}.py"
  assert source.read_text() == expected, (
      f"{source.relative_to(ROOT)} and {notebook.relative_to(ROOT)} differ: edit one, then "
      f"`jupytext --sync {notebook.relative_to(ROOT)}` (the newer file wins)")
