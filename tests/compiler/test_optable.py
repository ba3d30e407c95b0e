"""The op table (compiler/optable.py): one source for Python and C++, decided at compile time.

* The plugin was built from this table (fingerprint), and its registered kernels are
  exactly the table's ops.
* Every elementwise (op, dtype) cell XLA:CPU runs, workshop runs with the same result
  (jax_plugins.workshop.teach.coverage), and every dtype the table claims for those ops runs:
  a claimed dtype without a kernel fails here.
* Unsupported programs fail at compile time, in one error naming every unsupported op.
* Every op whose attributes (docs/plan.md's attribute table) name axes or per-dimension
  bounds of its operands has a check hook (KernelDef::check), or is listed where its
  kernel checks them itself before indexing.
"""

import ctypes
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from jax import lax
from jax._src import xla_bridge

from jax_plugins.workshop.teach import coverage
from jax_plugins.workshop.compiler import compile_program, optable
from jax_plugins.workshop import library_path

pytestmark = pytest.mark.usefixtures("x64")


def _plugin() -> ctypes.CDLL:
  lib = ctypes.CDLL(library_path())
  lib.WorkshopOpTableFingerprint.restype = ctypes.c_char_p
  lib.WorkshopKernelNames.restype = ctypes.c_char_p
  lib.WorkshopCheckedKernelNames.restype = ctypes.c_char_p
  return lib


def test_plugin_was_built_from_this_table():
  assert _plugin().WorkshopOpTableFingerprint().decode() == optable.fingerprint(), (
    "optable.py changed since the plugin was built: python setup.py build_ext --inplace"
  )


def test_registered_kernels_are_the_tables_ops():
  registered = set(_plugin().WorkshopKernelNames().decode().split())
  assert registered == set(optable.SPECS), (
    f"kernels without a spec: {sorted(registered - set(optable.SPECS))}; "
    f"specs without a kernel: {sorted(set(optable.SPECS) - registered)}"
  )


# Attributes a kernel indexes memory with: axes of an operand or result, and per-dimension
# bounds, sizes and steps (plan.md's names). A value out of range in a crafted or resealed
# serialized executable makes the kernel read or write out of bounds, so each must be
# checked when the plan is prepared (KernelDef::check, kernels/core/attr_check.h).
INDEXING_ATTRS = {
  "dim",
  "dims",
  "perm",
  "split_dim",
  "concat_dim",
  "lhs_batch",
  "rhs_batch",
  "lhs_contract",
  "rhs_contract",
  "start",
  "limit",
  "stride",
  "window",
  "strides",
  "pad_lo",
  "src_start",
  "dst_start",
  "dst_step",
  "counts",
  "batch_shape",
  "start_limits",
  "window_shape",
}
# Ops whose kernel checks those attributes itself, at run time, before indexing with them.
CHECKED_BY_KERNEL = {
  "approx_top_k": "kernels/approx_top_k.cc: dim and k against the operand",
  "gather": "kernels/gather_scatter.cc CheckWalk: every offset the walk reaches",
  "convolution": "kernels/convolution.cc: layouts and per-spatial-dim lists against ranks",
}


def _ops_with_indexing_attrs() -> dict[str, set[str]]:
  """op -> the INDEXING_ATTRS its row of docs/plan.md's attribute table names."""
  plan_md = Path(__file__).resolve().parents[2] / "docs" / "plan.md"
  found = {}
  for line in plan_md.read_text().splitlines():
    cells = line.split("|")
    if len(cells) < 5 or not cells[1].strip().startswith("`"):
      continue
    # The op names are the first column's leading backticked names (the rest explains).
    ops = re.findall(r"`([a-z_0-9]+)`", cells[1].split("(")[0])
    # Attribute names: `name, name: type` or a bare `name, name` (not `[0, dim - size]`).
    names = {
      word
      for quoted in re.findall(r"`([^`]*)`", cells[3])
      if re.fullmatch(r"[\w, ]+(:.*)?", quoted)
      for word in re.findall(r"\w+", quoted.split(":")[0])
    }
    for op in ops:
      if names & INDEXING_ATTRS:
        found[op] = names & INDEXING_ATTRS
  return found


