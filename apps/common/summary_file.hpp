// The run summary file that the programs' writers share: a job split in
// views that never joined again (a partition that never healed, under
// membership.partition: merge) has a writer on each side, and the file keeps
// the summary of the side that outranks the others, whichever ends first.
#pragma once

#include <string>
#include <vector>

namespace gossamer {
class Store;
}

namespace gossamer::apps {

/// A random identifier of the running job (16 hex digits), the same in each
/// of its processes: rank 0 draws it and publishes it through `store`, the
/// job's rendezvous (one per job, as for its other keys); a rank 0
/// `restarted` into the running job (membership.restarted) finds it there,
/// and the other ranks wait for it up to `timeoutSeconds`. Call it once the
/// rank's Session (its transport) is up: rank 0 may wait for the others'
/// addresses before it gets here. A summary carries it as "job".
/// @returns the id; empty (logged) where rank 0 published none within
///          `timeoutSeconds` (it died first: the survivors train on).
/// @throws what `store` throws, but TimeoutError.
std::string jobNonce(Store& store, int rank, bool restarted, double timeoutSeconds);

/// Whether the final view `a` (global ranks) outranks the final view `b` as
/// the one whose summary stands for a job that ended split: it has more
/// ranks, or as many and the lowest rank of the two. Neither outranks the
/// other when both are empty.
bool summaryOutranks(const std::vector<int>& a, const std::vector<int>& b);

/// The "survivors" the summary file `path` names; empty when it cannot be
/// read or names none.
std::vector<int> survivorsInSummary(const std::string& path);

/// Writes `json`, a summary object with "job" and "survivors", and a newline
/// to the file `path` as a whole (a temporary file beside it, renamed over
/// it; through a symbolic link, at the file it names), unless `path` already
/// holds a summary of the same non-empty "job" whose survivors share no rank
/// with `json`'s and outrank them. Writers of one directory take turns (an
/// flock on the directory, waited for at most 10 s; where the file system
/// refuses it, as NFS can, they go on without, and the last may win). A
/// target that is not a regular file (a FIFO, a device) or is reached
/// through /proc (/dev/stdout, /dev/fd/N), or a file in a directory that
/// takes no new file or refuses the rename (another user's file in a sticky
/// directory, a file mounted on its own), is written in place: a name for a
/// descriptor (/dev/stdout, /dev/fd/N) through that descriptor, at its
/// position; a regular file truncated; a FIFO once a process opens it to
/// read, waited for at most `fifoWaitSeconds`. The replacing file keeps the
/// old one's permission bits (not its owner).
/// @returns the survivors of the summary kept instead; empty when `json`
///          was written.
/// @throws Error naming `path` if it cannot be written.
std::vector<int> writeSummaryFile(const std::string& path, const std::string& json,
                                  double fifoWaitSeconds = 10.0);

}  // namespace gossamer::apps
