"""The op table: one OpSpec per kernel, the single source of what each op computes on.

The Python compiler reads it (legalize.py checks and upcasts every instruction of a plan,
cost.py counts by `cost`, lanes/cse/fusion ask `elementwise`), and the build generates the
C++ side from it (setup.py -> plugin_src/generated/op_table.h): op names, the dtype mask of
each kernel, and a static_assert on the count. The element functors of the elementwise
kernels take their `kSupports<T>` from that mask, so a dtype listed here that the C++
expression cannot compute fails the build, and the executor re-checks every instruction
against the mask when a plan is prepared (at compile time), so nothing the compiler accepts
can fail with "no kernel for dtype" at execute.

This module imports nothing from the package: setup.py loads it by path, without jaxlib.

Adding a dtype to an op: add it to `kernel` (and the kernel's code, if the functor can't
already compute it), or to `upcast` to have it computed in another dtype by conversion.
"""

from __future__ import annotations

import dataclasses
import hashlib

# Dtype families by XLA name.
PRED = frozenset({"pred"})
SIGNED = frozenset({"s8", "s16", "s32", "s64"})
UNSIGNED = frozenset({"u8", "u16", "u32", "u64"})
INTS = SIGNED | UNSIGNED
HALF = frozenset({"f16", "bf16"})
WIDE_FLOATS = frozenset({"f32", "f64"})
FLOATS = HALF | WIDE_FLOATS
COMPLEX = frozenset({"c64", "c128"})
ALL = PRED | INTS | FLOATS | COMPLEX
NUMERIC = INTS | FLOATS
# 8- and 4-bit floats, one per byte (kernels/math/minifloat.h): stored, moved and converted
# (kernels that move bytes list them: STORED), computed in f32 like f16/bf16 (IN_F32).
MINIFLOATS = frozenset(
  {
    "f8E5M2",
    "f8E4M3FN",
    "f8E4M3B11FNUZ",
    "f8E5M2FNUZ",
    "f8E4M3FNUZ",
    "f8E4M3",
    "f8E3M4",
    "f8E8M0FNU",
    "f4E2M1FN",
  }
)
STORED = ALL | MINIFLOATS

# Sub-byte integers: stored one per byte, computed by every integer kernel in the byte
# type (legalize.py), so no spec lists them: each bit count -> (byte type, bits).
SUB_BYTE = {"s4": ("s8", 4), "u4": ("u8", 4), "s2": ("s8", 2), "u2": ("u8", 2)}

# PJRT_Buffer_Type codes, the bit positions of the C++ dtype masks.
CODES = {
  "pred": 1,
  "s8": 2,
  "s16": 3,
  "s32": 4,
  "s64": 5,
  "u8": 6,
  "u16": 7,
  "u32": 8,
  "u64": 9,
  "f16": 10,
  "f32": 11,
  "f64": 12,
  "bf16": 13,
  "c64": 14,
  "c128": 15,
  "s4": 21,
  "u4": 22,
  "s2": 24,
  "u2": 25,
  "f8E5M2": 16,
  "f8E4M3FN": 17,
  "f8E4M3B11FNUZ": 18,
  "f8E5M2FNUZ": 19,
  "f8E4M3FNUZ": 20,
  "f8E4M3": 26,
  "f8E3M4": 27,
  "f8E8M0FNU": 28,
  "f4E2M1FN": 29,
}

# As on XLA:CPU, math on 16-bit (and 8/4-bit) floats is done in f32 and rounded once to
# the declared type: the one generic rule (legalize.py) that gives every f32 kernel f16,
# bf16 and the minifloats.
IN_F32 = {"f16": "f32", "bf16": "f32", **{name: "f32" for name in sorted(MINIFLOATS)}}
# Only the minifloats in f32, for kernels that take f16/bf16 themselves.
MINI_IN_F32 = {name: "f32" for name in sorted(MINIFLOATS)}
# XLA:CPU sorts minifloat operands (keys and values) as f16 (f32 for f8E8M0FNU, whose
# range f16 lacks), converted in and back out, and compares keys on the minifloat bits
# (NaNs of one sign tie). The values that round trip changes are NaNs: f8E5M2's all
# become 0x7F, f8E4M3's and f8E3M4's the quiet NaN of their sign.
MINI_SORTED_IN = {name: "f32" if name == "f8E8M0FNU" else "f16" for name in sorted(MINIFLOATS)}

