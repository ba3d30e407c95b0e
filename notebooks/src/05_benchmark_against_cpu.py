# %% [markdown]
# # 05 · Benchmark against JAX's CPU backend
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/05_benchmark_against_cpu.ipynb)
#
# **Concept: a backend is judged by running the programs of the reference backend, side by
# side in one process, and explaining every gap by its mechanism.** This notebook runs a
# short version of the benchmark suite (`python -m jax_plugins.workshop.bench`) on the
# `workshop` plugin and on JAX's built-in CPU backend (XLA:CPU), checks that both computed
# the same results, plots the times against this machine's roofline, and explains where the
# workshop wins or loses and why.
#
# Timings depend on the machine and on what else runs on it. The cells that print them are
# marked `# NBVAL_IGNORE_OUTPUT`, so nbval re-runs them without comparing their output; the
# cells that check structure (which cases ran, on which backends, whether the results agree)
# are compared.

# %%
# Colab only (anywhere else this cell does nothing): clone the repository, install the
# workshop's stack and build the plugin, then restart the runtime. After that: run all.
import sys
if "google.colab" in sys.modules:
  import os, subprocess
  if not os.path.isdir("/content/pjrt-workshop"):
    subprocess.run(["git", "clone", "-q", "https://github.com/pjrt-workshop/pjrt-workshop",
                    "/content/pjrt-workshop"], check=True)
  sys.path.insert(0, "/content/pjrt-workshop/notebooks")
  import colab_setup
  colab_setup.main()

# %% [markdown]
# ## Setup
#
# Both backends in one process, `workshop` the default (as in notebook 03), and the
# benchmark package `jax_plugins.workshop.bench`.

# %%
import os
import sys
from pathlib import Path

from jax_plugins.workshop import notebook

ROOT = notebook.setup("workshop,cpu")

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from jax_plugins.workshop import bench

# %% [markdown]
# Some machines set `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` for old OpenBLAS builds. Current
# OpenBLAS then picks kernels for the wrong CPU and runs GEMMs about half as fast. Both
# OpenBLAS builds in this process read them: the plugin's (scipy-openblas32) and numpy's. The
# command line drops them for its own process. This notebook does not, because it also runs
# under CI, which must see the environment as configured. If they are set here, read the
# workshop's matmul numbers as pessimistic.

# %%
# NBVAL_IGNORE_OUTPUT
for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
  print(f"{var} = {os.environ.get(var, '(not set)')}")

# %% [markdown]
# ## How the harness measures
#
# For every case and size, `bench.run_point`:
#
# 1. builds the program and its float32 inputs (seeded by case and size) and places them on
#    each backend's first device;
# 2. compiles with `jax.jit(f).lower(*args).compile()` and times that call. This is the
#    backend's compile time: XLA's pass pipeline and LLVM for `cpu`; for `workshop`, the
#    StableHLO → plan lowering in Python;
# 3. makes a first call on each backend and compares the outputs,
#    `max|workshop − cpu| / max|cpu|` against the case's tolerance. The two backends sum
#    reductions and GEMMs in different orders, so those cases get looser tolerances, and
#    `sum_all` over the most terms the loosest. The benchmark doubles as a correctness test;
# 4. after warm-up, times both backends **interleaved**. Each repetition calls workshop then
#    cpu, or cpu then workshop, alternating, so a burst of load from another process hits
#    both. Every call ends in `block_until_ready`, so the time is the latency of a call,
#    dispatch included. Fast calls are repeated within a repetition to last at least
#    20 ms: when one backend's repetition ends, its idle threads still poll for a moment
#    while the other's may have gone to sleep, and a short repetition would charge that to
#    its calls. It reports the median and the interquartile range.
#
# Each case also has a **roofline model**: the FLOPs of one call and its *compulsory* memory
# traffic (each input read once, each output written once). Against the machine's measured
# copy bandwidth and peak GEMM rate, `bytes / bandwidth` and `flops / peak` are lower bounds
# on the time of any implementation whose data does not fit in cache.
#
# The cases, with the sizes this notebook runs (the full suite sweeps further):

