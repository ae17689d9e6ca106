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
#include "base/files.h"
#include "base/log.h"

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

// Gives `path` and everything under it (never following a link) to `uid`:`gid`.
Status ChownTree(const std::string& path, uid_t uid, gid_t gid) {
  std::error_code ec;
  if (::lchown(path.c_str(), uid, gid) != 0) {
    return Status::Io("cannot give " + path + " to uid " + std::to_string(uid) + ": " +
                      std::strerror(errno));
  }
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (::lchown(it->path().c_str(), uid, gid) != 0) {
      return Status::Io("cannot give " + it->path().string() + " to uid " + std::to_string(uid));
    }
  }
  if (ec) return Status::Io("cannot read " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Status Agent::PrepareData(const Task& t, std::vector<std::pair<std::string, std::string>>* binds) {
  const protocol::Assignment& a = t.assignment;
  binds->clear();
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
    if (d.path.empty()) {
      return Status::NotFound("dataset " + d.name +
                              " is not at this node's site, which has no cache to stage it to "
                              "(its Cluster's storage.cache)");
    }
    struct stat st {};
    // What is to be staged is there once the shim has copied it, before the task starts.
    if (d.stage_from.empty() && (::stat(d.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
      return Status::NotFound("dataset " + d.name + ": " + d.path + " is not a folder on node " +
                              o_.node + (d.stage_from.empty() ? "" : " (it was to be staged)"));
    }
    const std::string target = DatasetTarget(t.dir, d.name);
    if (container) continue;  // the runtime mounts it (TaskArgv)
    if (t.uid) {
      // An empty folder the shim binds the dataset over, read-only, in the task's namespace.
      if (::mkdir(target.c_str(), 0755) != 0) {
        return Status::Io("cannot create " + target + ": " + std::strerror(errno));
      }
      binds->emplace_back(d.path, target);
    } else if (::symlink(d.path.c_str(), target.c_str()) != 0) {
      // Without uids of its own the task runs as the agent: a link is all it gets (and the
      // dataset is as writable as the agent's user may write it).
      return Status::Io("cannot link " + target + ": " + std::strerror(errno));
    }
  }
  if (a.checkpoint_dir.empty()) return Status::Ok();
  // <checkpoints>/<project>/<job>: the folders above the job's are root's to enter only (0711),
  // the job's is its task's uid's alone while it runs (another job that later gets the uid finds
  // it handed back to root: HandBackCheckpoint).
  std::error_code ec;
  std::filesystem::create_directories(a.checkpoint_dir, ec);
  if (ec) return Status::Io("cannot create " + a.checkpoint_dir + ": " + ec.message());
  if (t.uid) {
    const std::string project = std::filesystem::path(a.checkpoint_dir).parent_path().string();
    ::chmod(project.c_str(), 0711);
    ::chmod(std::filesystem::path(project).parent_path().c_str(), 0711);
    if (Status s = ChownTree(a.checkpoint_dir, *t.uid, *t.uid); !s.ok()) return s;
  }
  if (::chmod(a.checkpoint_dir.c_str(), 0700) != 0) {
    return Status::Io("cannot set the mode of " + a.checkpoint_dir + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

void Agent::HandBackCheckpoint(const Task& t) {
  if (!t.uid || t.assignment.checkpoint_dir.empty()) return;
  if (Status s = ChownTree(t.assignment.checkpoint_dir, 0, 0); !s.ok()) {
    base::log::Warn("job {}: {}", t.job, s.message());
  }
}

void Agent::AddDataEnv(const Task& t, std::map<std::string, std::string>* env) const {
  const protocol::Assignment& a = t.assignment;
  if (!a.data.empty()) (*env)["MERIDIAN_DATA_DIR"] = t.dir + "/data";
  for (const protocol::DataMount& d : a.data) {
    (*env)[DatasetVariable(d.name)] = DatasetTarget(t.dir, d.name);
  }
  if (!a.checkpoint_dir.empty()) (*env)["MERIDIAN_CHECKPOINT_DIR"] = a.checkpoint_dir;
}

void Agent::AddDataVolumes(const Task& t, std::vector<std::string>* argv) const {
  const protocol::Assignment& a = t.assignment;
  for (const protocol::DataMount& d : a.data) {
    argv->insert(argv->end(), {"-v", d.path + ":" + DatasetTarget(t.dir, d.name) + ":ro"});
  }
  if (!a.checkpoint_dir.empty()) {
    argv->insert(argv->end(), {"-v", a.checkpoint_dir + ":" + a.checkpoint_dir});
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
