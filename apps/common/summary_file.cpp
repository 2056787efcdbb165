// The run summary file the programs' writers share (summary_file.hpp): the
// outranking side of a split job keeps it, written whole through a renamed
// temporary file, the writers of one directory taking turns under a flock.
#include "summary_file.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"
#include "gossamer/store.hpp"

namespace gossamer::apps {

namespace {

constexpr const char* kJobKey = "gossamer.job";

// The survivors a parsed summary names (none if it names none).
std::vector<int> survivorsOf(const nlohmann::json& j) {
  std::vector<int> out;
  if (!j.is_object() || !j.contains("survivors") || !j["survivors"].is_array()) return out;
  for (const auto& r : j["survivors"])
    if (r.is_number_integer()) out.push_back(r.get<int>());
  return out;
}

// `key`'s string in a parsed summary, or "" when it has none.
std::string stringOf(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

bool shareARank(const std::vector<int>& a, const std::vector<int>& b) {
  return std::any_of(a.begin(), a.end(), [&](int r) { return std::find(b.begin(), b.end(), r) != b.end(); });
}

std::string randomHex() {
  std::random_device device;
  const std::uint64_t v = (std::uint64_t{device()} << 32) ^ device();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// An exclusive flock on a directory, held while the object lives, so that
// the writers of files there take turns; waited for at most `seconds`, then
// (or where the file system cannot lock) the writer goes on without it.
class DirectoryTurn {
 public:
  DirectoryTurn(const std::string& dir, double seconds) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) {
      const int err = errno;
      GOSSAMER_LOG(kWarning, "summary: cannot open '" << dir << "' to take turns (" << std::strerror(err)
                                                      << "): writing without it");
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if ((err != EWOULDBLOCK && err != EINTR) || std::chrono::steady_clock::now() >= deadline) {
        ::close(fd_);
        fd_ = -1;
        GOSSAMER_LOG(kWarning, "summary: no turn on '"
                                   << dir << "' (" << (err == EWOULDBLOCK ? "still held" : std::strerror(err))
                                   << "): writing without it");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~DirectoryTurn() {
    if (fd_ < 0) return;
    ::flock(fd_, LOCK_UN);  // (a copy of the descriptor in a forked child would hold it on)
    ::close(fd_);
  }
  DirectoryTurn(const DirectoryTurn&) = delete;
  DirectoryTurn& operator=(const DirectoryTurn&) = delete;

 private:
  int fd_ = -1;
};

[[noreturn]] void cannotWrite(const std::string& path, int err) {
  throw Error("cannot write summary to '" + path + "': " + std::strerror(err));
}

// Whether `file` is named in /proc (its directory is there: /proc/self/fd,
// /dev/fd through its link), where a name stands for an open descriptor.
bool inProc(const std::filesystem::path& file) {
  struct statfs fs {};
  const std::string dir = file.has_parent_path() ? file.parent_path().string() : std::string(".");
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
}

// Writes all of `text` to `fd`; 0, or the errno of the write that failed.
// A descriptor the caller set nonblocking (a full pipe: EAGAIN) is waited
// for, at most 10 s without progress.
int writeAll(int fd, const std::string& text) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    const int err = errno;
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      deadline = Clock::now() + std::chrono::seconds(10);
    } else if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return ETIMEDOUT;
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) return errno;
    } else if (n == 0 || err != EINTR) {
      return n == 0 ? EIO : err;
    }
  }
  return 0;
}

// N for a name of N digits (no leading zero, at most 9), else -1.
int descriptorNumber(const std::string& digits) {
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos ||
      (digits.size() > 1 && digits[0] == '0'))
    return -1;
  return std::stoi(digits);
}