# %%
for c in bench.all_cases():
  print(f"{c.name:<18} {c.family:<14} {' | '.join(c.label(s) for s in c.quick_sizes)}")

# %% [markdown]
# ## Run the short suite
#
# `quick=True` selects the short size sweeps and few repetitions (about a minute). The
# results go to a CSV, one row per case × size × backend, with a JSON side file that
# describes the machine. One line per case and size gives each backend's median and
# interquartile range, the ratio workshop / cpu (> 1: workshop slower), and the agreement.

# %%
# NBVAL_IGNORE_OUTPUT
csv_path = ROOT / "bench_results" / "notebook-quick.csv"
suite = bench.run_suite(quick=True, out=csv_path, progress=False, log=None)
for i in range(0, len(suite.rows), 2):
  print(bench.point_line(suite.rows[i:i + 2]))

# %% [markdown]
# ## Check the results
#
# The CSV read back: its columns, one row per backend for every case and size, every case
# run on the CPU backend, and on the workshop backend either run or reported `unsupported`
# (its compiler raised UNIMPLEMENTED for an op it has no kernel for yet). Nothing failed in
# another way, and wherever both ran the results agree.

# %%
rows = bench.read_csv(csv_path)
points = {(r["case"], r["size"]) for r in rows}
print("columns:", ", ".join(rows[0]))
print("cases:", ", ".join(dict.fromkeys(r["case"] for r in rows)))
print("a row per backend for every point:",
      sorted(r["backend"] for r in rows) == sorted(bench.BACKENDS * len(points)))
print("every point ran on cpu:",
      all(r["status"] == "ok" for r in rows if r["backend"] == "cpu"))
print("workshop: ran or reported unsupported, no other failure:",
      all(r["status"] in ("ok", "unsupported") for r in rows if r["backend"] == "workshop"))
both = [r for r in rows if r["backend"] == "workshop" and r["status"] == "ok"]
print("results agree wherever both ran:", all(r["agree"] for r in both))

# %% [markdown]
# Which ops the workshop does not support yet changes as kernels land, so it is listed
# separately:

# %%
# NBVAL_IGNORE_OUTPUT
unsupported = {r["case"]: r["message"] for r in rows
               if r["backend"] == "workshop" and r["status"] == "unsupported"}
for case, message in unsupported.items():
  print(f"{case}: {message.split(' at ')[0]}")
print(f"{len(points) - len({(r['case'], r['size']) for r in rows if r['case'] in unsupported})}"
      f" of {len(points)} points ran on both backends")

# %% [markdown]
# ## The machine and its roofline
#
# `suite.machine` records the CPU, the library versions, the OpenBLAS kernels each build
# selected at run time, and the load average. A load average above the core count means the
# timings below are noisy. `suite.references` holds the two ceilings of the roofline,
# measured just before the cases ran.

# %%
# NBVAL_IGNORE_OUTPUT
m, ref = suite.machine, suite.references
print(f"{m['cpu_model']}, {m['cpu_count']} cores, load average {m['loadavg_at_start'][0]:.1f}")
print("versions:", ", ".join(f"{k} {v}" for k, v in m["versions"].items()))
for lib, info in m["openblas"].items():
  print(f"OpenBLAS {lib}: {info.get('corename')} kernels, {info.get('threads')} threads")
print(f"copy bandwidth {ref['copy_gbps']:.1f} GB/s (read + write, preallocated 64 MB)")
sources = {"plugin's OpenBLAS": "plugin", "numpy's OpenBLAS": "numpy", "XLA:CPU": "cpu"}
print(f"peak f32 GEMM {ref['peak_gflops']:.0f} GFLOP/s, the best of "
      + ", ".join(f"{name} {ref[key + '_gemm_gflops']:.0f}" for name, key in sources.items()
                  if key + "_gemm_gflops" in ref))


