// The Store interface's waits, MemoryStore and PrefixedStore (gossamer/store.hpp);
// FileStore is in file_store.cpp.
#include "gossamer/store.hpp"

#include <chrono>
#include <thread>

#include "gossamer/errors.hpp"
#include "gossamer/kit/clock.hpp"

namespace gossamer {

void checkStoreKey(const std::string& key) {
  GOSSAMER_ENFORCE(!key.empty() && key.size() <= 200, "store key must have 1..200 characters");
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-' || c == '/';
    GOSSAMER_ENFORCE(ok, "store key '" << key << "' has a character outside [A-Za-z0-9._/-]");
  }
  GOSSAMER_ENFORCE(key.find("..") == std::string::npos, "store key '" << key << "' contains '..'");
}

void checkStoreValue(const std::string& key, const std::string& value) {
  if (value.size() > kMaxStoreValueBytes)
    throw InvalidArgument("store key '" + key + "': a value of " + std::to_string(value.size()) +
                          " bytes, above the store's " + std::to_string(kMaxStoreValueBytes) + " bytes");
}

void Store::idle(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

std::string Store::get(const std::string& key, double timeoutSeconds) {
  const std::string keys[] = {key};
  wait(keys, timeoutSeconds);
  auto v = tryGet(key);
  if (!v) throw TimeoutError("store key '" + key + "' vanished");
  return *v;
}

void Store::wait(std::span<const std::string> keys, double timeoutSeconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = deadlineAfter<Clock>(timeoutSeconds);  // saturating: 1e9 s or more waits for good
  double pause = 0.0005;
  std::vector<std::string> missing(keys.begin(), keys.end());
  for (;;) {
    std::erase_if(missing, [&](const std::string& k) { return tryGet(k).has_value(); });
    if (missing.empty()) return;
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) {
      std::string names;
      for (const auto& k : missing) names += (names.empty() ? "" : ", ") + k;
      throw TimeoutError("timed out after " + std::to_string(timeoutSeconds) +
                         " s waiting for store key(s): " + names);
    }
    idle(std::min(pause, left));
    pause = std::min(pause * 2, 0.02);
  }
}

bool Store::claim(const std::string& key, const std::string&) {
  checkStoreKey(key);
  throw InvalidArgument("this rendezvous store cannot claim a key ('" + key + "')");
}

bool MemoryStore::claim(const std::string& key, const std::string& value) {
  checkStoreKey(key);
  checkStoreValue(key, value);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!kv_.emplace(key, value).second) return false;
  }
  cv_.notify_all();
  return true;
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  checkStoreKey(key);
  checkStoreValue(key, value);
  {
    std::lock_guard<std::mutex> lk(mu_);
    kv_[key] = value;
  }
  cv_.notify_all();
}

std::optional<std::string> MemoryStore::tryGet(const std::string& key) {
  checkStoreKey(key);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

void MemoryStore::idle(double seconds) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::duration<double>(seconds));
}

PrefixedStore::PrefixedStore(Store& inner, std::string prefix) : inner_(inner), prefix_(std::move(prefix)) {
  checkStoreKey(prefix_ + "x");
}

void PrefixedStore::set(const std::string& key, const std::string& value) {
  inner_.set(prefix_ + key, value);
}

std::optional<std::string> PrefixedStore::tryGet(const std::string& key) {
  return inner_.tryGet(prefix_ + key);
}

bool PrefixedStore::claim(const std::string& key, const std::string& value) {
  return inner_.claim(prefix_ + key, value);
}

}  // namespace gossamer