// The descriptor a name stands for: /dev/fd/N, /proc/self/fd/N or N in
// any spelling of that directory (`dev/./fd/N`, `../dev/fd/N`: the same
// directory as this process's /proc/self/fd), and /dev/stdout and
// /dev/stderr (1, 2); -1 for any other name.
int descriptorNamed(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const std::string prefix : {"/dev/fd/", "/proc/self/fd/"})
    if (path.rfind(prefix, 0) == 0) return descriptorNumber(path.substr(prefix.size()));
  const std::filesystem::path name(path);
  const int n = descriptorNumber(name.filename().string());
  struct stat dir {
  }, fds{};
  if (n < 0 || !name.has_parent_path() || ::stat(name.parent_path().c_str(), &dir) != 0 ||
      ::stat("/proc/self/fd", &fds) != 0)
    return -1;
  return dir.st_dev == fds.st_dev && dir.st_ino == fds.st_ino ? n : -1;
}

// `text` written to what `file` names without replacing it: through the
// descriptor it names (at that descriptor's position: a log the process
// writes keeps what it holds); else `file` opened: a regular one truncated
// (`truncate`: a summary whose name may not be replaced) or appended to
// (another name in /proc), a FIFO once a process opens it to read (waited
// for at most `fifoWaitSeconds`), a device as it is. Errors name `path`.
void writeInPlace(const std::string& path, const std::string& file, const std::string& text, bool truncate,
                  double fifoWaitSeconds) {
  if (const int named = descriptorNamed(file); named >= 0) {
    const int err = writeAll(named, text);
    if (err != 0) cannotWrite(path, err);
    return;
  }
  struct stat st {};
  const bool exists = ::stat(file.c_str(), &st) == 0, fifo = exists && S_ISFIFO(st.st_mode);
  int flags = O_WRONLY | O_NOCTTY | O_CLOEXEC;
  if (fifo)
    flags |= O_NONBLOCK;  // ENXIO at once while no process reads it
  else if (!exists || S_ISREG(st.st_mode))
    flags |= O_CREAT | (truncate ? O_TRUNC : O_APPEND);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(fifoWaitSeconds);
  int fd = -1, openErr = 0;
  for (;;) {
    fd = ::open(file.c_str(), flags, 0666);
    openErr = errno;
    if (fd >= 0 || !fifo || (openErr != ENXIO && openErr != EINTR) ||
        std::chrono::steady_clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (fd < 0 && fifo && openErr == ENXIO) {
    std::ostringstream why;
    why << "cannot write summary to '" << path << "': no process opened the FIFO to read it in "
        << fifoWaitSeconds << " s";
    throw Error(why.str());
  }
  if (fd < 0) cannotWrite(path, openErr);
  if (fifo) {
    const int now = ::fcntl(fd, F_GETFL);
    if (now >= 0) (void)::fcntl(fd, F_SETFL, now & ~O_NONBLOCK);  // the writes wait for a slow reader
  }
  int err = writeAll(fd, text);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) cannotWrite(path, err);
}

// `text` into a temporary file beside `target`, then renamed over it; in
// place where the name may not be replaced but the file exists: the
// directory takes no new file (EACCES, EPERM, EROFS), or refuses the rename
// (another user's file in a sticky directory: EPERM; a file mounted on its
// own: EBUSY). Errors name `path`, the name the caller gave.
void replaceWhole(const std::string& path, const std::string& target, const std::string& text) {
  const auto notToBeReplaced = [&](int err) {
    return (err == EACCES || err == EPERM || err == EROFS || err == EBUSY) &&
           ::access(target.c_str(), F_OK) == 0;
  };
  const std::filesystem::path dir = std::filesystem::path(target).parent_path();
  // The old file's permission bits (the new one is made 0600 until it has
  // them: no reader it would refuse opens it in between), else 0666 less the umask.
  struct stat old {};
  const bool hadOld = ::stat(target.c_str(), &old) == 0;
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {  // a short name no other writer holds
    temporary = (dir / (".gossamer-summary-" + randomHex())).string();
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, hadOld ? 0600 : 0666);
    const int err = errno;
    if (fd >= 0) break;
    if (notToBeReplaced(err)) {
      writeInPlace(path, target, text, true, 0);
      return;
    }
    if (err != EEXIST || attempt == 16) cannotWrite(path, err);
  }
  if (hadOld) (void)::fchmod(fd, old.st_mode & 0777);
  int err = writeAll(fd, text);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(temporary.c_str(), target.c_str()) != 0) err = errno;
  if (err == 0) return;
  ::unlink(temporary.c_str());
  if (notToBeReplaced(err)) {
    writeInPlace(path, target, text, true, 0);
    return;
  }
  cannotWrite(path, err);
}

}  // namespace

