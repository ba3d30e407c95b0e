"""compile_program: the entry point PJRT_Client_Compile calls (with the GIL held)."""

from __future__ import annotations

import hashlib

from jax._src.interpreters import mlir as jax_mlir
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from . import fusion, lowering, options as options_lib, rules  # noqa: F401  (rules register)
from .plan import Executable

# MLIR bytecode magic; portable artifacts (VHLO, possibly with sdy mixed in) start with it.
_BYTECODE_MAGIC = b"ML\xefR"


def compile_program(code: bytes, format: str, options: bytes,  # pylint: disable=redefined-builtin
                    num_devices: int, *, fuse: bool = True) -> Executable:
  """Compiles a StableHLO program into an Executable for the C++ executor.

  Args:
    code: a StableHLO portable artifact (MLIR bytecode, VHLO with native sdy ops), or
      MLIR text.
    format: PJRT program format; only "mlir".
    options: a serialized xla.CompileOptionsProto; empty means defaults.
    num_devices: how many devices the client has; assigned ids must be below it.
    fuse: run the elementwise fusion pass (fusion.py); off to see the plain lowering.

  Raises:
    ValueError: unknown format, undecodable program or options, bad device assignment,
      malformed ops.
    NotImplementedError: ops, dtypes, shapes or shardings the plugin doesn't support;
      the message names the op, its dtypes and its source location.
    RuntimeError: a bug in the compiler, naming the op it was lowering.
  """
  if format != "mlir":
    raise ValueError(f"Unknown program format '{format}'.")
  with jax_mlir.make_ir_context() as ctx, ir.Location.unknown():
    module = _parse(code, ctx)
    opts = options_lib.parse(options, num_devices,
                             _module_int(module, "mhlo.num_replicas"),
                             _module_int(module, "mhlo.num_partitions"))
    plan, donations = lowering.lower_main(module, opts)
    if fuse:
      plan = fusion.fuse_plan(plan)
    name = module.operation.attributes["sym_name"].value \
        if "sym_name" in module.operation.attributes else "main"
    return Executable(
        name=name,
        plan=plan,
        num_replicas=opts.num_replicas,
        num_partitions=opts.num_partitions,
        device_assignment=opts.device_assignment,
        device_assignment_proto=opts.device_assignment_proto,
        donations=donations,
        fingerprint=_fingerprint(format, code, options),
        text=str(module),
    )


def _parse(code: bytes, ctx: ir.Context) -> ir.Module:
  """Deserializes a portable artifact or parses MLIR text, and verifies the result."""
  try:
    if code.startswith(_BYTECODE_MAGIC):
      # Also accepts plain (non-VHLO) StableHLO bytecode.
      module = stablehlo.deserialize_portable_artifact(ctx, code)
    else:
      module = ir.Module.parse(code, ctx)
    module.operation.verify()
  except (ValueError, ir.MLIRError) as e:
    raise ValueError(f"workshop: failed to parse the StableHLO program: {e}") from None
  return module


def _module_int(module: ir.Module, name: str) -> int:
  """An integer module attribute such as mhlo.num_partitions; 1 if absent."""
  attrs = module.operation.attributes
  return attrs[name].value if name in attrs else 1


def _fingerprint(*parts: str | bytes) -> str:
  """sha256 over length-prefixed parts, so distinct part lists never hash alike."""
  h = hashlib.sha256()
  for part in parts:
    data = part.encode() if isinstance(part, str) else part
    h.update(len(data).to_bytes(8, "little") + data)
  return h.hexdigest()
