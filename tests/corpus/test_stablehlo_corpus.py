"""StableHLO's interpreter tests, run through workshop and through XLA's CPU plugin.

The goal (see stablehlo_corpus.py): every case XLA:CPU passes also passes on workshop.
Cases where that does not hold yet are listed, each with its reason, in
corpus_known_gaps.txt; a listed case that starts passing fails this test, so the list stays
true. `python tests/stablehlo_corpus.py` prints the pass counts of both backends.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import stablehlo_corpus

pytestmark = pytest.mark.skipif(
  not stablehlo_corpus.CORPUS.is_dir(), reason=f"no corpus at {stablehlo_corpus.CORPUS}"
)

_GAPS_FILE = Path(__file__).resolve().parent.parent / "corpus_known_gaps.txt"


def _known_gaps() -> dict[str, str]:
  """'file:index' -> reason, from corpus_known_gaps.txt (`file:index  reason` lines)."""
  gaps = {}
  for line in _GAPS_FILE.read_text().splitlines():
    if line.strip() and not line.startswith("#"):
      key, _, reason = line.partition(" ")
      gaps[key] = reason.strip()
  return gaps


@pytest.fixture(scope="module")
def corpus_results():
  cases = stablehlo_corpus.cases()
  return cases, {b: stablehlo_corpus.results(b) for b in stablehlo_corpus.BACKENDS}


def test_workshop_passes_what_xla_cpu_passes(corpus_results):
  cases, results = corpus_results
  gaps = _known_gaps()
  regressions, fixed = [], []
  for i, case in enumerate(cases):
    key = f"{case.file}:{case.index}"
    xla = results["xla_cpu"].get(i, ("missing", ""))[0]
    ours, detail = results["workshop"].get(i, ("missing", ""))
    # Element types JAX never produces (i2, i4, f8, f4...) are counted apart, as the corpus
    # README suggests; the plugin supports the dtypes JAX programs use.
    if xla != "pass" or case.exotic:
      continue
    if ours != "pass" and key not in gaps:
      regressions.append(f"{key} {case.name}: {ours}: {detail}")
    if ours == "pass" and key in gaps:
      fixed.append(f"{key} {case.name} now passes: remove it from {_GAPS_FILE.name}")
  assert not regressions, "\n".join(regressions)
  assert not fixed, "\n".join(fixed)


def test_known_gaps_name_real_cases(corpus_results):
  cases, _ = corpus_results
  keys = {f"{c.file}:{c.index}" for c in cases}
  assert not set(_known_gaps()) - keys
