"""A/B micro-benchmark of StridedCopy (plugin_src/kernels/core/strided.cc) on one thread.

    python tools/strided_bench.py [--against REV] [--filter TEXT] [--reps N]

Compiles kernels/core/strided.cc twice with g++ -O3 (the plugin's flags): as it is in the
working tree ("new") and as it was at git revision REV ("old", default HEAD), the old one
inside another namespace, links both into one program with a serial stand-in for the
thread pool, and times the two alternately on the same buffers: transposes of n x n
arrays of 1/2/4/8-byte elements (powers of two and not), the 0213 transpose of attention,
stride-2 slices, reverses along rows, row and column broadcasts, stride-2 stores
(StridedCopy's element loop; pad's interleaving StridedCopyPadInterior is timed by the
bench's `pad_interior`). It prints per case the median and the minimum of each side's
thread CPU time (microseconds per call; CPU time, so a busy machine's descheduling does
not count) and new/old, and MISMATCH if the two results differ in any byte (data
movement must be bit-identical). One thread: this compares the kernels, not the pool's
splitting; the workshop-vs-CPU comparison is `python -m jax_plugins.workshop.bench`.
Buffers are 2 MiB-aligned, so source and destination rows start at the same offset
within a page (which decides 4 KiB aliasing between loads and stores).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["-O3", "-std=c++20", "-mno-mmx", "-fno-math-errno", f"-I{ROOT / 'plugin_src'}"]

SERIAL_POOL = r"""
#include "runtime/thread_pool.h"
namespace workshop {
ThreadPool& ThreadPool::Global() { static auto* pool = new ThreadPool(0); return *pool; }
ThreadPool::ThreadPool(int) {}
void ThreadPool::ParallelFor(int64_t n, int64_t,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n > 0) fn(0, n);
}
}  // namespace workshop
"""

MAIN = r"""
#include <sys/mman.h>
#include <time.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
using V = std::vector<int64_t>;
#define DECLARE(ns) namespace ns { void StridedCopy(void*, const V&, const void*, const V&, \
    int64_t, const V&); }
