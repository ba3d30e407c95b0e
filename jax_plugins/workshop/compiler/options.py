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


def parse(options: bytes, num_devices: int, module_replicas: int,
          module_partitions: int) -> Options:
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
        f"PJRT_Client_Compile: failed to deserialize CompileOptionsProto ({e})") from None
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
    raise ValueError(f"workshop: device assignment is {shape[0]}x{shape[1]} but the "
                     f"program has {num_replicas} replicas x {num_partitions} partitions")
  flat = [d for row in assignment for d in row]
  for d in flat:
    if not 0 <= d < num_devices:
      raise ValueError(f"workshop: device assignment names device {d}, but the client "
                       f"has only {num_devices} devices")
  if len(set(flat)) != len(flat):
    raise ValueError(f"workshop: device assignment {assignment} uses a device twice")
  return Options(num_replicas, num_partitions, assignment, proto,
                 tuple(build.allow_spmd_sharding_propagation_to_parameters),
                 tuple(build.allow_spmd_sharding_propagation_to_output))


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
        raise ValueError(f"executable_build_options.device_ordinal {ordinal} is neither -1 "
                         "(unset) nor a device ordinal in [0, 2^31)")


def _check_overrides(parsed) -> None:
  """Rejects compile options (`jit(f).lower(x).compile({...})`) the CPU backend rejects.

  They arrive as CompileOptionsProto.env_option_overrides. As on XLA:CPU, a name that is
  no XLA debug option is an error naming it; the plugin compiles without XLA, so the
  `xla_*` options it accepts change nothing, but one whose value has the wrong type for
  the option (as far as jaxlib's DebugOptions shows the type) is an error too.

  Raises:
    ValueError: "No such compile option: 'name'" or the ill-typed option.
  """
  debug = parsed.executable_build_options.debug_options
  for name, value in parsed.env_option_overrides:
    if not name.startswith("xla_"):
      raise ValueError(f"No such compile option: '{name}'")
    default = getattr(debug, name, None)
    if default is None:
      continue
    if isinstance(default, bool):
      ok = isinstance(value, bool) or (isinstance(value, str) and
                                       value.lower() in ("true", "false"))
    elif isinstance(default, int):
      ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
      ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
      ok = isinstance(value, str)
    if not ok:
      raise ValueError(f"While setting option {name}, {value!r} is not a valid "
                       f"{type(default).__name__} value.")


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
