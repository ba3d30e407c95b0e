# %% [markdown]
# # 06 · Benchmark against JAX's CPU backend
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pjrt-workshop/pjrt-workshop/blob/main/notebooks/06_benchmark_against_cpu.ipynb)
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

from jax_plugins.workshop.teach import notebook

ROOT = notebook.setup("workshop,cpu")

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# The sharded case (mlp_train_step_dp4) runs on 4 devices of each backend, as the
# command line sets up; the CPU backend has one device unless told otherwise.
jax.config.update("jax_num_cpu_devices", 4)

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
# on the time of any implementation whose data does not fit in cache; for data that stays in
# cache, the cache's copy bandwidth takes the place of memory's.
#
# The cases, with the sizes this notebook runs (the full suite sweeps further):

# %%
for c in bench.all_cases():
  print(f"{c.name:<18} {c.family:<14} {' | '.join(c.label(s) for s in c.quick_sizes)}")

# %% [markdown]
# ## Run the short suite
#
# `quick=True` selects the short size sweeps and few repetitions; a progress bar shows the
# points as they run. The
# results go to a CSV, one row per case × size × backend, with a JSON side file that
# describes the machine. One line per case and size gives each backend's median and
# interquartile range, the ratio workshop / cpu (> 1: workshop slower), and the agreement.

# %%
# NBVAL_IGNORE_OUTPUT
csv_path = ROOT / "bench_results" / "notebook-quick.csv"
suite = bench.run_suite(quick=True, out=csv_path, progress=True, log=None)  # tqdm bar
for i in range(0, len(suite.rows), 2):
  print(bench.point_line(suite.rows[i:i + 2]))

# %% [markdown]
# ## Check the results
#
# The CSV read back: its columns, one row per backend for every case and size, every case
# run on the CPU backend or skipped (a `models` case whose optional library is not
# installed), and on the workshop backend run, skipped or reported `unsupported` (its
# compiler raised UNIMPLEMENTED for an op it has no kernel for yet). Nothing failed in
# another way, and wherever both ran the results agree.

# %%
rows = bench.read_csv(csv_path)
points = {(r["case"], r["size"]) for r in rows}
print("columns:", ", ".join(rows[0]))
print("cases:", ", ".join(dict.fromkeys(r["case"] for r in rows)))
print("a row per backend for every point:",
      sorted(r["backend"] for r in rows) == sorted(bench.BACKENDS * len(points)))
# `skipped`: a `models` case whose library (the optional `models` extra) is not installed.
print("every point ran on cpu (or was skipped):",
      all(r["status"] in ("ok", "skipped") for r in rows if r["backend"] == "cpu"))
print("workshop: ran, reported unsupported or skipped, no other failure:",
      all(r["status"] in ("ok", "unsupported", "skipped")
          for r in rows if r["backend"] == "workshop"))
both = [r for r in rows if r["backend"] == "workshop" and r["status"] == "ok"]
print("results agree wherever both ran:", all(r["agree"] for r in both))

# %% [markdown]
# How many points ran on both backends, and what became of the others: skipped (a `models`
# case whose optional library is not installed, with the reason), unsupported on the
# workshop (which ops it does not support yet changes as kernels land), failed. The counts
# come from `bench.point_counts`, which the summary at the end of the run uses too; they
# depend on what is installed, so they are printed, not compared.

# %%
# NBVAL_IGNORE_OUTPUT
print(bench.point_counts(rows).text())

# %% [markdown]
# ## The machine and its roofline
#
# `suite.machine` records the CPU, the library versions, the OpenBLAS kernels each build
# selected at run time, and the load average. A load average above the core count means the
# timings below are noisy. `suite.references` holds the ceilings of the roofline: two copy
# bandwidths, out of DRAM (64 MB) and within each core's L2 cache (the cores' own caches,
# so their rates add up), and the peak float32 GEMM rate of three libraries on 512³ and
# 1024³ matmuls. Each is the fastest of its repetitions, measured before and after the
# cases with the higher of the two kept: load from other processes can only lower a
# ceiling's estimate.