# %% [markdown]
# ## Time against size
#
# One panel per case, log-log: the median time per call of each backend, with its
# interquartile range as error bars, and the two roofline bounds. The dashed line is
# `bytes / bandwidth` and the dotted line `flops / peak`. A backend near the higher of the two
# lines uses the machine fully; the distance above it is overhead or wasted traffic. Small
# sizes sit far above both lines: there a fixed cost per call dominates, not bytes or FLOPs.
# The bandwidth is measured on 64 MB, out of cache, so a small working set that stays in cache
# can beat the dashed line. The references are measured under whatever load the machine has,
# so on a busy machine the lines sit too high or too low.

# %%
# NBVAL_IGNORE_OUTPUT
def series(case, backend):
  pts = sorted((r["size"], r) for r in rows
               if r["case"] == case and r["backend"] == backend and r["status"] == "ok")
  return [s for s, _ in pts], [r for _, r in pts]


def plot_case(ax, c):
  title = c.name
  for backend, style in [("workshop", "o-"), ("cpu", "s-")]:
    sizes, rs = series(c.name, backend)
    if sizes:
      med = np.array([r["median_ms"] for r in rs])
      err = [med - [r["p25_ms"] for r in rs], [r["p75_ms"] for r in rs] - med]
      ax.errorbar(sizes, med, yerr=err, fmt=style, ms=4, capsize=2, label=backend)
    else:
      ax.plot([], [], style, label=backend)  # keeps the colours of the other panels
      title += f" ({backend}: unsupported)"
  sizes = list(c.quick_sizes)
  ax.plot(sizes, [c.bytes(s) / ref["copy_gbps"] / 1e6 for s in sizes], "k--", lw=0.8,
          label="bytes / bandwidth")
  if c.flops(sizes[0]):
    ax.plot(sizes, [c.flops(s) / ref["peak_gflops"] / 1e6 for s in sizes], "k:", lw=0.8,
            label="flops / peak")
  ax.set(yscale="log", title=title, xlabel=c.size_name)
  ax.set_xscale("log", base=2)
  ax.title.set_fontsize(9)


cases = [c for c in bench.all_cases() if c.family != "overhead"]
fig, axes = plt.subplots((len(cases) + 3) // 4, 4, figsize=(14, 3.1 * ((len(cases) + 3) // 4)))
for ax, c in zip(axes.flat, cases):
  plot_case(ax, c)
for ax in axes.flat[len(cases):]:
  ax.set_visible(False)
for ax in axes[:, 0]:
  ax.set_ylabel("ms per call")
fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="upper center", ncol=4)
fig.tight_layout(rect=(0, 0, 1, 0.97))
plt.show()

# %% [markdown]
# The same results as a roofline: achieved GFLOP/s against arithmetic intensity (FLOPs per
# compulsory byte), for every point with arithmetic. The ceiling is
# `min(peak, bandwidth × intensity)`. Elementwise ops, reductions and normalizations sit at
# low intensity, where bandwidth limits them; large matmuls sit at high intensity, where the
# peak does.

# %%
# NBVAL_IGNORE_OUTPUT
fig, ax = plt.subplots(figsize=(7, 4.5))
ai = np.logspace(-2, 3, 100)
ax.plot(ai, np.minimum(ref["peak_gflops"], ref["copy_gbps"] * ai), "k-", lw=1,
        label="roofline (measured)")
for backend, marker in [("workshop", "o"), ("cpu", "s")]:
  pts = [r for r in rows if r["backend"] == backend and r["status"] == "ok"
         and r["flops"] and r["family"] != "overhead"]
  ax.scatter([r["flops"] / r["bytes"] for r in pts], [r["gflops"] for r in pts],
             marker=marker, s=18, alpha=0.7, label=backend)
ax.set(xscale="log", yscale="log", xlabel="FLOPs per byte", ylabel="GFLOP/s")
ax.legend()
plt.show()

# %% [markdown]
# And the ratio per case (workshop time / cpu time, > 1: workshop slower), with the geometric
# mean over all points and the worst point:

# %%
# NBVAL_IGNORE_OUTPUT
print(bench.summary_text(suite))

