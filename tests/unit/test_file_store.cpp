// FileStore's directory across jobs: the last holder clears it, keys left by
// processes that ended are removed when it is opened again, a live holder's
// are kept, files that are not keys are never touched, and a directory other
// users could write or own is refused.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"
#include "log_capture.hpp"
#include "process.hpp"

namespace fs = std::filesystem;
using gossamer::FileStore;
using gossamer::testing::LogCapture;
using gossamer::testing::TempDir;

namespace {

unsigned modeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777U;
}

// The names in `dir` that start with `prefix`.
std::vector<std::string> namesIn(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

// Reads one byte from `fd` (bounded: the writer is a live child or has closed it).
bool readByte(int fd) {
  char c = 0;
  return ::read(fd, &c, 1) == 1;
}

// A child process holding a FileStore on `dir` with `key` set to "child";
// it ends with _exit (no destructor runs: as if killed) when told to.
class Holder {
 public:
  Holder(const std::string& dir, const std::string& key) {
    REQUIRE(::pipe(ready_) == 0);
    REQUIRE(::pipe(go_) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(ready_[0]);
      ::close(go_[1]);
      try {
        FileStore store(dir);
        store.set(key, "child");
        (void)!::write(ready_[1], "r", 1);
        readByte(go_[0]);  // until told, or the parent ends
        ::_exit(0);        // FileStore's destructor does not run: the holder stays behind
      } catch (...) {
      }
      ::_exit(1);
    }
    ::close(ready_[1]);
    ::close(go_[0]);
    REQUIRE(readByte(ready_[0]));
  }
  ~Holder() {
    if (pid_ > 0) {
      end();
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(ready_[0]);
  }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  // Lets the child exit and waits until it has, leaving it a zombie (unreaped).
  void end() {
    if (go_[1] < 0) return;
    ::close(go_[1]);
    go_[1] = -1;
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT);
  }
  void reap() {
    end();
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int ready_[2] = {-1, -1};
  int go_[2] = {-1, -1};
};

}  // namespace

TEST_CASE("a FileStore directory loses its keys with its last holder and goes if a FileStore made it",
          "[store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/deep/rdv";
  std::optional<FileStore> a(std::in_place, dir);
  std::optional<FileStore> b(std::in_place, dir + "/");  // the same directory
  CHECK(b->dir() == dir);
  a->set("job/endpoint", "tcp://127.0.0.1:1");
  CHECK(modeOf(dir) == 0700U);
  CHECK(modeOf(FileStore::fileOf(dir, "job/endpoint")) == 0600U);
  CHECK(FileStore::fileOf(dir, "job/endpoint") == dir + "/@job%endpoint");
  a.reset();
  CHECK(b->tryGet("job/endpoint") == "tcp://127.0.0.1:1");  // b still holds the directory
  b.reset();
  CHECK_FALSE(fs::exists(dir));
  CHECK(fs::is_directory(tmp.path() + "/deep"));  // made as a parent, not the store's
  FileStore next(dir);
  CHECK_FALSE(next.tryGet("job/endpoint").has_value());
}

TEST_CASE("a FileStore leaves the files that are not keys and a directory it did not make", "[store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/rdv";
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  gossamer::testing::writeFile(dir + "/notes.txt", "mine");
  {
    FileStore s(dir);
    s.set("a", "1");
    CHECK(s.claim("b", "2"));
    CHECK(modeOf(dir) == 0755U);
  }
  CHECK(gossamer::testing::readFile(dir + "/notes.txt") == "mine");
  CHECK(namesIn(dir, "@").empty());
  CHECK(namesIn(dir, "+holder.").empty());
}

TEST_CASE("keys of a FileStore whose process ended are removed when the directory is opened again",
          "[store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/rdv";
  Holder child(dir, "job/stale");
  {
    // Alive: its key is the job's.
    FileStore alive(dir);
    CHECK(alive.tryGet("job/stale") == "child");
  }
  CHECK(namesIn(dir, "+holder.").size() == 1);  // the child's: letting go of ours cleared nothing
  child.end();                                  // exited without letting go: a zombie now
  {
    LogCapture log;
    FileStore after(dir);
    CHECK_FALSE(after.tryGet("job/stale").has_value());
    bool warned = false;
    for (const auto& [level, line] : log.lines())
      warned =
          warned || line.find("removed 1 key file(s) left by processes that have ended") != std::string::npos;
    CHECK(warned);
  }
  child.reap();
  CHECK_FALSE(fs::exists(dir));  // the child made it; the last holder removed it
  // Reaped, its pid gone: the same.
  Holder reaped(dir, "job/gone");
  reaped.reap();
  FileStore again(dir);
  CHECK_FALSE(again.tryGet("job/gone").has_value());
}

TEST_CASE("a live holder keeps its keys while others come and go", "[store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/rdv";
  Holder keeper(dir, "job/key");  // another process: its lock is what keeps it
  std::vector<std::thread> threads;
  std::atomic<int> missing{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        FileStore s(dir);
        s.set("job/t" + std::to_string(t), std::to_string(i));
        if (s.tryGet("job/key") != "child") ++missing;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(missing.load() == 0);
  FileStore last(dir);
  CHECK(last.tryGet("job/t3") == "24");
  CHECK(namesIn(dir, "+holder.").size() == 2);  // the keeper's and last's
}

TEST_CASE("a FileStore refuses a directory other users can write or own", "[store]") {
  TempDir tmp;
  const std::string open = tmp.path() + "/open";
  REQUIRE(::mkdir(open.c_str(), 0700) == 0);
  REQUIRE(::chmod(open.c_str(), 0777) == 0);
  CHECK_THROWS_WITH(FileStore(open), Catch::Contains("writable by every user"));
  CHECK(namesIn(open, "").empty());  // nothing written there
  // Another user's: "/" when not root; as root, a directory given to nobody.
  std::string theirs = "/";
  if (::geteuid() == 0) {
    theirs = tmp.path() + "/theirs";
    REQUIRE(::mkdir(theirs.c_str(), 0755) == 0);
    REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
  }
  CHECK_THROWS_WITH(FileStore(theirs), Catch::Contains("not to this user"));
  const std::string file = tmp.path() + "/file";
  gossamer::testing::writeFile(file, "x");
  CHECK_THROWS_WITH(FileStore(file), Catch::Contains("is not a directory"));
}

TEST_CASE("a FileStore follows a symlink of this user's and refuses one another user owns", "[store]") {
  TempDir tmp;
  const std::string target = tmp.path() + "/target";
  REQUIRE(::mkdir(target.c_str(), 0700) == 0);
  const std::string mine = tmp.path() + "/mine";
  REQUIRE(::symlink(target.c_str(), mine.c_str()) == 0);
  {
    FileStore s(mine);
    s.set("k", "v");
    CHECK(gossamer::testing::readFile(FileStore::fileOf(target, "k")) == "v");
  }
  CHECK(fs::is_symlink(mine));  // neither the link nor the directory it names is removed
  CHECK(fs::is_directory(target));
  // Another user's link could be pointed anywhere after the check: as root, a
  // link given to nobody; otherwise Debian's /lib (root's link to usr/lib).
  std::string theirs = "/lib";
  if (::geteuid() == 0) {
    theirs = tmp.path() + "/theirs";
    REQUIRE(::symlink(target.c_str(), theirs.c_str()) == 0);
    REQUIRE(::lchown(theirs.c_str(), 65534, 65534) == 0);
  }
  REQUIRE(fs::is_symlink(theirs));
  CHECK_THROWS_WITH(FileStore(theirs), Catch::Contains("a symlink that is not this user's"));
}

TEST_CASE("processes opening and leaving one FileStore directory at once never fail and leave nothing",
          "[store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/rdv";
  constexpr int kProcesses = 4;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int failed = 0;
      for (int i = 0; i < 40; ++i) {
        try {
          FileStore s(dir);  // made, or removed by the last one out just before
          s.set("p" + std::to_string(p), std::to_string(i));
          if (s.tryGet("p" + std::to_string(p)) != std::to_string(i)) ++failed;
        } catch (...) {
          ++failed;
        }
      }
      ::_exit(failed == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  int exitedWell = 0;
  for (pid_t pid : children) {
    const auto status = gossamer::testing::waitBounded(pid, 60);
    if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) ++exitedWell;
  }
  CHECK(exitedWell == kProcesses);
  CHECK_FALSE(fs::exists(dir));
}

// The process's descriptors, its holder's locked file among them, live as
// long as any of its threads.
TEST_CASE("a holder whose main thread ended while another runs keeps its keys", "[store]") {
  TempDir tmp;
  const std::string dir = tmp.path() + "/rdv";
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(ready[0]);
    ::close(go[1]);
    std::thread([dir, readyFd = ready[1], goFd = go[0]] {
      try {
        FileStore store(dir);
        store.set("job/k", "alive");
        (void)!::write(readyFd, "r", 1);
        readByte(goFd);
        ::_exit(0);
      } catch (...) {
      }
      ::_exit(1);
    }).detach();
    // Ends the main thread alone, unwinding nothing (pthread_exit would unwind
    // through Catch): /proc shows the process as a zombie ("Z") from here on.
    ::syscall(SYS_exit, 0);
  }
  ::close(ready[1]);
  ::close(go[0]);
  REQUIRE(readByte(ready[0]));
  // Until its main thread is seen to have ended (bounded).
  std::string state;
  for (int i = 0; i < 500 && state != "Z"; ++i) {
    const std::string stat = gossamer::testing::readFile("/proc/" + std::to_string(pid) + "/stat");
    const auto paren = stat.rfind(')');
    state = paren == std::string::npos ? "" : stat.substr(paren + 2, 1);
    if (state != "Z") std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(state == "Z");
  {
    FileStore other(dir);
    CHECK(other.tryGet("job/k") == "alive");
  }
  ::close(go[1]);
  const auto status = gossamer::testing::waitBounded(pid, 30);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 0);
  ::close(ready[0]);
}