# %%
# NBVAL_IGNORE_OUTPUT
m, ref = suite.machine, suite.references
print(f"{m['cpu_model']}, {m['cpu_count']} cores, load average {m['loadavg_at_start'][0]:.1f}")
print("versions:", ", ".join(f"{k} {v}" for k, v in m["versions"].items()))
for lib, info in m["openblas"].items():
  print(f"OpenBLAS {lib}: {info.get('corename')} kernels, {info.get('threads')} threads")
print(f"copy bandwidth (read + write): DRAM {ref['copy_gbps']:.1f} GB/s (64 MB), "
      f"L2 {ref['cache_copy_gbps']:.0f} GB/s ({ref['copy_threads']} cores, "
      f"{ref['cache_copy_bytes'] // 1024} KiB each)")
sources = {"plugin's OpenBLAS": "plugin", "numpy's OpenBLAS": "numpy", "XLA:CPU": "cpu"}
print(f"peak f32 GEMM {ref['peak_gflops']:.0f} GFLOP/s, the best of "
      + ", ".join(f"{name} {ref[key + '_gemm_gflops']:.0f}" for name, key in sources.items()
                  if key + "_gemm_gflops" in ref))


# %% [markdown]
# ## One figure: the roofline
#
# The results as a roofline: achieved GFLOP/s against arithmetic intensity (FLOPs per
# compulsory byte), for every point with arithmetic. A ceiling is
# `min(peak, bandwidth × intensity)`: the solid line with the L2 cache's bandwidth, which
# bounds every point, the dashed one with DRAM's, which bounds a point whose data does not
# fit in cache (the short suite's arrays are mostly a few MB; a point between the two ran
# faster than DRAM allows, so its data stayed in cache, and the cell counts them).
# Elementwise ops, reductions and normalizations sit at low intensity, where bandwidth
# limits them; large matmuls sit at high intensity, where the peak does. The
# 8-bit and bfloat16 dots (`dot_int8`, `dot_bf16`) are drawn apart: a CPU with
# instructions for them (AVX-512 VNNI and BF16, as the one this notebook was last run on)
# does two to four times the multiply-adds of a float32 one, so the float32 peak need not
# bound them. A case's FLOPs
# and compulsory bytes are lower bounds of what it computes and moves, so a point above a
# ceiling means the ceiling was measured low: on a loaded machine (the load average above)
# another process can take a core from the reference GEMMs more than from a short case.
# So the compute ceiling is the higher of the reference GEMMs' rate and the best rate of
# any case in this run (the 8-bit and bfloat16 dots aside), and the legend says which it
# is. The cell then sorts every point by the ceilings (`teach.claims.roofline`): how many
# sit between the two, and any above its ceiling.

# %%
# NBVAL_IGNORE_OUTPUT
from jax_plugins.workshop.teach import claims

roof = claims.roofline(rows, ref)
peak, dram, cache = roof.peak_gflops, roof.dram_gbps, roof.cache_gbps
fig, ax = plt.subplots(figsize=(9.5, 4.5))
ai = np.logspace(-2, 3, 100)
ax.plot(ai, np.minimum(peak, cache * ai), "k-", lw=1,
        label=f"ceiling: L2 {cache:.0f} GB/s,\nf32 peak {peak:.0f} GFLOP/s\n({roof.peak_from})")
ax.plot(ai, np.minimum(peak, dram * ai), "k--", lw=1, label=f"ceiling: DRAM {dram:.0f} GB/s")
for backend, marker, color in [("workshop", "o", "C0"), ("cpu", "s", "C1")]:
  for narrow in (False, True):
    chosen = [r for r in roof.points
              if r["backend"] == backend and (r["case"] in claims.NARROW_DOTS) == narrow]
    style = dict(facecolors="none", edgecolors=color) if narrow else dict(color=color)
    ax.scatter([r["flops"] / r["bytes"] for r in chosen], [r["gflops"] for r in chosen],
               marker=marker, s=18, alpha=0.7, **style,
               label=backend + (": int8 / bf16 dots" if narrow else ""))