# The cost classes cost.py counts by (OpSpec.cost).
COSTS = ("elementwise", "transcendental", "data", "reduction", "dot", "conv")


@dataclasses.dataclass(frozen=True)
class OpSpec:
  """What one kernel computes on.

  Attributes:
    name: the kernel name (the StableHLO/CHLO op name without its dialect prefix).
    family: rules/<family>.py and kernels/<family>.cc or kernels/<family>/ hold its lowering
      and kernel.
    kernel: dtypes the C++ kernel computes on, of the value `typed` names.
    upcast: dtype -> the kernel dtype it is computed in (operands of that dtype converted
      in, results converted back).
    typed: the value whose dtype selects the kernel: "in<i>" or "out<i>"; None for ops
      that take any dtype (data movement, control flow).
    cost: cost.py's class: "elementwise" (1 flop per output element), "transcendental"
      (1 per output element), "data" (0 flops), "reduction" (1 flop per input element),
      "dot", "conv".
    elementwise: computes each element from the same element of its operands (lanes.py
      runs reduce and sort bodies made of these on vectors; fusion chains them).
    pure: the result depends only on operands and attributes (cse.py may merge repeats).
    operands: how many operands of the typed dtype an elementwise op takes (the coverage
      report builds its programs from it).
    same_type: the operand whose element type every result has, by index; None where a
      result's type may differ. Kernels size their writes by that operand's type, so the
      executor refuses a plan whose result slot has another (runtime/plan.cc, from the
      generated op_table.h): a crafted serialized executable cannot make them overrun.
    round_trip: dtype -> a wider dtype each result of that dtype is converted to and back
      after the kernel (legalize.py): where XLA:CPU computes a data-moving op on the wider
      type (its float normalization), which changes NaN bit patterns on the way.
  """

  name: str
  family: str
  kernel: frozenset[str] = ALL
  upcast: dict[str, str] = dataclasses.field(default_factory=dict)
  typed: str | None = "in0"
  cost: str = "elementwise"
  elementwise: bool = False
  pure: bool = False
  operands: int = 1
  same_type: int | None = None
  round_trip: dict[str, str] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.cost not in COSTS:
      raise ValueError(
        f"OpSpec {self.name!r}: cost={self.cost!r} is not a cost class; "
        f"cost.py knows {', '.join(map(repr, COSTS))}"
      )

  @property
  def dtypes(self) -> frozenset[str]:
    """Every dtype the compiler accepts for the typed value."""
    return self.kernel | frozenset(self.upcast)


def _math(
  names,
  kernel,
  *,
  cost="elementwise",
  upcast=IN_F32,
  family="elementwise",
  elementwise=True,
  operands=1,
  same_type=0,
):
  """Math specs; `same_type` defaults to operand 0 (the result has the operands' type)."""
  return [
    OpSpec(
      n,
      family,
      kernel,
      upcast if kernel & WIDE_FLOATS else {},
      cost=cost,
      elementwise=elementwise,
      pure=elementwise,
      operands=operands,
      same_type=same_type,
    )
    for n in names.split()
  ]


def _data(names, family, *, typed=None, pure=False, kernel=STORED, cost="data", same_type=None):
  return [
    OpSpec(n, family, kernel, typed=typed, cost=cost, pure=pure, same_type=same_type)
    for n in names.split()
  ]


