// FileStore: the rendezvous store on a directory, and the holders that let a
// job's last process clear it (gossamer/store.hpp has the rules).
//
// The directory:
//   +lock              flock(2)ed while holders are added, dropped or counted
//   +holder.<hex>      one per FileStore alive: host, boot id, pid namespace,
//                      pid and start time (/proc/PID/stat field 22)
//   +created           a FileStore made the directory: its last holder removes it
//   @<key>             a key's value, '/' written as '%' (mode 0600)
//   @<key>~tmp.*, ~claim.*  a value being written (renamed or linked to @<key>)
// Anything else (a launcher's process marks, a summary, the user's files) is
// never touched; the directory is removed only when empty. Every file is
// reached through the directory's descriptor (openat and friends), opened and
// checked once, so a path swapped for a symlink later leads nowhere new.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"
#include "gossamer/store.hpp"
#include "proc_stat.hpp"

namespace gossamer {

namespace {

constexpr double kLockWaitSeconds = 30;
constexpr const char* kLockFile = "+lock";
constexpr const char* kCreatedFile = "+created";
constexpr const char* kHolderPrefix = "+holder.";
constexpr char kKeyPrefix = '@';

std::string errnoText(int err) { return std::strerror(err); }

// Closes a descriptor when it goes.
class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// flock(2) on NFS is a POSIX lock of the whole process, which does not keep
// two threads of one process apart: they take this first. Timed, so that a
// child forked while another thread held it fails instead of waiting forever.
class ThreadsOfThisProcess {
 public:
  explicit ThreadsOfThisProcess(const std::string& dir) {
    static std::timed_mutex m;
    if (!m.try_lock_for(std::chrono::duration<double>(kLockWaitSeconds)))
      throw Error("store directory '" + dir + "': another thread of this process held the store's lock for " +
                  std::to_string(static_cast<int>(kLockWaitSeconds)) + " s (or it was forked while one did)");
    held_ = &m;
  }
  ThreadsOfThisProcess(const ThreadsOfThisProcess&) = delete;
  ThreadsOfThisProcess& operator=(const ThreadsOfThisProcess&) = delete;
  ~ThreadsOfThisProcess() { held_->unlock(); }

 private:
  std::timed_mutex* held_ = nullptr;
};

// Where a process runs, as far as telling whether it is alive from here goes.
struct Place {
  std::string host, boot, pidNamespace;
  bool operator==(const Place&) const = default;
};

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

const Place& here() {
  static const Place place = [] {
    Place p;
    std::array<char, 256> name{};
    p.host = ::gethostname(name.data(), name.size() - 1) == 0 ? name.data() : "?";
    p.boot = trimmed(detail::readFileHead("/proc/sys/kernel/random/boot_id", 64).value_or("?"));
    std::array<char, 64> ns{};
    const ssize_t n = ::readlink("/proc/self/ns/pid", ns.data(), ns.size() - 1);
    p.pidNamespace = n > 0 ? std::string(ns.data(), static_cast<std::size_t>(n)) : "?";
    return p;
  }();
  return place;
}

// A holder file's text: one "name value" line per field.
std::string holderText(long pid, const std::string& startTime) {
  const Place& p = here();
  std::ostringstream out;
  out << "host " << p.host << "\nboot " << p.boot << "\npidns " << p.pidNamespace << "\npid " << pid
      << "\nstart " << startTime << "\n";
  return out.str();
}

// Whether the holder described by `text` has certainly ended: its process ran
// here (same host, boot and pid namespace) and is gone, a zombie, or another
// process now has its pid. A text that does not parse is from a holder that
// died while writing it. A holder elsewhere, or one whose process cannot be
// read (out of descriptors), may be alive.
bool holderEnded(const std::string& text) {
  Place p;
  long pid = 0;
  std::string start;
  std::istringstream in(text);
  std::string line;
  int fields = 0;
  while (std::getline(in, line)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) return true;
    const std::string name = line.substr(0, space), value = line.substr(space + 1);
    if (name == "host")
      p.host = value;
    else if (name == "boot")
      p.boot = value;
    else if (name == "pidns")
      p.pidNamespace = value;
    else if (name == "pid")
      pid = std::strtol(value.c_str(), nullptr, 10);
    else if (name == "start")
      start = value;
    else
      continue;
    ++fields;
  }
  if (fields != 5 || pid <= 0 || start.empty()) return true;
  if (!(p == here())) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  const auto stat = detail::readProcessStat(static_cast<pid_t>(pid));
  if (!stat) return false;  // gone since, or unreadable: the next opener sees
  return stat->zombie || stat->startTime != start;
}

// The whole of file `name` in `dir`; nullopt if there is none.
// @throws Error if it exists but cannot be read.
std::optional<std::string> readAt(int dir, const std::string& name, const std::string& what) {
  const Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw Error("cannot read " + what + ": " + errnoText(errno));
  }
  std::string out;
  std::array<char, 4096> buf{};
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot read " + what + ": " + errnoText(errno));
    if (n == 0) return out;
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
}

