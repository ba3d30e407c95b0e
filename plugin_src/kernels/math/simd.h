// Runtime dispatch to wider SIMD for hot loops.
//
// The plugin is built for baseline x86-64 (a wheel must run on any x86-64 CPU; never
// -march=native), where GCC vectorizes with 4-float SSE2 registers. A function marked
// WORKSHOP_SIMD_CLONES is compiled a second time for AVX2 (8 floats), and GCC emits an ifunc
// resolver that the dynamic loader runs once to pick the clone for the running CPU. Use it
// on small loop functions whose body GCC vectorizes; the clone costs code size, not speed.
//
// WORKSHOP_SIMD_CLONES_FMA makes the wide clone x86-64-v3 (AVX2 plus FMA; GCC's "avx2" target
// has no FMA). GCC contracts a * b + c into a fused multiply-add there (-ffp-contract=fast,
// its default for C++), so the two clones differ in the last bits: use it only for loops
// whose stated error bound covers both (kernels/math/tanh_f32.cc).
#pragma once

// Sanitizer builds define WORKSHOP_NO_SIMD_CLONES (setup.py): an ifunc resolver runs before
// the sanitizer's hooks can be called from it.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(WORKSHOP_NO_SIMD_CLONES)
#define WORKSHOP_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#define WORKSHOP_SIMD_CLONES_FMA __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define WORKSHOP_SIMD_CLONES
#define WORKSHOP_SIMD_CLONES_FMA
#endif