_INEXACT = WIDE_FLOATS | COMPLEX
_SPECS: list[OpSpec] = [
  # Elementwise math (kernels/elementwise/elementwise.cc).
  *_math("negate", INTS | _INEXACT),
  *_math("sign", SIGNED | _INEXACT),
  # abs of a complex value is real.
  *_math("abs", SIGNED | _INEXACT, same_type=None),
  *_math("not", PRED | INTS),
  *_math("popcnt count_leading_zeros", INTS),
  *_math("floor ceil round_nearest_afz round_nearest_even", WIDE_FLOATS),
  *_math("is_finite", WIDE_FLOATS, same_type=None),
  *_math("cbrt", WIDE_FLOATS, cost="transcendental"),
  *_math(
    "sqrt rsqrt exponential exponential_minus_one log log_plus_one logistic sine cosine tan tanh",
    _INEXACT,
    cost="transcendental",
  ),
  *_math("add multiply", PRED | INTS | _INEXACT, operands=2),
  *_math("subtract divide", INTS | _INEXACT, operands=2),
  *_math("power", INTS | _INEXACT, cost="transcendental", operands=2),
  *_math("remainder", INTS | WIDE_FLOATS, operands=2),
  # Complex max/min order lexicographically (real part, then imaginary), as XLA.
  *_math("maximum minimum", PRED | INTS | _INEXACT, operands=2),
  *_math("atan2", _INEXACT, cost="transcendental", operands=2),
  *_math("and or xor", PRED | INTS, operands=2),
  *_math("shift_left shift_right_arithmetic shift_right_logical", INTS, operands=2),
  # clamp(min, x, max): typed by x; min and max may be scalars.
  OpSpec(
    "clamp",
    "elementwise",
    INTS | WIDE_FLOATS,
    IN_F32,
    typed="in1",
    elementwise=True,
    pure=True,
    same_type=1,
  ),
  # Ordered compares of complex are rejected by the rule (EQ/NE only).
  OpSpec("compare", "elementwise", ALL - HALF, IN_F32, elementwise=True, pure=True),
  # select(pred, on_true, on_false) moves elements: any dtype.
  OpSpec("select", "elementwise", STORED, typed="in1", elementwise=True, pure=True),
  # Works on the bits of every float type (minifloats in f32).
  OpSpec(
    "reduce_precision",
    "elementwise",
    FLOATS,
    MINI_IN_F32,
    cost="reduction",
    elementwise=True,
    pure=True,
    same_type=0,
  ),
  OpSpec("convert", "elementwise", STORED, typed=None, cost="data", elementwise=True, pure=True),
  OpSpec("bitcast_convert", "elementwise", STORED, typed=None, cost="data"),
  # real/imag of a real float move its bytes (or zeros): every float width.
  OpSpec("real", "elementwise", FLOATS | COMPLEX, cost="data", elementwise=True, pure=True),
  OpSpec("imag", "elementwise", FLOATS | COMPLEX, cost="data", elementwise=True, pure=True),
  OpSpec("complex", "elementwise", WIDE_FLOATS, cost="data", elementwise=True, pure=True),
  # CHLO special functions (kernels/chlo.cc); erf has no complex version. Not in
  # fusion or lane plans: kernels/fusion.cc and lanes.py were never tried on them.
  *_math(
    "erf",
    WIDE_FLOATS,
    cost="transcendental",
    family="chlo",
    elementwise=False,
    same_type=None,
  ),
  *_math(
    "sinh cosh asin acos asinh acosh atanh",
    _INEXACT,
    cost="transcendental",
    family="chlo",
    elementwise=False,
    same_type=None,
  ),
  # pred keys sort as s8 (false < true).
  OpSpec("top_k", "chlo", NUMERIC - HALF, {**IN_F32, "pred": "s8"}),
  # Shapes and data movement: bytes by width, any dtype.
  OpSpec(
    "copy", "shape", STORED, typed=None, cost="data", elementwise=True, pure=True, same_type=0
  ),
  *_data("constant", "shape", pure=True),
  *_data("reshape broadcast_in_dim transpose slice", "shape", pure=True, same_type=0),
  *_data("concatenate", "shape", same_type=0),
  OpSpec(
    "iota",
    "shape",
    NUMERIC - HALF,
    {**IN_F32, "c64": "f32", "c128": "f64"},
    typed="out0",
    cost="data",
    pure=True,
  ),
  *_data("pad reverse dynamic_slice dynamic_update_slice", "indexing", same_type=0),
  *_data("gather", "gather_scatter", same_type=0),
  # Reduce bodies other than "set" are f16/bf16-aware in the kernel (accumulates in f32).
  # Minifloats are scattered in f32.
  OpSpec("scatter", "gather_scatter", ALL, MINI_IN_F32, cost="data", same_type=0),
  # Any other update computation, run as a lane plan (its ops are checked on their own).
  OpSpec("scatter_general", "gather_scatter", STORED, typed=None, cost="data"),
  # The sort kernel compares keys of every type (minifloats as XLA:CPU, on their bits); a
  # general comparator is a lane plan whose ops are checked on their own.
  OpSpec("sort", "sort", STORED, typed=None, round_trip=MINI_SORTED_IN),
  OpSpec("sort_general", "sort", STORED, typed=None, round_trip=MINI_SORTED_IN),
  # Reductions and contractions.
  OpSpec("reduce", "reduce", ALL - HALF, IN_F32, cost="reduction", pure=True),
  OpSpec("argmax", "reduce", PRED | INTS | WIDE_FLOATS, IN_F32),
  OpSpec("argmin", "reduce", PRED | INTS | WIDE_FLOATS, IN_F32),
  OpSpec("reduce_general", "reduce", STORED, typed=None),
  # stablehlo.map: its body as a lane plan, one lane per element.
  OpSpec("map", "reduce", STORED, typed=None),
  # Typed by the result: the rule converts operands of another dtype (from
  # preferred_element_type) to the result's compute dtype. pred dots are computed in
  # s32: any nonzero sum of products converts back to true.
  OpSpec(
    "dot_general",
    "dot",
    INTS | _INEXACT,
    {**IN_F32, "pred": "s32"},
    typed="out0",
    cost="dot",
    pure=True,
  ),
  OpSpec("convolution", "convolution", INTS | _INEXACT, IN_F32, typed="out0", cost="conv"),
  OpSpec("reduce_window", "reduce_window", PRED | INTS | _INEXACT, IN_F32, cost="reduction"),
  # pred selects and scatters as s8 (0/1: its compares and or/and bodies agree).
  OpSpec("select_and_scatter", "reduce_window", NUMERIC - HALF, {**IN_F32, "pred": "s8"}),
  # Linear algebra and FFT (LAPACK/BLAS and pocketfft-like kernels on f32/f64/complex).
  OpSpec("cholesky", "linalg", _INEXACT, IN_F32, same_type=0),
  OpSpec("triangular_solve", "linalg", _INEXACT, IN_F32, same_type=0),
  OpSpec("geqrf", "linalg", _INEXACT, IN_F32),
  OpSpec("householder_product", "linalg", _INEXACT, IN_F32),
  # LAPACK behind JAX's CPU lowerings of eigh, svd, eig, schur, hessenberg, tridiagonal,
  # lu and geqp3 (jax_plugins/workshop/extensions/linalg.py), and jaxlib's perturbed tridiagonal
  # solve. No cost class fits a factorization; they count bytes only.
  *(
    OpSpec(name, "lapack", _INEXACT, cost="data")
    for name in (
      "lapack_evd",
      "lapack_svd",
      "lapack_geev",
      "lapack_gees",
      "lapack_gehrd",
      "lapack_sytrd",
      "lapack_getrf",
      "lapack_geqp3",
      "tridiagonal_solve_perturbed",
    )
  ),
  # Python host callbacks and user FFI handlers: any dtype, opaque to the cost model.
  OpSpec("host_callback", "callback", ALL, typed=None, cost="data"),
  OpSpec("ffi_call", "ffi", ALL, typed=None, cost="data"),
  OpSpec("fft", "fft", _INEXACT, typed=None),
  OpSpec("rng_bit_generator", "random", INTS, typed="out1"),
  # Control flow: the sub-plans' instructions are checked on their own.
  *_data("while case", "control_flow"),
  # Collectives move or combine whole buffers.
  # Complex values fold with the body's complex functor (add: of (re, im) pairs), for
  # the bodies whose own spec lists complex (legalize.py checks the body).
  OpSpec("all_reduce", "collectives", PRED | INTS | _INEXACT, IN_F32, cost="reduction"),
  OpSpec("reduce_scatter", "collectives", PRED | INTS | _INEXACT, IN_F32, cost="data", same_type=0),
  *_data("all_gather all_to_all", "collectives"),
  *_data("collective_permute", "collectives", same_type=0),
  *_data("collective_broadcast", "collectives", cost="elementwise", same_type=0),
  *_data("partition_id replica_id", "collectives", cost="elementwise"),
  # Made by plan passes, never lowered from an op.
  OpSpec("fusion", "fusion", STORED, typed=None),
  OpSpec("gelu_tanh", "elementwise", frozenset({"f32"}), same_type=0),
  # A while loop compiled to native code (compiler/codegen/, kernels/codegen/jit_loop.cc);
  # the values it carries may be of any dtype the interpreted loop takes.
  OpSpec("jit_loop", "codegen", STORED, typed=None),
  # A fusion compiled to native code (compiler/codegen/fusions.py); its body keeps the
  # fusion's kernels, checked on their own.
  OpSpec("jit_fusion", "codegen", STORED, typed=None),
  # Independent small jit_fusions run as one kernel (compiler/horizontal.py); its body's
  # jit_fusions are checked on their own.
  OpSpec("horizontal_fusion", "fusion", STORED, typed=None),
  # Straight-line small ops of an interpreted loop body or branch compiled to native code
  # (compiler/codegen compile_blocks, kernels/codegen/jit_loop.cc); its body keeps them.
  OpSpec("jit_block", "codegen", STORED, typed=None),
  # exercise approx_top_k: begin (notebook 03 writes these lines)
  # jax.lax.approx_max_k/min_k off TPU: the exact top k along one dimension, of floats
  # (f16/bf16 sorted as f32: the conversion keeps their order and ties).
  OpSpec("approx_top_k", "approx_top_k", WIDE_FLOATS, IN_F32, cost="reduction"),
  # exercise approx_top_k: end
]

