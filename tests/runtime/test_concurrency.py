"""Threads compiling and running their own programs at once, with the code-generation tier
on and forced (issue 34): every result is checked against numpy, with other threads
donating and deleting inputs.

The tier once created its one LLVM engine twice when the first compiles of a process ran
on several threads (llvmlite releases the GIL); the engine that lost took its functions'
code with it, and plans that pointed there ran another program's code, returned wrong
results or jumped into unmapped memory (3 runs of 3 failed within 30 s). The first
compiles of a process are the dangerous ones, so each setting runs in a fresh process
with a fresh object cache, for a bounded time.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECONDS = 12  # of load per setting; the process starts and compiles in a few more

STRESS = r'''
import os, sys, threading, time, traceback
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 30
dev = jax.devices("workshop")
mesh = jax.sharding.Mesh(np.array(dev[:4]), ("x",))
errors = []
counts = {}
stop = time.monotonic() + SECONDS

def check(name, got, want, tol=1e-4):
    got = np.asarray(got)
    # f32 sums of thousands: the error scales with the largest magnitude, not each value.
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol * scale):
        raise AssertionError(f"{name}: wrong result {got.ravel()[:4]} vs {want.ravel()[:4]}")

def case_matmul(i, rng):
    a = rng.standard_normal((33, 17)).astype(np.float32); b = rng.standard_normal((17, 9)).astype(np.float32)
    f = jax.jit(lambda a, b: jnp.tanh(a @ b) * (i + 1))
    check("matmul", f(a, b), np.tanh(a @ b) * (i + 1), 1e-3)

def case_reduce(i, rng):
    x = rng.standard_normal((64, 40)).astype(np.float32)
    f = jax.jit(lambda x: (jnp.sum(x * (i + 2), axis=0), jnp.max(x + i, axis=1)))
    s, m = f(x); check("reduce_sum", s, (x * (i + 2)).sum(0), 1e-3); check("reduce_max", m, (x + i).max(1))

def case_scan(i, rng):
    x = rng.standard_normal((20, 8)).astype(np.float32)
    f = jax.jit(lambda xs: jax.lax.scan(lambda c, v: (c * 0.5 + v + i, c), jnp.zeros(8, jnp.float32), xs)[0])
    c = np.zeros(8, np.float32)
    for v in x: c = c * 0.5 + v + i
    check("scan", f(x), c, 1e-3)

def case_while(i, rng):
    a = np.float32(1.0 + 0.01 * (i % 7 + 1)); b = np.float32(i % 5 + 1); n = np.float32(1000 + i)
    f = jax.jit(lambda x: jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] * a + b, c[1] + 1), (x, 0)))
    x = np.float32(rng.uniform(0, 10))
    want_x, want_k = x, 0
    while want_x < n: want_x = np.float32(want_x * a + b); want_k += 1
    got_x, got_k = f(x)
    if int(got_k) != want_k: raise AssertionError(f"while: {int(got_k)} iterations, expected {want_k}")
    check("while", got_x, np.asarray(want_x), 1e-3)

def case_sort(i, rng):
    x = rng.standard_normal(100 + i % 13).astype(np.float32)
    check("sort", jax.jit(lambda x: jnp.sort(x * (i + 1)))(x), np.sort(x * (i + 1)))

def case_random(i, rng):
    f = jax.jit(lambda k: jax.random.uniform(k, (16,)) + i)
    got = np.asarray(f(jax.random.key(i)))
    if not ((got >= i) & (got < i + 1)).all(): raise AssertionError(f"random: {got[:4]}")

def case_sharded(i, rng):
    x = rng.standard_normal((8, 64)).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P("x")))
    f = jax.jit(lambda x: (jnp.exp(x * 0.1) * (i + 1) + x).sum(axis=1))
    check("sharded", f(xs), (np.exp(x * 0.1) * (i + 1) + x).sum(1), 1e-3)

def case_donate_delete(i, rng):
    x = rng.standard_normal((256,)).astype(np.float32)
    f = jax.jit(lambda x: x * 3 + i, donate_argnums=0)
    y = jax.device_put(x, dev[i % 4])
    z = f(y)
    check("donate", z, x * 3 + i)
    w = jax.device_put(x, dev[i % 4]); v = jax.jit(lambda x: jnp.cos(x) + i)(w); w.delete()
    check("delete", v, np.cos(x) + i)

CASES = [case_matmul, case_reduce, case_scan, case_while, case_sort, case_random, case_sharded, case_donate_delete]

def worker(t):
    rng = np.random.default_rng(t)
    i = t * 1000
    while time.monotonic() < stop and not errors:
        case = CASES[(t + i) % len(CASES)]
        try:
            case(i, rng)
            counts[case.__name__] = counts.get(case.__name__, 0) + 1
        except Exception:
            errors.append(f"thread {t} {case.__name__} {i}: {traceback.format_exc()[-1500:]}")
        i += 1

threads = [threading.Thread(target=worker, args=(t,)) for t in range(int(os.environ.get("STRESS_THREADS", "8")))]
for th in threads: th.start()
for th in threads: th.join()
print("counts", sorted(counts.items()), flush=True)
if errors:
    print("ERRORS", len(errors)); print(errors[0]); sys.exit(1)
print("OK")
'''


@pytest.mark.parametrize("setting", ["1", "force"])
def test_threads_compiling_and_running_at_once(setting, tmp_path):
  env = dict(
    os.environ,
    JAX_PLATFORMS="workshop,cpu",
    WORKSHOP_CODEGEN=setting,
    WORKSHOP_CODEGEN_CACHE=str(tmp_path),
    STRESS_THREADS="6",
  )
  env.pop("XLA_FLAGS", None)
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
  try:
    done = subprocess.run(
      [sys.executable, "-c", STRESS, str(SECONDS)],
      env=env,
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=SECONDS + 150,
    )
  except subprocess.TimeoutExpired as e:
    pytest.fail(f"hung: {e.stdout} {e.stderr}")
  assert done.returncode == 0 and "OK" in done.stdout, (
    f"status {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
  )
  assert "unavailable" not in done.stderr, done.stderr[-2000:]  # generated code was used


def test_generated_functions_carry_their_tag():
  """Each generated function has its symbol's hash as prefix data (what the kernels check
  before every call), and load refuses code that does not define the symbol so."""
  import ctypes
  import hashlib

  from jax_plugins.workshop.compiler import codegen

  if codegen.backend() != "llvm":
    pytest.skip("llvmlite unavailable")
  code = (
    "define void @f(ptr %args, i64 %begin, i64 %end) #0 {\n  ret void\n}\n"
    'attributes #0 = { nounwind }\n'
  )
  symbol = "workshop_fusion_" + hashlib.sha256(code.encode()).hexdigest()[:16]
  named = code.replace("@f(", f"@{symbol}(", 1)
  with pytest.raises(ValueError, match="tag"):
    codegen.load("llvm", named, symbol)
  address = codegen.load("llvm", codegen.with_tag(named, symbol), symbol)
  assert ctypes.c_uint64.from_address(address - 8).value == codegen.symbol_tag(symbol)


_TAMPER = r"""
import ctypes, mmap
import numpy as np
import jax, jax.numpy as jnp
from jax_plugins.workshop.compiler import codegen

