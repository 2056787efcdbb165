// Private helpers of the libfabric transport: RAII handles for libfabric
// objects, error checking, and provider selection. Not installed.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <memory>
#include <string>

#include "gossamer/transports/libfabric.hpp"

namespace gossamer::libfabric::detail {

/// Closes a libfabric object (anything with a `fid` member) when it goes away.
struct FidCloser {
  template <typename T>
  void operator()(T* object) const noexcept {
    if (object) fi_close(&object->fid);
  }
};
template <typename T>
using FidPtr = std::unique_ptr<T, FidCloser>;

/// The five functions of libfabric's library that the transport calls (the
/// rest of libfabric's API is inline functions of its headers, calling through
/// the objects' ops tables), resolved from libfabric.so.1 with dlopen on first
/// use. Loading libfabric costs a process about 0.2 s (its PSM provider
/// library calibrates a clock with 600 short sleeps when it is loaded), so
/// gossamer links it only into the processes that use this transport.
struct Api {
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;
  decltype(&::fi_fabric) fabric = nullptr;
  decltype(&::fi_strerror) strerror = nullptr;
};

/// libfabric's functions, loaded by the first call (thread-safe).
/// @throws Error when libfabric.so.1 cannot be loaded (naming dlopen's reason)
///   or lacks one of the functions; a later call tries again.
const Api& api();

struct InfoDeleter {
  void operator()(fi_info* info) const noexcept {
    if (info) api().freeinfo(info);  // an fi_info exists only once api() loaded
  }
};
/// An fi_info list (from fi_getinfo or fi_allocinfo).
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

/// libfabric's message for a negative return code.
std::string errorText(long rc);

/// Throws Error("libfabric <what>: <message> (<rc>)") when rc < 0.
void check(long rc, const char* what);

/// The fi_info of the first (preferred) reliable-datagram tagged endpoint of
/// `options.provider`, bound to `options.host` for IP-based providers. For
/// shm the source address is a name of our own, `<kShmNamePrefix><pid>-<64
/// random bits>`, from which the provider names the endpoint's file in
/// /dev/shm. Its default name, the process id alone, collides with the file a
/// killed process of the same id left behind (pids are reused), and fi_enable
/// then fails with EBUSY.
/// @throws ProviderNotFound listing the providers that are available.
InfoPtr selectProvider(const Options& options);

/// Prefix of the shm endpoint names selectProvider makes.
inline constexpr const char* kShmNamePrefix = "gossamer-";

/// Removes the /dev/shm files of shm endpoints (names `<kShmNamePrefix><pid>-
/// ...`) whose process no longer exists: a process killed before it closed its
/// endpoints leaves one (16 MiB) behind. A file whose process id is in use is
/// kept, even if the id was reused. Never throws; returns how many it removed.
/// `dir` is the directory to sweep (tests use another one).
std::size_t removeStaleShmFiles(const std::string& dir = "/dev/shm");

/// True for providers whose addresses are IP socket addresses (tcp, verbs,
/// net, sockets, udp, psm3), for which `host` is the source address.
bool usesIpAddresses(const std::string& provider);

}  // namespace gossamer::libfabric::detail
