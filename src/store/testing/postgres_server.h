#pragma once

#include <libpq-fe.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/testing/temp_dir.h"

namespace meridian::store::testing {

// A throwaway PostgreSQL server, real, for tests: initdb into a temporary folder, then pg_ctl
// start, listening only on a Unix socket in that folder (no port to collide with another test's
// server). As root it runs as the `postgres` account, since initdb refuses root. Stopped, and its
// folder removed, on destruction. Debian's `postgresql` package provides it (install-deps.sh).
class PostgresServer {
 public:
  // Where it runs and listens beyond its socket, for tests of the network between servers and
  // their database.
  struct Network {
    std::string netns;     // a network namespace to run in (`ip netns exec`); "": this one
    std::string listen;    // TCP addresses (listen_addresses), trusted from anywhere
    std::string settings;  // more `-c name=value` settings
  };

  PostgresServer() = default;
  explicit PostgresServer(Network network) : network_(std::move(network)) {}
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;
  ~PostgresServer() {
    if (started_)
      Shell(Bin("pg_ctl") + " -D " + dir_.File("pg/data") +
            " -m immediate -w stop > /dev/null 2>&1");
  }

  // Starts the server (creating its database cluster the first time); "" when it is up, else
  // what went wrong (with the server's log).
  std::string Start() {
    if (!bin_.empty()) return Control("start");
    const std::string bin = BinDir();
    if (bin.empty()) return "no PostgreSQL under /usr/lib/postgresql (run scripts/install-deps.sh)";
    bin_ = bin;
    const std::string pg = dir_.File("pg");
    std::filesystem::create_directories(pg);
    if (::geteuid() == 0) {
      // The server's account must reach its folder: through the test's, into its own.
      ::chmod(dir_.path().c_str(), 0711);
      if (Shell("chown postgres: " + pg) != 0) return "cannot give " + pg + " to user postgres";
    }
    if (Shell(Bin("initdb") + " -D " + pg + "/data -U postgres -A trust -E UTF8 --no-sync > " + pg +
              "/initdb.log 2>&1") != 0) {
      return "initdb failed: " + Read(pg + "/initdb.log");
    }
    if (!network_.listen.empty()) {
      std::ofstream(pg + "/data/pg_hba.conf", std::ios::app) << "host all all 0.0.0.0/0 trust\n";
    }
    return Control("start");
  }

  // Stops the server, closing every connection; "" when it has stopped.
  std::string Stop() {
    std::string error = Control("stop -m fast");
    started_ = false;
    return error;
  }

  // Stops the server (closing every connection) and starts it again; "" when it is back up.
  std::string Restart() { return Control("restart -m fast"); }

  // A connection string for the database `name` (letters, digits and _), created empty on the
  // first call; "" with `error` set when it cannot be.
  std::string Database(const std::string& name, std::string* error) {
    const std::string base = "host=" + dir_.File("pg") + " user=postgres dbname=";
    PGconn* c = PQconnectdb((base + "postgres").c_str());
    std::string message;
    if (PQstatus(c) != CONNECTION_OK) {
      message = PQerrorMessage(c);
    } else {
      PGresult* exists =
          PQexec(c, ("SELECT 1 FROM pg_database WHERE datname = '" + name + "'").c_str());
      const bool found = PQresultStatus(exists) == PGRES_TUPLES_OK && PQntuples(exists) > 0;
      PQclear(exists);
      if (!found) {
        PGresult* r = PQexec(c, ("CREATE DATABASE " + name).c_str());
        if (PQresultStatus(r) != PGRES_COMMAND_OK) message = PQresultErrorMessage(r);
        PQclear(r);
      }
    }
    PQfinish(c);
    if (!message.empty()) {
      *error = "PostgreSQL test server: " + message;
      return "";
    }
    return base + name;
  }

  // The folder of the server's socket (a libpq `host`).
  std::string socket_dir() const { return dir_.File("pg"); }

 private:
  std::string Control(const std::string& action) {
    const std::string pg = dir_.File("pg");
    const std::string options = "-c listen_addresses='" + network_.listen + "' -k " + pg +
                                " -c max_connections=200 " + network_.settings;
    if (Shell(Bin("pg_ctl") + " -D " + pg + "/data -l " + pg + "/server.log -w -t 60 -o \"" +
              options + "\" " + action + " > " + pg + "/pg_ctl.log 2>&1") != 0) {
      return "pg_ctl " + action + " failed: " + Read(pg + "/pg_ctl.log") + Read(pg + "/server.log");
    }
    started_ = true;
    return "";
  }
  static std::string BinDir() {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
      if (std::filesystem::exists(e.path() / "bin/initdb")) found.push_back(e.path() / "bin");
    }
    std::sort(found.begin(), found.end());
    return found.empty() ? "" : found.back();
  }
  std::string Bin(const std::string& tool) const {
    const std::string path = bin_ + "/" + tool;
    const std::string in = network_.netns.empty() ? "" : "ip netns exec " + network_.netns + " ";
    return ::geteuid() == 0 ? "cd / && " + in + "runuser -u postgres -- " + path : in + path;
  }
  static int Shell(const std::string& command) { return std::system(command.c_str()); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  Network network_;
  base::testing::TempDir dir_;
  std::string bin_;
  bool started_ = false;
};

}  // namespace meridian::store::testing
