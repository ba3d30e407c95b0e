"""Compile options: replica/partition counts and the device assignment."""

from __future__ import annotations

import dataclasses

import numpy as np
from jax._src.lib import xla_client

from . import protowire

# CompileOptionsProto has fields 1..~10 today; leave room for growth. A stray byte that
# happens to form a field beyond this is almost certainly not a CompileOptionsProto.
_MAX_COMPILE_OPTIONS_FIELD = 64

# CompileOptionsProto.executable_build_options, and its device_ordinal (int64).
_EXECUTABLE_BUILD_OPTIONS = 3
_DEVICE_ORDINAL = 1

# DeviceAssignmentProto fields.
_COMPUTATION_DEVICES = 3  # repeated ComputationDevice, one per partition
_REPLICA_DEVICE_IDS = 1  # ComputationDevice: repeated int64, one per replica


@dataclasses.dataclass(frozen=True)
class Options:
  """What the plan needs from a CompileOptionsProto.

  Attributes:
    num_replicas, num_partitions: at least 1.
    device_assignment: [replica][partition] -> device id.
    device_assignment_proto: the same as a serialized DeviceAssignmentProto.
    propagate_to_parameters, propagate_to_outputs: XLA's
      allow_spmd_sharding_propagation_to_{parameters,output}: whether the compiler may
      choose the sharding of a parameter (result) that the program leaves unspecified.
      One entry applies to all; see `may_choose`.
  """

  num_replicas: int
  num_partitions: int
  device_assignment: list[list[int]]
  device_assignment_proto: bytes
  propagate_to_parameters: tuple[bool, ...] = ()
  propagate_to_outputs: tuple[bool, ...] = ()


def may_choose(flags: tuple[bool, ...], index: int) -> bool:
  """Whether `flags` (one for all, or one per value) allow choosing value `index`'s sharding."""
  if len(flags) == 1:
    return flags[0]
  return index < len(flags) and flags[index]


def parse(
  options: bytes, num_devices: int, module_replicas: int, module_partitions: int
) -> Options:
  """Parses a serialized CompileOptionsProto.

  Empty bytes mean all defaults. Counts left unset (0) fall back to the module's
  `mhlo.num_replicas` / `mhlo.num_partitions`; a missing device assignment defaults to
  device r * num_partitions + p for replica r, partition p.

  Raises:
    ValueError: the bytes aren't a CompileOptionsProto, the device assignment doesn't have
      num_replicas x num_partitions entries, or names a device outside [0, num_devices) or
      the same device twice.
  """
  try:
    for number, value in protowire.fields(options):
      if number > _MAX_COMPILE_OPTIONS_FIELD:
        raise ValueError(f"unknown field {number}")
      if number == _EXECUTABLE_BUILD_OPTIONS:
        _check_build_options(value)
  except ValueError as e:
    raise ValueError(
      f"PJRT_Client_Compile: failed to deserialize CompileOptionsProto ({e})"
    ) from None
  parsed = xla_client.CompileOptions.ParseFromString(options)
  _check_overrides(parsed)
  build = parsed.executable_build_options
  num_replicas = build.num_replicas or module_replicas
  num_partitions = build.num_partitions or module_partitions

  if build.device_assignment is None:
    ids = np.arange(num_replicas * num_partitions).reshape(num_replicas, num_partitions)
    proto = xla_client.DeviceAssignment.create(ids).serialize()
  else:
    proto = build.device_assignment.serialize()
  assignment = _decode_device_assignment(proto)

  shape = (len(assignment), len(assignment[0]) if assignment else 0)
  if shape != (num_replicas, num_partitions):
    raise ValueError(
      f"workshop: device assignment is {shape[0]}x{shape[1]} but the "
      f"program has {num_replicas} replicas x {num_partitions} partitions"
    )
  flat = [d for row in assignment for d in row]
  for d in flat:
    if not 0 <= d < num_devices:
      raise ValueError(
        f"workshop: device assignment names device {d}, but the client "
        f"has only {num_devices} devices"
      )
  if len(set(flat)) != len(flat):
    raise ValueError(f"workshop: device assignment {assignment} uses a device twice")
  return Options(
    num_replicas,
    num_partitions,
    assignment,
    proto,
    tuple(build.allow_spmd_sharding_propagation_to_parameters),
    tuple(build.allow_spmd_sharding_propagation_to_output),
  )


def _check_build_options(build: int | bytes) -> None:
  """Refuses what jaxlib's CompileOptions.ParseFromString would abort the process on.

  xla::ExecutableBuildOptionsFromProto passes device_ordinal (an int64 where -1 means
  unset) to set_device_ordinal(int), which CHECK-fails on a negative int: a flipped bit
  in the options bytes (34 of 3,000 random flips of jax's options) killed the process
  instead of failing the compile.

  Raises:
    ValueError: `build` is not a message, or device_ordinal is neither -1 nor in
      [0, 2^31).
  """
  if not isinstance(build, bytes):
    raise ValueError("executable_build_options is not a message")
  for number, value in protowire.fields(build):
    if number == _DEVICE_ORDINAL:
      if not isinstance(value, int):
        raise ValueError("executable_build_options.device_ordinal is not a varint")
      ordinal = value - (1 << 64) if value >= 1 << 63 else value  # int64 two's complement
      if ordinal != -1 and not 0 <= ordinal < 1 << 31:
        raise ValueError(
          f"executable_build_options.device_ordinal {ordinal} is neither -1 "
          "(unset) nor a device ordinal in [0, 2^31)"
        )


