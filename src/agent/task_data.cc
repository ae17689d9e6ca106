// A task's data (docs/adr/0044-datasets.md): each dataset it reads at a stable path in its
// folder, read-only, and its job's checkpoint folder on the site's shared filesystem. Part of
// Agent (agent.h); the shim binds the datasets in the task's mount namespace (shim.cc).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "agent/agent.h"
#include "agent/task_isolation.h"
#include "base/files.h"
#include "base/log.h"
#include "domain/spec.h"

namespace meridian::agent {

using base::Status;

namespace {

// Where the task finds dataset `name`: a folder of its own task folder, the same for every run.
std::string DatasetTarget(const std::string& task_dir, const std::string& name) {
  return task_dir + "/data/" + name;
}

// MERIDIAN_DATASET_IMAGENET_1K for imagenet-1k.
std::string DatasetVariable(const std::string& name) {
  std::string v = "MERIDIAN_DATASET_";
  for (char ch : name) {
    v += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  return v;
}

// Where the task finds its job's checkpoint folder: a folder of its task folder, bound over the
// folder on the site's storage, which no task can reach by its own path.
std::string CheckpointTarget(const std::string& task_dir) { return task_dir + "/checkpoint"; }

// A path the server sent that the agent acts on as root: absolute, with no "." or ".." part.
bool PlainAbsolute(const std::string& path) {
  if (path.empty() || path.front() != '/') return false;
  for (const auto& part : std::filesystem::path(path)) {
    if (part == "." || part == "..") return false;
  }
  return true;
}

}  // namespace

Status Agent::PrepareData(const Task& t, Mounts* mounts) {
  const protocol::Assignment& a = t.assignment;
  *mounts = Mounts{};
  const bool container = !a.run.image.empty();
  if (!a.data.empty()) {
    const std::string dir = t.dir + "/data";
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // links or empty folders of an earlier run
    if (::mkdir(dir.c_str(), 0755) != 0) {
      return Status::Io("cannot create " + dir + ": " + std::strerror(errno));
    }
  }
  for (const protocol::DataMount& d : a.data) {
    if (!domain::IsValidName(d.name)) return Status::Invalid("\"" + d.name + "\" is no dataset");
    if (d.path.empty()) {
      return Status::NotFound("dataset " + d.name +
                              " cannot be reached from this node's site: no folder of it there, "
                              "and no cache to stage it to (its Cluster's storage.cache), or no "
                              "Dataset document");
    }
    if (!PlainAbsolute(d.path)) return Status::Invalid("dataset " + d.name + ": bad path");
    struct stat st {};
    // What is to be staged is there once the shim has copied it, before the task starts.
    if (d.stage_from.empty() && (::stat(d.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
      return Status::NotFound("dataset " + d.name + ": " + d.path + " is not a folder on node " +
                              o_.node);
    }
    const std::string target = DatasetTarget(t.dir, d.name);
    if (container) continue;  // the runtime mounts it (TaskArgv)
    if (t.uid) {
      // An empty folder the shim binds the dataset over, read-only, in the task's namespace.
      if (::mkdir(target.c_str(), 0755) != 0) {
        return Status::Io("cannot create " + target + ": " + std::strerror(errno));
      }
      mounts->read_only.emplace_back(d.path, target);
    } else if (::symlink(d.path.c_str(), target.c_str()) != 0) {
      // Without uids of its own the task runs as the agent: a link is all it gets (and the
      // dataset is as writable as the agent's user may write it).
      return Status::Io("cannot link " + target + ": " + std::strerror(errno));
    }
  }
  if (a.checkpoint_dir.empty()) return Status::Ok();
  // <checkpoints>/<project>/<job>: the project's folder is root's alone (0700), so that no task
  // reaches a job's folder by its path, whatever uid it runs under; the task has its own at
  // <task dir>/checkpoint, a bind of it in its mount namespace, given to its uid by the shim.
  if (!PlainAbsolute(a.checkpoint_dir)) return Status::Invalid("bad checkpoint folder");
  const std::filesystem::path job = a.checkpoint_dir;
  std::error_code ec;
  std::filesystem::create_directories(job.parent_path().parent_path(), ec);
  if (ec) return Status::Io("cannot create " + job.parent_path().string() + ": " + ec.message());
  if (t.uid) {
    if (Status s = MakeFolder(job.parent_path().string(), 0, 0, 0700); !s.ok()) return s;
  } else {
    std::filesystem::create_directories(job.parent_path(), ec);
  }
  if (::mkdir(job.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::Io("cannot create " + job.string() + ": " + std::strerror(errno));
  }
  const std::string target = CheckpointTarget(t.dir);
  std::filesystem::remove(target, ec);  // an earlier run's link or empty folder
  if (t.uid) mounts->owned = job.string();
  if (container) return Status::Ok();  // a volume (TaskArgv)
  if (t.uid) {
    if (::mkdir(target.c_str(), 0755) != 0) {
      return Status::Io("cannot create " + target + ": " + std::strerror(errno));
    }
    mounts->read_write.emplace_back(job.string(), target);
  } else if (::symlink(job.c_str(), target.c_str()) != 0) {
    return Status::Io("cannot link " + target + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

void Agent::AddDataEnv(const Task& t, std::map<std::string, std::string>* env) const {
  const protocol::Assignment& a = t.assignment;
  if (!a.data.empty()) (*env)["MERIDIAN_DATA_DIR"] = t.dir + "/data";
  for (const protocol::DataMount& d : a.data) {
    (*env)[DatasetVariable(d.name)] = DatasetTarget(t.dir, d.name);
  }
  if (!a.checkpoint_dir.empty()) (*env)["MERIDIAN_CHECKPOINT_DIR"] = CheckpointTarget(t.dir);
}

void Agent::AddDataVolumes(const Task& t, std::vector<std::string>* argv) const {
  const protocol::Assignment& a = t.assignment;
  for (const protocol::DataMount& d : a.data) {
    argv->insert(argv->end(),
                 {"-v", d.path + ":" + DatasetTarget(t.dir, d.name) + ":ro,nosuid,nodev"});
  }
  if (!a.checkpoint_dir.empty()) {
    argv->insert(argv->end(),
                 {"-v", a.checkpoint_dir + ":" + CheckpointTarget(t.dir) + ":nosuid,nodev"});
  }
}

std::vector<protocol::StagingProgress> Agent::StagingOf(const Task& t) const {
  std::vector<protocol::StagingProgress> out;
  const bool stages =
      std::any_of(t.assignment.data.begin(), t.assignment.data.end(),
                  [](const protocol::DataMount& d) { return !d.stage_from.empty(); });
  if (!stages || t.dir.empty()) return out;
  const Json list = Json::parse(base::ReadWholeFile(t.dir + "/staging.json"), nullptr, false);
  if (!list.is_array()) return out;
  for (const Json& item : list) {
    auto p = protocol::DecodeStagingProgress(item);
    if (p.ok()) out.push_back(std::move(p.value()));
  }
  return out;
}

}  // namespace meridian::agent
