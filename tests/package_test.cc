// The Debian package end to end: built by CPack from the build tree, unpacked into a scratch root
// with `dpkg -x` (no root needed, as an operator's `apt install` would lay it out), and its
// server started from its own configuration file on a loopback port and a temporary data dir.
// And the configuration file itself: it covers every flag of `server` and `agent`, and a bad key
// is named by file and line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "base/testing/temp_dir.h"
#include "tests/server_process.h"

namespace meridian::testing {
namespace {

const std::string kBinary = MERIDIAN_BINARY;

int Shell(const std::string& command) { return std::system(command.c_str()); }

// The long flags a command's --help lists (the first name of each option line), without their
// dashes.
std::set<std::string> Flags(const std::string& help) {
  std::set<std::string> out;
  const std::regex option(R"(^\s+(-[A-Za-z],)?--([a-z][a-z0-9-]*))");
  std::stringstream in(help);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, option)) out.insert(m[2]);
  }
  return out;
}

TEST(Package, InstallsIntoAScratchRootAndItsServerStartsFromThePackagedConfig) {
  base::testing::TempDir dir;
  const std::string out = dir.File("out"), log = dir.File("cpack.log");
  ASSERT_EQ(Shell(std::string(CPACK_COMMAND) + " --config " + CPACK_CONFIG + " -B " + out + " > " +
                  log + " 2>&1"),
            0)
      << ReadFile(log);
  std::string deb;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    if (e.path().extension() == ".deb") deb = e.path();
  }
  ASSERT_FALSE(deb.empty()) << ReadFile(log);
  const std::string root = dir.File("root"), control = dir.File("control");
  ASSERT_EQ(Shell("dpkg -x " + deb + " " + root + " && dpkg-deb -e " + deb + " " + control), 0);

  // What the package says about itself: its version, the libraries it needs, its conffile.
  const std::string fields = dir.File("fields");
  ASSERT_EQ(Shell("dpkg-deb -f " + deb + " Package Version Depends > " + fields), 0);
  const std::string f = ReadFile(fields);
  EXPECT_NE(f.find("Package: meridian"), std::string::npos) << f;
  EXPECT_NE(f.find("Version: " + std::string(MERIDIAN_VERSION)), std::string::npos) << f;
  for (const char* lib : {"libpq5", "libsqlite3-0", "libssl3", "adduser"}) {
    EXPECT_NE(f.find(lib), std::string::npos) << lib << " in " << f;
  }
  // The allocator, except in a sanitizer's build (which brings its own).
  EXPECT_EQ(f.find("libjemalloc2") != std::string::npos, MERIDIAN_JEMALLOC == 1) << f;
  EXPECT_EQ(ReadFile(control + "/conffiles"), "/etc/meridian/meridian.yaml");
  EXPECT_NE(ReadFile(control + "/postinst").find("adduser --system"), std::string::npos);

  for (const char* path :
       {"/usr/bin/meridian", "/usr/bin/meridian-shim", "/etc/meridian/meridian.yaml",
        "/lib/systemd/system/meridian-server.service", "/lib/systemd/system/meridian-agent.service",
        "/usr/share/doc/meridian/operations.md", "/usr/share/doc/meridian/user-guide.md",
        "/usr/share/doc/meridian/adr/0027-packaging-and-upgrades.md",
        "/usr/share/meridian/prometheus/meridian-alerts.rules.yml"}) {
    EXPECT_TRUE(std::filesystem::exists(root + path)) << path;
  }
  const std::string config = root + "/etc/meridian/meridian.yaml";
  EXPECT_NE(ReadFile(root + "/lib/systemd/system/meridian-server.service")
                .find("ExecStart=/usr/bin/meridian server --config /etc/meridian/meridian.yaml"),
            std::string::npos);
  EXPECT_NE(ReadFile(root + "/lib/systemd/system/meridian-agent.service")
                .find("ExecStart=/usr/bin/meridian agent --config /etc/meridian/meridian.yaml"),
            std::string::npos);

  // The packaged binary, from the packaged file; the command line's --data-dir and --listen
  // (port 0, loopback) win over the file's /var/lib/meridian and 127.0.0.1:8080.
  const std::string binary = root + "/usr/bin/meridian";
  const std::string data = dir.File("data");
  ServerProcess server(binary, data, {"--config", config});
  ASSERT_TRUE(server.Start()) << ReadFile(data + ".log");
  EXPECT_NE(server.port(), 8080);
  httplib::Client c("127.0.0.1", server.port());
  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  HttpResult metrics = Http(server, "GET", "/metrics", server.admin_token());
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(
      metrics.text.find("meridian_build_info{version=\"" + std::string(MERIDIAN_VERSION) + "\"} 1"),
      std::string::npos)
      << metrics.text.substr(0, 2000);
  // The file's log-format: json is in force: every line the server wrote is a JSON object.
  const std::string lines = ReadFile(data + ".log");
  ASSERT_FALSE(lines.empty());
  std::stringstream in(lines);
  int objects = 0;
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << line;
    objects += j.is_object();
  }
  EXPECT_GT(objects, 0);
  CliResult version = Cli(binary, "version", server.url(), server.admin_token());
  EXPECT_EQ(version.code, 0) << version.output;
  EXPECT_NE(version.output.find(MERIDIAN_VERSION), std::string::npos) << version.output;
}

