#include "reft/peer/knock.h"

#include <cstdlib>

#include "bulk_wire.h"

namespace reft::peer {

const char* KnockAnswerName(KnockAnswer answer) {
  switch (answer) {
    case KnockAnswer::kRefused:
      return "refused";
    case KnockAnswer::kAccepted:
      return "accepted";
    case KnockAnswer::kNoAnswer:
      return "no answer";
  }
  return "no answer";
}

KnockAnswer Knock(const std::string& address, std::chrono::milliseconds timeout) {
  const std::string host = HostOfTarget(address);
  const auto colon = address.rfind(':');
  if (host.empty() || colon == std::string::npos) return KnockAnswer::kNoAnswer;
  char* end = nullptr;
  const long port = std::strtol(address.c_str() + colon + 1, &end, 10);
  if (end == address.c_str() + colon + 1 || *end != '\0' || port <= 0 || port > 65535) {
    return KnockAnswer::kNoAnswer;
  }
  bool refused = false;
  auto fd = ConnectBulk(host, static_cast<uint16_t>(port),
                        std::chrono::steady_clock::now() + timeout, &refused);
  if (fd.ok()) return KnockAnswer::kAccepted;
  return refused ? KnockAnswer::kRefused : KnockAnswer::kNoAnswer;
}

}  // namespace reft::peer
