"""Compile latency on both backends: python -m jax_plugins.workshop.bench.compile_latency

Times `lowered.compile()` (tracing and lowering excluded, as the bench's compile column)
of four programs on `workshop` and `cpu`, interleaved, each compile of a fresh wrapper so
that no JAX cache answers:

  one_op         x + 1 on f32[4] (the bench's tiny_call)
  mlp48_grad     the gradient of a 48-layer tanh MLP, width 256, batch 64 (95 fusions of
                 16K elements: below codegen.fusions.MIN_ELEMENTS, none compiled)
  mlp48_grad_big the same at batch 256 (95 fusions of 64K elements, 4 distinct, each
                 under codegen.fusions.MIN_WORK: none compiled; compiled, they cost 1.3x
                 the CPU backend's compile time)
  softmax        jax.nn.softmax of f32[1024, 1024] (one row fusion, compiled)

and with the plugin's code generation on and off (WORKSHOP_CODEGEN, read at each compile).
The generated code's disk cache is a fresh temporary directory, so "codegen on" pays for
code generation; `--warm-cache` keeps one directory across repetitions instead: what a
second process sees with the persistent cache (it still parses the IR and links the
cached object). Either way the process forgets what it generated before each compile.
Prints medians over `--repeat` rounds (default 5) in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def _programs(jax, jnp, np):
  rng = np.random.default_rng(0)

  def mlp_loss(ws, x):
    for w in ws:
      x = jnp.tanh(x @ w)
    return jnp.sum(x * x)

  ws = [rng.standard_normal((256, 256)).astype(np.float32) * 0.06 for _ in range(48)]
  x = rng.standard_normal((256, 256)).astype(np.float32)
  return {
    "one_op": (lambda v: v + 1, (np.ones(4, np.float32),)),
    "mlp48_grad": (jax.grad(mlp_loss), (ws, x[:64])),
    "mlp48_grad_big": (jax.grad(mlp_loss), (ws, x)),
    "softmax": (
      lambda v: jax.nn.softmax(v, axis=-1),
      (rng.standard_normal((1024, 1024)).astype(np.float32),),
    ),
  }


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m jax_plugins.workshop.bench.compile_latency")
  p.add_argument("--repeat", type=int, default=5)
  p.add_argument("--warm-cache", action="store_true")
  args = p.parse_args(argv)
  os.environ.setdefault("JAX_PLATFORMS", "workshop,cpu")
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel

  programs = _programs(jax, jnp, np)
  settings = [("cpu", None), ("workshop", "0"), ("workshop", "1")]
  times: dict[tuple[str, str, str | None], list[float]] = {}
  warm = tempfile.mkdtemp(prefix="codegen-")
  for _ in range(args.repeat):
    for name, (fn, fn_args) in programs.items():
      for backend, codegen in settings:
        if codegen is not None:
          os.environ["WORKSHOP_CODEGEN"] = codegen
          os.environ["WORKSHOP_CODEGEN_CACHE"] = (
            warm if args.warm_cache else tempfile.mkdtemp(prefix="codegen-")
          )
          # Forget what this process generated, as a new process would (the disk cache
          # stays, when warm).
          from jax_plugins.workshop.compiler import codegen as cg  # pylint: disable=import-outside-toplevel

          cg.forget_generated()
        device = jax.devices(backend)[0]
        placed = jax.device_put(fn_args, device)
        lowered = jax.jit(lambda *a, f=fn: f(*a)).lower(*placed)
        t0 = time.perf_counter()
        lowered.compile()
        times.setdefault((name, backend, codegen), []).append(time.perf_counter() - t0)
  print(
    f"compile latency, median of {args.repeat} (ms); codegen cache "
    f"{'warm' if args.warm_cache else 'cold'}"
  )
  print(f"{'program':<15} {'cpu':>9} {'workshop':>9} {'ws+codegen':>11} {'ratio':>7}")
  for name in programs:
    cpu, off, on = (statistics.median(times[(name, b, c)]) * 1e3 for b, c in settings)
    print(f"{name:<15} {cpu:9.1f} {off:9.1f} {on:11.1f} {on / cpu:7.2f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
