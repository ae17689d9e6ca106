#pragma once

#include <functional>
#include <string>
#include <vector>

#include "protocol/agent_protocol.h"

// Staging (docs/adr/0044-datasets.md): the task's supervisor copies each dataset its site's cache
// lacks into the cache before the task starts, with the site's command, into a folder of its own
// that is renamed into place once whole, so that a reader never sees half a copy. One node of a
// site copies a dataset at a time (a lock file in the cache); the others wait for its copy.
// Progress goes to a file the agent reports from. A failed copy is tried again (three attempts, 2 s
// and 4 s apart), then fails the task with the command's exit and the end of what it wrote.
namespace meridian::agent {

struct StagingResult {
  std::string stopped;  // why it was stopped before the task could start (the stop's reason)
  std::string error;    // why a dataset could not be staged
};

// Runs `stages` one after another. `output` gets what the copy commands write (the task's output
// file), `progress_file` a JSON list of protocol::StagingProgress, rewritten as copies go.
// `stop_reason` is asked about once a second: a reason ends the copy at once (SIGKILL to its
// process group; what it copied is removed).
StagingResult StageDatasets(const std::vector<protocol::ShimSpec::Stage>& stages,
                            const std::string& output, const std::string& progress_file,
                            const std::function<std::string()>& stop_reason);

// The bytes of the files under `path` (0 when it does not exist); links are not followed.
int64_t FolderBytes(const std::string& path);

// The copy command for a dataset: the site's words, or `cp -a {source} {target}`, with {source}
// filled in.
std::vector<std::string> StagingArgv(const std::vector<std::string>& command,
                                     const std::string& source);

}  // namespace meridian::agent
