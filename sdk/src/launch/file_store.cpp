// FileStore: the rendezvous store on a directory, and the holders that let a
// job's last process clear it (gossamer/store.hpp has the rules).
//
// The directory:
//   +lock              flock(2)ed while holders are added, dropped or counted
//   +holder.<16 hex>   one per FileStore alive: host, boot id, pid namespace,
//                      pid and start time (/proc/PID/stat field 22)
//   +created           a FileStore made the directory: its last holder removes it
//   @<key>             a key's value, '/' written as '%' (mode 0600)
//   @<key>~tmp.*, ~claim.*  a value being written (renamed or linked to @<key>)
// Anything else (a launcher's process marks, a summary, the user's files) is
// never touched; the directory is removed with rmdir(2), only when empty.
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
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/log.hpp"
#include "gossamer/store.hpp"
#include "proc_stat.hpp"

namespace gossamer {

namespace fs = std::filesystem;

namespace {

constexpr double kLockWaitSeconds = 30;
constexpr const char* kLockFile = "+lock";
constexpr const char* kCreatedFile = "+created";
constexpr const char* kHolderPrefix = "+holder.";
constexpr char kKeyPrefix = '@';

std::string errnoText(int err) { return std::strerror(err); }

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
// died while writing it. A holder elsewhere may be alive.
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
  const auto stat = detail::readProcessStat(static_cast<pid_t>(pid));
  return !stat || stat->zombie || stat->startTime != start;
}

// Closes a locked lock file (which releases the lock).
struct HeldLock {
  int fd;
  explicit HeldLock(int f) : fd(f) {}
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  ~HeldLock() { ::close(fd); }
};

// Opens and flock()s dir/+lock. Returns -1 when that lock file is gone or
// was replaced meanwhile (the directory's last holder removed it, and the
// directory perhaps with it): the caller starts over.
// @throws Error if it cannot be opened, or stays locked kLockWaitSeconds.
int lockDirectory(const std::string& dir) {
  const std::string path = dir + "/" + kLockFile;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    throw Error("cannot open the rendezvous lock '" + path + "': " + errnoText(errno));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLockWaitSeconds);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) {
      ::close(fd);
      throw Error("cannot lock the rendezvous lock '" + path + "': " + errnoText(err));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      throw Error("the rendezvous lock '" + path + "' stayed taken for " +
                  std::to_string(static_cast<int>(kLockWaitSeconds)) +
                  " s (a process stopped while holding it?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  struct stat held {
  }, named{};
  if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &named) != 0 || held.st_ino != named.st_ino ||
      held.st_dev != named.st_dev) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Drops the holder files of processes that have ended; returns how many
// holders are left. Caller holds the lock.
std::size_t pruneHolders(const std::string& dir) {
  std::size_t left = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kHolderPrefix, 0) != 0) continue;
    const auto text = detail::readFileHead(entry.path().string(), 4096);
    if (!text) continue;  // removed meanwhile
    if (holderEnded(*text))
      fs::remove(entry.path(), ec);
    else
      ++left;
  }
  return left;
}

// Removes every key (and value being written); returns how many files. Caller
// holds the lock and has found no holder left.
std::size_t clearKeys(const std::string& dir) {
  std::vector<fs::path> keys;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() && name[0] == kKeyPrefix) keys.push_back(entry.path());
  }
  std::size_t removed = 0;
  for (const auto& k : keys) removed += fs::remove(k, ec) ? 1 : 0;
  return removed;
}

// mkdir(dir, 0700), making its parents first if missing. Returns whether it
// made `dir` (false: it exists).
bool makeDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0) return true;
  int err = errno;
  if (err == ENOENT) {
    std::error_code ec;
    fs::create_directories(fs::path(dir).parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) == 0) return true;
    err = errno;
  }
  if (err == EEXIST) return false;
  throw Error("cannot create store directory '" + dir + "': " + errnoText(err));
}