ax.set(xscale="log", yscale="log", xlabel="FLOPs per compulsory byte", ylabel="GFLOP/s",
       title="every case and size of the short suite against this machine's roofline")
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
fig.tight_layout()
plt.show()
print(roof.text())

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
# ### The three biggest reasons
#
# The full account, op family by op family, is in `docs/performance.md`. Three mechanisms
# explain most of what the figure shows:
#
# 1. **Per call: little code generation, fast dispatch.** A small program on `workshop` runs
#    on the calling thread (no hand-off to the device's worker), so the tiny call costs about
#    what it costs on XLA:CPU, while compiling is cheaper: the workshop maps ops to kernels
#    in Python and runs LLVM only for large fused regions and small loops, where XLA runs
#    its pass pipeline and LLVM on every program.
# 2. **Per op: interpretation, or generated code.** XLA fuses an elementwise chain into one
#    generated loop that keeps values in registers. The workshop fuses it too; a small fused
#    region runs the chain's ordinary kernels block by block in L1, a large one (and a small
#    `while` loop) is compiled to one native function, as shown below. What the code
#    generator does not cover stays interpreted.
# 3. **Per byte: libraries and threads.** Large matmuls and convolutions end in tuned
#    microkernels on both sides (OpenBLAS here, YNNPACK in XLA:CPU), so their ratio tends
#    to 1. Memory-bound ops (reductions, transposes, gather/scatter) are decided by walking
#    memory in order and by splitting the work over the thread pool. Both backends split it
#    (XLA:CPU's `partitions=N` above), so which one is ahead depends on the op, the size
#    and how busy the machine's cores are: a split waits for its slowest part.
#
# The numbers of this run behind them, computed from the table above
# (`teach.claims.three_reasons`): the tiny call's ratio and the compile times; the library
# families at their largest sizes; for the memory-bound families the geometric mean of the
# ratios and every point where the workshop was slower.

# %%
# NBVAL_IGNORE_OUTPUT
print(claims.three_reasons(rows))

# %% [markdown]
# ## Generated code: a fused region and a loop
#
# Two kinds of region are not interpreted kernel by kernel. A large fused elementwise
# region (with its broadcasts and row reductions; large: 64K elements and 2M element
# operations, below which compiling costs more than it saves) and a small `while` loop are
# written out by the compiler as LLVM IR (`compiler/codegen/`), and llvmlite, LLVM's JIT in
# a Python wheel, compiles that for this CPU while the program compiles. The plan then holds one
# instruction, `jit_fusion` or `jit_loop`, that calls the native function. First the
# StableHLO JAX sends for `x * 2 + 1` on 2^21 floats, then the IR of its `jit_fusion`: a
# function of a range of elements (the thread pool splits the array into ranges), a loop
# over 8-float vectors (`<8 x float>`), then one masked vector for the last few elements;
# each element is loaded once and stored once, the arithmetic stays in registers. The
# constants 2 and 1 are literals in the code (`0x4000000000000000` is 2.0, as LLVM spells
# a float: the bits of the equal double), so LLVM folds them where it can: a division by
# a constant becomes a multiply and shifts.

# %%
from jax_plugins.workshop.compiler import codegen

x21 = np.ones(2**21, np.float32)
axpb = lambda x: x * 2 + 1
print(jax.jit(axpb).lower(x21).as_text())
(fused,) = codegen.generated_code(axpb, x21)
print(fused[0])
print(fused[2])

# %% [markdown]
# And a `fori_loop` on a scalar: the StableHLO `while` with its condition and body regions,
# then one function in which the loop-carried values are `phi`s (the counter and `c`), the
# condition a compare and a branch, the body two float operations. Every iteration runs in
# registers; interpreted, it would dispatch each op of the condition and the body.
# A loop whose values are too big for registers (a decode step's KV cache, an RNN's hidden
# state for a batch) is compiled too, after fusion: those values live in buffers the
# compiler places, every op on them is a call of its kernel from the generated function,
# and what the loop saves is the interpreter's bookkeeping per op (docs/codegen.md,
# "Values in memory").

