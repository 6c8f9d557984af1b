/// \file restore_stream.cc
#include "restore_stream.h"

#include "reft/local_proto/stream.h"

namespace reft::local {

bool RestoreStream::Available() const {
  MutexLock lock(mu_);
  return !begun_;
}

Status RestoreStream::Begin(const std::map<std::string, uint64_t>& offsets, uint64_t size) {
  MutexLock lock(mu_);
  if (begun_) return Status::Internal("a restore stream is opened once");
  begun_ = true;
  REFT_ASSIGN_OR_RETURN(std::vector<local_proto::Placement> placed, place_(offsets));
  local_proto::SlotReply frame;
  frame.file_size = size;
  frame.staged = std::move(placed);
  REFT_ASSIGN_OR_RETURN(auto pair, local_proto::StreamSocketPair());
  REFT_RETURN_NOT_OK(send_(local_proto::Encode(frame), pair.second.get()));
  sock_ = std::move(pair.first);  // the client's end was passed and is closed here
  return Status::OK();
}

Status RestoreStream::Write(uint64_t offset, const uint8_t* data, uint64_t size) {
  MutexLock lock(mu_);  // one record at a time: records are never interleaved
  if (!sock_.valid()) return Status::Internal("the restore stream is not open");
  // The first failure answers every later write at once: the other fetch workers queued here
  // must not each wait out the timeout again.
  if (!error_.ok()) return error_;
  error_ = local_proto::WriteStreamRecord(sock_.get(), offset, data, size, timeout_ms_);
  return error_;
}

void RestoreStream::End(bool /*complete: the reply that follows tells the client*/) {
  MutexLock lock(mu_);
  sock_.reset();  // the trainer reads to the end of the stream, then waits for the reply
}

}  // namespace reft::local
