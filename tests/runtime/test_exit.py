"""The interpreter exits cleanly after host callbacks (jax#16637, jax#23501).

A program holding a Python callback may be destroyed on a device worker while the
interpreter finalizes; CPython ends a thread that asks for the GIL then, and inside a
destructor that aborted the process ("terminate called without an active exception",
status 134). runtime/python_gate.h: no plugin thread enters Python once the exit hook has
run, and destructors never wait for the GIL. The race is timing-dependent, so each
reproducer runs a few times, in fresh processes, side by side.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = 2  # per reproducer (1 to 7 runs of 10 aborted before the fix; 0 of 50 after)

REPRODUCERS = {
  # Twenty jitted pure_callbacks, then exit.
  "pure_callbacks": """
    import jax, jax.numpy as jnp, numpy as np
    for i in range(20):
      f = jax.jit(lambda x, i=i: jax.pure_callback(
          lambda v: np.asarray(v) + i, jax.ShapeDtypeStruct((4,), jnp.float32), x))
      assert float(f(jnp.ones(4, jnp.float32))[0]) == 1 + i
    print("done")
    """,
  # jax.debug.callback inside lax.scan.
  "debug_callback_in_scan": """
    import jax, jax.numpy as jnp
    seen = []
    def body(c, x):
      jax.debug.callback(lambda v: seen.append(float(v)), x)
      return c + x, x
    total = jax.jit(lambda xs: jax.lax.scan(body, 0.0, xs))(jnp.arange(10.0))[0]
    assert float(total) == 45.0
    print("done")
    """,
  # Programs with callbacks still queued on the workers when the main thread leaves,
  # and executables dropped on the way out.
  "queued_and_dropped": """
    import jax, jax.numpy as jnp, numpy as np
    fs = [jax.jit(lambda x, i=i: jax.pure_callback(
        lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct((64,), jnp.float32), x) + i)
        for i in range(6)]
    outs = [f(jnp.ones(64, jnp.float32)) for f in fs for _ in range(3)]
    del fs
    print("done")
    """,
}


def _run(name: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, JAX_PLATFORMS="workshop,cpu")
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
  return subprocess.run(
    [sys.executable, "-c", textwrap.dedent(REPRODUCERS[name])],
    env=env,
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )


def test_exit_after_host_callbacks_is_clean():
  jobs = [name for name in REPRODUCERS for _ in range(RUNS)]
  with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
    results = list(pool.map(_run, jobs))
  failures = [
    f"{name}: status {r.returncode}, stdout {r.stdout[-200:]!r}, stderr {r.stderr[-1500:]}"
    for name, r in zip(jobs, results)
    if r.returncode != 0 or r.stdout.strip().splitlines()[-1:] != ["done"]
  ]
  assert not failures, "\n".join(failures)