def test_indexing_attributes_are_checked_when_prepared():
  checked = set(_plugin().WorkshopCheckedKernelNames().decode().split())
  assert checked <= set(optable.SPECS), sorted(checked - set(optable.SPECS))
  indexing = _ops_with_indexing_attrs()
  # The parse found the table: these rows are there today.
  assert {"iota", "transpose", "slice", "pad", "dot_general", "reduce", "sort"} <= set(indexing)
  assert set(indexing) <= set(optable.SPECS), sorted(set(indexing) - set(optable.SPECS))
  unchecked = {op: sorted(names) for op, names in indexing.items() if op not in checked}
  assert set(unchecked) <= set(CHECKED_BY_KERNEL), (
    f"ops indexing with these attributes have no KernelDef::check: "
    f"{ {op: names for op, names in unchecked.items() if op not in CHECKED_BY_KERNEL} }"
  )
  # An entry whose op now has a hook, or no such attributes, is stale.
  assert not set(CHECKED_BY_KERNEL) & checked, sorted(set(CHECKED_BY_KERNEL) & checked)
  assert set(CHECKED_BY_KERNEL) <= set(indexing), sorted(set(CHECKED_BY_KERNEL) - set(indexing))


def test_specs_are_consistent():
  for spec in optable.SPECS.values():
    assert spec.family and spec.cost in (
      "elementwise",
      "transcendental",
      "data",
      "reduction",
      "dot",
      "conv",
    ), spec
    # An upcast computes in a dtype the kernel has, and never shadows one it has.
    assert not set(spec.upcast) & spec.kernel, spec


def test_elementwise_cells_match_xla_cpu():
  """Every cell of the coverage matrix: XLA:CPU's cells run here with its results, and
  every dtype the table claims runs."""
  cells = coverage.matrix(xla_bridge.get_backend("workshop"), xla_bridge.get_backend("cpu"))
  bad = [c for c in cells if c.mark in ("gap", "diff")]
  assert not bad, "\n".join(f"{c.op} {c.dtype}: {c.mark}: {c.detail}" for c in bad)
  runs = {(c.op, c.dtype) for c in cells if c.mark in ("ok", "ours")}
  claimed = {
    (op, d) for op in coverage.ops() for d in optable.SPECS[op].dtypes if coverage.valid(op, d)
  }
  assert claimed <= runs, sorted(claimed - runs)
  assert len(cells) > 300


def _compile(text: str):
  return compile_program(text.encode(), "mlir", b"", 1)


def test_every_unsupported_op_in_one_compile_error():
  text = """
  func.func public @main(%x: tensor<4xcomplex<f32>>, %y: tensor<4xcomplex<f64>>)
      -> (tensor<4xcomplex<f32>>, tensor<4xcomplex<f32>>, tensor<4xcomplex<f64>>) {
    %0 = stablehlo.remainder %x, %x : tensor<4xcomplex<f32>> loc("first.py":1:2)
    %1 = stablehlo.cbrt %x : tensor<4xcomplex<f32>> loc("second.py":3:4)
    %2 = stablehlo.cbrt %y : tensor<4xcomplex<f64>> loc("third.py":5:6)
    return %0, %1, %2 : tensor<4xcomplex<f32>>, tensor<4xcomplex<f32>>, tensor<4xcomplex<f64>>
  }"""
  with pytest.raises(NotImplementedError) as e:
    _compile(text)
  message = str(e.value)
  assert "unsupported ops" in message
  assert "'stablehlo.remainder' has no kernel for dtype c64 at first.py:1:2" in message
  assert "'stablehlo.cbrt' has no kernel for dtype c64 at second.py:3:4" in message
  assert "'stablehlo.cbrt' has no kernel for dtype c128 at third.py:5:6" in message


def test_unsupported_op_in_a_region_fails_at_compile():
  # A reduce_window body no kernel hard-codes runs as a lane plan: its ops are checked too.
  text = """
  func.func public @main(%x: tensor<4xcomplex<f32>>, %i: tensor<complex<f32>>)
      -> tensor<3xcomplex<f32>> {
    %0 = "stablehlo.reduce_window"(%x, %i) ({
    ^bb0(%a: tensor<complex<f32>>, %b: tensor<complex<f32>>):
      %m = stablehlo.remainder %a, %b : tensor<complex<f32>> loc("body.py":9:10)
      stablehlo.return %m : tensor<complex<f32>>
    }) {window_dimensions = array<i64: 2>}
        : (tensor<4xcomplex<f32>>, tensor<complex<f32>>) -> tensor<3xcomplex<f32>>
    return %0 : tensor<3xcomplex<f32>>
  }"""
  with pytest.raises(
    NotImplementedError, match=r"'stablehlo.remainder' has no kernel for dtype c64 at body.py:9:10"
  ):
    _compile(text)