# %%
loop = lambda c: jax.lax.fori_loop(0, 100, lambda i, c: c * 0.5 + 1.0, c)
print(jax.jit(loop).lower(np.float32(1)).as_text())
(generated,) = codegen.generated_code(loop, np.float32(1))
print(generated[0])
print(generated[2])

# %% [markdown]
# The same programs run on `workshop` give what the interpreter gives, bit for bit
# (`WORKSHOP_CODEGEN=0` turns the tier off; the tests run both ways). Checked here against
# numpy:

# %%
np.testing.assert_array_equal(np.asarray(jax.jit(axpb)(x21)), x21 * 2 + 1)
reference = np.float32(1)
for _ in range(100):
  reference = reference * np.float32(0.5) + np.float32(1.0)
print(np.asarray(jax.jit(loop)(np.float32(1))) == reference)

# %% [markdown]
# ## A reduction fused with what feeds it
#
# A loss is usually a reduction of everything: `jnp.mean((p - y) ** 2)` subtracts, squares
# and sums. Kernel by kernel, the squares are written to memory and read back (4 MB here);
# XLA's reduction fusion never writes them. Neither does the workshop: its compiler
# (`compiler/fusion.py`, `_full_reductions_in_rows`) turns the sum of everything into a sum
# of each row (here the last dim, 1024 elements), which joins the subtract and the square
# in one row fusion, then a sum of the 1024 row sums, a small `reduce`. Rows are also what
# the thread pool splits, and the sum is blocked (each row, then the rows), as accurate as
# the unfused kernel's.
#
# `anatomy.workshop_steps` lists the plan's kernels with what each writes: two scalar
# constants (the sum's start, 0, and the element count the mean divides by), the row
# fusion (generated code, `jit_fusion`, as it is over the code generator's thresholds),
# which writes only the 1024 row sums, the `reduce` of those, and the `divide`. Then
# the result against float64:

# %%
p_mse, y_mse = np.random.default_rng(0).standard_normal((2, 1024, 1024)).astype(np.float32)
mse = lambda p, y: jnp.mean((p - y) ** 2)
print("\n".join(anatomy.workshop_steps(mse, p_mse, y_mse)))
exact = np.mean((p_mse.astype(np.float64) - y_mse) ** 2)
print("relative error below 1e-6:", abs(float(jax.jit(mse)(p_mse, y_mse)) - exact) / exact < 1e-6)

# %% [markdown]
# ## Time against core count
#
# Both backends split a large kernel over a pool of threads, one per CPU the process may
# use. Splitting pays only when each part carries enough work to cover its hand-off (waking
# a thread costs tens of microseconds), so the plugin's cost model (`ThreadPool::PartsFor`,
# docs/performance.md) gives a small kernel one part and a large one every thread. Whether
# that works shows when the same program runs on 1, 2, 4, ... CPUs: a program of large
# kernels should get faster, one of many small kernels should at least not get slower.
#
# `bench.heldout.sweep` runs a few of the held-out programs (model-like programs that no
# case of the suite names) under `taskset` on the first k CPUs of this machine, for each k
# up to all of them, both backends interleaved in each run. On a 2-core machine that is
# only 1 and 2; on a laptop or a workstation it goes further. About 10 seconds per core count.

# %%
# NBVAL_IGNORE_OUTPUT
from jax_plugins.workshop.bench import heldout

ncpu = len(os.sched_getaffinity(0))
counts = sorted({1, ncpu} | {k for k in (2, 4, 8, 16, 32, 64) if k < ncpu})
scaling_cases = ["logsumexp_32k", "softmax_xent_8k", "attention_block", "adam_100_leaves"]
by_cores = heldout.sweep(counts, ["--quick", "--cases", ",".join(scaling_cases)])
for k, rows in by_cores.items():
  print(k, "cores:", ", ".join(f"{r['case']} {r['ratio']:.2f}" for r in rows))

# %% [markdown]
# One panel per program: milliseconds per call against the number of CPUs, both axes
# logarithmic, so perfect scaling is a line falling at 45 degrees (dotted).

