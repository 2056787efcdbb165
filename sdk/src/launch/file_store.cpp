// FileStore: the rendezvous store on a directory, and the holders that let a
// job's last process clear it (gossamer/store.hpp has the rules).
//
// The directory:
//   +lock              flock(2)ed while holders are added, dropped or counted
//   +holder.<hex>      one per FileStore, flock()ed by it while it lives (its
//                      pid and host inside, for people)
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
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/write_fully.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"
#include "gossamer/store.hpp"

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
// two threads of one process apart: they take this mutex first. It is never
// destroyed (a FileStore may outlive static destructors), and a forked child
// gets a fresh one: the thread that held the parent's does not exist there.
// Nothing is made lazily: the first mutex is constant-initialised, and the
// fork handler registered while the library loads, so that no fork by
// another thread can leave a child waiting for ever on a function-local
// static whose initialisation was under way in the parent.
// (std::mutex's constructor is constexpr, its destructor trivial.)
// NOLINTBEGIN(cppcoreguidelines-avoid-non-const-global-variables)
std::mutex gFirstProcessMutex;
std::mutex* gProcessMutex = &gFirstProcessMutex;
// NOLINTEND(cppcoreguidelines-avoid-non-const-global-variables)
void freshProcessMutex() {
  gProcessMutex = new std::mutex;  // NOLINT(cppcoreguidelines-owning-memory): the parent's is left as it was
}
[[maybe_unused]] const bool gProcessMutexForks = ::pthread_atfork(nullptr, nullptr, freshProcessMutex) == 0;
std::mutex* processMutex() { return gProcessMutex; }

// Takes `m`, waiting at most kLockWaitSeconds; false if it stayed taken. It
// polls try_lock, as DirectoryLock polls flock, rather than wait in
// std::timed_mutex::try_lock_for: libstdc++ 12 waits there in
// pthread_mutex_clocklock, which clang 14's ThreadSanitizer does not
// intercept, so the tool saw neither the lock nor the order it makes between
// threads, and reported every use of ownHolders() as a data race.
bool lockWithin(std::mutex& m) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLockWaitSeconds);
  while (!m.try_lock()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class ThreadsOfThisProcess {
 public:
  explicit ThreadsOfThisProcess(const std::string& dir) : held_(processMutex()) {
    if (!lockWithin(*held_))
      throw Error("store directory '" + dir + "': another thread of this process held the store's lock for " +
                  std::to_string(static_cast<int>(kLockWaitSeconds)) + " s");
  }
  ThreadsOfThisProcess(const ThreadsOfThisProcess&) = delete;
  ThreadsOfThisProcess& operator=(const ThreadsOfThisProcess&) = delete;
  ~ThreadsOfThisProcess() { held_->unlock(); }

 private:
  std::mutex* held_;
};

// The holder files of this process's FileStores (changed and read under the
// process mutex). On NFS, flock is a POSIX lock of the whole process: this
// process could take the lock of its own holder file, and closing the
// descriptor it tested with would drop that lock; so it never tests its own.
std::set<std::string>& ownHolders() {
  static auto* names = new std::set<std::string>;  // NOLINT(cppcoreguidelines-owning-memory): never destroyed
  return *names;
}

// The running kernel's boot id: holders that share it share the kernel that
// keeps their locks. Empty if it cannot be read.
const std::string& bootId() {
  static const std::string id = [] {
    std::string text;
    if (const Fd fd(::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC)); fd.get() >= 0) {
      std::array<char, 64> buf{};
      const ssize_t n = ::read(fd.get(), buf.data(), buf.size() - 1);
      if (n > 0) text.assign(buf.data(), static_cast<std::size_t>(n));
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }();
  return id;
}

// A holder file's text: the kernel it runs under first (read back by
// holderState), then, for people, its pid and host.
std::string holderText() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return "boot " + bootId() + "\npid " + std::to_string(::getpid()) + "\nhost " + host.data() + "\n";
}