// Refuses a directory that is not this user's alone to write.
void checkDirectory(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw Error("cannot open store directory '" + dir + "': " + errnoText(errno));
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

// Writes `text` to a new file `path` (mode 0600). @throws Error.
void writeNewFile(const std::string& path, const std::string& text, int flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | flags, 0600);
  if (fd < 0) throw Error("cannot write store file '" + path + "': " + errnoText(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(path.c_str());
      throw Error("cannot write store file '" + path + "': " + errnoText(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    throw Error("cannot write store file '" + path + "': " + errnoText(err));
  }
}

// Writes `value` to a file beside `path` of this process and thread alone
// (`kind`: "tmp", "claim"), and returns its name.
std::string writeBeside(const std::string& path, const char* kind, const std::string& value) {
  std::ostringstream name;
  name << path << '~' << kind << '.' << ::getpid() << '.' << std::this_thread::get_id();
  writeNewFile(name.str(), value, O_TRUNC);
  return name.str();
}

std::string withoutTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

std::string FileStore::fileOf(const std::string& dir, const std::string& key) {
  checkStoreKey(key);
  std::string flat = key;
  std::replace(flat.begin(), flat.end(), '/', '%');
  return withoutTrailingSlashes(dir) + "/" + kKeyPrefix + flat;
}

FileStore::FileStore(std::string dir) : dir_(withoutTrailingSlashes(std::move(dir))), owner_(::getpid()) {
  GOSSAMER_ENFORCE(!dir_.empty(), "empty store directory");
  const auto self = detail::readProcessStat(::getpid());
  if (!self) throw Error("store directory '" + dir_ + "': cannot read /proc/self/stat");
  for (int attempt = 0;; ++attempt) {
    const bool created = makeDirectory(dir_);
    checkDirectory(dir_);
    const int fd = lockDirectory(dir_);
    if (fd < 0) {  // its last holder was removing it: start over
      if (attempt < 100) continue;
      throw Error("store directory '" + dir_ + "' keeps being removed while it is opened");
    }
    const HeldLock lock(fd);
    if (created) writeNewFile(dir_ + "/" + kCreatedFile, "", O_TRUNC);
    if (pruneHolders(dir_) == 0) {
      if (const std::size_t n = clearKeys(dir_); n > 0)
        GOSSAMER_LOG(kWarning, "store directory " << dir_ << ": removed " << n
                                                  << " key file(s) left by processes that have ended "
                                                     "(a job that was killed, or stopped without closing)");
    }
    std::random_device random;
    std::ostringstream name;
    name << dir_ << '/' << kHolderPrefix << std::hex << random() << random();
    writeNewFile(name.str(), holderText(owner_, self->startTime), O_EXCL);
    holder_ = name.str();
    return;
  }
}

FileStore::~FileStore() {
  if (holder_.empty() || owner_ != static_cast<long>(::getpid())) return;
  try {
    const int fd = lockDirectory(dir_);
    if (fd < 0) return;  // the directory is gone, and this holder with it
    const HeldLock lock(fd);
    ::unlink(holder_.c_str());
    if (pruneHolders(dir_) > 0) return;
    clearKeys(dir_);
    const std::string created = dir_ + "/" + kCreatedFile;
    if (::unlink(created.c_str()) == 0) {
      // Removed while still locked: a process opening the directory now finds
      // its lock file gone or replaced and starts over.
      ::unlink((dir_ + "/" + kLockFile).c_str());
      ::rmdir(dir_.c_str());  // fails, harmlessly, if anything else is in it
    }
  } catch (...) {  // a destructor does not throw: the next FileStore prunes this holder
  }
}

void FileStore::set(const std::string& key, const std::string& value) {
  const std::string path = pathOf(key);
  const std::string tmp = writeBeside(path, "tmp", value);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    throw Error("cannot publish store key '" + key + "' in '" + dir_ + "': " + why);
  }
}

bool FileStore::claim(const std::string& key, const std::string& value) {
  const std::string path = pathOf(key);
  const std::string tmp = writeBeside(path, "claim", value);
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  std::error_code ec;
  fs::remove(tmp, ec);
  if (rc == 0) return true;
  if (err == EEXIST) return false;
  throw Error("cannot claim store key '" + key + "' in '" + dir_ + "': " + errnoText(err));
}

std::optional<std::string> FileStore::tryGet(const std::string& key) {
  std::ifstream in(pathOf(key), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gossamer
