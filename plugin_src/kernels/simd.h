// Runtime dispatch to wider SIMD for hot loops.
//
// The plugin is built for baseline x86-64 (a wheel must run on any x86-64 CPU; never
// -march=native), where GCC vectorizes with 4-float SSE2 registers. A function marked
// WORKSHOP_SIMD_CLONES is compiled a second time for AVX2 (8 floats), and GCC emits an ifunc
// resolver that the dynamic loader runs once to pick the clone for the running CPU. Use it
// on small loop functions whose body GCC vectorizes; the clone costs code size, not speed.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WORKSHOP_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define WORKSHOP_SIMD_CLONES
#endif
