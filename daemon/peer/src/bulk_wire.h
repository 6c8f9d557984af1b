#pragma once
/// \file bulk_wire.h
/// \brief What travels on a bulk connection (BulkListener) and the socket loops both ends use.
///
/// The connecting side sends its 16-byte ticket. The serving side then sends the range as
/// chunks, each a 24-byte header (offset, length, XXH3-64 of the data; little-endian) followed
/// by `length` bytes: the same chunks, in the same order and with the same checksums, as a
/// FetchRegion gRPC stream, so the receiver checks them the same way. The serving side closes
/// the connection after the last chunk; its verdict (OK or the error that cut the range
/// short) is the status of the FetchRegion call that handed out the ticket.

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "reft/checksum.h"
#include "reft/result.h"
#include "reft/unique_fd.h"

namespace reft::peer {

struct BulkChunkHeader {
  uint64_t offset = 0;  ///< within the region
  uint64_t length = 0;
  uint64_t checksum = 0;
};
constexpr size_t kBulkChunkHeaderBytes = 24;

void EncodeBulkChunkHeader(const BulkChunkHeader& h, uint8_t* out);
BulkChunkHeader DecodeBulkChunkHeader(const uint8_t* in);

using Deadline = std::chrono::steady_clock::time_point;

/// \brief Writes all of `iov` to the non-blocking socket `fd`. Timeout at `deadline`,
/// Cancelled when `cancelled()` (asked while the socket is full), Unavailable when the other
/// end went away.
Status SendAll(int fd, iovec* iov, int iovcnt, Deadline deadline,
               const std::function<bool()>& cancelled);

/// \brief Reads exactly `size` bytes from the non-blocking socket `fd` into `dst`, feeding
/// each piece to `hash` (if any) while it is still in cache. Timeout at `deadline` (a hung
/// holder), Unavailable when the other end closed first (naming how far it got).
Status RecvAll(int fd, uint8_t* dst, size_t size, Deadline deadline, ChecksumStream* hash);

/// \brief A non-blocking TCP connection to `port` on `host` (an IP address, or a name to look
/// up). Unavailable when it cannot be made by `deadline`; then `*refused` (when given) says
/// whether every address of the host refused it (ECONNREFUSED: nothing listens on the port).
Result<UniqueFd> ConnectBulk(const std::string& host, uint16_t port, Deadline deadline,
                             bool* refused = nullptr);

/// \brief The host part of a gRPC target ("[::1]:80" -> "::1", "dns:///a:1" -> "a").
std::string HostOfTarget(const std::string& grpc_address);

}  // namespace reft::peer
