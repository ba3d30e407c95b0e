"""One family name from rule to kernel to test: every op table family has its lowering in
compiler/rules/<family>.py (or, for kernels a compiler pass emits, the pass's module), its
kernel in plugin_src/kernels/<family>.cc or plugin_src/kernels/<family>/, and its tests in
tests/ops/test_<family>*.py; and no rule, kernel or test file names a family the op table
does not have."""

import pathlib

from jax_plugins.workshop.compiler import optable

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = ROOT / "jax_plugins" / "workshop" / "compiler" / "rules"
KERNELS = ROOT / "plugin_src" / "kernels"
OPS_TESTS = ROOT / "tests" / "ops"

# Families whose kernels a compiler pass emits instead of a rule: the pass's module.
PASSES = {"fusion": "compiler/fusion.py", "codegen": "compiler/codegen"}
# Rule modules that lower no kernel family: CHLO/composite expansion and Shardy's ops.
RULES_WITHOUT_KERNELS = {"composite", "shardy"}
# Kernel rooms that are not families (plan table in docs/architecture.md).
KERNEL_ROOMS = {"core", "math"}

FAMILIES = sorted({spec.family for spec in optable.SPECS.values()})


def test_every_family_has_its_rule_kernel_and_tests():
  missing = []
  for family in FAMILIES:
    rule = (
      ROOT / "jax_plugins" / "workshop" / PASSES[family]
      if family in PASSES
      else RULES / f"{family}.py"
    )
    kernel = [KERNELS / f"{family}.cc", KERNELS / family]
    if not rule.exists():
      missing.append(f"{family}: no {rule.relative_to(ROOT)}")
    if not any(k.exists() for k in kernel):
      missing.append(f"{family}: no plugin_src/kernels/{family}.cc or kernels/{family}/")
    if not list(OPS_TESTS.glob(f"test_{family}*.py")):
      missing.append(f"{family}: no tests/ops/test_{family}*.py")
  assert not missing, "\n".join(missing)


def test_no_file_names_a_family_the_op_table_lacks():
  known = set(FAMILIES)
  strays = [
    p.name for p in RULES.glob("*.py") if p.stem not in known | RULES_WITHOUT_KERNELS | {"__init__"}
  ]
  strays += [
    p.name
    for p in KERNELS.iterdir()
    if (p.stem if p.is_file() else p.name) not in known | KERNEL_ROOMS
  ]
  assert not strays, strays


def test_ops_tests_are_named_after_a_family():
  names = [p.stem.removeprefix("test_") for p in OPS_TESTS.glob("test_*.py")]
  strays = [n for n in names if not any(n == f or n.startswith(f + "_") for f in FAMILIES)]
  assert not strays, strays