# %% [markdown]
# ## Why the numbers are what they are
#
# The numbers above will change as the plugin's kernels and executor improve. The mechanisms
# below do not change. Each says what a backend does per call, per op and per byte, and
# therefore which way the ratio should move with size.
#
# First, what each backend runs. `bench.anatomy` lists the kernels of the workshop's plan (one
# kernel call per instruction, in order) and the top-level instructions of XLA:CPU's optimized
# HLO. `fusion:kLoop` is a loop generated by LLVM; `fusion:__ynn_fusion` is a call into the
# YNNPACK library, which XLA:CPU in this jaxlib uses for dots, convolutions and reductions;
# `partitions=N` says a loop is split across N threads.

# %%
# NBVAL_IGNORE_OUTPUT
from jax_plugins.workshop.bench import anatomy, cases

v, m = np.ones(2**20, np.float32), np.ones((256, 1024), np.float32)
programs = {
    "x * 2 + 1": (lambda x: x * 2 + 1, v),
    "gelu": (jax.nn.gelu, v),
    "sum over axis 0": (lambda x: x.sum(0), np.ones((64, 64, 64), np.float32)),
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), m),
    "layer norm": (cases.layer_norm, m, m[0], m[0]),
    "matmul": (lambda a, b: a @ b, m[:, :256], m[:, :256]),
    "transpose": (lambda x: x.T, m),
}
for name, (f, *args) in programs.items():
  print(f"{name}\n  workshop: {anatomy.workshop_kernels(f, *args)}\n"
        f"  XLA:CPU:  {anatomy.xla_kernels(f, *args)}")

# %% [markdown]
# ### Per-call overhead and compile time (`tiny_call`)
#
# A call to a jitted function on `workshop` goes through JAX's C++ dispatch path, then the
# PJRT C API (`PJRT_LoadedExecutable_Execute` with its argument structs), then the plugin.
# Handing the launch to the device's worker thread and waiting for its completion event
# would cost two thread hand-offs per call, each a futex wake-up and a context switch: more
# than a small program's work. So a single-device program without loops whose inputs are
# ready runs on the calling thread when its device is idle if it is small (at most 256 KiB of
# values) or does next to no arithmetic (under a thousand FLOPs: a transpose, a slice), and
# its outputs are created already complete. Other programs go to the worker, and return
# before they finish, as JAX expects. Waking a sleeping thread costs tens of microseconds on a
# small VM, and such a program pays it on the way to the worker, to the thread pool and back.
# So the worker and the pool's helpers poll for new work for 100 µs before they sleep:
# back-to-back calls find them awake. XLA's thread pool (Eigen's) spins in the same way.
#
# XLA's CPU client makes the second choice: a program of less than about a thousand FLOPs runs
# synchronously on the calling thread, larger ones go to its thread pool. It is also linked
# into jaxlib, so it skips the C API. The API itself costs little: XLA's own CPU plugin
# (`xla_cpu_pjrt`), driven through the same C API, adds under a microsecond per call.
#
# Compile time goes the other way. XLA runs its HLO pass pipeline and generates machine code
# with LLVM, even for a one-op program. The workshop deserializes the StableHLO and maps each
# op to a kernel in Python, with no code generation. Its compile time grows with the number
# of ops, and it stays small for small programs.
#
# ### Elementwise chains (`axpb`, `gelu`): fusion, blocks and SIMD
#
# XLA fuses a chain of elementwise ops into one loop (`fusion:kLoop` above). LLVM vectorizes
# it; each element is loaded once, goes through the whole chain in registers, and is stored
# once: the roofline's `2 × 4` bytes per float32 element. The workshop's compiler also fuses
# the chain (`fusion` in the kernel list above), but it generates no code. Its `fusion`
# kernel cuts the arrays into blocks of at most 1024 elements and runs the chain's ordinary
# kernels on one block after the other. Memory sees one read of `x` and one write of the
# result, as for XLA. Each op still reads and writes its block, in L1 cache rather than in
# registers, and costs a kernel call per block. Broadcasts of scalars and constants run once,
# not per block. Blocks are spread over the thread pool, one thread per core, as XLA splits a
# large loop into `partitions`.
#
# The plugin is built for any x86-64 CPU, so its loops compile to 4-wide SSE2 code. The hot
# ones are compiled a second time for AVX2 (8 floats per instruction), and the loader picks
# the version for the running CPU. float32 `tanh`, `exp` and `logistic` are the plugin's own
# loops (rational and polynomial approximations within 2.5 ulp, fitted by `tools/fit_*.py`);
# the other transcendental functions come from glibc's vector math library.
#
# What remains is the per-op pass over L1. A compiled backend keeps any chain in registers.
# A plugin without a code generator can do that only for idioms it knows. `jax.nn.gelu`, the
# usual transformer activation, lowers to nine ops. The compiler recognises that sequence
# (`compiler/idioms.py`) and runs it as one kernel, `gelu_tanh`. The kernel does the same
# operations in the same order, so its result has the same bits, but it keeps them in
# registers around the tanh.
#
# Fresh outputs cost page faults. XLA allocates a new output buffer on every call. glibc
# serves blocks that large with a fresh `mmap`, so the first write to each 4 KiB page takes a
# page fault (16 384 of them for 64 MB), which can cost more than the arithmetic. The
# workshop's `MemoryPool` recycles large blocks, so its outputs land in memory that is
# already mapped. The references measure this cost with numpy: the same 64 MB copy, into a
# new array and into a reused one (the cell below).