# %%
# NBVAL_IGNORE_OUTPUT
fig, axes = plt.subplots(1, len(scaling_cases), figsize=(4 * len(scaling_cases), 3.2))
ks = sorted(by_cores)
for ax, case in zip(np.atleast_1d(axes), scaling_cases):
  for backend, style in (("workshop", "o-"), ("cpu", "s--")):
    ms = [1e3 * next(r for r in by_cores[k] if r["case"] == case)[f"{backend}_s"] for k in ks]
    ax.plot(ks, ms, style, label=backend)
    ax.plot(ks, [ms[0] * ks[0] / k for k in ks], ":", color="gray")
  ax.set(xscale="log", yscale="log", title=case, xlabel="CPUs", xticks=ks, xticklabels=ks)
  ax.set_ylabel("ms per call")
axes[0].legend()
fig.tight_layout()

# %% [markdown]
# What to look for: the large kernels of `logsumexp_32k` and `softmax_xent_8k` fall with
# more CPUs on both backends; `adam_100_leaves` is a hundred small kernels, which the
# horizontal fusion of independent kernels runs as one launch whose parts the pool shares.
# The same sweep on all of the held-out programs, with a table of ratios per core count:
# `python -m jax_plugins.workshop.bench.heldout --cores 1,2,4,8`.

# %% [markdown]
# ## Run the full suite
#
# From the repository root:
#
# ```bash
# python -m jax_plugins.workshop.bench                  # all cases, full sweeps
# python -m jax_plugins.workshop.bench --quick          # this notebook's sweep
# python -m jax_plugins.workshop.bench --cases 'matmul,sum_*,model' --out results.csv
# python -m jax_plugins.workshop.bench --list           # cases and their sizes
# ```
#
# It prints one line per case and size, then the ratio table, the geometric mean of the ratios
# and the worst case. How long it takes, measured by `tools/measure_times.py`: docs/developing.md's
# "How long things take". It writes `bench_results/bench-<date>.csv` and a `.json` beside it with
# the machine description and references. It also removes `OPENBLAS_CORETYPE` and
# `OPENBLAS_L2_SIZE` from its own environment, and says so. For numbers worth comparing, run it
# on a quiet machine, and check the load averages recorded in the JSON.

# %% [markdown]
# ## Exercise: a fused kernel, measured
#
# A compiled backend fuses a chain of elementwise ops into one loop: each element is read
# once, computed in registers and written once. XLA:CPU does that for `jax.nn.hard_silu`
# (hard swish, `x * min(max(x + 3, 0), 6) / 6`: five elementwise ops). The plugin fuses the
# chain too, in one of two ways, by size (the section on generated code above): a small
# region runs as one `fusion` instruction that applies the ops' kernels block by block in
# L1 cache, on its thread pool; a large one (64K elements and 2M element operations) is
# compiled to one native loop over vectors, a `jit_fusion`, whose ranges the thread pool
# splits. The plans for the three sizes timed below:

# %%
from jax_plugins.workshop.bench import anatomy

for n in (1 << 12, 1 << 16, 1 << 20):
  print(f"workshop plan of jax.nn.hard_silu on {n:>7} floats:",
        anatomy.workshop_kernels(jax.nn.hard_silu, np.ones(n, np.float32)))

# %% [markdown]
# **Your task:** write the loop a compiler would, by hand, as a kernel the plugin runs:
# an [XLA FFI](https://docs.jax.dev/en/latest/ffi.html) handler (the route notebook 05
# showed for user kernels: `jax.ffi.ffi_call`, registered for platform `workshop`), in
# `notebooks/ffi_kernels/hard_silu.cc`. Compute each element in JAX's order of operations
# (add 3, max with 0, min with 6, divide by 6, multiply by x), each rounded to f32, so the
# result matches the CPU backend's to the last bits. The cell writes the file and compiles
# it into a small library of its own (`notebook.build_ffi_library`: one file, a few
# seconds; the plugin is not rebuilt). The exercise is named `hard_silu_kernel`. In the
# reader's version of the notebooks (`python -m jax_plugins.workshop.teach.notebook reader
# reader`) the cell starts from `notebooks/exercises/hard_silu_kernel.cc`, a handler that
# returns `UNIMPLEMENTED`; in `notebooks/` it holds the worked solution. To start over:
# `notebook.reset_exercise("hard_silu_kernel")` writes the starting point back into the
# file, and `print(notebook.starting_point("hard_silu_kernel"))` shows it, to paste into the
# cell; to get the worked solution back: `git checkout -- notebooks/ffi_kernels/hard_silu.cc`.

