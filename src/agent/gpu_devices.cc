#include "agent/gpu_devices.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace meridian::agent {

namespace {

// "Key:   value" -> value, for one key of an information file.
std::string Field(const std::string& line, const std::string& key) {
  if (line.rfind(key + ":", 0) != 0) return "";
  const size_t start = line.find_first_not_of(" \t", key.size() + 1);
  return start == std::string::npos ? "" : line.substr(start);
}

}  // namespace

DriverGpu ParseDriverInformation(const std::string& text) {
  DriverGpu gpu;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (std::string v = Field(line, "Device Minor");
        !v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos) {
      gpu.minor = std::stoll(v);
    }
    if (std::string v = Field(line, "GPU UUID"); !v.empty()) gpu.uuid = v;
  }
  return gpu;
}

std::vector<GpuDeviceNode> GpuDeviceNodes(const std::string& dev, const std::string& driver) {
  std::map<int64_t, std::string> uuid_of_minor;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator(driver, ec)) {
    std::ifstream in(gpu.path() / "information");
    std::stringstream text;
    text << in.rdbuf();
    const DriverGpu parsed = ParseDriverInformation(text.str());
    if (parsed.minor >= 0) uuid_of_minor[parsed.minor] = parsed.uuid;
  }
  std::vector<GpuDeviceNode> out;
  for (const auto& e : std::filesystem::directory_iterator(dev, ec)) {
    const std::string name = e.path().filename();
    if (name.rfind("nvidia", 0) != 0 || name.size() == 6 ||
        name.find_first_not_of("0123456789", 6) != std::string::npos) {
      continue;  // nvidiactl, nvidia-uvm, nvidia-caps, ...
    }
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    auto it = uuid_of_minor.find(static_cast<int64_t>(minor(st.st_rdev)));
    out.push_back({e.path().string(), it == uuid_of_minor.end() ? "" : it->second});
  }
  return out;
}

MigCapability ParseCapabilityFile(const std::string& text) {
  MigCapability c;
  auto number = [](const std::string& v, size_t most) {
    return !v.empty() && v.size() <= most && v.find_first_not_of("0123456789") == std::string::npos
               ? std::stoll(v)
               : -1;
  };
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (const int64_t minor = number(Field(line, "DeviceFileMinor"), 9); minor >= 0) {
      c.minor = minor;
    }
    if (const int64_t mode = number(Field(line, "DeviceFileMode"), 5); mode >= 0) {
      c.mode = static_cast<uint32_t>(mode) & 0777;
    }
  }
  return c;
}

std::vector<MigCapability> MigCapabilities(const std::string& root) {
  std::vector<MigCapability> out;
  // The driver's tree is a few levels deep (gpuN/mig/giN/ciN/access): walked without following
  // links, in a stable order. An error part-way stops the walk: what was found is returned, and
  // a task whose own instance is not among it is refused (PrepareGpus).
  std::error_code ec;
  std::vector<std::string> files;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() > 5) it.disable_recursion_pending();
    const std::string name = it->path().filename();
    std::error_code kind;
    if (it->is_regular_file(kind) && (name == "access" || name == "config" || name == "monitor")) {
      files.push_back(it->path().lexically_relative(root).string());
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    if (f.find("mig/") == std::string::npos) continue;  // fabric-mgmt and others: not MIG's
    std::ifstream in(root + "/" + f);
    std::stringstream text;
    text << in.rdbuf();
    MigCapability c = ParseCapabilityFile(text.str());
    if (c.minor < 0) continue;
    c.path = f;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<MigCapability> OwnMigCapabilities(const std::vector<MigCapability>& caps,
                                              const std::vector<MigInstanceIds>& granted) {
  std::vector<MigCapability> out;
  for (const MigInstanceIds& g : granted) {
    const std::string gi = "gpu" + std::to_string(g.gpu_minor) + "/mig/gi" + std::to_string(g.gi);
    for (const std::string& path :
         {gi + "/access", gi + "/ci" + std::to_string(g.ci) + "/access"}) {
      auto it = std::find_if(caps.begin(), caps.end(),
                             [&](const MigCapability& c) { return c.path == path; });
      if (it != caps.end()) out.push_back(*it);
    }
  }
  return out;
}

int64_t CharDeviceMajor(const std::string& name, const std::string& devices) {
  std::ifstream in(devices);
  bool characters = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Character devices:", 0) == 0) characters = true;
    if (line.rfind("Block devices:", 0) == 0) characters = false;
    std::istringstream fields(line);
    int64_t major = -1;
    std::string device;
    if (characters && fields >> major >> device && device == name) return major;
  }
  return -1;
}

std::vector<std::string> DevicesToHide(const std::vector<GpuDeviceNode>& nodes,
                                       const std::set<std::string>& granted) {
  std::vector<std::string> hide;
  for (const GpuDeviceNode& n : nodes) {
    if (n.uuid.empty() || !granted.count(n.uuid)) hide.push_back(n.path);
  }
  return hide;
}

}  // namespace meridian::agent
