"""Linear algebra on both backends: python -m jax_plugins.workshop.bench.linalg

Times jnp.linalg / jax.scipy.linalg functions (the LAPACK-backed lowerings of
jax_plugins/workshop/extensions/linalg.py and the `linalg` kernels) on `workshop` and `cpu`,
interleaved (timing.time_interleaved, FULL settings; `--quick` for QUICK): one n x n
matrix (`--n`, default 256) and a batch of small ones (`--batch`, default 512 matrices of
16 x 16), f32 (`--dtype float64` with x64 enabled for f64). Prints the median ms per call
on each backend and the ratio workshop / cpu (> 1: workshop slower). Timings are for
reading, never pass/fail; docs/extensions.md ("What JAX withholds...") has measured numbers.
Not a case of the main suite, whose case list notebook 06 prints.
"""

from __future__ import annotations

import argparse
import sys


def _functions(jnp, jsl):
  """name -> (function, which input: 'general', 'hermitian' or 'spd')."""
  return {
    "eigh": (jnp.linalg.eigh, "hermitian"),
    "svd": (jnp.linalg.svd, "general"),
    "eigvals": (jnp.linalg.eigvals, "general"),
    "det": (jnp.linalg.det, "general"),
    "solve": (lambda a: jnp.linalg.solve(a, a[..., :1]), "general"),
    "inv": (jnp.linalg.inv, "general"),
    "qr": (jnp.linalg.qr, "general"),
    "cholesky": (jnp.linalg.cholesky, "spd"),
    "expm": (lambda a: jsl.expm(a / a.shape[-1]), "general"),
  }


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--n", type=int, default=256, help="size of the single matrix")
  p.add_argument("--batch", type=int, default=512, help="matrices in the batched runs")
  p.add_argument("--batch-n", type=int, default=16, help="size of each batched matrix")
  p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
  p.add_argument("--quick", action="store_true", help="QUICK timing settings")
  p.add_argument("--only", default=None, help="comma-separated function names")
  args = p.parse_args(argv)

  import jax
  import jax.numpy as jnp
  import jax.scipy.linalg as jsl
  import numpy as np

  from . import timing

  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  devices = {"workshop": jax.devices("workshop")[0], "cpu": jax.devices("cpu")[0]}
  settings = timing.QUICK if args.quick else timing.FULL
  rng = np.random.default_rng(0)
  functions = _functions(jnp, jsl)
  chosen = args.only.split(",") if args.only else list(functions)
  print(f"{'function':<10} {'shape':<16} {'workshop ms':>12} {'cpu ms':>10} {'ratio':>7}")
  for shape in [(args.n, args.n), (args.batch, args.batch_n, args.batch_n)]:
    a = rng.standard_normal(shape).astype(args.dtype)
    inputs = {
      "general": a,
      "hermitian": (a + np.swapaxes(a, -1, -2)) / 2,
      "spd": a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1], dtype=a.dtype),
    }
    for name in chosen:
      fn, kind = functions[name]
      jitted = jax.jit(fn)
      placed = {k: jax.device_put(inputs[kind], d) for k, d in devices.items()}
      calls = {k: (lambda k=k: jitted(placed[k])) for k in devices}
      stats = timing.time_interleaved(calls, settings)
      ms = {k: s.median * 1e3 for k, s in stats.items()}
      print(
        f"{name:<10} {str(shape):<16} {ms['workshop']:>12.3f} {ms['cpu']:>10.3f} "
        f"{ms['workshop'] / ms['cpu']:>7.2f}",
        flush=True,
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
