// rng_bit_generator: counter-based random bits, bit for bit as XLA computes them.
//
//   ins:  state u64[2] (THREE_FRY, PHILOX) or u64[3] (PHILOX)
//   outs: new state (same shape), bits (any integer dtype; 8- and 16-bit values are the low
//         bits of 32-bit ones)
//   attrs: algorithm "THREE_FRY" | "PHILOX" (the compiler maps DEFAULT to PHILOX, as
//          XLA:CPU does)
//
// `jax.random` with the rbg/unsafe_rbg PRNGs feeds these bits to its distributions, so
// they must equal XLA's exactly. The generators are the published ones (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011): Threefry-2x32 with 20 rounds
// and Philox-4x32 with 10 rounds. What is XLA-specific, and reproduced here from the
// behaviour of its RngBitGeneratorExpander and prng library, is how the state becomes
// keys and counters and how the generated words are laid out:
//
// THREE_FRY: key = state[0], counter = state[1]. 64-bit outputs: element i (row-major)
//   is Threefry(counter + i) with its two words joined low-first; the counter advances
//   by the element count. 32-bit outputs: the shape is halved along its first even
//   dimension (else its largest, rounding up; rank 0 counts as [1]); half-shape element
//   j yields two words that land at positions 2j and 2j+1 along that dimension (the
//   second dropped past the end); the counter advances by the half-shape's size.
// PHILOX: key = state[0]; the 128-bit counter is (low = state[1], high = state[0]) for a
//   2-word state and (state[1], state[2]) for a 3-word one. Block i = Philox(counter + i)
//   gives 4 words; 32-bit outputs take them in order (block-major), 64-bit outputs join
//   pairs low-first. The counter advances by the number of blocks; a 2-word state keeps
//   only the low word of the new counter.
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "kernels/core/dispatch.h"
#include "kernels/core/kernel.h"

namespace workshop {
namespace {

using Words2 = std::array<uint32_t, 2>;
using Words4 = std::array<uint32_t, 4>;

constexpr uint32_t Lo(uint64_t x) { return static_cast<uint32_t>(x); }
constexpr uint32_t Hi(uint64_t x) { return static_cast<uint32_t>(x >> 32); }
constexpr uint64_t Join(uint32_t lo, uint32_t hi) { return lo | (uint64_t{hi} << 32); }
constexpr uint32_t RotL(uint32_t v, int d) { return (v << d) | (v >> (32 - d)); }

// Threefry-2x32, 20 rounds: five groups of four, a key injection after each group.
inline Words2 Threefry2x32(uint64_t key, uint64_t counter) {
  constexpr int kRot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  const uint32_t ks[3] = {Lo(key), Hi(key), 0x1BD11BDAu ^ Lo(key) ^ Hi(key)};
  uint32_t x0 = Lo(counter) + ks[0], x1 = Hi(counter) + ks[1];
  for (uint32_t group = 0; group < 5; ++group) {
    for (int r : kRot[group % 2]) {
      x0 += x1;
      x1 = RotL(x1, r) ^ x0;
    }
    x0 += ks[(group + 1) % 3];
    x1 += ks[(group + 2) % 3] + group + 1;
  }
  return {x0, x1};
}

// Philox-4x32, 10 rounds, on a 128-bit counter given as (low, high).
inline Words4 Philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi) {
  constexpr uint32_t kMulA = 0xD2511F53u, kMulB = 0xCD9E8D57u;
  constexpr uint32_t kWeylA = 0x9E3779B9u, kWeylB = 0xBB67AE85u;
  uint32_t k0 = Lo(key), k1 = Hi(key);
  Words4 x = {Lo(counter_lo), Hi(counter_lo), Lo(counter_hi), Hi(counter_hi)};
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kMulA} * x[0];
    const uint64_t p1 = uint64_t{kMulB} * x[2];
    x = {Hi(p1) ^ x[1] ^ k0, Lo(p1), Hi(p0) ^ x[3] ^ k1, Lo(p0)};
    k0 += kWeylA;
    k1 += kWeylB;
  }
  return x;
}

// Writes word `w` (or joined words) into element i of `out`, truncating to T.
template <typename T>
void Store(T* out, int64_t i, uint64_t w) {
  out[i] = static_cast<T>(static_cast<std::make_unsigned_t<T>>(w));
}

