// The rendezvous server's reading of a request (store_request.hpp).
#include "store_request.hpp"

#include "gossamer/errors.hpp"
#include "gossamer/store.hpp"

namespace gossamer::zmq::store_wire {

std::size_t storeEnvelopeFrames(std::span<const std::string_view> frames) noexcept {
  std::size_t delim = 0;
  while (delim < frames.size() && !frames[delim].empty()) ++delim;
  if (delim == 0 || delim >= frames.size()) return 0;
  return delim + 1;
}

StoreRequest parseStoreRequest(std::span<const std::string_view> body) {
  const std::size_t n = body.size();
  if (n < 2) throw InvalidArgument("malformed request");
  StoreRequest r;
  const std::string_view op = body[0];
  r.key = std::string(body[1]);
  checkStoreKey(r.key);
  if ((op == "set" || op == "claim") && n == 3) {
    GOSSAMER_ENFORCE(body[2].size() <= kMaxStoreValueBytes, "value larger than 1 MiB");
    r.op = op == "set" ? StoreRequest::Op::kSet : StoreRequest::Op::kClaim;
    r.value = std::string(body[2]);
  } else if (op == "get" && n == 2) {
    r.op = StoreRequest::Op::kGet;
  } else {
    throw InvalidArgument("unknown operation");
  }
  return r;
}

}  // namespace gossamer::zmq::store_wire