def _check_overrides(parsed) -> None:
  """Rejects compile options (`jit(f).lower(x).compile({...})`) the CPU backend rejects.

  They arrive as CompileOptionsProto.env_option_overrides. The plugin compiles without
  XLA, so the `xla_*` options it accepts change nothing; but which names exist and which
  values convert to each option's type is XLA's to say: DebugOptions has a few hundred
  fields and jaxlib's Python binding shows 39. So the overrides are applied in a compile
  by XLA's own CPU client that stops before its first pass (_CHECK_MODULE; a few ms,
  only when there are overrides), and its error, e.g. "No such compile option: 'xla_foo'"
  or "While setting option xla_cpu_enable_fast_math, 'true' is not a valid bool value.",
  is ours. Options that make XLA write dumps are not sent there (XLA would dump the check
  module); jaxlib's binding has them all, and they are type-checked here with XLA's rules
  (a bool wants a bool, an int an int or a string of one, a string a string).

  Raises:
    ValueError: the message XLA:CPU gives for the same options.
  """
  overrides = list(parsed.env_option_overrides)
  for name, _ in overrides:
    if not name.startswith("xla_"):
      raise ValueError(f"No such compile option: '{name}'")
  debug = parsed.executable_build_options.debug_options
  to_xla = []
  for name, value in overrides:
    if not (name.startswith("xla_dump") or name == "xla_enable_dumping"):
      to_xla.append((name, value))
      continue
    default = getattr(debug, name, None)
    if default is None:
      to_xla.append((name, value))  # no dump option jaxlib knows of: XLA names it
    elif not _converts(value, type(default)):
      raise ValueError(
        f"While setting option {name}, '{value}' is not a valid "
        f"{_XLA_TYPE_NAMES[type(default)]} value."
      )
  if to_xla:
    _apply_in_xla(to_xla)


# How XLA's option parser names the types of DebugOptions' dump fields (int ones are int32).
_XLA_TYPE_NAMES = {bool: "bool", int: "int32", float: "float", str: "string"}


def _converts(value, kind: type) -> bool:
  """Whether XLA's option parser takes `value` for an option of Python type `kind`."""
  if kind is bool:
    return isinstance(value, bool)
  if isinstance(value, bool):
    return False
  if kind is str:
    return isinstance(value, str)
  try:
    kind(value)
  except (TypeError, ValueError):
    return False
  return isinstance(value, (int, str)) if kind is int else True


# What the options are judged on: a module whose parameter is f32[2], with compile options
# that declare it s32[7]. XLA:CPU applies the option overrides first, then refuses the
# argument layout, before any HLO pass runs; no option turns that check off (a verifier
# refusal can be: xla_disable_hlo_passes=hlo-verifier), so no option reaches code
# generation (xla_cpu_parallel_codegen_split_count=-5 makes XLA:CPU's codegen throw
# std::length_error, which aborts the process).
_CHECK_MODULE = (
  "module @workshop_option_check { func.func public @main(%a: tensor<2xf32>) "
  "-> tensor<2xf32> { return %a : tensor<2xf32> } }"
)
_check_client = None
_refusal = None  # the error _CHECK_MODULE gets with no options (the same on any client)


def _apply_in_xla(overrides: list[tuple[str, object]]) -> None:
  """Applies `overrides` in an XLA:CPU compile of _CHECK_MODULE; raises XLA's option error.

  Any error other than the module's own refusal is about the options.
  """
  global _check_client, _refusal
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top

  client = xla_bridge._backends.get("cpu")  # pylint: disable=protected-access
  if client is None:  # JAX_PLATFORMS without cpu: a client of our own, made once
    if _check_client is None:
      _check_client = xla_client.make_cpu_client()
    client = _check_client
  devices = xla_client.DeviceList(tuple(client.local_devices()[:1]))

  def refusal(overrides) -> str:
    options = xla_client.CompileOptions()
    options.env_option_overrides = overrides
    options.argument_layouts = [xla_client.Shape.array_shape(np.dtype(np.int32), (7,), (0,))]
    try:
      client.compile_and_load(_CHECK_MODULE, devices, options)
    except Exception as e:  # pylint: disable=broad-except
      return str(e)
    return ""

  if _refusal is None:
    _refusal = refusal([])
  message = refusal(overrides)
  if message and message != _refusal:
    raise ValueError(message.removeprefix("INVALID_ARGUMENT: "))


def _decode_device_assignment(proto: bytes) -> list[list[int]]:
  """[replica][partition] -> device id from a serialized DeviceAssignmentProto."""
  by_partition = []  # [partition][replica]
  for number, value in protowire.fields(proto):
    if number == _COMPUTATION_DEVICES:
      replicas = []
      for inner, ids in protowire.fields(value):
        if inner == _REPLICA_DEVICE_IDS:
          # Packed (bytes) as written by C++, but a parser must also accept unpacked.
          replicas += protowire.packed_varints(ids) if isinstance(ids, bytes) else [ids]
      by_partition.append(replicas)
  return [list(row) for row in zip(*by_partition)]
