"""The __NAME__ compiler: a StableHLO program -> a plan that src/runtime.cc runs.

PJRT_Client_Compile (src/capi.cc) calls ``compile()`` under the GIL with the program
bytes JAX sent, the serialized CompileOptionsProto and the kernels the C++ side has.
The program is read with jaxlib's MLIR bindings; a program over several devices (pmap,
shard_map) is made per-device by Shardy's ``sdy-convert-global-to-local`` pass; then
every op of @main is looked up in RULES, which says which kernel runs it.

The plan is plain data (C++ reads it with pybind11): ``values`` holds (dtype, dims) for
every value, the parameters first; each step is (kernel, output value, input values,
constant bytes, replica groups); ``outputs`` are the values @main returns.

REAL ACCELERATOR: this is where your compiler goes. Lower the StableHLO (or hand it to
an MLIR/XLA-based toolchain), and return what the runtime needs to launch it: a device
binary, its argument and result layout, the collectives' groups. Decide everything here:
an op or dtype you cannot run is an error now (NotImplementedError: UNIMPLEMENTED), never
at execute time.
"""

from __future__ import annotations

import numpy as np
from jax._src.interpreters import mlir as jax_mlir
from jax._src.lib import _jax, xla_client
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from . import protowire

# MLIR element types -> the runtime's dtype names (src/runtime.cc kDTypes).
_DTYPES = {"i1": "pred", "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64",
           "ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64",
           "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64"}


def elementwise(kernel: str):
  """A rule for an elementwise op: operands and result share shape (StableHLO has no
  implicit broadcasting: JAX inserts broadcast_in_dim) and dtype."""
  def rule(op: ir.Operation, num_devices: int):
    return kernel, b"", []
  return rule


def _constant(op: ir.Operation, num_devices: int):
  value = ir.DenseElementsAttr(op.attributes["value"])
  shape = ir.RankedTensorType(op.result.type).shape
  dtype = _numpy_dtype(op.result.type)
  if value.is_splat:  # one element stored for the whole tensor
    data = np.full(shape, np.array(value.get_splat_value()), dtype)
  else:
    data = np.array(value).astype(dtype).reshape(shape)
  return "constant", data.tobytes(), []


def _iota(op: ir.Operation, num_devices: int):
  """0, 1, 2, ... along iota_dimension (the dimension travels as the step's data)."""
  dimension = ir.IntegerAttr(op.attributes["iota_dimension"]).value
  return "iota", np.int64(dimension).tobytes(), []


def _broadcast_in_dim(op: ir.Operation, num_devices: int):
  """The operand's dim i becomes the result's dim broadcast_dimensions[i] (size 1 or the
  same size); the result's other dims repeat it. The dims travel as int64 data."""
  dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
  return "broadcast_in_dim", np.array(dims, np.int64).tobytes(), []


def _slice(op: ir.Operation, num_devices: int):
  """operand[start:limit:stride] per dim; starts then strides travel as int64 data."""
  starts = list(ir.DenseI64ArrayAttr(op.attributes["start_indices"]))
  strides = list(ir.DenseI64ArrayAttr(op.attributes["strides"]))
  return "slice", np.array(starts + strides, np.int64).tobytes(), []


def _convert(op: ir.Operation, num_devices: int):
  """Element type conversion (eager `x + 1.0` converts the weak-typed scalar), from the
  types the kernel reads; float -> int saturates, NaN -> 0, as XLA does."""
  source = _dtype(op.operands[0].type)
  if source not in ("f32", "s32", "pred"):
    raise NotImplementedError(f"__NAME__: convert from {source} (kernels.cc Convert reads "
                              "f32, s32 and pred)")
  return "convert", b"", []


