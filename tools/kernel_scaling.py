"""Time per kernel kind against core count, workshop vs XLA:CPU (ThreadPool::PartsFor).

    python tools/kernel_scaling.py --cores 1,2,4,8,13

One program per kernel kind the cost model splits (convolutions in several layouts,
strides and groups, a depthwise one, a dot, a batched dot, a reduction, a max-pool, a row
gather, a sort), each timed on both backends in one process, alternating, the minimum of
--reps calls. With --cores the script re-runs itself under `taskset -c 0-(K-1)` for each
K and prints each backend's time per K and its scaling (time at the smallest K over time
at the largest). Results are checked against the CPU backend (max relative difference).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _cases():
  import jax.numpy as jnp
  import numpy as np
  from jax import lax

  r = np.random.default_rng(0)
  f32 = lambda *s: r.standard_normal(s).astype(np.float32)

  def conv(dn, strides=(1, 1), groups=1):
    return lambda x, k: lax.conv_general_dilated(
      x, k, strides, "SAME", dimension_numbers=dn, feature_group_count=groups
    )

  nhwc = ("NHWC", "HWIO", "NHWC")
  nchw = ("NCHW", "OIHW", "NCHW")
  pool = lambda h: lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
  return {
    "conv 16x32x32x3->32 nhwc": (conv(nhwc), (f32(16, 32, 32, 3), f32(3, 3, 3, 32))),
    "conv 16x16x16x32->64 nhwc": (conv(nhwc), (f32(16, 16, 16, 32), f32(3, 3, 32, 64))),
    "conv 8x56x56x64->64 nhwc": (conv(nhwc), (f32(8, 56, 56, 64), f32(3, 3, 64, 64))),
    "conv 8x64x28x28 nchw": (conv(nchw), (f32(8, 64, 28, 28), f32(64, 64, 3, 3))),
    "conv stride 2 nhwc": (conv(nhwc, (2, 2)), (f32(16, 32, 32, 32), f32(3, 3, 32, 64))),
    "conv groups 4 nhwc": (conv(nhwc, groups=4), (f32(8, 28, 28, 64), f32(3, 3, 16, 64))),
    "conv depthwise nhwc": (conv(nhwc, groups=64), (f32(8, 56, 56, 64), f32(3, 3, 1, 64))),
    "maxpool 2x2 16x32x32x32": (pool, (f32(16, 32, 32, 32),)),
    "dot 512x1024x512": (jnp.matmul, (f32(512, 1024), f32(1024, 512))),
    "dot batch 32x128x128x128": (jnp.matmul, (f32(32, 128, 128), f32(32, 128, 128))),
    "sum axis 1 4096x4096": (lambda x: x.sum(1), (f32(4096, 4096),)),
    "gather 16384 rows of 256": (
      lambda t, i: t[i],
      (f32(50000, 256), r.integers(0, 50000, 16384).astype(np.int32)),
    ),
    "sort 2000x1000": (lambda x: jnp.sort(x, -1), (f32(2000, 1000),)),
  }


def _measure(reps: int, only: list[str]) -> dict:
  import jax
  import numpy as np

  ws, cpu = jax.devices("workshop")[0], jax.devices("cpu")[0]
  rows = {}
  for name, (f, args) in _cases().items():
    if only and not any(o in name for o in only):
      continue
    fj = jax.jit(f)
    aw, ac = jax.device_put(args, ws), jax.device_put(args, cpu)
    for _ in range(2):
      jax.block_until_ready(fj(*aw))
      jax.block_until_ready(fj(*ac))
    tw, tc = [], []
    for _ in range(reps):
      s = time.perf_counter()
      jax.block_until_ready(fj(*aw))
      tw.append(time.perf_counter() - s)
      s = time.perf_counter()
      jax.block_until_ready(fj(*ac))
      tc.append(time.perf_counter() - s)
    a, b = np.asarray(fj(*aw), np.float64), np.asarray(fj(*ac), np.float64)
    diff = float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))
    rows[name] = {"workshop_ms": min(tw) * 1e3, "cpu_ms": min(tc) * 1e3, "rel_diff": diff}
    print(
      f"{name:28s} workshop {min(tw) * 1e3:8.3f} ms  cpu {min(tc) * 1e3:8.3f} ms  "
      f"ratio {min(tw) / min(tc):5.2f}  rel diff {diff:.1e}",
      flush=True,
    )
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--cores", help="comma-separated core counts: re-run under taskset for each")
  p.add_argument("--reps", type=int, default=20)
  p.add_argument("--cases", default="", help="comma-separated substrings of case names")
  p.add_argument("--out", help="write the results as JSON here")
  args = p.parse_args()
  os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
  only = [c for c in args.cases.split(",") if c]
  if not args.cores:
    rows = _measure(args.reps, only)
    if args.out:
      with open(args.out, "w") as f:
        json.dump(rows, f)
    return
  mask = sorted(os.sched_getaffinity(0))
  results = {}
  for k in [int(c) for c in args.cores.split(",")]:
    if k > len(mask):
      print(f"--cores {k}: only {len(mask)} CPUs here; skipped", flush=True)
      continue
    out = f"/tmp/kernel_scaling_{os.getpid()}_{k}.json"
    cpus = ",".join(str(c) for c in mask[:k])
    cmd = ["taskset", "-c", cpus, sys.executable, __file__, "--reps", str(args.reps), "--out", out]
    if args.cases:
      cmd += ["--cases", args.cases]
    print(f"== {k} cores", flush=True)
    subprocess.run(cmd, check=True)
    with open(out) as f:
      results[k] = json.load(f)
    os.remove(out)
  ks = sorted(results)
  if len(ks) >= 2:
    print(f"\nscaling {ks[0]} -> {ks[-1]} cores (time at {ks[0]} / time at {ks[-1]}):")
    for name in results[ks[0]]:
      w = [results[k][name]["workshop_ms"] for k in ks]
      c = [results[k][name]["cpu_ms"] for k in ks]
      print(
        f"{name:28s} workshop {' / '.join(f'{t:.2f}' for t in w)} ms (x{w[0] / w[-1]:.2f})  "
        f"cpu {' / '.join(f'{t:.2f}' for t in c)} ms (x{c[0] / c[-1]:.2f})"
      )
  if args.out:
    with open(args.out, "w") as f:
      json.dump({str(k): v for k, v in results.items()}, f)


if __name__ == "__main__":
  main()
