#pragma once
/// \file restore_stream.h
/// \brief The session's end of a streamed restore (local_proto/stream.h): a RestoreSink that
/// opens a data socket and a ring to the trainer, tells it where each buffer lies
/// (kRestoreStream), lends ring slots to the fetch workers and posts each verified piece as a
/// record the trainer copies out of the ring and acknowledges.

#include <condition_variable>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reft/local/recovery_hooks.h"
#include "reft/local_proto/messages.h"
#include "reft/mapped_memfd.h"
#include "reft/mutex.h"
#include "reft/unique_fd.h"
#include "stream_rings.h"

namespace reft::local {

class RestoreStream : public RestoreSink {
 public:
  /// Sends the kRestoreStream frame (payload; fds: the client's end of the data socket, the ring).
  using SendFrame = std::function<Status(const std::vector<uint8_t>& payload, std::vector<int> fds)>;
  /// Where the staged buffers lie for a state laid out as `offsets` (RestoreDeliverer).
  using PlaceBuffers = std::function<Result<std::vector<local_proto::Placement>>(
      const std::map<std::string, uint64_t>& offsets)>;

  /// `timeout_ms`: how long a write, or a wait for ring room, waits for a trainer that stopped
  /// reading. The ring comes from `rings` (a new one without) as `owner`'s.
  RestoreStream(SendFrame send, PlaceBuffers place, int timeout_ms, StreamRings* rings,
                uid_t owner)
      : send_(std::move(send)),
        place_(std::move(place)),
        timeout_ms_(timeout_ms),
        rings_(rings),
        owner_(owner) {}
  /// Waits (at most a second each) for the trainer to acknowledge the last pieces, then gives
  /// the ring back to `rings` (a ring with pieces still out is freed instead).
  ~RestoreStream() override;

  bool Available() const override;
  /// Takes a ring of StreamRingBytes(piece_bytes, in_flight): a slot per fetch worker and two
  /// the trainer copies out of.
  Status Begin(const std::map<std::string, uint64_t>& offsets, uint64_t size,
               uint64_t piece_bytes, int in_flight) override;
  Result<uint8_t*> Borrow(uint64_t size) override;
  void GiveBack(uint8_t* memory) override;
  Status Write(uint64_t offset, const uint8_t* data, uint64_t size) override;
  void End(bool complete) override;

 private:
  // A ring slot is free when neither a fetch worker (borrowed) nor the trainer (posted, until
  // it acknowledges) holds it.
  struct Slot {
    bool borrowed = false;
    bool posted = false;
  };
  int SlotAt(const uint8_t* p) const REFT_REQUIRES(mu_);
  Status Post(int slot, uint64_t offset, uint64_t size) REFT_REQUIRES(mu_);
  Status CopyIn(uint64_t offset, const uint8_t* data, uint64_t size);
  // Frees the slot the trainer acknowledged; Protocol when no piece it was sent lies there.
  Status TakeAck(uint64_t ring_offset) REFT_REQUIRES(mu_);

  const SendFrame send_;
  const PlaceBuffers place_;
  const int timeout_ms_;
  StreamRings* const rings_;
  const uid_t owner_;
  mutable Mutex mu_;
  std::condition_variable room_;  // a slot was freed, or the ack reader finished
  bool begun_ REFT_GUARDED_BY(mu_) = false;
  UniqueFd sock_ REFT_GUARDED_BY(mu_);  // reftd's end of the data socket
  bool ended_ REFT_GUARDED_BY(mu_) = false;  // End(): no more records (acks may still come)
  Status error_ REFT_GUARDED_BY(mu_);   // the first failure: every later call returns it
  MappedMemfd ring_ REFT_GUARDED_BY(mu_);
  uint64_t slot_bytes_ REFT_GUARDED_BY(mu_) = 0;
  std::vector<Slot> slots_ REFT_GUARDED_BY(mu_);
  bool reading_ack_ REFT_GUARDED_BY(mu_) = false;
};

}  // namespace reft::local
