"""Seeded fuzzer of serialized executables (one child process of test_fuzz.py).

  python tests/hostile/fuzz_serialized.py --seed S --first K --count N [--reseal]
  python tests/hostile/fuzz_serialized.py --flip PROGRAM:SIZE:POS:BIT

Compiles a few programs on the workshop backend, serializes each, then for mutation
k = K .. K+N-1 (each derived from (S, k) alone, so any k replays on its own) flips a bit of,
or truncates, the plugin's blob, loads it and, if it loads, runs it on fixed inputs. Prints
one line per mutation *before* trying it ("try k") and one after ("k outcome"), so the
parent can tell which mutation a crash or hang belongs to and resume after it.

Outcomes: rejected (load failed with an error), identical (ran, every output bit-identical
to the unmutated executable's), error (ran, failed with an error), different (ran, other
bits). With --reseal the mutated body gets a valid CRC again, which exercises the plan
validator instead of the checksum: a mutation there can be a different valid program, so
"different" is expected in that mode and only crashes and hangs are failures.
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import zlib

os.environ.setdefault("JAX_PLATFORMS", "workshop")

import numpy as np  # noqa: E402

HEADER = b"\x04\x00\x00\x00\x00\x00\x00\x00WSEX"
HEADER_SIZE = len(HEADER) + 4 + 8 + 4  # magic, version, body size, CRC-32


def programs():
  import jax
  import jax.numpy as jnp
  from jax import lax

  rng = np.random.default_rng(0)
  x = rng.standard_normal((4, 8, 8, 3)).astype(np.float32)
  m = rng.standard_normal((16, 32)).astype(np.float32)
  idx = rng.integers(0, 16, size=(10,)).astype(np.int32)
  return [
    (
      "max_pool",
      lambda a: lax.reduce_window(a, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
      (x,),
    ),
    ("softmax_dot", lambda a: jax.nn.softmax(a @ a.T, axis=-1), (m,)),
    ("gather_iota", lambda a, i: a[i] + jnp.arange(32, dtype=jnp.float32), (m, idx)),
    ("scan", lambda a: lax.fori_loop(0, 5, lambda k, c: c * 0.5 + k, a), (m,)),
    ("sort_pad_slice", lambda a: jnp.pad(jnp.sort(a, axis=1), ((1, 2), (0, 3)))[2:9:2, 1:], (m,)),
    ("transpose_reduce", lambda a: jnp.transpose(a, (0, 3, 1, 2)).sum(axis=(2, 3)), (x,)),
    ("scatter_add", lambda a, i: a.at[i].add(jnp.ones((10, 32), jnp.float32)), (m, idx)),
    (
      "cond_while",
      lambda a: lax.cond(
        a.sum() > 0,
        lambda b: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0), (0, b))[1],
        lambda b: -b,
        a,
      ),
      (m,),
    ),
  ]


def reseal(blob: bytes, start: int) -> bytes:
  """Re-writes the size and CRC-32 fields of the plugin blob starting at `start`."""
  body = blob[start + HEADER_SIZE :]
  return (
    blob[:start]
    + HEADER
    + blob[start + len(HEADER) : start + len(HEADER) + 4]
    + struct.pack("<QI", len(body), zlib.crc32(body))
    + body
  )


def mutate(blob: bytes, start: int, rng: random.Random, do_reseal: bool) -> bytes:
  kind = rng.random()
  ours = len(blob) - start
  if kind < 0.8:
    pos = start + rng.randrange(ours)
    out = bytearray(blob)
    out[pos] ^= 1 << rng.randrange(8)
    out = bytes(out)
  elif kind < 0.9:
    out = blob[: start + rng.randrange(ours)]
  else:  # a few bytes overwritten at once (a torn write)
    pos = start + rng.randrange(ours)
    out = bytearray(blob)
    for i in range(pos, min(len(out), pos + rng.randrange(1, 9))):
      out[i] = rng.randrange(256)
    out = bytes(out)
  if do_reseal and len(out) >= start + HEADER_SIZE:
    out = reseal(out, start)
  return out


def flip(blob: bytes, start: int, pos: int, bit: int) -> bytes:
  """Flips bit `bit` of byte `pos` of the plugin blob starting at `start`, then reseals."""
  out = bytearray(blob)
  out[start + pos] ^= 1 << bit
  return reseal(bytes(out), start)


def seeded(cases, args):
  """Yields (k, case, mutated blob) for the seeded mutations k = first .. first+count-1."""
  for k in range(args.first, args.first + args.count):
    rng = random.Random(args.seed * 1_000_003 + k)
    case = cases[rng.randrange(len(cases))]
    yield k, case, mutate(case[1], case[2], rng, args.reseal)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--first", type=int, default=0)
  parser.add_argument("--count", type=int, default=100)
  parser.add_argument("--reseal", action="store_true")
  parser.add_argument(
    "--flip",
    metavar="PROGRAM:SIZE:POS:BIT",
    help="instead of seeded mutations, flip bit BIT of byte POS of the "
    "plugin blob of PROGRAM (whose blob must be SIZE bytes), reseal, try it",
  )
  args = parser.parse_args()

  import jax
  from jax._src.lib import xla_client as xc

  # Source locations (kept in the plan for error messages) would carry the checkout's path,
  # so byte positions, and what a given (seed, k) hits, would differ between clones.
  jax.config.update("jax_hlo_source_file_canonicalization_regex", r".*/")
  # A mutated shape can ask for any amount of memory; bounded, it is RESOURCE_EXHAUSTED
  # instead of the host's OOM killer (which took a child down at 20+ GB).
  jax.config.update("jax_pjrt_client_create_options", "device_memory_limit:268435456")

  device = jax.devices("workshop")[0]
  backend = device.client
  cases = []
  for name, fn, inputs in programs():
    compiled = jax.jit(fn).lower(*inputs).compile()
    blob = backend.serialize_executable(compiled.runtime_executable())
    start = blob.find(HEADER)
    assert start >= 0, f"{name}: no WSEX header in the serialized executable"
    if args.reseal:
      assert reseal(blob, start) == blob, "reseal must be the identity on an intact blob"
    placed = [jax.device_put(a, device) for a in inputs]
    exe = backend.deserialize_executable(blob, xc.DeviceList((device,)), xc.CompileOptions())
    reference = [np.asarray(y).tobytes() for y in exe.execute(placed)]
    cases.append((name, blob, start, placed, reference))

  if args.flip:
    program, size, pos, bit = args.flip.split(":")
    case = next(c for c in cases if c[0] == program)
    if len(case[1]) - case[2] != int(size):
      print(
        f"{program}'s blob is {len(case[1]) - case[2]} bytes, not {size}: the serialized "
        "form changed, so this flip no longer hits what it was recorded for; find the "
        "field again (WORKSHOP_FUZZ_DUMP of the old case) and update the case",
        file=sys.stderr,
      )
      return 2
    mutations = [("flip", case, flip(case[1], case[2], int(pos), int(bit)))]
  else:
    mutations = seeded(cases, args)
  for k, (name, blob, start, placed, reference), mutated in mutations:
    if os.environ.get("WORKSHOP_FUZZ_DUMP"):  # replaying one mutation by hand
      with open(f"{os.environ['WORKSHOP_FUZZ_DUMP']}.{k}", "wb") as f:
        f.write(blob[start:] + b"\0MUTATED\0" + mutated[start:])
    print("try", k, name, flush=True)
    try:
      exe = backend.deserialize_executable(mutated, xc.DeviceList((device,)), xc.CompileOptions())
    except Exception as e:  # noqa: BLE001 - any load error is a rejection
      if k == "flip":
        print(e, file=sys.stderr, flush=True)
      print(k, "rejected", flush=True)
      continue
    try:
      outputs = [np.asarray(y).tobytes() for y in exe.execute(placed)]
    except Exception:  # noqa: BLE001
      print(k, "error", flush=True)
      continue
    print(k, "identical" if outputs == reference else "different", flush=True)
  print("done", flush=True)


if __name__ == "__main__":
  sys.exit(main())
