#pragma once
/// \file segment_image.h
/// \brief Standalone segment *images*: a sealed snapshot of one rank in the store's segment
/// format (segment_layout.h), written to and read from a regular file or any byte stream.
///
/// An image is byte for byte a segment file whose state record is `committed(step)`: the same
/// header, region table, per-chunk XXH3-64 table and 4 KiB-aligned payload, so one format (and
/// one strict parser, the one adoption uses) serves the shm slots and the persistent tier
/// (docs/data-paths.md "Persist"). Only record A is used (seqno 1); record B is zero; the header's
/// slot index is 0.
///
/// Writing is two passes over the caller's memory: SegmentImageWriter::Prepare checksums every
/// chunk of the spans first (optionally on several threads), then Stream/WriteToFd emits the
/// bytes strictly in file order (header, region table, chunk table, payload). Checksumming first
/// costs one extra read of memory (XXH3 runs at >10 GB/s, far above storage bandwidth) and buys
/// a writer that never seeks: it works on pipes and sockets as well as files, and a shared
/// file system (NFS) sees one sequential stream. The spans must not change between Prepare and
/// the end of the write; if they do, the image is still self-consistent in format but a reader
/// reports the changed chunks as Corrupted; nothing is ever loaded silently.
///
/// Reading never trusts the file: SegmentImageReader::Open parses the header with the store's
/// strict parser, requires the committed state, and checks the chunk table against the checksum
/// in the state record; every Read verifies each chunk it touches.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reft/result.h"
#include "reft/store/snapshot_store.h"

namespace reft {
class TokenBucket;
}  // namespace reft

namespace reft::store {

/// \brief One region of an image to write: a name and bytes the caller owns. The bytes must
/// stay valid and unchanged until the write has returned. `data` may be null when `size` is 0.
struct ImageRegion {
  std::string name;  ///< unique within the image, 1..127 bytes, no NUL
  const void* data = nullptr;
  uint64_t size = 0;
};

/// \brief How an image is cut into checksummed chunks.
struct ImageOptions {
  uint64_t chunk_size = 4ull << 20;  ///< power of two >= 4096 (the store's default: 4 MiB)
  int checksum_threads = 1;          ///< threads used by Prepare on large images (1..256)
};

/// \brief A planned, fully checksummed image, ready to be streamed out any number of times.
///
/// Cheap to copy (shared immutable state). Holds pointers to the caller's spans, not copies.
/// Thread-safe: const methods may run concurrently.
class SegmentImageWriter {
 public:
  /// \brief Validates the rank (job id rules of the store), the step (>= 0), the region names
  /// and sizes and the options, then checksums every chunk of every region.
  /// \return InvalidArgument naming the problem; nothing is written.
  static Result<SegmentImageWriter> Prepare(const RankKey& rank, int64_t step,
                                            std::vector<ImageRegion> regions,
                                            const ImageOptions& options = {});

  uint64_t file_bytes() const;     ///< total bytes Stream emits (header and padding included)
  uint64_t payload_bytes() const;  ///< sum of region sizes
  uint64_t chunk_size() const;
  uint64_t chunk_count() const;
  /// \brief XXH3-64 of the chunk table; the state record carries it, so it identifies the
  /// content of the whole image (every payload chunk is pinned by its entry in the table).
  uint64_t chunk_table_checksum() const;
  const std::vector<RegionSpec>& regions() const;  ///< names and sizes, in payload order

  /// \brief Receives consecutive pieces of the image; a non-OK status stops the stream.
  using Sink = std::function<Status(const void* data, size_t size)>;
  /// \brief Calls `sink` with the image's bytes in file order, in pieces of at most
  /// `max_piece` bytes (>= 4096), from offset 0 to file_bytes(). Returns the first error of the
  /// sink unchanged.
  Status Stream(const Sink& sink, size_t max_piece = 8u << 20) const;
  /// \brief Stream into `fd` at its current position with write(2) (EINTR and short writes
  /// handled), taking `bucket` tokens (if not null) before each piece. IoError with strerror
  /// text and the image offset on failure; the fd is left open either way.
  Status WriteToFd(int fd, TokenBucket* bucket = nullptr) const;

 private:
  struct Impl;
  explicit SegmentImageWriter(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

/// \brief A verified, read-only view of an image file.
///
/// Owns the fd (closed on destruction). Thread-safe: every method is const and uses pread, so
/// many threads may read regions concurrently.
class SegmentImageReader {
 public:
  /// \brief Opens `path` (O_RDONLY|O_NOFOLLOW|O_CLOEXEC; must be a regular file) and checks the
  /// header (magic, version, sizes against the file size, layout checksum, region table), the
  /// committed state record and the chunk table checksum. Payload chunks are verified by Read.
  /// \return NotFound if the file does not exist; IoError if it cannot be read; Corrupted
  /// (message starting with `path`) if anything does not check out, a truncated file included.
  static Result<std::unique_ptr<SegmentImageReader>> Open(const std::string& path);
  /// \brief Same on an open fd; takes ownership of `fd` (closed on failure too). `name` is used
  /// in error messages.
  static Result<std::unique_ptr<SegmentImageReader>> FromFd(int fd, const std::string& name);
  ~SegmentImageReader();
  SegmentImageReader(const SegmentImageReader&) = delete;
  SegmentImageReader& operator=(const SegmentImageReader&) = delete;

  const std::string& name() const;
  const RankKey& rank() const;
  int64_t step() const;
  const std::vector<RegionSpec>& regions() const;  ///< names and sizes, in payload order
  uint64_t chunk_size() const;
  uint64_t chunk_count() const;
  uint64_t file_bytes() const;
  uint64_t payload_bytes() const;
  uint64_t chunk_table_checksum() const;  ///< same value SegmentImageWriter reported
  /// \brief Index of the region called `region`, or NotFound listing the names there are.
  Result<size_t> FindRegion(const std::string& region) const;

  /// \brief Copies bytes [offset, offset+size) of region `region` into `dst`, reading every
  /// chunk the range touches in full and verifying its checksum first. Whole chunks are read
  /// straight into `dst`; partial ones go through a scratch buffer. Takes `bucket` tokens (if
  /// not null) for the bytes read from the file.
  /// \return InvalidArgument for a bad index or a range outside the region; Corrupted naming
  /// the file, the region and the chunk (index within the region and byte range) on a checksum
  /// mismatch or a file that got shorter; IoError on a read error. On error `dst` holds
  /// unspecified bytes.
  Status Read(size_t region, uint64_t offset, void* dst, uint64_t size,
              TokenBucket* bucket = nullptr) const;
  /// \brief Reads and checks every chunk of every region (nothing is copied out).
  /// \return the bad chunks by region in the report; IoError if the file cannot be read.
  Result<VerifyReport> Verify(TokenBucket* bucket = nullptr) const;

 private:
  struct Impl;
  explicit SegmentImageReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace reft::store
