// Rendezvous key-value stores, separate from the data path: peers publish
// their endpoints and wait for each other's.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gossamer {

/// Rendezvous store. Keys are non-empty strings of [A-Za-z0-9._/-]; values are
/// arbitrary bytes. Thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  /// Sets `key` to `value` (overwrites). @throws InvalidArgument for a bad key.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// Returns the value if the key is set, without waiting.
  virtual std::optional<std::string> tryGet(const std::string& key) = 0;
  /// Sets `key` to `value` only if it is not set yet, atomically: of
  /// processes that claim one key at once, exactly one gets true (a rank
  /// that joins a running job claims its rank this way).
  /// @throws InvalidArgument for a bad key, or from a store that cannot
  ///         claim (the default).
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
class FileStore final : public Store {
 public:
  /// @param dir directory; created if missing. @throws Error if it cannot be.
  explicit FileStore(std::string dir);
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> tryGet(const std::string& key) override;
  /// A hard link of a temp file to the key's file: link(2) fails if it exists.
  /// @throws Error if the directory cannot be written.
  bool claim(const std::string& key, const std::string& value) override;
  const std::string& dir() const noexcept { return dir_; }

 private:
  std::string pathOf(const std::string& key) const;
  std::string dir_;
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

}  // namespace gossamer
