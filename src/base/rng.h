#pragma once

#include <cstdint>

namespace meridian::base {

// A small, fast, seedable random stream (SplitMix64). Every random choice in Meridian comes from
// an Rng that was handed in, so a run is reproducible from its seed; the standard library's
// distributions are avoided because their output differs between implementations.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n); n must be positive.
  uint64_t Uniform(uint64_t n) {
    // Lemire's multiply-shift: unbiased enough for n far below 2^64, and branch-free.
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

  // Uniform in [0, 1).
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // A new independent stream derived from this one.
  Rng Fork() { return Rng(Next()); }

 private:
  uint64_t state_;
};

}  // namespace meridian::base