std::string jobNonce(Store& store, int rank, bool restarted, double timeoutSeconds) {
  if (rank != 0) {
    try {
      return store.get(kJobKey, timeoutSeconds);
    } catch (const TimeoutError&) {
      // Rank 0 died before it published one; the job trains on without it.
      GOSSAMER_LOG(kWarning, "rank " << rank << ": no job id from rank 0 within " << timeoutSeconds
                                     << " s; this rank's summary names none");
      return {};
    }
  }
  if (restarted) {
    if (auto known = store.tryGet(kJobKey)) return *known;  // rank 0 restarted into a running job
    GOSSAMER_LOG(kWarning,
                 "rank 0: restarted, and the rendezvous holds no job id (a tcp:// store it serves "
                 "anew): drew a new one, which the summaries of the others' views do not share");
  }
  const std::string nonce = randomHex();
  store.set(kJobKey, nonce);
  return nonce;
}

bool summaryOutranks(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size()) return a.size() > b.size();
  if (a.empty()) return false;
  return *std::min_element(a.begin(), a.end()) < *std::min_element(b.begin(), b.end());
}

std::vector<int> survivorsInSummary(const std::string& path) {
  std::ifstream in(path);
  if (path.empty() || !in) return {};
  return survivorsOf(nlohmann::json::parse(in, nullptr, false));
}

std::vector<int> writeSummaryFile(const std::string& path, const std::string& json, double fifoWaitSeconds) {
  namespace fs = std::filesystem;
  const std::string text = json + '\n';
  // Through symbolic links (a chain of them, or one naming no file yet) to
  // the file they name, as many hops as the kernel follows (40). A name in
  // /proc at any hop (/dev/stdout, /dev/fd/N, /proc/self/fd/N: an open
  // descriptor, of a pipe or of a file another writer holds) is written in
  // place, as a device or FIFO is.
  std::error_code ec;
  fs::path target(path);
  bool inPlace = false;
  for (int hop = 0;; ++hop) {
    // A descriptor's name (also where /proc is not mounted): that descriptor.
    if (descriptorNamed(target.string()) >= 0) {
      writeInPlace(path, target.string(), text, false, fifoWaitSeconds);
      return {};
    }
    inPlace = inPlace || inProc(target);
    if (!fs::is_symlink(fs::symlink_status(target, ec))) break;
    if (hop == 40) cannotWrite(path, ELOOP);
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) cannotWrite(path, ec.value());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  struct stat st {};
  if (inPlace || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))) {
    writeInPlace(path, path, text, false, fifoWaitSeconds);
    return {};
  }
  DirectoryTurn turn(target.has_parent_path() ? target.parent_path().string() : std::string("."), 10.0);
  // What the file holds now, under the turn (another side may have written
  // it while this one waited).
  const auto ours = nlohmann::json::parse(json, nullptr, false);
  const std::string job = stringOf(ours, "job");
  if (!job.empty() && ::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    std::ifstream in(target);
    const auto held = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    const std::vector<int> theirs = survivorsOf(held), mine = survivorsOf(ours);
    if (stringOf(held, "job") == job && !shareARank(theirs, mine) && summaryOutranks(theirs, mine))
      return theirs;
  }
  replaceWhole(path, target.string(), text);
  return {};
}

}  // namespace gossamer::apps