def _all_reduce(op: ir.Operation, num_devices: int):
  """A sum over the devices of each replica group (psum). Groups hold positions in the
  launch (device_ids), as use_global_device_ids with 1 replica or plain replica ids with
  1 partition both do."""
  (body,) = op.regions[0].blocks
  names = [o.operation.name for o in body.operations]
  if names != ["stablehlo.add", "stablehlo.return"]:
    raise NotImplementedError(f"__NAME__: all_reduce of {names[:-1]} (only sums)")
  groups = np.array(ir.DenseIntElementsAttr(op.attributes["replica_groups"])).tolist()
  if not groups or not groups[0]:
    groups = [list(range(num_devices))]
  return "all_reduce_sum", b"", groups


# StableHLO op -> rule(op, num_devices) -> (kernel, constant bytes, replica groups).
# The kernel must exist in src/kernels.cc for the op's result dtype.
RULES = {
    "stablehlo.add": elementwise("add"),
    "stablehlo.multiply": elementwise("multiply"),
    "stablehlo.constant": _constant,
    "stablehlo.iota": _iota,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.convert": _convert,
    "stablehlo.slice": _slice,  # JAX slices an array to put its shards on devices
    "stablehlo.reshape": elementwise("copy"),  # row-major: the same bytes
    "stablehlo.all_reduce": _all_reduce,
    # New rules go above this line.
}


def compile(code: bytes, format: str, options: bytes, num_devices: int,  # noqa: A002
            kernels: dict[str, list[str]]) -> dict:
  """Compiles one program for a client with `num_devices` devices.

  Args:
    code: the program: StableHLO (portable artifact bytecode or text), legacy MHLO
      text, or a serialized HloModuleProto (`format` "hlo").
    format: "mlir" or "hlo" (PJRT_Program.format).
    options: a serialized xla.CompileOptionsProto (empty: defaults).
    kernels: kernel name -> dtype names it takes ("any" for byte-moving kernels).

  Returns:
    The plan: name, num_replicas, num_partitions, device_ids (launch position -> device
    id), device_assignment (serialized DeviceAssignmentProto), values, num_params,
    steps, outputs, donated (parameter indices), text (the program after our passes).

  Raises:
    ValueError: options or program do not parse, the assignment names a missing device
      (INVALID_ARGUMENT).
    NotImplementedError: an op, dtype or collective this plugin has no kernel for
      (UNIMPLEMENTED).
  """
  # JAX's own context: every dialect JAX emits (func, stablehlo, sdy, chlo...) registered.
  with jax_mlir.make_ir_context() as ctx, ir.Location.unknown():
    module = _parse(code, format, ctx)
    replicas, partitions, device_ids, proto = _options(options, module, num_devices)
    if _has_op(module, "sdy.mesh"):
      # Global shapes -> per-device shapes, manual computations (shard_map, pmap) inlined,
      # sdy collectives -> StableHLO ones. A program whose sharding the compiler must
      # choose (jit over sharded arrays) needs propagation first, as XLA's partitioner
      # does; this template leaves that out (see the workshop's compiler/spmd/partition.py).
      _run(module, "sdy-convert-global-to-local", hint=_partitioning_hint(module))
    plan = _Lowering(module, len(device_ids), kernels).run()
    return dict(plan, name=_name(module), num_replicas=replicas, num_partitions=partitions,
                device_ids=device_ids, device_assignment=proto, text=str(module))


