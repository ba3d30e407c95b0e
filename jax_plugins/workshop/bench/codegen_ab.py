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

DEFAULT = "softmax,layer_norm,gelu,axpb,tanh_exp_chain,transformer_block,fori_scalar," \
          "newton_while,scan_rnn"


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

  print(f"{'case':<18} {'size':<22} {'off ms':>9} {'on ms':>9} {'cpu ms':>9} "
        f"{'off/cpu':>8} {'on/cpu':>7}")
  for case in registry.select(args.cases.split(",")):
    if case.devices != 1:
      continue
    for size in case.sizes[-args.sizes:]:
      fn, fn_args = case.build(size, np.random.default_rng(0))
      runs = {}
      for name, device, setting in (("off", "workshop", "0"), ("on", "workshop", "1"),
                                    ("cpu", "cpu", None)):
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
      print(f"{case.name:<18} {case.label(size):<22} {m['off']:9.3f} {m['on']:9.3f} "
            f"{m['cpu']:9.3f} {m['off'] / m['cpu']:8.2f} {m['on'] / m['cpu']:7.2f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
