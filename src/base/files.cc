#include "base/files.h"

#include <fstream>
#include <sstream>

namespace meridian::base {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace meridian::base
