/// \file stream.cc
/// \brief Records on a streamed restore's data socket.

#include "reft/local_proto/stream.h"

#include "reft/local_proto/codec.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

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

Status SendAll(int sock, const uint8_t* data, uint64_t size, int timeout_ms) {
  while (size > 0) {
    const ssize_t n = ::send(sock, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      REFT_RETURN_NOT_OK(Wait(sock, POLLOUT, timeout_ms, "the trainer stopped reading"));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return Status::Unavailable("the trainer closed the restore stream");
    }
    return Status::FromErrno(errno, "writing the restore stream");
  }
  return Status::OK();
}

// Reads up to `size` bytes; returns how many before a clean end of stream.
Result<uint64_t> RecvUpTo(int sock, uint8_t* dst, uint64_t size, int timeout_ms) {
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
      REFT_RETURN_NOT_OK(Wait(sock, POLLIN, timeout_ms, "reftd sent nothing"));
      continue;
    }
    if (errno == ECONNRESET) break;
    return Status::FromErrno(errno, "reading the restore stream");
  }
  return got;
}

}  // namespace

Result<std::pair<UniqueFd, UniqueFd>> StreamSocketPair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::FromErrno(errno, "socketpair for the restore stream");
  }
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

Status WriteStreamRecord(int sock, uint64_t file_offset, const uint8_t* data, uint64_t size,
                         int timeout_ms) {
  Writer w;
  w.U64(file_offset);
  w.U64(size);
  const std::vector<uint8_t> header = w.Take();
  REFT_RETURN_NOT_OK(SendAll(sock, header.data(), header.size(), timeout_ms));
  return SendAll(sock, data, size, timeout_ms);
}

Result<std::optional<StreamRecordHeader>> ReadStreamRecordHeader(int sock, int timeout_ms) {
  uint8_t header[kStreamRecordHeaderSize];
  REFT_ASSIGN_OR_RETURN(uint64_t got, RecvUpTo(sock, header, sizeof(header), timeout_ms));
  if (got == 0) return std::optional<StreamRecordHeader>();
  if (got < sizeof(header)) {
    return Status::Protocol("the restore stream ended inside a record header");
  }
  StreamRecordHeader out;
  Reader r(header, sizeof(header));
  REFT_RETURN_NOT_OK(r.U64(&out.file_offset, "file_offset"));
  REFT_RETURN_NOT_OK(r.U64(&out.size, "size"));
  return std::optional<StreamRecordHeader>(out);
}

Status ReadStreamBytes(int sock, uint8_t* dst, uint64_t size, int timeout_ms) {
  REFT_ASSIGN_OR_RETURN(uint64_t got, RecvUpTo(sock, dst, size, timeout_ms));
  if (got < size) return Status::Protocol("the restore stream ended inside a record");
  return Status::OK();
}

Result<uint64_t> ReceiveStream(int sock, std::vector<StreamTarget> targets, int timeout_ms) {
  std::sort(targets.begin(), targets.end(), [](const StreamTarget& a, const StreamTarget& b) {
    return a.file_offset < b.file_offset;
  });
  for (size_t i = 1; i < targets.size(); ++i) {
    if (targets[i - 1].file_offset + targets[i - 1].size > targets[i].file_offset) {
      return Status::Protocol("the restore stream places two buffers over the same bytes");
    }
  }
  uint64_t received = 0;
  while (true) {
    REFT_ASSIGN_OR_RETURN(std::optional<StreamRecordHeader> record,
                          ReadStreamRecordHeader(sock, timeout_ms));
    if (!record) return received;
    uint64_t at = record->file_offset;
    uint64_t left = record->size;
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
      REFT_RETURN_NOT_OK(ReadStreamBytes(sock, t.dst + (at - t.file_offset), n, timeout_ms));
      at += n;
      left -= n;
      received += n;
    }
  }
}

}  // namespace reft::local_proto