SPECS: dict[str, OpSpec] = {}
for _spec in _SPECS:
  assert _spec.name not in SPECS, f"two specs for {_spec.name}"
  assert _spec.dtypes <= STORED, _spec
  assert all(_spec.upcast[d] in _spec.kernel for d in _spec.upcast), _spec
  assert all(_spec.round_trip[d] in ALL for d in _spec.round_trip), _spec
  assert not _spec.round_trip or _spec.typed is None, _spec  # legalize skips the upcast
  SPECS[_spec.name] = _spec
del _spec

ELEMENTWISE = frozenset(s.name for s in SPECS.values() if s.elementwise)
PURE = frozenset(s.name for s in SPECS.values() if s.pure)


def mask(names: frozenset[str]) -> int:
  """The dtype bit mask (bit = PJRT_Buffer_Type code) of dtype names."""
  return sum(1 << CODES[n] for n in names)


def fingerprint() -> str:
  """A hash of what the C++ side is generated from: a stale build differs."""
  text = ";".join(
    f"{s.name}:{mask(s.kernel)}:{s.typed}:{s.elementwise}:{s.same_type}" for s in SPECS.values()
  )
  return hashlib.sha256(text.encode()).hexdigest()[:16]


# The families whose C++ element functors take their dtypes from the table at compile time
# (`kSupports<T> = optable::Supports<T>("op")`, kernels/core/optable.h). Only their rows go
# into the header those kernels include (plugin_src/generated/functor_dtypes.h): adding an op
# of any other family (or of NO_FUNCTOR) changes op_table.h alone, which registry.cc alone
# includes, so the rebuild compiles that file and the new kernel instead of every file with a
# functor (4.5 min against seconds on the 2-core test machine, measured).
FUNCTOR_FAMILIES = ("elementwise", "chlo")
# The ops of FUNCTOR_FAMILIES without element functors, left out of that header: the
# kernels of kernels/elementwise/complex.cc, convert.cc and gelu.cc, which include neither
# optable.h nor the header.
NO_FUNCTOR = frozenset({"real", "imag", "complex", "convert", "bitcast_convert", "gelu_tanh"})
# The ops whose rows functor_dtypes.h holds, in table order.
FUNCTOR_OPS = tuple(
  s.name for s in SPECS.values() if s.family in FUNCTOR_FAMILIES and s.name not in NO_FUNCTOR
)


