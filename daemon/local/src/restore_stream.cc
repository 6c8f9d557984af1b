/// \file restore_stream.cc
#include "restore_stream.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "reft/local/local_server.h"
#include "reft/local_proto/stream.h"

namespace reft::local {

bool RestoreStream::Available() const {
  MutexLock lock(mu_);
  return !begun_;
}

Status RestoreStream::Begin(const std::map<std::string, uint64_t>& offsets, uint64_t size,
                            uint64_t piece_bytes, int in_flight) {
  MutexLock lock(mu_);
  if (begun_) return Status::Internal("a restore stream is opened once");
  begun_ = true;
  REFT_ASSIGN_OR_RETURN(std::vector<local_proto::Placement> placed, place_(offsets));
  const uint64_t want = StreamRingBytes(piece_bytes, in_flight);
  const uint64_t slot_bytes = StreamRingSlotBytes(piece_bytes);
  REFT_ASSIGN_OR_RETURN(MappedMemfd ring, rings_ != nullptr ? rings_->Take(owner_, want)
                                                            : StreamRings::Create(want));
  const size_t slots = static_cast<size_t>(ring.size() / slot_bytes);  // a kept ring may be larger
  local_proto::SlotReply frame;
  frame.file_size = size;
  frame.staged = std::move(placed);
  REFT_ASSIGN_OR_RETURN(auto pair, local_proto::StreamSocketPair());
  REFT_RETURN_NOT_OK(send_(local_proto::Encode(frame), {pair.second.get(), ring.fd()}));
  sock_ = std::move(pair.first);  // the client's end was passed and is closed here
  ring_ = std::move(ring);
  slot_bytes_ = slot_bytes;
  slots_.assign(slots, Slot{});
  return Status::OK();
}

RestoreStream::~RestoreStream() {
  MutexLock lock(mu_);  // no other thread is left: waiting here holds nobody up
  if (!ring_.data()) return;
  // Reused only when the trainer is done with every piece: a ring still being copied out of
  // must not take the next restore's bytes.
  auto out = [&]() REFT_REQUIRES(mu_) {
    return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.posted; });
  };
  // The trainer acknowledges as it copies, before it reads the reply: a second is ample. One
  // that does not costs its ring (freed, not kept), and never holds this worker longer.
  const int drain_ms = std::min(timeout_ms_, 1000);
  while (sock_.valid() && error_.ok() && out()) {
    Result<uint64_t> ack = local_proto::ReadStreamAck(sock_.get(), drain_ms);
    error_ = ack.ok() ? TakeAck(*ack) : ack.status();
  }
  if (rings_ != nullptr && !out()) rings_->Give(owner_, std::move(ring_));
}

Result<uint8_t*> RestoreStream::Borrow(uint64_t size) {
  MutexLock lock(mu_);
  if (!sock_.valid() || ended_ || size > slot_bytes_) return nullptr;
  while (true) {
    if (!error_.ok()) return error_;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].borrowed || slots_[i].posted) continue;
      slots_[i].borrowed = true;
      return ring_.data() + i * slot_bytes_;
    }
    if (reading_ack_) {
      lock.Wait(room_);
      continue;
    }
    // Every slot is out: this thread reads the next acknowledgement, the others wait for it.
    // The mutex is released meanwhile so that the workers holding slots can post them.
    reading_ack_ = true;
    const int sock = sock_.get();  // End() closes it only after every worker is done
    lock.Unlock();
    Result<uint64_t> ack = local_proto::ReadStreamAck(sock, timeout_ms_);
    lock.Lock();
    reading_ack_ = false;
    room_.notify_all();
    Status taken = ack.ok() ? TakeAck(*ack) : ack.status();
    if (!taken.ok() && error_.ok()) error_ = taken;
  }
}

Status RestoreStream::TakeAck(uint64_t ring_offset) {
  const int slot = SlotAt(ring_.data() + std::min<uint64_t>(ring_offset, ring_.size()));
  if (slot < 0 || !slots_[static_cast<size_t>(slot)].posted) {
    return Status::Protocol("the trainer acknowledged ring offset " + std::to_string(ring_offset) +
                            ", where no piece it was sent lies");
  }
  slots_[static_cast<size_t>(slot)].posted = false;
  return Status::OK();
}

void RestoreStream::GiveBack(uint8_t* memory) {
  MutexLock lock(mu_);
  const int slot = SlotAt(memory);
  if (slot < 0) return;
  slots_[static_cast<size_t>(slot)].borrowed = false;
  room_.notify_all();
}

int RestoreStream::SlotAt(const uint8_t* p) const {
  const uint8_t* base = ring_.data();
  if (base == nullptr || p < base || p >= base + ring_.size()) return -1;
  const uint64_t at = static_cast<uint64_t>(p - base);
  return at % slot_bytes_ == 0 ? static_cast<int>(at / slot_bytes_) : -1;
}

Status RestoreStream::Write(uint64_t offset, const uint8_t* data, uint64_t size) {
  {
    MutexLock lock(mu_);
    if (!sock_.valid() || ended_) return Status::Internal("the restore stream is not open");
    if (!error_.ok()) return error_;
    // A piece read into a slot lent for it goes as it is; anything else (a decoded shard, part
    // of a slot, a slot written twice) is copied into slots of its own.
    const int slot = SlotAt(data);
    if (slot >= 0 && size <= slot_bytes_) {
      const Slot& s = slots_[static_cast<size_t>(slot)];
      if (s.borrowed && !s.posted) return Post(slot, offset, size);
    }
  }
  return CopyIn(offset, data, size);
}

Status RestoreStream::Post(int slot, uint64_t offset, uint64_t size) {
  // The first failure answers every later write at once: the other fetch workers queued here
  // must not each wait out the timeout again.
  if (!error_.ok()) return error_;
  // Posted before the header goes out: the acknowledgement may come back at once.
  slots_[static_cast<size_t>(slot)].posted = true;
  error_ = local_proto::WriteStreamRecord(
      sock_.get(), {offset, size, static_cast<uint64_t>(slot) * slot_bytes_}, timeout_ms_);
  return error_;
}

Status RestoreStream::CopyIn(uint64_t offset, const uint8_t* data, uint64_t size) {
  // Bytes from reftd's own memory (a piece decoded from parity): copied into ring slots.
  uint64_t slot_bytes = 0;
  {
    MutexLock lock(mu_);
    slot_bytes = slot_bytes_;  // set by Begin, fixed since
  }
  while (size > 0) {
    REFT_ASSIGN_OR_RETURN(uint8_t* slot, Borrow(1));
    if (slot == nullptr) return Status::Internal("the restore stream is not open");
    const uint64_t n = std::min(size, slot_bytes);
    std::memcpy(slot, data, n);  // the slot is lent to this thread alone
    Status st;
    {
      MutexLock lock(mu_);
      st = Post(SlotAt(slot), offset, n);
    }
    GiveBack(slot);
    REFT_RETURN_NOT_OK(st);
    offset += n;
    data += n;
    size -= n;
  }
  return Status::OK();
}

void RestoreStream::End(bool /*complete: the reply that follows tells the client*/) {
  MutexLock lock(mu_);
  ended_ = true;
  // The trainer reads to the end of the stream, then waits for the reply; its last
  // acknowledgements still come back on this socket (the destructor reads them).
  if (sock_.valid()) ::shutdown(sock_.get(), SHUT_WR);
}

}  // namespace reft::local