// Writes `text` to a new file `name` in `dir` (mode 0600). @throws Error.
void writeAt(int dir, const std::string& name, const std::string& text, int flags, const std::string& what) {
  Fd fd(::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | flags, 0600));
  if (fd.get() < 0) throw Error("cannot write " + what + ": " + errnoText(errno));
  int err = 0;
  for (std::size_t done = 0; done < text.size() && err == 0;) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      err = n < 0 ? errno : EIO;
    else
      done += static_cast<std::size_t>(n);
  }
  if (::close(fd.release()) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlinkat(dir, name.c_str(), 0);
    throw Error("cannot write " + what + ": " + errnoText(err));
  }
}

// The names of the entries of `dir`; nullopt if it cannot be listed.
std::optional<std::vector<std::string>> namesIn(int dir) {
  const int copy = ::dup(dir);
  if (copy < 0) return std::nullopt;
  DIR* d = ::fdopendir(copy);
  if (d == nullptr) {
    ::close(copy);
    return std::nullopt;
  }
  ::rewinddir(d);
  std::vector<std::string> names;
  bool ok = true;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      ok = errno == 0;
      break;
    }
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  if (!ok) return std::nullopt;
  return names;
}

// Opens and flock()s dir's +lock. Returns -1 when that lock file is gone or
// was replaced meanwhile, or the directory was removed (its last holder did
// so): the caller starts over.
// @throws Error if it cannot be opened, or stays locked kLockWaitSeconds.
int lockDirectory(int dir, const std::string& path) {
  const std::string what = "the rendezvous lock '" + path + "/" + kLockFile + "'";
  Fd fd(::openat(dir, kLockFile, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) {
    if (errno == ENOENT) return -1;
    throw Error("cannot open " + what + ": " + errnoText(errno));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLockWaitSeconds);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) throw Error("cannot lock " + what + ": " + errnoText(err));
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error(what + " stayed taken for " + std::to_string(static_cast<int>(kLockWaitSeconds)) +
                  " s (a process stopped while holding it, or a child forked then kept it?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  struct stat held {
  }, named{};
  if (::fstat(fd.get(), &held) != 0 || ::fstatat(dir, kLockFile, &named, AT_SYMLINK_NOFOLLOW) != 0 ||
      held.st_ino != named.st_ino || held.st_dev != named.st_dev)
    return -1;
  return fd.release();
}

// Drops the holder files of processes that have ended; returns how many
// holders are left, nullopt if that cannot be told. Caller holds the lock.
std::optional<std::size_t> pruneHolders(int dir) {
  const auto names = namesIn(dir);
  if (!names) return std::nullopt;
  std::size_t left = 0;
  for (const auto& name : *names) {
    if (name.rfind(kHolderPrefix, 0) != 0) continue;
    std::optional<std::string> text;
    try {
      text = readAt(dir, name, "holder " + name);
    } catch (const Error&) {
      ++left;  // unreadable now: alive, as far as anyone can tell
      continue;
    }
    if (!text) continue;  // removed meanwhile
    if (holderEnded(*text))
      ::unlinkat(dir, name.c_str(), 0);
    else
      ++left;
  }
  return left;
}

