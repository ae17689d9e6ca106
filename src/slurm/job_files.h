#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

// The files a Slurm job writes in its run's folder, as the connector (root, when jobs run as
// other users: ADR 0037, "Whose jobs they are") reads and removes them. The job's user controls
// everything in its folder and may change it while the connector looks: put a link where its
// output was, a FIFO, a hard link to another user's file, a folder swapped for a link mid-walk.
namespace meridian::slurm {

// At most `limit` bytes from `offset` of the file at `path`, opened without following a link
// (O_NOFOLLOW; O_NONBLOCK, so that a FIFO does not hang the connector), and only when it is a
// regular file of uid `owner`. `size` gets the file's size. nullopt: no such file (missing, a
// link, not a regular file, another owner's).
std::optional<std::string> ReadJobFile(const std::string& path, uint32_t owner, int64_t offset = 0,
                                       int64_t limit = 4096, int64_t* size = nullptr);

// Writes `content` to `path` whole or not at all, as a file of uid:gid with `mode`: through a
// temporary file beside it made afresh (O_EXCL, O_NOFOLLOW: never one that was there, never
// through a link), owned and closed to others before a byte is in it, then renamed over.
base::Status WriteFileAs(const std::string& path, const std::string& content, uint32_t uid,
                         uint32_t gid, mode_t mode);

// Removes the folder `path` and everything in it, as root may do safely in a tree its user may
// change meanwhile: each folder is opened from its parent's descriptor without following a link
// (openat, O_NOFOLLOW | O_DIRECTORY) and its entries removed through that descriptor (unlinkat),
// so a link is removed, never followed, and nothing outside the tree is reached whatever is
// swapped in. It goes into a folder only on the top's filesystem (no mount is walked) and only
// when the folder is its parent's owner's or its parent is root's: a folder of root's that a
// user moved into its own is left, with an error, as the user could not remove it itself. It
// removes at most `*budget` entries, less by what it removed, so that a folder of millions of files
// does not hold the connector's round: false while something is left (call again), true once it is
// gone (or never was). An error for what cannot be removed (its message names it).
base::Result<bool> RemoveTree(const std::string& path, int64_t* budget);

}  // namespace meridian::slurm