TEST(ConfigFile, CoversEveryFlagOfServerAndAgentAndNamesABadKeyByLine) {
  base::testing::TempDir dir;
  const std::string packaged =
      ReadFile(std::string(MERIDIAN_SOURCE_DIR) + "/packaging/meridian.yaml");
  const size_t agent_at = packaged.find("\nagent:");
  ASSERT_NE(agent_at, std::string::npos);
  const std::map<std::string, std::string> sections = {{"server", packaged.substr(0, agent_at)},
                                                       {"agent", packaged.substr(agent_at)}};
  for (const auto& [command, text] : sections) {
    CliResult help = RunToExit(kBinary, {command, "--help"}, dir.File(command + ".help"), 10);
    ASSERT_EQ(help.code, 0) << help.output;
    std::set<std::string> flags = Flags(help.output);
    for (const char* own : {"help", "config", "output", "token", "insecure-skip-verify"}) {
      flags.erase(own);  // not flags of the long-running command's file
    }
    ASSERT_GT(flags.size(), 10u) << help.output;
    for (const std::string& flag : flags) {
      EXPECT_NE(text.find(" " + flag + ":"), std::string::npos)
          << command << " --" << flag << " is not in packaging/meridian.yaml";
    }
  }

  const struct {
    std::string yaml;
    std::string error;
  } cases[] = {
      {"server:\n  data-dir: x\n  listn: 127.0.0.1:0\n",
       ":3: server.listn: not a flag of `meridian server`"},
      {"server:\n  threads: -4\n", ":2: server.threads: "},
      {"server:\n  header-timeout: soon\n", ":2: server.header-timeout: "},
      {"server:\n  listen: [a, b]\n", ":2: server.listen: expected one value"},
      {"servers:\n  listen: x\n", ":1: unknown section \"servers\""},
      {"server:\n  listen: [a\n", ":3: not YAML"},
      {"agent:\n  clustr: onprem\n", ":2: agent.clustr: not a flag of `meridian agent`"},
  };
  int n = 0;
  for (const auto& c : cases) {
    const std::string file = WriteTestFile(dir.File("bad" + std::to_string(n++) + ".yaml"), c.yaml);
    const std::string command = c.yaml.rfind("agent", 0) == 0 ? "agent" : "server";
    std::vector<std::string> args = {command, "--config", file};
    if (command == "server") args.insert(args.end(), {"--data-dir", dir.File("d")});
    CliResult r = RunToExit(kBinary, args, dir.File("bad.log"), 10);
    EXPECT_EQ(r.code, 2) << c.yaml << r.output;
    EXPECT_NE(r.output.find(file + c.error), std::string::npos) << c.yaml << r.output;
  }
}

}  // namespace
}  // namespace meridian::testing