f = jax.jit(lambda x: jnp.tanh(x * 3.0) + 1.0)
x = np.linspace(-1, 1, 64, dtype=np.float32)
np.testing.assert_allclose(np.asarray(f(x)), np.tanh(x * 3) + 1, rtol=1e-5)
(address,) = [a for (which, _), (_, a) in codegen._loaded.items() if which == "llvm"][-1:]
tag = ctypes.c_uint64.from_address(address - 8)
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page = (address - 8) & ~(mmap.PAGESIZE - 1)
assert libc.mprotect(page, 2 * mmap.PAGESIZE, 7) == 0, ctypes.get_errno()  # rwx
good = tag.value
tag.value = good ^ 1  # what another function at that address would carry
try:
  np.asarray(f(x))
  print("CALLED")
except Exception as e:
  print("REFUSED", "tag differs" in str(e))
tag.value = good
np.testing.assert_allclose(np.asarray(f(x)), np.tanh(x * 3) + 1, rtol=1e-5)
print("RESTORED")
"""


def test_a_function_without_its_tag_is_not_called(tmp_path):
  """The check before every call: with the tag in front of the generated function changed
  (as if another function had come to live at that address), the program fails with an
  error instead of jumping there; restored, it runs again."""
  env = dict(
    os.environ,
    JAX_PLATFORMS="workshop,cpu",
    WORKSHOP_CODEGEN="force",
    WORKSHOP_CODEGEN_CACHE=str(tmp_path),
  )
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
  done = subprocess.run(
    [sys.executable, "-c", _TAMPER], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
  )
  assert done.returncode == 0, done.stderr[-3000:]
  assert "REFUSED True" in done.stdout and "RESTORED" in done.stdout, done.stdout
