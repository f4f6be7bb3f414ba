#include "net/frames.hpp"

#include <algorithm>

namespace herd::net {

zmq::message_t zero_copy(const PayloadPtr& payload, std::size_t offset, std::size_t size) {
  size = std::min(size, payload->size() - offset);
  auto* hold = new PayloadPtr(payload);
  return zmq::message_t(const_cast<char*>(payload->data() + offset), size,
                        [](void*, void* hint) { delete static_cast<PayloadPtr*>(hint); }, hold);
}

}  // namespace herd::net