// flock(2) errors of a file system without locks.
bool noLocks(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

// The names of the entries of `dir`; nullopt if it cannot be listed.
std::optional<std::vector<std::string>> namesIn(int dir) {
  const int copy = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
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

enum class Holder { kGone, kHeld, kEnded };

// Whether holder file `name` still belongs to a live FileStore: each keeps
// its file flock()ed for its lifetime, and the kernel drops that lock when the
// process ends, however it ends. So a lock that can be taken means the holder
// has ended, if it ran under this kernel: on a shared file system whose locks
// are only local to each host (NFS with local_lock, Lustre's localflock) a
// lock taken here says nothing of a holder elsewhere, which counts as held,
// as does one whose lock cannot be tested.
Holder holderState(int dir, const std::string& name) {
  if (ownHolders().count(name) != 0) return Holder::kHeld;
  const Fd fd(::openat(dir, name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return errno == ENOENT ? Holder::kGone : Holder::kHeld;
  std::array<char, 128> head{};
  const ssize_t n = ::read(fd.get(), head.data(), head.size() - 1);
  const std::string firstLine = n > 0 ? std::string(head.data(), static_cast<std::size_t>(n)) : std::string();
  const bool here = !bootId().empty() && firstLine.rfind("boot " + bootId() + "\n", 0) == 0;
  if (!here) return Holder::kHeld;
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return Holder::kHeld;
  ::flock(fd.get(), LOCK_UN);
  return Holder::kEnded;
}

// The whole of file `name` in `dir` (a store's value); nullopt if there is
// none. @throws Error if it exists but cannot be read, or holds more than
// kMaxStoreValueBytes (no store wrote it).
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
    if (out.size() + static_cast<std::size_t>(n) > kMaxStoreValueBytes)
      throw Error("cannot read " + what + ": the file holds more than " +
                  std::to_string(kMaxStoreValueBytes) + " bytes, more than any value a store writes");
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
}

// Writes `text` to a new file `name` in `dir` (mode 0600). @throws Error.
void writeAt(int dir, const std::string& name, const std::string& text, int flags, const std::string& what) {
  Fd fd(::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | flags, 0600));
  if (fd.get() < 0) throw Error("cannot write " + what + ": " + errnoText(errno));
  int err = detail::writeFully(fd.get(), text.data(), text.size());
  if (::close(fd.release()) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlinkat(dir, name.c_str(), 0);
    throw Error("cannot write " + what + ": " + errnoText(err));
  }
}

// The lock of a directory, held while its holders are added, dropped or
// counted: this process's mutex, then flock(2) on the directory's +lock. It is
// released with LOCK_UN before the file is closed, so that a copy of the
// descriptor in a child forked meanwhile does not keep it held.
class DirectoryLock {
 public:
  // Takes it. locked() is false when the directory was removed (by its last
  // holder): the caller starts over. Whether the directory is still the one
  // at its path is the caller's to check, once locked.
  // @throws Error if the file cannot be opened, or the lock stays taken
  //         kLockWaitSeconds.
  DirectoryLock(int dir, const std::string& path) : threads_(path) {
    const std::string what = "the rendezvous lock '" + path + "/" + kLockFile + "'";
    fd_ = ::openat(dir, kLockFile, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) {
      const int err = errno;
      if (err == ENOENT) return;
      throw Error("cannot open " + what + ": " + errnoText(err));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLockWaitSeconds);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (noLocks(err)) break;  // no locks here: this process's mutex alone
      if (err != EWOULDBLOCK && err != EINTR) {
        ::close(std::exchange(fd_, -1));
        throw Error("cannot lock " + what + ": " + errnoText(err));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::close(std::exchange(fd_, -1));
        throw Error(what + " stayed taken for " + std::to_string(static_cast<int>(kLockWaitSeconds)) +
                    " s (a process stopped while holding it?)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock() { release(); }
  bool locked() const noexcept { return fd_ >= 0; }
  void release() noexcept {
    if (fd_ < 0) return;
    ::flock(fd_, LOCK_UN);
    ::close(std::exchange(fd_, -1));
  }

 private:
  ThreadsOfThisProcess threads_;
  int fd_ = -1;
};

// Drops the holder files of FileStores that have ended; returns how many
// holders are left, nullopt if that cannot be told. Caller holds the lock.
std::optional<std::size_t> pruneHolders(int dir) {
  const auto names = namesIn(dir);
  if (!names) return std::nullopt;
  std::size_t left = 0;
  for (const auto& name : *names) {
    if (name.rfind(kHolderPrefix, 0) != 0) continue;
    switch (holderState(dir, name)) {
      case Holder::kGone:
        break;
      case Holder::kHeld:
        ++left;
        break;
      case Holder::kEnded:
        ::unlinkat(dir, name.c_str(), 0);
        break;
    }
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

// What opening the store's directory found.
struct Opened {
  int fd = -1;
  int err = 0;        // errno when fd < 0
  bool link = false;  // `base` is a symlink (of this user's: another's is ELOOP)
};

// Opens `base` in `parent`: not through a symlink, unless the link is this
// user's (nobody else can point it elsewhere).
Opened openDirectoryAt(int parent, const std::string& base) {
  Opened o;
  o.fd = ::openat(parent, base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (o.fd >= 0) return o;
  o.err = errno;  // ELOOP or ENOTDIR for a symlink, ENOTDIR for a file
  struct stat link {};
  if ((o.err != ELOOP && o.err != ENOTDIR) ||
      ::fstatat(parent, base.c_str(), &link, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(link.st_mode))
    return o;
  o.link = true;
  if (link.st_uid != ::geteuid()) {
    o.err = ELOOP;
    return o;
  }
  o.fd = ::openat(parent, base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  o.err = o.fd < 0 ? errno : 0;
  return o;
}

// Whether `name` in `parent` is the directory open as `dir` (through a
// symlink too when `follow`).
bool namesDirectory(int parent, const std::string& name, int dir, bool follow) {
  struct stat named {
  }, held{};
  return ::fstatat(parent, name.c_str(), &named, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0 &&
         ::fstat(dir, &held) == 0 && named.st_ino == held.st_ino && named.st_dev == held.st_dev;
}

// Whether nothing but the store's lock and +created is left in `dir`.
bool onlyLockLeft(int dir) {
  const auto names = namesIn(dir);
  if (!names) return false;
  return std::all_of(names->begin(), names->end(), [](const std::string& n) {
    return n == "." || n == ".." || n == kLockFile || n == kCreatedFile;
  });
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

FileStore::FileStore(std::string dir)
    : dir_(withoutTrailingSlashes(std::filesystem::path(std::move(dir)).lexically_normal().string())),
      owner_(::getpid()) {
  GOSSAMER_ENFORCE(!dir_.empty(), "empty store directory");
  const std::filesystem::path path(dir_);
  base_ = path.filename().string();
  if (base_ == "." || base_ == "..") base_.clear();  // opened as it is, never removed (like "/")
  const std::string parent = base_.empty()            ? dir_
                             : path.has_parent_path() ? path.parent_path().string()
                                                      : ".";
  std::error_code made;  // a missing parent is made as the umask says; the store's own directory is 0700
  if (!base_.empty()) std::filesystem::create_directories(parent, made);
  for (int attempt = 0;; ++attempt) {
    GOSSAMER_CHECK(attempt < 100, "store directory '" << dir_ << "' keeps being removed while it is opened");
    Fd parentFd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (parentFd.get() < 0) {
      const int err = errno;
      throw Error("cannot open '" + parent + "': " + errnoText(err) +
                  (made ? " (creating it failed: " + made.message() + ")" : ""));
    }
    Fd dirFd;
    bool created = false;
    if (base_.empty()) {
      dirFd.reset(::fcntl(parentFd.get(), F_DUPFD_CLOEXEC, 0));
      if (dirFd.get() < 0) throw Error("cannot open store directory '" + dir_ + "': " + errnoText(errno));
      parentFd.reset();
    } else {
      created = ::mkdirat(parentFd.get(), base_.c_str(), 0700) == 0;
      if (!created && errno != EEXIST) {
        const int err = errno;
        throw Error("cannot create store directory '" + dir_ + "': " + errnoText(err));
      }
      const Opened o = openDirectoryAt(parentFd.get(), base_);
      if (o.fd < 0) {
        if (o.err == ENOENT && !o.link) continue;  // its last holder removed it just now
        if (o.err == ENOTDIR) throw Error("store directory '" + dir_ + "' is not a directory");
        throw Error("cannot open store directory '" + dir_ + "': " + errnoText(o.err) +
                    (o.err == ELOOP ? " (a symlink that is not this user's)"
                     : o.link       ? " (a symlink)"
                                    : ""));
      }
      dirFd.reset(o.fd);
    }
    if (created) writeAt(dirFd.get(), kCreatedFile, "", O_TRUNC, "'" + dir_ + "/" + kCreatedFile + "'");
    checkDirectory(dirFd.get(), dir_);
    const DirectoryLock lock(dirFd.get(), dir_);
    if (!lock.locked()) continue;  // its last holder removed it: start over
    // Still the directory at the path? Its last holder moves it away, under
    // the lock, before removing it.
    if (!base_.empty() && !namesDirectory(parentFd.get(), base_, dirFd.get(), true)) continue;
    if (pruneHolders(dirFd.get()) == std::optional<std::size_t>(0)) {
      if (const std::size_t n = clearKeys(dirFd.get()); n > 0)
        GOSSAMER_LOG(kWarning, "store directory " << dir_ << ": removed " << n
                                                  << " key file(s) left by processes that have ended "
                                                     "(a job that was killed, or stopped without closing)");
    }
    std::random_device random;
    std::ostringstream name;
    name << kHolderPrefix << std::hex << random() << random();
    const std::string what = "the holder file '" + dir_ + "/" + name.str() + "'";
    writeAt(dirFd.get(), name.str(), holderText(), O_EXCL, what);
    Fd holder(::openat(dirFd.get(), name.str().c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
    if (holder.get() < 0 || (::flock(holder.get(), LOCK_EX | LOCK_NB) != 0 && !noLocks(errno))) {
      const int err = errno;
      ::unlinkat(dirFd.get(), name.str().c_str(), 0);
      throw Error("cannot lock " + what + ": " + errnoText(err));
    }
    ownHolders().insert(name.str());
    holderFd_ = holder.release();
    holder_ = name.str();
    parentFd_ = parentFd.release();
    dirFd_ = dirFd.release();
    return;
  }
}

FileStore::~FileStore() {
  const Fd parent(parentFd_), dir(dirFd_);  // closed on the way out
  Fd holder(holderFd_);
  if (holder_.empty() || owner_ != static_cast<long>(::getpid())) return;
  try {
    DirectoryLock lock(dir.get(), dir_);
    ownHolders().erase(holder_);
    holder.reset();              // closed before its file goes: NFS keeps an open unlinked file as .nfs*
    if (!lock.locked()) return;  // the directory is gone, and this holder with it
    ::unlinkat(dir.get(), holder_.c_str(), 0);
    if (pruneHolders(dir.get()) != std::optional<std::size_t>(0)) return;
    clearKeys(dir.get());
    // A directory a FileStore made goes too, by the path it was made at (not
    // through a symlink), if nothing else was put in it.
    if (parent.get() < 0 || !namesDirectory(parent.get(), base_, dir.get(), false) ||
        ::faccessat(dir.get(), kCreatedFile, F_OK, AT_SYMLINK_NOFOLLOW) != 0 || !onlyLockLeft(dir.get()))
      return;
    // Moved out of the path first, still locked: a process that opened it and
    // waits for the lock then finds the path naming another directory, or
    // none, and starts over.
    std::random_device random;
    std::ostringstream away;
    away << '.' << base_ << ".removed." << std::hex << random() << random();
    if (::renameat(parent.get(), base_.c_str(), parent.get(), away.str().c_str()) != 0) return;
    lock.release();
    ::unlinkat(dir.get(), kCreatedFile, 0);
    ::unlinkat(dir.get(), kLockFile, 0);
    // A process that was waiting closes its copy of the lock file at once
    // (on NFS the file lingers as .nfs* until then).
    for (int attempt = 0; attempt < 200; ++attempt) {
      if (::unlinkat(parent.get(), away.str().c_str(), AT_REMOVEDIR) == 0 ||
          (errno != ENOTEMPTY && errno != EBUSY))
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Something was put in it meanwhile: back where it was, for the next
    // last holder (unless the path names a new directory by now).
    const int marker = ::openat(dir.get(), kCreatedFile, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (marker >= 0) ::close(marker);
    if (::renameat2(parent.get(), away.str().c_str(), parent.get(), base_.c_str(), RENAME_NOREPLACE) != 0)
      GOSSAMER_LOG(kWarning, "store directory " << dir_ << ": something was put in it while its last holder "
                                                << "removed it; it is left as " << away.str());
  } catch (...) {  // a destructor does not throw: the next FileStore prunes this holder
    if (lockWithin(*processMutex())) {
      ownHolders().erase(holder_);
      processMutex()->unlock();
    }
  }
}

void FileStore::set(const std::string& key, const std::string& value) {
  const std::string name = keyFile(key);
  checkStoreValue(key, value);
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
  checkStoreValue(key, value);
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
