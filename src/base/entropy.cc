#include "base/entropy.h"

#include <sys/random.h>

#include <cstdlib>

namespace meridian::base {

std::string SystemEntropy::Bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r < 0) continue;  // EINTR: the kernel's generator does not fail otherwise once seeded
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

}  // namespace meridian::base