# %% exercise="hard_silu_kernel" tags=["solution"]
# NBVAL_IGNORE_OUTPUT
notebook.write_source("notebooks/ffi_kernels/hard_silu.cc", r'''
// hard_silu(x) = x * min(max(x + 3, 0), 6) / 6 over f32, as one XLA FFI handler: notebook
// 06's exercise (its starting point is notebooks/exercises/hard_silu_kernel.cc).
//
// `jax.nn.hard_silu` (hard swish, MobileNetV3's activation) lowers to add, max, min,
// divide and multiply with broadcast constants: five elementwise ops, each a pass over
// memory when run one by one. Here each element is read once, computed in registers and
// written once. The operations are JAX's, in its order, each rounded to f32; XLA:CPU's
// results differ from that in the last bits (up to 2 ulps, measured).
// std::max/std::min keep a NaN first operand, as jnp.maximum/minimum propagate it, and
// compile to vector max/min instructions (a `x != x ? ...` test would stop the
// vectorizer: floating compares with short-circuit control flow).
//
//   Handler symbol: HardSilu.   Operand x: f32, any shape.   Result: f32, x's shape.
//   Errors: none beyond the binding's (it refuses a dtype other than f32).
#include <algorithm>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error HardSiluImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  const float* __restrict in = x.typed_data();
  float* __restrict out = y->typed_data();
  const int64_t n = static_cast<int64_t>(x.element_count());
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    out[i] = v * (std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(HardSilu, HardSiluImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
''')
library = notebook.build_ffi_library("notebooks/ffi_kernels/hard_silu.cc", ROOT)
print("built", library.relative_to(ROOT))

# %% [markdown]
# The check runs in a fresh process: it loads the library, registers the handler for the
# `workshop` platform, and compares it with `jax.nn.hard_silu` on the CPU backend, on
# random values and on the ones where the clamps and NaN matter. Correctness only: the
# time is measured after.

# %% tags=["exercise_setup"]
import json

HARD_SILU_SETUP = """
import ctypes, json, sys
import jax, numpy as np
handler = ctypes.CDLL(sys.argv[1]).HardSilu
jax.ffi.register_ffi_target("hard_silu", jax.ffi.pycapsule(handler), platform="workshop")

def hard_silu_kernel(x):
  return jax.ffi.ffi_call("hard_silu", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""

def run_with_kernel(library, code):
  """Runs HARD_SILU_SETUP then `code` in a fresh process (workshop and cpu); its stdout."""
  script = f"import sys; sys.argv[1:] = [{str(library)!r}]\n" + HARD_SILU_SETUP + code
  return notebook.run_fresh(script, platforms="workshop,cpu")

# %% exercise="hard_silu_kernel"
def check_hard_silu(library):
  """Fails with what is wrong, if the handler's results differ from the CPU backend's."""
  import json
  notebook.check_last_build("notebooks/ffi_kernels/hard_silu.cc")
  found = json.loads(run_with_kernel(library, """
special = [np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0, 3.0, -3.5, 3.5, 1e-30, -1e30, 1e30]
x = np.concatenate([special, np.random.default_rng(0).normal(size=4096) * 4]).astype(np.float32)
try:
  ours = np.asarray(jax.jit(hard_silu_kernel)(x))
except Exception as e:
  print(json.dumps({"error": str(e).splitlines()[0]}))
  raise SystemExit
