"""The code-generation tier, off against on: python -m jax_plugins.workshop.bench.codegen_ab

For each bench case and size (default: the fusion and loop cases at their two largest
sizes), jits the case three times in one process: on `workshop` compiled with
WORKSHOP_CODEGEN=0 (every fusion and loop interpreted), on `workshop` with the tier on,
and on the CPU backend; then times the three interleaved, call by call, and prints the
median of `--reps` calls (default 15) of each and the workshop/cpu ratios off and on.
One process and interleaving make the comparison fair on a busy machine, where separate
bench runs swing with the load; the bench (`python -m jax_plugins.workshop.bench`) with
and without WORKSHOP_CODEGEN=0 measures the same thing with its own method.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

DEFAULT = (
  "softmax,layer_norm,gelu,axpb,tanh_exp_chain,transformer_block,fori_scalar,"
  "newton_while,scan_rnn,log_softmax,softmax_bf16"
)


def _extra_cases():
  """Regions the tier covers that the suite has no case for (the suite is float32 and
  notebook 06 runs all of it): log-softmax (libmvec's log in a row fusion) and a bf16
  softmax (16-bit operands and results, f32 inside), over rows of 1024."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  from .registry import Case, normal  # pylint: disable=import-outside-toplevel

  def row_case(name, f, dtype, doc):
    return Case(
      name,
      "normalization",
      (1024, 4096),
      (1024,),
      lambda r, rng: (f, (normal(rng, r, 1024).astype(dtype),)),
      flops=lambda r: 5 * r * 1024,
      bytes=lambda r: 2 * r * 1024 * 4,
      label=lambda r: f"{r}x1024",
      tol=1e-2,
      doc=doc,
    )

  return [
    row_case(
      "log_softmax",
      lambda x: jax.nn.log_softmax(x, axis=-1),
      jnp.float32,
      "jax.nn.log_softmax over the last axis of f32[r,1024].",
    ),
    row_case(
      "softmax_bf16",
      lambda x: jax.nn.softmax(x, axis=-1),
      jnp.bfloat16,
      "jax.nn.softmax over the last axis of bf16[r,1024].",
    ),
  ]


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m jax_plugins.workshop.bench.codegen_ab")
  p.add_argument("--cases", default=DEFAULT)
  p.add_argument("--reps", type=int, default=15)
  p.add_argument("--sizes", type=int, default=2, help="the largest this many sizes")
  args = p.parse_args(argv)
  os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel

  from . import registry  # pylint: disable=import-outside-toplevel

  print(
    f"{'case':<18} {'size':<22} {'off ms':>9} {'on ms':>9} {'cpu ms':>9} "
    f"{'off/cpu':>8} {'on/cpu':>7}"
  )
  names = args.cases.split(",")
  extra = [c for c in _extra_cases() if c.name in names]
  names = [n for n in names if n not in {c.name for c in extra}]
  for case in (registry.select(names) if names else []) + extra:
    if case.devices != 1:
      continue
    for size in case.sizes[-args.sizes :]:
      fn, fn_args = case.build(size, np.random.default_rng(0))
      runs = {}
      for name, device, setting in (
        ("off", "workshop", "0"),
        ("on", "workshop", "1"),
        ("cpu", "cpu", None),
      ):
        if setting is not None:
          os.environ["WORKSHOP_CODEGEN"] = setting
        jitted = jax.jit(lambda *a, f=fn: f(*a))  # a fresh function: compiled now
        placed = jax.device_put(fn_args, jax.devices(device)[0])
        jax.block_until_ready(jitted(*placed))
        runs[name] = (jitted, placed)
      times = {name: [] for name in runs}
      for _ in range(args.reps):
        for name, (jitted, placed) in runs.items():
          t0 = time.perf_counter()
          jax.block_until_ready(jitted(*placed))
          times[name].append(time.perf_counter() - t0)
      m = {name: statistics.median(t) * 1e3 for name, t in times.items()}
      print(
        f"{case.name:<18} {case.label(size):<22} {m['off']:9.3f} {m['on']:9.3f} "
        f"{m['cpu']:9.3f} {m['off'] / m['cpu']:8.2f} {m['on'] / m['cpu']:7.2f}"
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
