"""Prints one SHA-256 per compiled program, to check that a change which should not alter
what the compiler produces (a restructuring, a rename) leaves it byte-identical.

Every benchmark case (at its smallest size; the `models` cases too when flax, optax,
equinox and transformers are installed) is jitted, its arguments placed on workshop
devices as the benchmark places them, and compiled by the plugin. The Executable the
compiler hands back to PJRT_Client_Compile (`jax_plugins.workshop.compiler
.compile_program`, wrapped here) is hashed: its plan (every instruction, slot and
attribute, including the code-generation tier's sources and objects), cost analysis,
optimized program, layouts and memory kinds; its fingerprint (a hash of the input) is
left out. The generated C++ headers (plugin_src/generated/) are hashed too.

Source locations are part of a program and of its plan (every instruction quotes one):
a change that moves lines of the benchmark cases or of the plugin's Python lowering rules
changes them; `--without-source-lines` compares what the compiler makes of the same
programs without them.

usage:
  XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=workshop,cpu \
      python tools/compiled_snapshot.py > before.txt
  ... change, rebuild ...
  (the same) > after.txt && diff before.txt after.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import pathlib
import sys

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _digest(executable) -> str:
  fields = dataclasses.asdict(executable)
  fields.pop("fingerprint", None)  # a hash of the input, not of what was produced
  return hashlib.sha256(repr(fields).encode()).hexdigest()


def _bench_cases():
  from jax_plugins.workshop.bench import cases, registry  # noqa: F401  (registers them)

  try:
    from jax_plugins.workshop.bench import model_cases  # noqa: F401
  except ImportError:
    pass
  return registry, sorted(registry.all_cases(), key=lambda c: c.name)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument(
    "--without-source-lines",
    action="store_true",
    help="programs carry no Python traceback in their locations (only op names), so a change "
    "that only moves lines of Python (reformatting the benchmark cases or the plugin's own "
    "lowering rules) leaves the programs the compiler sees, and so its output, the same",
  )
  args = parser.parse_args()
  if args.without_source_lines:
    jax.config.update("jax_traceback_in_locations_limit", 0)
  import jax_plugins.workshop.compiler as compiler

  compiled: list[str] = []
  original = compiler.compile_program

  def recording(*args, **kwargs):
    executable = original(*args, **kwargs)
    compiled.append(_digest(executable))
    return executable

  compiler.compile_program = recording  # looked up on each compile by runtime/compiler_bridge
  for path in sorted((ROOT / "plugin_src" / "generated").glob("*.h")):
    print(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  generated/{path.name}")
  registry, cases = _bench_cases()
  devices = jax.devices("workshop")
  for case in cases:
    if case.missing():
      continue
    size = min(case.quick_sizes or case.sizes)
    compiled.clear()
    try:
      with jax.enable_x64(case.x64):
        fn, args = case.build(size, np.random.default_rng(0))
        placed = (
          case.place(args, devices[: case.devices])
          if case.place
          else jax.device_put(args, devices[0])
        )
        jax.jit(fn).lower(*placed).compile()
    except registry.Skip:
      continue
    except Exception as e:  # noqa: BLE001  (a refusal is part of the output too)
      compiled.append("error " + hashlib.sha256(f"{type(e).__name__}: {e}".encode()).hexdigest())
      print(f"{case.name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
    for i, digest in enumerate(compiled):
      print(f"{digest}  bench/{case.name}[{size}]#{i}", flush=True)


if __name__ == "__main__":
  sys.exit(main())
