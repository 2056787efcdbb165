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

struct InfoDeleter {
  void operator()(fi_info* info) const noexcept { fi_freeinfo(info); }
};
/// An fi_info list (from fi_getinfo or fi_allocinfo).
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

/// libfabric's message for a negative return code.
std::string errorText(long rc);

/// Throws Error("libfabric <what>: <message> (<rc>)") when rc < 0.
void check(long rc, const char* what);

/// The fi_info of the first (preferred) reliable-datagram tagged endpoint of
/// `options.provider`, bound to `options.host` for IP-based providers.
/// @throws ProviderNotFound listing the providers that are available.
InfoPtr selectProvider(const Options& options);

/// True for providers whose addresses are IP socket addresses (tcp, verbs,
/// net, sockets, udp, psm3), for which `host` is the source address.
bool usesIpAddresses(const std::string& provider);

}  // namespace gossamer::libfabric::detail
