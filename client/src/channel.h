#pragma once
/// \file channel.h
/// \brief The client end of the local channel: strictly one request then its reply, serialised
/// by a mutex so the copy worker and the trainer thread can share one connection.

#include <functional>
#include <string>
#include <vector>

#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"
#include "reft/mutex.h"

namespace reft::client {

class Channel {
 public:
  Channel(UniqueFd sock, int timeout_ms) : sock_(std::move(sock)), timeout_ms_(timeout_ms) {}
  /// A frame the daemon may send before the reply (kRestoreStream), handled as it comes.
  struct Interim {
    local_proto::MessageType type;
    std::function<Status(local_proto::Frame&)> handle;
  };

  /// \brief Sends a request and returns the reply frame of type `expect`; an error reply
  /// becomes its Status; any other reply is a Protocol error, except frames of `interim`'s
  /// type, which go to its handler (an error there is returned; the reply is then skipped
  /// when it comes, as a late one).
  Result<local_proto::Frame> Call(local_proto::MessageType type,
                                  const std::vector<uint8_t>& payload,
                                  local_proto::MessageType expect,
                                  const std::vector<int>& fds = {},
                                  const Interim* interim = nullptr);
  void Close();

 private:
  /// An error reply as its Status; one of another protocol version (a reftd of another release)
  /// becomes a Protocol error naming both versions.
  Status ErrorOf(const local_proto::Frame& frame) const;

  Mutex mu_;
  UniqueFd sock_ REFT_GUARDED_BY(mu_);
  const int timeout_ms_;
  uint32_t next_id_ REFT_GUARDED_BY(mu_) = 1;
  const local_proto::Limits limits_;
};

}  // namespace reft::client