DECLARE(workshop)
DECLARE(workshop_old)
struct Case {
  std::string name;
  int64_t w;  // element bytes
  V dims, dst, src;  // strides in bytes
  int64_t src_off, src_bytes, dst_bytes;
};
static V RowMajor(const V& d, int64_t w) {
  V s(d.size()); int64_t t = w;
  for (size_t i = d.size(); i-- > 0;) { s[i] = t; t *= d[i]; }
  return s;
}
static char* Alloc(int64_t bytes) {
  const size_t n = (bytes + 64 + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  char* p = static_cast<char*>(aligned_alloc(2 << 20, n));
  memset(p, 0, n);
  return p;
}
static double CpuUs() {
  timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}
int main(int argc, char** argv) {
  std::vector<Case> cases;
  for (int64_t w : {4, 8, 2, 1})
    for (int64_t n : {256, 512, 1000, 1024, 1100, 2048, 3000, 4096})
      cases.push_back({"transpose " + std::to_string(n) + " w" + std::to_string(w), w, {n, n},
                       RowMajor({n, n}, w), {w, n * w}, 0, n * n * w, n * n * w});
  for (int64_t s : {64, 128, 512, 2048}) {
    V d = {8, 8, s, 64};
    cases.push_back({"0213 8x" + std::to_string(s) + "x8x64", 4, d, RowMajor(d, 4),
                     {s * 512 * 4, 64 * 4, 512 * 4, 4}, 0, 8 * s * 512 * 4, 8 * s * 512 * 4});
  }
  for (int64_t n : {256, 1024, 4096}) {
    const std::string k = " " + std::to_string(n);
    cases.push_back({"slice ::2" + k, 4, {n, n / 2}, RowMajor({n, n / 2}, 4), {n * 4, 8}, 0,
                     n * n * 4, n * n * 2});
    cases.push_back({"reverse rows" + k, 4, {n, n}, RowMajor({n, n}, 4), {n * 4, -4},
                     (n - 1) * 4, n * n * 4, n * n * 4});
    cases.push_back({"broadcast cols" + k, 4, {n, n}, RowMajor({n, n}, 4), {4, 0}, 0, n * 4,
                     n * n * 4});
    cases.push_back({"broadcast rows" + k, 4, {n, n}, RowMajor({n, n}, 4), {0, 4}, 0, n * 4,
                     n * n * 4});
    cases.push_back({"stride-2 stores" + k, 4, {n, n}, {2 * n * 4, 8}, RowMajor({n, n}, 4),
                     0, n * n * 4, 2 * n * n * 4});
  }
  const std::string filter = argc > 1 ? argv[1] : "";
  const int reps = argc > 2 ? std::max(1, atoi(argv[2])) : 11;
  for (const Case& c : cases) {
    if (c.name.find(filter) == std::string::npos) continue;
    char* src = Alloc(c.src_bytes);
    char* out[2] = {Alloc(c.dst_bytes), Alloc(c.dst_bytes)};
    for (int64_t i = 0; i < c.src_bytes + 64; ++i) src[i] = static_cast<char>(i * 131 + 7);
    int64_t elems = 1;
    for (int64_t d : c.dims) elems *= d;
    const int64_t calls = std::max<int64_t>(1, (int64_t{1} << 22) / (elems * c.w));
    std::vector<double> t[2];
    for (int r = 0; r < reps; ++r) {
      for (int k = 0; k < 2; ++k) {
        const int side = (k + r) % 2;  // 0 old, 1 new; alternate which goes first.
        const double t0 = CpuUs();
        for (int64_t i = 0; i < calls; ++i) {
          const char* from = src + c.src_off;
          if (side == 0) workshop_old::StridedCopy(out[0], c.dst, from, c.src, c.w, c.dims);
          else workshop::StridedCopy(out[1], c.dst, from, c.src, c.w, c.dims);
        }
        t[side].push_back((CpuUs() - t0) / calls);
      }
    }
    const bool same = memcmp(out[0], out[1], c.dst_bytes) == 0;
    for (auto& v : t) std::sort(v.begin(), v.end());
    printf("%-24s old %9.1f (min %9.1f)  new %9.1f (min %9.1f) us  new/old %.2f (min %.2f)%s\n",
           c.name.c_str(), t[0][reps / 2], t[0][0], t[1][reps / 2], t[1][0],
           t[1][reps / 2] / t[0][reps / 2], t[1][0] / t[0][0], same ? "" : "  MISMATCH");
    fflush(stdout);
    free(src); free(out[0]); free(out[1]);
  }
}
"""


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--against", default="HEAD", help="git revision of the old strided.cc")
  p.add_argument("--filter", default="", help="run the cases whose name contains this")
  p.add_argument("--reps", type=int, default=11, help="timed calls per side (alternating)")
  args = p.parse_args(argv)
  old = subprocess.run(
    ["git", "-C", str(ROOT), "show", f"{args.against}:plugin_src/kernels/core/strided.cc"],
    check=True,
    capture_output=True,
    text=True,
  ).stdout
  with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    (tmp / "old.cc").write_text(old)
    (tmp / "pool.cc").write_text(SERIAL_POOL)
    (tmp / "main.cc").write_text(MAIN)
    units = [
      ("old.cc", ["-Dworkshop=workshop_old"]),
      ("pool.cc", ["-Dworkshop=workshop_old"]),
      (str(ROOT / "plugin_src/kernels/core/strided.cc"), []),
      ("pool.cc", []),
    ]
    objects = []
    for i, (src, defines) in enumerate(units):
      obj = tmp / f"{i}.o"
      subprocess.run(["g++", *FLAGS, *defines, "-c", str(tmp / src), "-o", str(obj)], check=True)
      objects.append(str(obj))
    exe = tmp / "strided_bench"
    subprocess.run(
      ["g++", *FLAGS, str(tmp / "main.cc"), *objects, "-o", str(exe), "-lpthread"], check=True
    )
    return subprocess.run([str(exe), args.filter, str(args.reps)]).returncode


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
