#pragma once
/// \file restore_stream.h
/// \brief The session's end of a streamed restore (local_proto/stream.h): a RestoreSink that
/// opens a data socket to the trainer, tells it where each buffer lies (kRestoreStream), and
/// writes verified records to it.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/messages.h"
#include "reft/mutex.h"
#include "reft/unique_fd.h"

namespace reft::local {

class RestoreStream : public RestoreSink {
 public:
  /// Sends the kRestoreStream frame (payload, the client's end of the data socket).
  using SendFrame = std::function<Status(const std::vector<uint8_t>& payload, int fd)>;
  /// Where the staged buffers lie for a state laid out as `offsets` (RestoreDeliverer).
  using PlaceBuffers = std::function<Result<std::vector<local_proto::Placement>>(
      const std::map<std::string, uint64_t>& offsets)>;

  /// `timeout_ms`: how long a write waits for a trainer that stopped reading.
  RestoreStream(SendFrame send, PlaceBuffers place, int timeout_ms)
      : send_(std::move(send)), place_(std::move(place)), timeout_ms_(timeout_ms) {}

  bool Available() const override;
  Status Begin(const std::map<std::string, uint64_t>& offsets, uint64_t size) override;
  Status Write(uint64_t offset, const uint8_t* data, uint64_t size) override;
  void End(bool complete) override;

 private:
  const SendFrame send_;
  const PlaceBuffers place_;
  const int timeout_ms_;
  mutable Mutex mu_;
  bool begun_ REFT_GUARDED_BY(mu_) = false;
  UniqueFd sock_ REFT_GUARDED_BY(mu_);  // reftd's end of the data socket while open
  Status error_ REFT_GUARDED_BY(mu_);   // the first failed write
};

}  // namespace reft::local