// THREE_FRY; returns the new counter.
template <typename T>
uint64_t ThreefryBits(uint64_t key, uint64_t counter, const Dims& dims, T* out) {
  const int64_t n = NumElements(dims);
  if constexpr (sizeof(T) == 8) {
    for (int64_t i = 0; i < n; ++i) {
      const Words2 w = Threefry2x32(key, counter + static_cast<uint64_t>(i));
      Store(out, i, Join(w[0], w[1]));
    }
    return counter + static_cast<uint64_t>(n);
  } else {
    // View the shape as [outer, d, inner] around the split dimension.
    size_t split = 0;
    bool found_even = false;
    for (size_t i = 0; i < dims.size() && !found_even; ++i) {
      if (dims[i] % 2 == 0) split = i, found_even = true;
    }
    for (size_t i = 0; i < dims.size() && !found_even; ++i) {
      if (dims[i] > dims[split]) split = i;
    }
    int64_t outer = 1, d = 1, inner = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
      (i < split ? outer : i == split ? d : inner) *= dims[i];
    }
    const int64_t half = (d + 1) / 2;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < half; ++j) {
        const uint64_t base = counter + static_cast<uint64_t>((o * half + j) * inner);
        T* first = out + (o * d + 2 * j) * inner;
        const bool has_second = 2 * j + 1 < d;
        for (int64_t q = 0; q < inner; ++q) {
          const Words2 w = Threefry2x32(key, base + static_cast<uint64_t>(q));
          Store(first, q, w[0]);
          if (has_second) Store(first + inner, q, w[1]);
        }
      }
    }
    return counter + static_cast<uint64_t>(outer * half * inner);
  }
}

// PHILOX; advances the 128-bit counter (lo, hi) in place.
template <typename T>
void PhiloxBits(uint64_t key, uint64_t& lo, uint64_t& hi, int64_t n, T* out) {
  constexpr int64_t kPerBlock = sizeof(T) == 8 ? 2 : 4;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint64_t block_lo = lo + static_cast<uint64_t>(b);
    const Words4 w = Philox4x32(key, block_lo, block_lo < lo ? hi + 1 : hi);
    const int64_t first = b * kPerBlock;
    const int64_t count = std::min(kPerBlock, n - first);
    for (int64_t k = 0; k < count; ++k) {
      Store(out, first + k, sizeof(T) == 8 ? Join(w[2 * k], w[2 * k + 1]) : w[k]);
    }
  }
  const uint64_t new_lo = lo + static_cast<uint64_t>(blocks);
  hi += new_lo < lo ? 1 : 0;
  lo = new_lo;
}

Status RngBitGenerator(KernelContext& ctx) {
  const Tensor& state = ctx.ins[0];
  const Tensor& new_state = ctx.outs[0];
  const Tensor& bits = ctx.outs[1];
  const std::string& algorithm = ctx.instr.attr<std::string>("algorithm");
  const int64_t words = state.num_elements();
  const bool threefry = algorithm == "THREE_FRY";
  if (state.dtype != DType::kU64 || new_state.dtype != DType::kU64 ||
      new_state.num_elements() != words || !(words == 2 || (words == 3 && !threefry)) ||
      !(threefry || algorithm == "PHILOX")) {
    return InvalidArgument("workshop: rng_bit_generator ", algorithm, " with state ",
                           ShapeString(state.dtype, *state.dims), " at ", ctx.instr.loc);
  }
  const uint64_t* s = state.as<uint64_t>();
  uint64_t* ns = new_state.as<uint64_t>();
  return DispatchInt(
      bits.dtype,
      [&](auto tag) -> Status {
        using T = decltype(tag);
        T* out = bits.as<T>();
        ns[0] = s[0];
        if (threefry) {
          ns[1] = ThreefryBits(s[0], s[1], *bits.dims, out);
        } else {
          uint64_t lo = s[1], hi = words == 3 ? s[2] : s[0];
          PhiloxBits(s[0], lo, hi, bits.num_elements(), out);
          ns[1] = lo;
          if (words == 3) ns[2] = hi;
        }
        return Status();
      },
      [&] { return UnsupportedDType(ctx, bits.dtype); });
}

WORKSHOP_REGISTER_KERNEL("rng_bit_generator", RngBitGenerator);

}  // namespace
}  // namespace workshop