// Removes every key (and value being written); returns how many files. Caller
// holds the lock and has found no holder left.
std::size_t clearKeys(int dir) {
  std::size_t removed = 0;
  for (const auto& name : namesIn(dir).value_or(std::vector<std::string>{}))
    if (!name.empty() && name[0] == kKeyPrefix && ::unlinkat(dir, name.c_str(), 0) == 0) ++removed;
  return removed;
}

// Refuses a directory that is not this user's alone to write.
void checkDirectory(int fd, const std::string& dir) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error("cannot open store directory '" + dir + "': " + errnoText(errno));
  if (!S_ISDIR(st.st_mode)) throw Error("store directory '" + dir + "' is not a directory");
  if (st.st_uid != ::geteuid())
    throw Error("store directory '" + dir + "' belongs to uid " + std::to_string(st.st_uid) +
                ", not to this user (" + std::to_string(::geteuid()) +
                "): its owner could read the job key and replace endpoints; use a directory of your own");
  if ((st.st_mode & S_IWOTH) != 0)
    throw Error("store directory '" + dir +
                "' is writable by every user: anyone could plant endpoints or the job key there; "
                "`chmod o-w` it or use another directory");
}

// Opens `base` in `parent`: not through a symlink, unless the link is this
// user's (nobody else can point it elsewhere). -1 with errno on failure.
int openDirectoryAt(int parent, const std::string& base) {
  const int fd = ::openat(parent, base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0 || (errno != ELOOP && errno != ENOTDIR)) return fd;
  const int err = errno;  // ELOOP or ENOTDIR for a symlink, ENOTDIR for a file
  struct stat link {};
  if (::fstatat(parent, base.c_str(), &link, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(link.st_mode)) {
    errno = err;
    return -1;
  }
  if (link.st_uid != ::geteuid()) {
    errno = ELOOP;
    return -1;
  }
  return ::openat(parent, base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

std::string withoutTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string keyFile(const std::string& key) {
  checkStoreKey(key);
  std::string flat = key;
  std::replace(flat.begin(), flat.end(), '/', '%');
  return kKeyPrefix + flat;
}

}  // namespace

std::string FileStore::fileOf(const std::string& dir, const std::string& key) {
  return withoutTrailingSlashes(dir) + "/" + keyFile(key);
}

FileStore::FileStore(std::string dir) : dir_(withoutTrailingSlashes(std::move(dir))), owner_(::getpid()) {
  GOSSAMER_ENFORCE(!dir_.empty(), "empty store directory");
  const auto self = detail::readProcessStat(::getpid());
  if (!self) throw Error("store directory '" + dir_ + "': cannot read /proc/self/stat");
  const std::filesystem::path path(dir_);
  base_ = path.filename().string();
  const std::string parent = base_.empty()            ? dir_
                             : path.has_parent_path() ? path.parent_path().string()
                                                      : ".";
  {
    std::error_code ec;  // a missing parent is made as the umask says; the store's own directory is 0700
    if (!base_.empty()) std::filesystem::create_directories(parent, ec);
  }
  const ThreadsOfThisProcess threads(dir_);
  for (int attempt = 0;; ++attempt) {
    GOSSAMER_CHECK(attempt < 100, "store directory '" << dir_ << "' keeps being removed while it is opened");
    Fd parentFd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (parentFd.get() < 0) throw Error("cannot open '" + parent + "': " + errnoText(errno));
    Fd dirFd;
    bool created = false;
    if (base_.empty()) {  // "/"
      dirFd.reset(::dup(parentFd.get()));
      parentFd.reset();
    } else {
      created = ::mkdirat(parentFd.get(), base_.c_str(), 0700) == 0;
      if (!created && errno != EEXIST)
        throw Error("cannot create store directory '" + dir_ + "': " + errnoText(errno));
      dirFd.reset(openDirectoryAt(parentFd.get(), base_));
    }
    if (dirFd.get() < 0) {
      if (errno == ENOENT) continue;  // its last holder removed it just now
      if (errno == ENOTDIR) throw Error("store directory '" + dir_ + "' is not a directory");
      throw Error("cannot open store directory '" + dir_ + "': " + errnoText(errno) +
                  (errno == ELOOP ? " (a symlink that is not this user's)" : ""));
    }
    if (created) writeAt(dirFd.get(), kCreatedFile, "", O_TRUNC, "'" + dir_ + "/" + kCreatedFile + "'");
    checkDirectory(dirFd.get(), dir_);
    const int lockFd = lockDirectory(dirFd.get(), dir_);
    if (lockFd < 0) continue;  // its last holder was removing it: start over
    const Fd lock(lockFd);
    if (pruneHolders(dirFd.get()) == std::optional<std::size_t>(0)) {
      if (const std::size_t n = clearKeys(dirFd.get()); n > 0)
        GOSSAMER_LOG(kWarning, "store directory " << dir_ << ": removed " << n
                                                  << " key file(s) left by processes that have ended "
                                                     "(a job that was killed, or stopped without closing)");
    }
    std::random_device random;
    std::ostringstream name;
    name << kHolderPrefix << std::hex << random() << random();
    writeAt(dirFd.get(), name.str(), holderText(owner_, self->startTime), O_EXCL,
            "the holder file '" + dir_ + "/" + name.str() + "'");
    holder_ = name.str();
    parentFd_ = parentFd.release();
    dirFd_ = dirFd.release();
    return;
  }
}

FileStore::~FileStore() {
  const Fd parent(parentFd_), dir(dirFd_);  // closed on the way out
  if (holder_.empty() || owner_ != static_cast<long>(::getpid())) return;
  try {
    const ThreadsOfThisProcess threads(dir_);
    Fd lock(lockDirectory(dir.get(), dir_));
    if (lock.get() < 0) return;  // the directory is gone, and this holder with it
    ::unlinkat(dir.get(), holder_.c_str(), 0);
    if (pruneHolders(dir.get()) != std::optional<std::size_t>(0)) return;
    clearKeys(dir.get());
    if (parent.get() < 0 || ::unlinkat(dir.get(), kCreatedFile, 0) != 0) return;
    // A process opening the directory from here on finds its lock file gone
    // or replaced, or the directory gone, and starts over.
    ::unlinkat(dir.get(), kLockFile, 0);
    lock.reset();  // closed before rmdir: NFS keeps an open unlinked file as .nfs*
    struct stat named {
    }, held{};
    const bool same = ::fstatat(parent.get(), base_.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
                      ::fstat(dir.get(), &held) == 0 && named.st_ino == held.st_ino &&
                      named.st_dev == held.st_dev;
    if (same && ::unlinkat(parent.get(), base_.c_str(), AT_REMOVEDIR) != 0) {
      // Not empty (other files, or a lock file made meanwhile): the next
      // last holder removes it.
      const int fd = ::openat(dir.get(), kCreatedFile, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd >= 0) ::close(fd);
    }
  } catch (...) {  // a destructor does not throw: the next FileStore prunes this holder
  }
}

void FileStore::set(const std::string& key, const std::string& value) {
  const std::string name = keyFile(key);
  std::ostringstream tmp;
  tmp << name << "~tmp." << ::getpid() << '.' << std::this_thread::get_id();
  writeAt(dirFd_, tmp.str(), value, O_TRUNC, "store key '" + key + "' in '" + dir_ + "'");
  if (::renameat(dirFd_, tmp.str().c_str(), dirFd_, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dirFd_, tmp.str().c_str(), 0);
    throw Error("cannot publish store key '" + key + "' in '" + dir_ + "': " + errnoText(err));
  }
}

bool FileStore::claim(const std::string& key, const std::string& value) {
  const std::string name = keyFile(key);
  std::ostringstream tmp;
  tmp << name << "~claim." << ::getpid() << '.' << std::this_thread::get_id();
  writeAt(dirFd_, tmp.str(), value, O_TRUNC, "store key '" + key + "' in '" + dir_ + "'");
  const int rc = ::linkat(dirFd_, tmp.str().c_str(), dirFd_, name.c_str(), 0);
  const int err = errno;
  ::unlinkat(dirFd_, tmp.str().c_str(), 0);
  if (rc == 0) return true;
  if (err == EEXIST) return false;
  throw Error("cannot claim store key '" + key + "' in '" + dir_ + "': " + errnoText(err));
}

std::optional<std::string> FileStore::tryGet(const std::string& key) {
  return readAt(dirFd_, keyFile(key), "store key '" + key + "' in '" + dir_ + "'");
}

}  // namespace gossamer
