#pragma once
/// \file channel.h
/// \brief The client end of the local channel: strictly one request then its reply, serialised
/// by a mutex so the copy worker and the trainer thread can share one connection.

#include <mutex>
#include <string>
#include <vector>

#include "reft/local_proto/messages.h"
#include "reft/local_proto/socket.h"

namespace reft::client {

class Channel {
 public:
  Channel(UniqueFd sock, int timeout_ms) : sock_(std::move(sock)), timeout_ms_(timeout_ms) {}
  /// \brief Sends a request and returns the reply frame of type `expect`; an error reply
  /// becomes its Status; any other reply is a Protocol error.
  Result<local_proto::Frame> Call(local_proto::MessageType type,
                                  const std::vector<uint8_t>& payload,
                                  local_proto::MessageType expect,
                                  const std::vector<int>& fds = {});
  void Close();

 private:
  std::mutex mu_;
  UniqueFd sock_;
  int timeout_ms_;
  uint32_t next_id_ = 1;
  local_proto::Limits limits_;
};

}  // namespace reft::client