def cpp_functor_header() -> str:
  """plugin_src/generated/functor_dtypes.h: the dtype masks of FUNCTOR_OPS."""
  rows = [f'    {{"{name}", 0x{mask(SPECS[name].kernel):x}u}},' for name in FUNCTOR_OPS]
  return "\n".join(
    [
      "// Generated by setup.py from jax_plugins/workshop/compiler/optable.py. Do not edit.",
      "// The dtype masks of the ops whose element functors check them at compile time",
      "// (optable.FUNCTOR_FAMILIES); the whole table is op_table.h.",
      "#pragma once",
      "",
      "#include <cstdint>",
      "#include <string_view>",
      "",
      "namespace workshop::optable::functors {",
      "",
      "struct Row {",
      "  std::string_view name;",
      "  uint32_t dtypes;  // bit i: the kernel computes on PJRT_Buffer_Type i",
      "};",
      "",
      "inline constexpr Row kRows[] = {",
      *rows,
      "};",
      "",
      "// Whether functor op `name` computes on dtype `code`; a name missing here is a build",
      "// error where this is evaluated at compile time. (A loop that returns, not a",
      "// pointer compared with null: GCC 12 cannot constant-evaluate that comparison",
      "// under -fsanitize=undefined.)",
      "constexpr bool Supports(std::string_view name, int code) {",
      "  for (const Row& row : kRows) {",
      "    if (row.name == name) return (row.dtypes >> code) & 1u;",
      "  }",
      "  throw \"op missing from optable.py, or not of a family in FUNCTOR_FAMILIES\";",
      "}",
      "",
      "}  // namespace workshop::optable::functors",
      "",
    ]
  )


