#include "base/files.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace meridian::base {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int64_t RaiseOpenFiles(int64_t wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  const rlim_t want = static_cast<rlim_t>(std::max<int64_t>(wanted, 0));
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < want) {
    // Past a lower hard limit where the process may (a privilege); else up to the hard limit.
    const rlim_t hard =
        limit.rlim_max == RLIM_INFINITY ? RLIM_INFINITY : std::max(want, limit.rlim_max);
    const rlimit raised{want, hard};
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      limit.rlim_cur = limit.rlim_max;
      setrlimit(RLIMIT_NOFILE, &limit);
    }
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int64_t>(limit.rlim_cur);
}

}  // namespace meridian::base
