"""All-reduce bandwidth across processes: workshop (MPI) against the CPU backend (gloo).

  python -m jax_plugins.workshop.bench.allreduce [--processes 2] [--devices 1]

Starts the processes on 127.0.0.1 twice (jax_plugins.workshop.extensions.multiprocess), once per
backend, and times a pmap'd psum of one f32 array per device for sizes 4 KiB to 4 MiB
(case ``allreduce_bandwidth``: median of 5-7 calls after a warm-up, on process 0). The
bandwidth printed is the algorithm bandwidth, bytes per device / seconds; the ratio is
workshop time / CPU time (below 1: workshop faster). Timings are for reading, never
pass/fail (docs/multiprocess.md, "Multi-process", has measured numbers).
"""

import argparse
import sys

from ..extensions import multiprocess


def measure(processes=2, devices=1, timeout=300):
  """{platform: {size_bytes: seconds}} from process 0 of each run."""
  out = {}
  for platform in ("workshop", "cpu"):
    results = multiprocess.launch(
      processes, platform, "allreduce_bandwidth", devices=devices, timeout=timeout
    )
    first = results[0]
    if "allreduce_bandwidth" not in first or "error" in first["allreduce_bandwidth"]:
      raise RuntimeError(f"{platform} run failed: {first}")
    out[platform] = {int(k): v for k, v in first["allreduce_bandwidth"].items()}
  return out


def main(argv=None):
  p = argparse.ArgumentParser(
    prog="python -m jax_plugins.workshop.bench.allreduce", description=__doc__.split("\n\n")[0]
  )
  p.add_argument("--processes", type=int, default=2)
  p.add_argument("--devices", type=int, default=1, help="devices per process")
  args = p.parse_args(argv)
  times = measure(args.processes, args.devices)
  print(
    f"all-reduce (psum) of f32 across {args.processes} processes x {args.devices} "
    f"device(s), median seconds per call"
  )
  print(
    f"{'bytes/device':>12} {'workshop':>10} {'MB/s':>8} {'cpu(gloo)':>10} {'MB/s':>8} {'ratio':>6}"
  )
  for size in sorted(times["workshop"]):
    w, c = times["workshop"][size], times["cpu"][size]
    print(
      f"{size:>12} {w * 1e3:>8.3f}ms {size / w / 1e6:>8.1f} {c * 1e3:>8.3f}ms "
      f"{size / c / 1e6:>8.1f} {w / c:>6.2f}"
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