class _Lowering:
  """Walks @main (calls inlined) into the plan's values and steps."""

  def __init__(self, module: ir.Module, num_devices: int, kernels: dict[str, list[str]]):
    self.functions = {ir.StringAttr(op.attributes["sym_name"]).value: op
                      for op in module.body.operations if op.operation.name == "func.func"}
    self.num_devices, self.kernels = num_devices, kernels
    self.values: list[tuple[str, list[int]]] = []
    self.steps: list[tuple[str, int, list[int], bytes, list[list[int]]]] = []

  def run(self) -> dict:
    main = self.functions["main"]
    block = main.regions[0].blocks[0]
    params = [self.new(arg.type) for arg in block.arguments]
    outputs = self.block(block, params)
    donated = [i for i, attrs in enumerate(_arg_attrs(main))
               if "tf.aliasing_output" in attrs or "jax.buffer_donor" in attrs]
    return dict(values=self.values, num_params=len(params), steps=self.steps,
                outputs=outputs, donated=donated)

  def new(self, t: ir.Type) -> int:
    self.values.append((_dtype(t), list(ir.RankedTensorType(t).shape)))
    return len(self.values) - 1

  def block(self, block: ir.Block, inputs: list[int]) -> list[int]:
    """Lowers `block` with its arguments bound to `inputs`; returns its results' ids."""
    ids = {arg: i for arg, i in zip(block.arguments, inputs)}
    for op in block.operations:
      op = op.operation
      ins = [ids[v] for v in op.operands]
      if op.name == "func.return":
        return ins
      if op.name == "func.call":
        callee = self.functions[ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
        results = self.block(callee.regions[0].blocks[0], ins)
      elif op.name in RULES:
        if len(op.results) != 1:
          raise NotImplementedError(f"__NAME__: {op.name} with {len(op.results)} results")
        kernel, data, groups = RULES[op.name](op, self.num_devices)
        out = self.new(op.results[0].type)
        dtype = self.values[out][0]
        if kernel not in self.kernels or not {dtype, "any"} & set(self.kernels[kernel]):
          has = (f"has it for {self.kernels[kernel]}" if kernel in self.kernels
                 else "has no entry of that name")
          raise NotImplementedError(f"__NAME__: no kernel '{kernel}' for {op.name} on "
                                    f"{dtype} (src/kernels.cc {has})")
        self.steps.append((kernel, out, ins, data, groups))
        results = [out]
      else:
        raise NotImplementedError(f"__NAME__: no rule for {op.name} (compiler.py RULES)")
      ids.update(zip(op.results, results))
    raise ValueError("__NAME__: a function without func.return")


def _parse(code: bytes, format: str, ctx: ir.Context) -> ir.Module:  # noqa: A002
  try:
    if format == "hlo":
      code = _jax.mlir.hlo_to_stablehlo(code)
    if code.startswith(b"ML\xefR"):  # MLIR bytecode (a StableHLO portable artifact)
      module = stablehlo.deserialize_portable_artifact(ctx, code)
    else:
      module = ir.Module.parse(code, ctx)
    if "mhlo." in str(module):  # legacy MHLO text (XLA's own C API tests send it)
      module = ir.Module.parse(_jax.mlir.mhlo_to_stablehlo(_drop_mhlo_copies(module)), ctx)
    module.operation.verify()
  except (ValueError, ir.MLIRError, _jax.JaxRuntimeError) as e:
    raise ValueError(f"__NAME__: failed to parse the {format} program: {e}") from None
  return module


def _drop_mhlo_copies(module: ir.Module) -> str:
  """mhlo.copy has no StableHLO counterpart; on values it is the identity."""
  for op in list(module.body.operations):
    for block in op.regions[0].blocks if op.operation.name == "func.func" else []:
      for child in list(block.operations):
        if child.operation.name == "mhlo.copy":
          child.operation.results[0].replace_all_uses_with(child.operation.operands[0])
          child.operation.erase()
  return str(module)


def _options(options: bytes, module: ir.Module, num_devices: int):
  """(num_replicas, num_partitions, device ids in launch order, DeviceAssignmentProto)."""
  try:
    # jaxlib's parser takes garbage for defaults, and aborts the process on a negative
    # executable_build_options.device_ordinal (CHECK-fails): both are refused here.
    for number, value in protowire.fields(options):
      if number == 3:  # executable_build_options
        if not isinstance(value, bytes):
          raise ValueError("executable_build_options is not a message")
        for inner, ordinal in protowire.fields(value):
          if inner == 1 and isinstance(ordinal, int):  # device_ordinal, int64
            ordinal -= (1 << 64) if ordinal >= 1 << 63 else 0
            if ordinal != -1 and not 0 <= ordinal < 1 << 31:
              raise ValueError(f"device_ordinal {ordinal}")
  except ValueError as e:
    raise ValueError(
        f"PJRT_Client_Compile: failed to deserialize CompileOptionsProto ({e})") from None
  build = xla_client.CompileOptions.ParseFromString(options).executable_build_options
  replicas = build.num_replicas or _module_int(module, "mhlo.num_replicas")
  partitions = build.num_partitions or _module_int(module, "mhlo.num_partitions")
  if build.device_assignment is None:
    ids = np.arange(replicas * partitions).reshape(replicas, partitions)
    proto = xla_client.DeviceAssignment.create(ids).serialize()
  else:
    proto = build.device_assignment.serialize()
  by_partition = [[v for inner, ids in protowire.fields(value) if inner == 1
                   for v in (protowire.packed_varints(ids) if isinstance(ids, bytes) else [ids])]
                  for number, value in protowire.fields(proto) if number == 3]
  flat = [d for row in zip(*by_partition) for d in row]  # replica-major
  if len(flat) != replicas * partitions or not all(0 <= d < num_devices for d in flat):
    raise ValueError(f"__NAME__: device assignment {flat} is not {replicas} x {partitions} "
                     f"devices of the {num_devices} this client has")
  return replicas, partitions, flat, proto


def _run(module: ir.Module, *passes: str, hint: str) -> None:
  try:
    passmanager.PassManager.parse(f"builtin.module({','.join(passes)})").run(module.operation)
  except ir.MLIRError as e:
    raise NotImplementedError(f"__NAME__: {hint} ({', '.join(passes)} failed: {e})") from None


def _partitioning_hint(module: ir.Module) -> str:
  """What to tell the user when sdy-convert-global-to-local refuses the program."""
  main = next(op for op in module.body.operations if op.operation.name == "func.func"
              and ir.StringAttr(op.attributes["sym_name"]).value == "main")
  results = ([ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes["res_attrs"])]
             if "res_attrs" in main.attributes else [])
  unsharded = [i for i, attrs in enumerate(results) if "sdy.sharding" not in attrs]
  manual = any(op.operation.name == "sdy.manual_computation"
               for op in main.regions[0].blocks[0].operations)
  if manual and unsharded:
    # jax.jit(shard_map(...)) without out_shardings leaves @main's results to the
    # compiler; choosing them (propagation) and reporting them to JAX is left out here.
    return (f"the result(s) {unsharded} of this shard_map program have no sharding: "
            "give them one (jax.jit(f, out_shardings=NamedSharding(mesh, spec))); "
            "choosing it, as Shardy propagation does, is left out of this template")
  return ("a jit over sharded arrays outside shard_map/pmap needs automatic SPMD "
          "partitioning (Shardy propagation first), which this template leaves out")


def _has_op(module: ir.Module, name: str) -> bool:
  return any(op.operation.name == name for op in module.body.operations)


def _module_int(module: ir.Module, name: str) -> int:
  attrs = module.operation.attributes
  return ir.IntegerAttr(attrs[name]).value if name in attrs else 1


def _name(module: ir.Module) -> str:
  attrs = module.operation.attributes
  return ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else "main"


def _arg_attrs(main: ir.Operation) -> list[ir.DictAttr]:
  if "arg_attrs" not in main.attributes:
    return [ir.DictAttr.get({}) for _ in main.regions[0].blocks[0].arguments]
  return [ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes["arg_attrs"])]


def _dtype(t: ir.Type) -> str:
  element = str(ir.RankedTensorType(t).element_type)
  if element not in _DTYPES:
    raise NotImplementedError(f"__NAME__: element type {element}")
  return _DTYPES[element]


def _numpy_dtype(t: ir.Type) -> np.dtype:
  name = _dtype(t)
  if name == "bf16":
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)
  return np.dtype({"pred": "bool", "f16": "float16", "f32": "float32", "f64": "float64"}.get(
      name, name.replace("s", "int").replace("u", "uint")))
