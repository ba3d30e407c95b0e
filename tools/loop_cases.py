"""Issue 36's loop examples and issue 35's buffered while_loop, timed on workshop and on
JAX's CPU backend in one process (interleaved; median and best of the repetitions).

    python tools/loop_cases.py                       # every case
    python tools/loop_cases.py --cases hmc,kv_decode --reps 15
    python tools/loop_cases.py --plan hmc            # the workshop plan, loops opened

Cases: `hmc` and `kv_decode` (bench.heldout's `hmc_logistic`: a lax.scan of 100 HMC steps,
each a fori_loop of 10 leapfrog steps on a 1000x20 logistic regression; `kv_decode_64`: 64
decode steps, dynamic_update_slice into a KV cache, then attention over it, in a
fori_loop), `buffer_while` / `buffer_while_read`
(equinox's test_while_loop.py::test_speed_buffer_while at 50,000 elements: a
checkpointed while_loop writing xs.at[step]; needs equinox, skipped without it), and
bench.heldout's `langevin`, `lorenz96_rk4`, `gru_scan`. Not a test: timings only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def _buffer_while(read: bool, size: int = 50_000):
  import equinox.internal as eqxi  # pylint: disable=import-outside-toplevel

  @jax.vmap
  def f(init_step, init_xs):
    def cond(carry):
      step, xs = carry
      return step < xs.size

    def body(carry):
      step, xs = carry
      if read:
        i = jax.random.randint(jax.random.PRNGKey(step), shape=(), minval=0, maxval=step)
        xs = xs.at[step].set(2 * jnp.tanh(xs[i]))
      else:
        xs = xs.at[step].set(1)
      return step + 1, xs

    def loop(init_xs):
      return eqxi.while_loop(
        cond,
        body,
        (init_step, init_xs),
        buffers=lambda i: i[1],
        kind="checkpointed",
        checkpoints=50_000,
      )

    return jax.linearize(loop, init_xs)  # as the test: residuals saved

  args = (np.array([0, 1], np.int32), np.zeros((2, size), np.float32))
  return (lambda a, b: jax.tree.leaves(f(a, b))), args


def _heldout(name):
  from jax_plugins.workshop.bench import heldout  # pylint: disable=import-outside-toplevel

  return next(c for c in heldout.CASES if c.name == name).make()


CASES = {
  "hmc": lambda: _heldout("hmc_logistic"),
  "kv_decode": lambda: _heldout("kv_decode_64"),
  "langevin": lambda: _heldout("langevin"),
  "lorenz96_rk4": lambda: _heldout("lorenz96_rk4"),
  "gru_scan": lambda: _heldout("gru_scan"),
  "buffer_while": lambda: _buffer_while(False),
  "buffer_while_read": lambda: _buffer_while(True),
}


def _rel_diff(a, b) -> float:
  worst = 0.0
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    scale = max(float(np.abs(y).max(initial=0.0)), 1e-30)
    worst = max(worst, float(np.abs(x - y).max(initial=0.0)) / scale)
  return worst


def time_case(name: str, reps: int) -> None:
  fn, args = CASES[name]()
  devices = {"workshop": jax.devices("workshop")[0], "cpu": jax.devices("cpu")[0]}
  jitted, placed, outs = {}, {}, {}
  for backend, dev in devices.items():
    placed[backend] = jax.device_put(args, dev)
    jitted[backend] = jax.jit(fn)
    outs[backend] = jax.block_until_ready(jitted[backend](*placed[backend]))
  times = {b: [] for b in devices}
  for _ in range(reps):
    for b in devices:
      start = time.perf_counter()
      jax.block_until_ready(jitted[b](*placed[b]))
      times[b].append(time.perf_counter() - start)
  w, c = statistics.median(times["workshop"]), statistics.median(times["cpu"])
  bw, bc = min(times["workshop"]), min(times["cpu"])
  print(
    f"{name:18s} median workshop {w * 1e3:9.3f} ms cpu {c * 1e3:9.3f} ms ratio {w / c:5.2f}"
    f" | best {bw * 1e3:9.3f} / {bc * 1e3:9.3f} ms ratio {bw / bc:5.2f}"
    f" | rel diff {_rel_diff(outs['workshop'], outs['cpu']):.1e}",
    flush=True,
  )


def print_plan(name: str) -> None:
  from jax._src.lib import _jax  # pylint: disable=import-outside-toplevel
  from jaxlib.mlir.dialects import stablehlo  # pylint: disable=import-outside-toplevel

  from jax_plugins.workshop.compiler import compile_program  # pylint: disable=import-outside-toplevel
  from jax_plugins.workshop.compiler.plan import Plan  # pylint: disable=import-outside-toplevel

  fn, args = CASES[name]()
  target = stablehlo.get_version_from_compatibility_requirement(
    stablehlo.StablehloCompatibilityRequirement.WEEK_4
  )
  artifact = _jax.mlir.serialize_portable_artifact(
    jax.jit(fn).lower(*args).compiler_ir("stablehlo"), target, True
  )

  def show(plan: Plan, depth: int) -> None:
    for instr in plan.instrs:
      out = plan.slots[instr.outs[0]] if instr.outs else None
      print("  " * depth + f"{instr.op} {out}")
      if instr.op in ("while", "case"):
        for key, value in instr.attrs.items():
          if isinstance(value, Plan):
            print("  " * depth + f" [{key}]")
            show(value, depth + 2)

  show(compile_program(artifact, "mlir", b"", 1).plan, 0)


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(prog="python tools/loop_cases.py")
  p.add_argument("--cases", help="comma-separated (default: all)")
  p.add_argument("--reps", type=int, default=11)
  p.add_argument("--plan", help="print the workshop plan of this case instead")
  args = p.parse_args(argv)
  if args.plan:
    print_plan(args.plan)
    return
  for name in args.cases.split(",") if args.cases else list(CASES):
    try:
      time_case(name, args.reps if not name.startswith("buffer") else min(args.reps, 3))
    except ImportError as e:
      print(f"{name:18s} skipped ({e})", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
