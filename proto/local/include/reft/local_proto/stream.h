#pragma once
/// \file stream.h
/// \brief The data socket and ring of a streamed restore (kRestoreStream).
///
/// A client that asked to stream (RestoreRequest::stream) may get, before its kRestoreReply,
/// one kRestoreStream frame: a SlotReply whose `staged` placements say where each buffer's
/// bytes lie in the restored state, and two fds: the client's end of an AF_UNIX SOCK_STREAM
/// socket, then the ring, a memfd sealed against writes (F_SEAL_FUTURE_WRITE), growing and
/// shrinking, which the client maps read-only.
///
/// reftd reads each piece of the state into the ring, verifies it there, and writes a record on
/// the socket: a 24-byte header (file_offset u64, size u64, ring_offset u64, little-endian)
/// saying the state's bytes [file_offset, file_offset+size) lie at [ring_offset,
/// ring_offset+size) of the ring. The client copies them into the buffers they cover and
/// answers with an 8-byte acknowledgement (ring_offset u64); reftd reuses those ring bytes only
/// after it. Records never overlap. So a restored byte is copied once between reftd and the
/// trainer (a socket would copy it into the kernel and out again). reftd closes its end when it
/// is done. The kRestoreReply that follows says how it ended: no fd and no placements = every
/// placed byte was streamed; placements and a memfd = the stream was abandoned (a source failed
/// and the state needed decoding) and the memfd holds every byte.

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "reft/result.h"
#include "reft/unique_fd.h"

namespace reft::local_proto {

constexpr size_t kStreamRecordHeaderSize = 24;
constexpr size_t kStreamAckSize = 8;

struct StreamRecord {
  uint64_t file_offset = 0;
  uint64_t size = 0;
  uint64_t ring_offset = 0;
};

/// \brief A connected AF_UNIX SOCK_STREAM pair (close-on-exec): {reftd's end, the client's}.
Result<std::pair<UniqueFd, UniqueFd>> StreamSocketPair();

/// \brief Writes one record header, waiting at most `timeout_ms` for the reader to make room.
/// Unavailable when the reader closed its end (MSG_NOSIGNAL: never SIGPIPE), Timeout when it
/// stopped reading.
Status WriteStreamRecord(int sock, const StreamRecord& record, int timeout_ms);

/// \brief Reads the next record header; nullopt at a clean end of stream (the writer closed
/// its end between records). Protocol for a header cut short, Timeout after `timeout_ms`
/// without a byte.
Result<std::optional<StreamRecord>> ReadStreamRecord(int sock, int timeout_ms);

/// \brief The client's acknowledgement that it copied the record at `ring_offset` out.
Status WriteStreamAck(int sock, uint64_t ring_offset, int timeout_ms);

/// \brief reftd's side: waits at most `timeout_ms` for the next acknowledgement. Timeout when
/// the client sent none (it stopped reading), Unavailable when it closed its end.
Result<uint64_t> ReadStreamAck(int sock, int timeout_ms);

/// \brief Where the state's bytes [file_offset, file_offset+size) go in the reader's memory.
struct StreamTarget {
  uint64_t file_offset = 0;
  uint64_t size = 0;
  uint8_t* dst = nullptr;
};

/// \brief The client's side: maps the ring read-only, then reads records until the end of the
/// stream, copying each into the targets it covers (a record may span adjacent targets) and
/// acknowledging it. Returns the bytes received. Protocol for overlapping targets, a record
/// reaching outside every target or outside the ring, or a stream cut inside a header.
/// `received` (optional): incremented by each record's bytes once they are copied, for another
/// thread to watch the restore's progress (one relaxed add per record).
Result<uint64_t> ReceiveStream(int sock, int ring_fd, std::vector<StreamTarget> targets,
                               int timeout_ms, std::atomic<uint64_t>* received = nullptr);

}  // namespace reft::local_proto
