#pragma once

#include <string>

namespace meridian::base {

// Unpredictable bytes for secrets (API tokens). SystemEntropy reads the kernel's generator;
// tests may inject their own.
class Entropy {
 public:
  virtual ~Entropy() = default;
  virtual std::string Bytes(size_t n) = 0;
};

class SystemEntropy final : public Entropy {
 public:
  std::string Bytes(size_t n) override;
};

// Lower-case hexadecimal of raw bytes.
std::string Hex(const std::string& bytes);

}  // namespace meridian::base
