"""bench.heldout: its cases are well formed and a case runs on both backends and agrees.

Timings are never checked (they are measurements, not pass/fail); the agreement of the two
backends' outputs, which the benchmark checks before it times, is.
"""

from __future__ import annotations

import pytest

from jax_plugins.workshop.bench import heldout


def test_case_names_are_unique_and_groups_known():
  names = [c.name for c in heldout.CASES]
  assert len(names) == len(set(names))
  assert {c.group for c in heldout.CASES} == set(heldout.GROUPS)


@pytest.mark.parametrize("name", ["mlp_latency_b1", "vae_step", "gmm_em"])
def test_a_case_runs_on_both_backends_and_agrees(name):
  (row,) = heldout.run_cases([name], quick=True)
  case = next(c for c in heldout.CASES if c.name == name)
  assert row["case"] == name and row["group"] == case.group
  assert row["max_rel_diff"] <= case.rtol
  assert row["workshop_s"] > 0 and row["cpu_s"] > 0
  assert row["compile_workshop_s"] > 0 and row["compile_cpu_s"] > 0