ref = np.asarray(jax.jit(jax.nn.hard_silu)(jax.device_put(x, jax.devices("cpu")[0])))
# Equal, both NaN, or within 4 ulps (XLA:CPU's results differ from the ops rounded one by
# one in the last bits: up to 2 ulps, measured).
ulps = np.abs(ours.astype(np.float64) - ref) <= 4 * np.spacing(np.abs(ref))
bad = ~((ours == ref) | (np.isnan(ours) & np.isnan(ref)) | ulps)
print(json.dumps({"bad": [[float(v), float(a), float(b)]
                          for v, a, b in zip(x[bad][:5], ours[bad][:5], ref[bad][:5])],
                  "count": int(bad.sum()), "n": x.size}))
"""))
  if "error" in found:
    raise AssertionError(f"the handler fails: {found['error']}")
  if found["count"]:
    shown = ", ".join(f"hard_silu({v}) = {a}, CPU {b}" for v, a, b in found["bad"])
    raise AssertionError(f"{found['count']} of {found['n']} results differ from the CPU "
                         f"backend's by more than 4 ulps: {shown}")
  print(f"all {found['n']} results match the CPU backend's within 4 ulps (NaN, "
        "infinities and the clamps included)")

check_hard_silu(library)

# %% [markdown]
# Now the measurement, in a fresh process with the same interleaved timing as the
# benchmark (`bench.timing.time_interleaved`): your kernel on the plugin, the plugin's own
# fused region of the five ops (the plans above: `fusion` at 4 Ki and 64 Ki floats,
# `jit_fusion` at 1 Mi), and XLA:CPU's fused loop. The numbers depend on the machine and
# its load, so the tests don't compare them; the last line ranks the three at 1 Mi.

# %% exercise="hard_silu_kernel"
# NBVAL_IGNORE_OUTPUT
print(run_with_kernel(library, """
from jax_plugins.workshop.bench import timing
cpu = jax.devices("cpu")[0]
ours, fused = jax.jit(hard_silu_kernel), jax.jit(jax.nn.hard_silu)
try:
  ours(np.ones(8, np.float32)).block_until_ready()
except Exception as e:  # the check above says what is wrong; stop without a traceback
  print(f"your kernel fails, nothing to time yet: {str(e).splitlines()[0]}")
  raise SystemExit(0)
print(f"{'elements':>9} {'your kernel':>12} {'workshop fusion':>16} {'XLA:CPU':>9}   (median per call)")
for n in (1 << 12, 1 << 16, 1 << 20):
  x = np.random.default_rng(0).normal(size=n).astype(np.float32)
  on_plugin, on_cpu = jax.device_put(x), jax.device_put(x, cpu)
  stats = timing.time_interleaved({
      "kernel": lambda: ours(on_plugin), "fusion": lambda: fused(on_plugin),
      "cpu": lambda: fused(on_cpu)}, timing.Settings(reps=7, budget_s=0.5))
  print(f"{n:>9} " + " ".join(f"{stats[k].median * 1e6:>{w}.1f} us"
                               for k, w in [("kernel", 9), ("fusion", 13), ("cpu", 6)]))
names = {"kernel": "your kernel", "fusion": "the workshop's fusion", "cpu": "XLA:CPU"}
print("at 1 Mi, fastest first:", ", ".join(names[k] for k in sorted(stats, key=lambda k: stats[k].median)))
"""))

# %% [markdown]
# What to read in it: at 4 Ki floats (16 KiB) the fixed cost of a call dominates, so
# fusing buys little. At 1 Mi (4 MiB in, 4 MiB out) the time is memory traffic and
# threads: your kernel makes one pass, as XLA's loop does, but on the one device thread
# that runs it; the plugin's `jit_fusion` makes one pass too, a generated vector loop, and
# splits it over its thread pool, as XLA:CPU splits its loop. The last line of the output
# ranks the three at 1 Mi. So a hand-fused kernel pays when the chain is not fused
# already, or when it computes better than the ops (vector math, fewer roundings:
# `kernels/elementwise/gelu.cc` is the plugin's own case, which `compiler/idioms.py` finds in a
# program); to beat the fusion here, it would also have to split its work over threads.