def cpp_header() -> str:
  """plugin_src/generated/op_table.h: the C++ view of SPECS."""
  rows = []
  for s in SPECS.values():
    if s.typed is None:
      which, index = "kAny", 0
    else:
      which, index = ("kIn" if s.typed.startswith("in") else "kOut"), int(s.typed[-1])
    rows.append(
      f'    {{"{s.name}", 0x{mask(s.kernel):x}u, TypedBy::{which}, {index}, '
      f'{"true" if s.elementwise else "false"}, '
      f"{-1 if s.same_type is None else s.same_type}}},"
    )
  return "\n".join(
    [
      "// Generated by setup.py from jax_plugins/workshop/compiler/optable.py. Do not edit.",
      "#pragma once",
      "",
      "#include <cstdint>",
      "#include <string_view>",
      "",
      "namespace workshop::optable {",
      "",
      "enum class TypedBy { kAny, kIn, kOut };",
      "",
      "struct OpInfo {",
      "  std::string_view name;",
      "  uint32_t dtypes;  // bit i: the kernel computes on PJRT_Buffer_Type i",
      "  TypedBy typed_by;  // which value's dtype selects the kernel",
      "  int typed_index;",
      "  bool elementwise;  // each result element from the same element of each operand",
      "  int same_type;  // the operand whose element type every result has; -1: none",
      "};",
      "",
      "inline constexpr OpInfo kOps[] = {",
      *rows,
      "};",
      f"inline constexpr int kNumOps = {len(SPECS)};",
      "static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOps);",
      f'inline constexpr char kFingerprint[] = "{fingerprint()}";',
      "",
      "// The table row of kernel `name`, or null.",
      "constexpr const OpInfo* Find(std::string_view name) {",
      "  for (const OpInfo& op : kOps) {",
      "    if (op.name == name) return &op;",
      "  }",
      "  return nullptr;",
      "}",
      "",
      "}  // namespace workshop::optable",
      "",
    ]
  )


if __name__ == "__main__":
  print(cpp_header(), end="")
  print(cpp_functor_header(), end="")
