/// \file stream.cc
/// \brief Records on a streamed restore's data socket.

#include "reft/local_proto/stream.h"

#include "reft/local_proto/codec.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace reft::local_proto {

namespace {

// Waits for `events` on `sock`: OK, Timeout, or the poll error.
Status Wait(int sock, short events, int timeout_ms, const char* what) {
  pollfd p{sock, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    return Status::FromErrno(errno, std::string("poll on the restore stream (") + what + ")");
  }
  if (r == 0) {
    return Status::Timeout(std::string("the restore stream made no progress for ") +
                           std::to_string(timeout_ms) + " ms (" + what + ")");
  }
  return Status::OK();
}

// `waiting_for` names what a timeout waited for.
Status SendAll(int sock, const uint8_t* data, uint64_t size, int timeout_ms,
               const char* waiting_for) {
  while (size > 0) {
    const ssize_t n = ::send(sock, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      REFT_RETURN_NOT_OK(Wait(sock, POLLOUT, timeout_ms, waiting_for));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return Status::Unavailable("the other end closed the restore stream");
    }
    return Status::FromErrno(errno, "writing the restore stream");
  }
  return Status::OK();
}

// Reads up to `size` bytes; returns how many before a clean end of stream. `waiting_for` names
// what a timeout waited for.
Result<uint64_t> RecvUpTo(int sock, uint8_t* dst, uint64_t size, int timeout_ms,
                          const char* waiting_for) {
  uint64_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(sock, dst + got, size - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      REFT_RETURN_NOT_OK(Wait(sock, POLLIN, timeout_ms, waiting_for));
      continue;
    }
    if (errno == ECONNRESET) break;
    return Status::FromErrno(errno, "reading the restore stream");
  }
  return got;
}

// Unmaps the client's read-only view of the ring when the stream ends, however it ends.
class RingView {
 public:
  static Result<RingView> Map(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat of the restore ring");
    RingView v;
    v.size_ = static_cast<uint64_t>(st.st_size);
    if (v.size_ == 0) return v;
    // Populated: reftd filled the pages already, so this maps them in one call.
    void* p = ::mmap(nullptr, v.size_, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping the restore ring");
    v.base_ = static_cast<const uint8_t*>(p);
    return v;
  }
  RingView() = default;
  RingView(RingView&& o) noexcept : base_(std::exchange(o.base_, nullptr)), size_(o.size_) {}
  RingView& operator=(RingView&&) = delete;
  ~RingView() {
    if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
  }
  const uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace

Result<std::pair<UniqueFd, UniqueFd>> StreamSocketPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::FromErrno(errno, "socketpair for the restore stream");
  }
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

Status WriteStreamRecord(int sock, const StreamRecord& record, int timeout_ms) {
  Writer w;
  w.U64(record.file_offset);
  w.U64(record.size);
  w.U64(record.ring_offset);
  const std::vector<uint8_t> header = w.Take();
  return SendAll(sock, header.data(), header.size(), timeout_ms, "the trainer stopped reading");
}

Result<std::optional<StreamRecord>> ReadStreamRecord(int sock, int timeout_ms) {
  uint8_t header[kStreamRecordHeaderSize];
  REFT_ASSIGN_OR_RETURN(uint64_t got,
                        RecvUpTo(sock, header, sizeof(header), timeout_ms, "reftd sent nothing"));
  if (got == 0) return std::optional<StreamRecord>();
  if (got < sizeof(header)) {
    return Status::Protocol("the restore stream ended inside a record header");
  }
  StreamRecord out;
  Reader r(header, sizeof(header));
  REFT_RETURN_NOT_OK(r.U64(&out.file_offset, "file_offset"));
  REFT_RETURN_NOT_OK(r.U64(&out.size, "size"));
  REFT_RETURN_NOT_OK(r.U64(&out.ring_offset, "ring_offset"));
  return std::optional<StreamRecord>(out);
}

Status WriteStreamAck(int sock, uint64_t ring_offset, int timeout_ms) {
  Writer w;
  w.U64(ring_offset);
  const std::vector<uint8_t> ack = w.Take();
  return SendAll(sock, ack.data(), ack.size(), timeout_ms, "reftd stopped reading");
}

Result<uint64_t> ReadStreamAck(int sock, int timeout_ms) {
  uint8_t ack[kStreamAckSize];
  REFT_ASSIGN_OR_RETURN(uint64_t got, RecvUpTo(sock, ack, sizeof(ack), timeout_ms,
                                               "the trainer stopped reading"));
  if (got == 0) return Status::Unavailable("the trainer closed the restore stream");
  if (got < sizeof(ack)) return Status::Protocol("the restore stream ended inside an ack");
  uint64_t ring_offset = 0;
  Reader r(ack, sizeof(ack));
  REFT_RETURN_NOT_OK(r.U64(&ring_offset, "ring_offset"));
  return ring_offset;
}

Result<uint64_t> ReceiveStream(int sock, int ring_fd, std::vector<StreamTarget> targets,
                               int timeout_ms, std::atomic<uint64_t>* received_counter) {
  std::sort(targets.begin(), targets.end(), [](const StreamTarget& a, const StreamTarget& b) {
    return a.file_offset < b.file_offset;
  });
  for (size_t i = 1; i < targets.size(); ++i) {
    if (targets[i - 1].file_offset + targets[i - 1].size > targets[i].file_offset) {
      return Status::Protocol("the restore stream places two buffers over the same bytes");
    }
  }
  REFT_ASSIGN_OR_RETURN(RingView ring, RingView::Map(ring_fd));
  uint64_t received = 0;
  while (true) {
    REFT_ASSIGN_OR_RETURN(std::optional<StreamRecord> record, ReadStreamRecord(sock, timeout_ms));
    if (!record) return received;
    if (record->ring_offset > ring.size() || record->size > ring.size() - record->ring_offset) {
      return Status::Protocol("a restore stream record lies outside the " +
                              std::to_string(ring.size()) + "-byte ring");
    }
    uint64_t at = record->file_offset;
    uint64_t left = record->size;
    const uint8_t* from = ring.base() + record->ring_offset;
    if (at + left < at) return Status::Protocol("a restore stream record wraps around");
    while (left > 0) {
      // The target holding byte `at`: the last one starting at or before it.
      auto it = std::upper_bound(
          targets.begin(), targets.end(), at,
          [](uint64_t v, const StreamTarget& t) { return v < t.file_offset; });
      if (it == targets.begin() || at >= std::prev(it)->file_offset + std::prev(it)->size) {
        return Status::Protocol("a restore stream record covers byte " + std::to_string(at) +
                                ", which belongs to no buffer");
      }
      const StreamTarget& t = *std::prev(it);
      const uint64_t n = std::min(left, t.file_offset + t.size - at);
      std::memcpy(t.dst + (at - t.file_offset), from, n);
      from += n;
      at += n;
      left -= n;
      received += n;
    }
    if (received_counter != nullptr) {
      received_counter->fetch_add(record->size, std::memory_order_relaxed);
    }
    // reftd closes its end after the last record without waiting for its acknowledgement: an
    // end already closed needs none (a stream cut short shows in the bytes received).
    Status acked = WriteStreamAck(sock, record->ring_offset, timeout_ms);
    if (!acked.ok() && acked.code() != StatusCode::kUnavailable) return acked;
  }
}

}  // namespace reft::local_proto
