#include "gossamer/store.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "gossamer/errors.hpp"

namespace gossamer {

namespace fs = std::filesystem;

void checkStoreKey(const std::string& key) {
  GOSSAMER_ENFORCE(!key.empty() && key.size() <= 200, "store key must have 1..200 characters");
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-' || c == '/';
    GOSSAMER_ENFORCE(ok, "store key '" << key << "' has a character outside [A-Za-z0-9._/-]");
  }
  GOSSAMER_ENFORCE(key.find("..") == std::string::npos, "store key '" << key << "' contains '..'");
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
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeoutSeconds));
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
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!kv_.emplace(key, value).second) return false;
  }
  cv_.notify_all();
  return true;
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  checkStoreKey(key);
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

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw Error("cannot create store directory '" + dir_ + "': " + ec.message());
}

std::string FileStore::pathOf(const std::string& key) const {
  std::string flat = key;
  std::replace(flat.begin(), flat.end(), '/', '%');
  return dir_ + "/" + flat;
}

namespace {
// Writes `value` to a file beside `path` of this process and thread alone
// (`kind`: "tmp", "claim"), and returns its name.
std::string writeBeside(const std::string& path, const char* kind, const std::string& value) {
  std::ostringstream name;
  name << path << '.' << kind << '.' << ::getpid() << '.' << std::this_thread::get_id();
  std::ofstream out(name.str(), std::ios::binary | std::ios::trunc);
  out.write(value.data(), static_cast<std::streamsize>(value.size()));
  if (!out) throw Error("cannot write store file '" + name.str() + "'");
  return name.str();
}
}  // namespace

void FileStore::set(const std::string& key, const std::string& value) {
  checkStoreKey(key);
  const std::string path = pathOf(key);
  const std::string tmp = writeBeside(path, "tmp", value);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error("cannot publish store key '" + key + "' in '" + dir_ + "': " + ec.message());
}

bool FileStore::claim(const std::string& key, const std::string& value) {
  checkStoreKey(key);
  const std::string path = pathOf(key);
  const std::string tmp = writeBeside(path, "claim", value);
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  std::error_code ec;
  fs::remove(tmp, ec);
  if (rc == 0) return true;
  if (err == EEXIST) return false;
  throw Error("cannot claim store key '" + key + "' in '" + dir_ + "': " + std::strerror(err));
}

std::optional<std::string> FileStore::tryGet(const std::string& key) {
  checkStoreKey(key);
  std::ifstream in(pathOf(key), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
