// libfabric's library functions, resolved from libfabric.so.1 on first use
// (see fabric.hpp: Api). Everything else the transport calls is an inline
// function of libfabric's headers that calls through the objects' ops tables.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "fabric.hpp"
#include "gossamer/errors.hpp"

namespace gossamer::libfabric::detail {

namespace {

/// Soname of the libfabric we were built against (libfabric's ABI 1).
constexpr const char* kLibrary = "libfabric.so.1";

template <typename F>
void resolve(void* library, const char* name, F*& out) {
  void* symbol = ::dlsym(library, name);
  if (!symbol)
    throw Error(std::string("libfabric: ") + kLibrary + " has no function " + name +
                " (the libfabric transport needs libfabric 1.9 or later)");
  out = reinterpret_cast<F*>(symbol);
}

Api load() {
  // Never closed: providers and endpoints may outlive any one transport.
  void* library = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = ::dlerror();
    throw Error(std::string("libfabric: cannot load ") + kLibrary + ": " + (why ? why : "unknown error") +
                " (Debian: apt-get install libfabric1)");
  }
  Api a{};
  resolve(library, "fi_getinfo", a.getinfo);
  resolve(library, "fi_freeinfo", a.freeinfo);
  resolve(library, "fi_dupinfo", a.dupinfo);
  resolve(library, "fi_fabric", a.fabric);
  resolve(library, "fi_strerror", a.strerror);
  return a;
}

}  // namespace

const Api& api() {
  // Loaded once; a failed load is retried by the next call (std::call_once
  // runs the function again after it threw).
  static std::once_flag once;
  static Api loaded{};
  std::call_once(once, [] { loaded = load(); });
  return loaded;
}

}  // namespace gossamer::libfabric::detail