# %%
# NBVAL_IGNORE_OUTPUT
print(f"numpy, 64 MB copy: into a fresh array {ref['fresh_copy_ms']:.1f} ms, "
      f"into a reused one {ref['prealloc_copy_ms']:.1f} ms")

# %% [markdown]
# ### Reductions (`sum_axis0/1/2`, `sum_all`)
#
# A reduction reads its input once and writes little, so large reductions are memory-bound on
# both backends, and what matters is how each walks memory. The workshop's `reduce` kernel
# always reads in memory order. When the reduced axis is innermost, it folds each contiguous
# row into several independent vector accumulators. When the reduced axis is outer, it adds
# whole contiguous rows into a row of the output, a few rows per pass, in column tiles that
# stay in L1. Both split over the thread pool by ranges of outputs, and the order of the
# additions depends only on the shape, so the result does not depend on the number of threads.
# XLA hands the reduction to YNNPACK (`__ynn_fusion`), whose strategy depends on which axes
# are reduced. The backends add in different orders, so their results differ in the last
# bits, most for `sum_all`, which adds the most terms.
#
# ### Matrix products (`matmul`, `batched_matmul`)
#
# At large sizes a GEMM is compute-bound, and both backends end in a hand-tuned microkernel:
# the workshop in OpenBLAS `sgemm` (scipy-openblas32), XLA:CPU in YNNPACK. Both approach the
# machine's peak, so the ratio tends to 1 as *n* grows. Smaller products show other costs:
#
# * the per-call overhead above, which is all there is at 64×64;
# * **threading.** OpenBLAS would split even medium GEMMs across its own threads, which spin
#   after each call and fight the plugin's thread pool for the cores. The plugin runs
#   OpenBLAS single-threaded and splits a large GEMM (over 4 MFLOP) into row blocks on its
#   own pool. A batch of small GEMMs is spread over the pool whole matrices at a time, and
#   the blocks of a batch of large ones all go to the pool at once, not entry by entry;
# * **layout.** The compiler folds transposes into `dot_general`'s dimension numbers (as XLA
#   does), and the kernel passes strided operands to the GEMM as normal or transposed
#   matrices with a leading dimension, so most operands are read in place.
#
# ### Softmax and layer norm
#
# Each is a short chain of reductions over a row and elementwise ops on it, with the row
# statistics broadcast back: max, subtract, exp, sum, divide for softmax; mean, variance,
# normalize, scale, shift for layer norm. XLA runs softmax as a few kernels, one of them the
# row maximum fused with the exponentials. The workshop fuses the whole chain, reductions
# included, into one *row fusion*: blocks of whole rows, each row's max or sum folded while
# the row is in cache, then broadcast back along the row. A statistic is never written out
# as a full-size array: the subtract or multiply that reads it takes the row's value as a
# scalar. Layer norm as JAX writes it computes `x - mean` twice; the compiler's common
# subexpression elimination keeps one. So each backend reads the rows once and writes the
# result once, and the difference left is per-op work in cache: the workshop's ops each
# make a pass over the block, XLA's generated loops keep values in registers.
#
# ### Convolution and max-pool (NHWC)
#
# A 3×3 convolution with 64 channels in and out does 2·9·64 FLOPs per output value, enough to
# be compute-bound if done as a GEMM. The workshop's `convolution` kernel gathers each output
# position's 3×3×64 patch into a row of a patch matrix (im2col), in tiles of rows that stay in
# cache, and multiplies each tile by the 576×64 filter matrix with `sgemm`. The tiles write
# different rows of the output, so the pool's threads take them one at a time. XLA:CPU hands
# the convolution to YNNPACK, with its own convolution kernels, on one thread here. Max-pool is a
# windowed reduction (`reduce_window`), memory-bound; the workshop's kernel walks NHWC
# windows with the channels innermost, so its inner loops are contiguous, and splits the
# output rows over the thread pool.
#
# ### Transposes, gather, scatter
#
# Pure data movement, so bandwidth is the roofline. A transpose that reads rows writes
# columns, one cache line per element written, unless it works in tiles. The workshop's copy
# transposes 64-byte tiles (4×4 float blocks transposed in SSE registers) and splits large
# copies over the thread pool. `transpose_0213` (the attention head shuffle) moves contiguous
# 64-float rows and is cheaper per byte: a `memcpy` per row, the pointers stepping along the
# sequence dim. A gather (`table[idx]`) copies one table row per index. A scatter-add
# (`zeros.at[idx].add(rows)`) writes the whole table (a `memset`), then reads, adds and
# writes one row per index, in order, so repeated indices add as on XLA:CPU. Rows land at
# random places, so both loops prefetch the rows a few indices ahead. A gather's result rows
# are independent, so they split over the thread pool. A scatter of whole rows splits the
# table instead: each thread owns some of its rows and walks all the indices, applying only
# the updates that land in its own rows, so every row still adds its updates in index order.
# Once the updates no longer fit in cache, every thread would stream all of them from memory,
# so large scatters stay on one thread.
#
# ### The models (`mlp_train_step`, `transformer_block`)
#
# A model is the sum of the above. Its large GEMMs run at library speed on both backends.
# Around them are dozens of small elementwise ops, reductions, broadcasts and transposes:
# bias adds, ReLU and its gradient, log-softmax, layer norm, the attention mask and softmax,
# GELU. Both backends fuse the elementwise ones and fold the transposes into the GEMMs. At
# small widths the non-GEMM ops and the per-kernel costs weigh most; as the width grows the
# GEMMs take over (their FLOPs grow as width² per row, the rest as width), and the ratio
# falls toward the matmul ratio.

# %% [markdown]
# ## Run the full suite
#
# From the repository root:
#
# ```bash
# python -m jax_plugins.workshop.bench                  # all cases, full sweeps (< 10 minutes)
# python -m jax_plugins.workshop.bench --quick          # this notebook's sweep
# python -m jax_plugins.workshop.bench --cases 'matmul,sum_*,model' --out results.csv
# python -m jax_plugins.workshop.bench --list           # cases and their sizes
# ```
#
# It prints one line per case and size, then the ratio table, the geometric mean of the ratios
# and the worst case. It writes `bench_results/bench-<date>.csv` and a `.json` beside it with
# the machine description and references. It also removes `OPENBLAS_CORETYPE` and
# `OPENBLAS_L2_SIZE` from its own environment, and says so. For numbers worth comparing, run it
# on a quiet machine, and check the load averages recorded in the JSON.
