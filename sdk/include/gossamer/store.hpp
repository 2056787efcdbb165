// Rendezvous key-value stores, separate from the data path: peers publish
// their endpoints and wait for each other's.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gossamer {

/// Largest value a rendezvous store holds, bytes (1 MiB). Rendezvous values
/// are endpoints, keys and settings; a reader never takes more than this
/// from a value another process wrote.
inline constexpr std::size_t kMaxStoreValueBytes = std::size_t{1} << 20;

/// Rendezvous store. Keys are non-empty strings of [A-Za-z0-9._/-]; values are
/// arbitrary bytes, at most kMaxStoreValueBytes. Thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  /// Sets `key` to `value` (overwrites).
  /// @throws InvalidArgument for a bad key or a value above kMaxStoreValueBytes.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// Returns the value if the key is set, without waiting.
  /// @throws InvalidArgument for a bad key; Error for a value the store
  ///         cannot read (FileStore: a file above kMaxStoreValueBytes).
  virtual std::optional<std::string> tryGet(const std::string& key) = 0;
  /// Sets `key` to `value` only if it is not set yet, atomically: of
  /// processes that claim one key at once, exactly one gets true (a rank
  /// that joins a running job claims its rank this way).
  /// @throws InvalidArgument for a bad key, a value above
  ///         kMaxStoreValueBytes, or from a store that cannot claim (the
  ///         default).
  virtual bool claim(const std::string& key, const std::string& value);
  /// Waits up to `timeoutSeconds` for `key`, then returns its value.
  /// @throws TimeoutError naming the key.
  std::string get(const std::string& key, double timeoutSeconds);
  /// Waits up to `timeoutSeconds` in all for every key.
  /// @throws TimeoutError naming the missing keys.
  void wait(std::span<const std::string> keys, double timeoutSeconds);
  /// This host's IPv4 address on the interface that reaches the store's
  /// server (what `transport.host: auto` binds to), or nullopt for a store
  /// without one (MemoryStore, FileStore: the default).
  /// @throws Error if the server's host cannot be resolved or routed to.
  virtual std::optional<std::string> localAddress() { return std::nullopt; }

 protected:
  /// Blocks until something may have changed or `seconds` passed. The default
  /// sleeps with a short back-off; MemoryStore wakes on set().
  virtual void idle(double seconds);
};

/// In-memory store for peers that are threads of one process.
class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> tryGet(const std::string& key) override;
  bool claim(const std::string& key, const std::string& value) override;

 protected:
  void idle(double seconds) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

/// Store on a shared directory, for processes on one host (or on a shared file
/// system). set() writes a temp file and renames it, so readers never see a
/// partial value.
///
/// A directory outlives the job that used it, so each FileStore is a holder
/// of it for its lifetime: a file "+holder.*" that it keeps flock()ed, a lock
/// the kernel drops when the process ends, however it ends. Holders come and
/// go under flock(2) on "+lock":
/// - the last holder to go removes the keys, and the directory itself when a
///   FileStore created it and nothing else was put in it, so a directory
///   given to the next job (the same --rendezvous, or a launcher's job id
///   reused) holds none of this job's endpoints, job key or run directory;
/// - holders under this host's running kernel whose lock can be taken have
///   ended and are dropped when a FileStore opens the directory, and if none
///   is left, the keys they left are removed first. A holder on another host
///   of a shared file system (whose locks may be per host), or on a file
///   system without locks, counts as alive: keys left by a job killed there
///   stay until the directory is removed.
/// Keys live in files "@<key, '/' as '%'>" (mode 0600), apart from anything
/// else in the directory, which is never touched. A directory created here
/// has mode 0700; one that exists must belong to this user and not be
/// writable by others (anyone who can write it can plant endpoints and the
/// job key; anyone who can read its keys can join the job). It is opened
/// once, not following a symlink that is not this user's, and every file is
/// reached through that descriptor, so the path cannot be pointed elsewhere
/// afterwards.
class FileStore final : public Store {
 public:
  /// @param dir directory; created (mode 0700, parents as the umask says)
  ///        if missing.
  /// @throws Error if it cannot be created or written, is not a directory,
  ///         belongs to another user or is writable by others, is named by
  ///         a symlink another user owns, or its lock stays taken for 30 s.
  explicit FileStore(std::string dir);
  /// Lets go of the directory (see the class); never throws. A copy of the
  /// object in a forked child lets go of nothing (and a child forked without
  /// exec keeps the holder's lock, so the holder counts as alive, until it
  /// ends).
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;
  /// Writes "@<key>~tmp.*" and renames it to the key's file.
  /// @throws InvalidArgument for a bad key; Error if the directory cannot be
  ///         written.
  void set(const std::string& key, const std::string& value) override;
  /// nullopt when the key's file does not exist.
  /// @throws InvalidArgument for a bad key; Error if the file exists but
  ///         cannot be read.
  std::optional<std::string> tryGet(const std::string& key) override;
  /// A hard link of a temp file to the key's file: link(2) fails if it exists.
  /// @throws Error if the directory cannot be written.
  bool claim(const std::string& key, const std::string& value) override;
  const std::string& dir() const noexcept { return dir_; }
  /// The file in `dir` that holds `key`'s value (for tools and tests that
  /// watch a rendezvous from outside). @throws InvalidArgument for a bad key.
  static std::string fileOf(const std::string& dir, const std::string& key);

 private:
  std::string dir_;
  std::string base_;    // dir_'s last component, in parentFd_
  int parentFd_ = -1;   // the directory holding dir_ (-1: dir_ is "/"), to remove it
  int dirFd_ = -1;      // dir_ itself: every file is opened at it
  int holderFd_ = -1;   // holder_, flock()ed while this store lives
  std::string holder_;  // this store's holder file's name; empty once let go of
  long owner_ = 0;      // the pid that made it: a forked child's copy lets go of nothing
};

/// Another store's keys under `prefix`: a view for a component that runs its
/// own rendezvous inside a job's (the composite transport's inner
/// transports). Does not own `inner`, which must outlive it.
class PrefixedStore final : public Store {
 public:
  /// @param prefix prepended to every key, e.g. "composite/local/0/".
  /// @throws InvalidArgument if prefix + "x" is not a valid key.
  PrefixedStore(Store& inner, std::string prefix);
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> tryGet(const std::string& key) override;
  bool claim(const std::string& key, const std::string& value) override;
  /// The inner store's.
  std::optional<std::string> localAddress() override { return inner_.localAddress(); }

 private:
  Store& inner_;
  std::string prefix_;
};

/// Validates a store key. @throws InvalidArgument.
void checkStoreKey(const std::string& key);

/// Validates a value a store is given to hold: at most kMaxStoreValueBytes.
/// @throws InvalidArgument naming `key` and the size.
void checkStoreValue(const std::string& key, const std::string& value);

}  // namespace gossamer