def test_f16_math_is_converted_around_the_f32_kernel():
  text = """
  func.func public @main(%x: tensor<4xf16>) -> tensor<4xf16> {
    %0 = chlo.asinh %x : tensor<4xf16> -> tensor<4xf16>
    return %0 : tensor<4xf16>
  }"""
  plan = compile_program(text.encode(), "mlir", b"", 1, fuse=False).plan
  assert [i.op for i in plan.instrs] == ["convert", "asinh", "convert"]
  assert plan.slots[plan.instrs[1].ins[0]][0] == 11  # f32


def test_jit_error_surfaces_at_compile_not_execute():
  x = np.ones((1, 1, 4, 4), np.float32)
  lowered = jax.jit(
    lambda v: (
      jax.lax.conv(v > 0, v > 1, (1, 1), "SAME"),
      jax.lax.conv(v < 0, v < 1, (1, 1), "VALID"),
    )
  ).lower(x)
  with pytest.raises(Exception, match=r"unsupported ops:(.|\n)*\(pred\)(.|\n)*\(pred\)"):
    lowered.compile()


def test_op_lists_outside_the_table_are_derived_from_it():
  """The layout pass's and the partitioner's lists of elementwise ops are the table's
  (plus what each names for a reason of its own)."""
  from jax_plugins.workshop.compiler import layouts
  from jax_plugins.workshop.compiler.spmd import fallback

  table = {"stablehlo." + name for name in optable.ELEMENTWISE}
  stablehlo = lambda ops: {o for o in ops if o.startswith("stablehlo.")}
  assert stablehlo(layouts.SAME_LAYOUT_OPS) - table == {"stablehlo.bitcast_convert"}
  assert table <= layouts.SAME_LAYOUT_OPS
  assert table <= fallback.LOCAL_OPS
  # The partitioner's other local ops are table ops, but optimization_barrier (no kernel).
  others = {o.removeprefix("stablehlo.") for o in stablehlo(fallback.LOCAL_OPS) - table}
  assert others - set(optable.SPECS) == {"optimization_barrier"}


@pytest.mark.parametrize(
  "op,f,operands",
  [
    ("clamp", lax.clamp, 3),  # same_type 1: clamp(min, x, max)
    ("transpose", lambda x: x.T, 1),  # same_type 0
  ],
)
def test_executor_refuses_a_result_slot_of_another_type_than_same_type(
  monkeypatch, op, f, operands
):
  """A plan (as a crafted serialized executable could carry) whose `op` result slot is
  f16 where its same_type operand is f32 is refused when the plan is prepared: the kernel
  would write f32 elements into it (runtime/plan.cc reads same_type from op_table.h)."""
  from jax_plugins.workshop import compiler

  from jax_plugins.workshop.compiler import Plan

  real, narrowed = compiler.compile_program, []

  def narrow_in(plan):  # the plan and the sub-plans (a fusion's body) it holds
    for instr in plan.instrs:
      if instr.op == op:
        dims = plan.slots[instr.outs[0]][1]
        plan.slots[instr.outs[0]] = (optable.CODES["f16"], dims)
        narrowed.append(instr.op)
      for body in instr.attrs.values():
        if isinstance(body, Plan):
          narrow_in(body)

  def narrow(*args, **kwargs):
    exe = real(*args, **kwargs)
    narrow_in(exe.plan)
    return exe

  monkeypatch.setattr(compiler, "compile_program", narrow)
  x = np.linspace(-1, 1, 5 * 13, dtype=np.float32).reshape(5, 13)  # a shape no other test uses
  args = jax.device_put([x * (i + 1) for i in range(operands)], jax.devices("workshop")[0])
  with pytest.raises(Exception, match="not the operand's"):
    jax.jit(f).lower(*args).compile()
  assert narrowed == [op]
