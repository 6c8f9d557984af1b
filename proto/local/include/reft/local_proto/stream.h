#pragma once
/// \file stream.h
/// \brief The data socket of a streamed restore (kRestoreStream).
///
/// A client that asked to stream (RestoreRequest::stream) may get, before its kRestoreReply,
/// one kRestoreStream frame: a SlotReply whose `staged` placements say where each buffer's
/// bytes lie in the restored state, and one fd, the client's end of an AF_UNIX SOCK_STREAM
/// socket. reftd writes records on it, each a 16-byte header (file_offset u64, size u64,
/// little-endian) followed by `size` bytes of the state at [file_offset, file_offset+size),
/// every one verified against its checksum before it is written; records never overlap. reftd
/// closes its end when it is done. The kRestoreReply that follows says how it ended: no fd and
/// no placements = every placed byte was streamed; placements and a memfd = the stream was
/// abandoned (a source failed and the state needed decoding) and the memfd holds every byte.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "reft/result.h"
#include "reft/unique_fd.h"

namespace reft::local_proto {

constexpr size_t kStreamRecordHeaderSize = 16;

struct StreamRecordHeader {
  uint64_t file_offset = 0;
  uint64_t size = 0;
};

/// \brief A connected AF_UNIX SOCK_STREAM pair (close-on-exec): {reftd's end, the client's}.
Result<std::pair<UniqueFd, UniqueFd>> StreamSocketPair();

/// \brief Writes one record (header + bytes), waiting at most `timeout_ms` for the reader to
/// make room each time the socket is full. Unavailable when the reader closed its end
/// (MSG_NOSIGNAL: never SIGPIPE), Timeout when it stopped reading.
Status WriteStreamRecord(int sock, uint64_t file_offset, const uint8_t* data, uint64_t size,
                         int timeout_ms);

/// \brief Reads the next record header; nullopt at a clean end of stream (the writer closed
/// its end between records). Protocol for a header cut short, Timeout after `timeout_ms`
/// without a byte.
Result<std::optional<StreamRecordHeader>> ReadStreamRecordHeader(int sock, int timeout_ms);

/// \brief Reads exactly `size` record bytes into `dst` (Protocol when the stream ends first).
Status ReadStreamBytes(int sock, uint8_t* dst, uint64_t size, int timeout_ms);

/// \brief Where the state's bytes [file_offset, file_offset+size) go in the reader's memory.
struct StreamTarget {
  uint64_t file_offset = 0;
  uint64_t size = 0;
  uint8_t* dst = nullptr;
};

/// \brief The client's side: reads records until the end of the stream, each straight into the
/// targets it covers (a record may span adjacent targets). Returns the bytes received.
/// Protocol for overlapping targets, a record reaching outside every target, or a stream cut
/// inside a record.
Result<uint64_t> ReceiveStream(int sock, std::vector<StreamTarget> targets, int timeout_ms);

}  // namespace reft::local_proto
