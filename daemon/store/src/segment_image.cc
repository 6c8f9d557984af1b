// Segment images in regular files: the store's segment format written as a byte stream and
// read back with pread (reft/store/segment_image.h).
#include "reft/store/segment_image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chunk_checksums.h"
#include "naming.h"
#include "reft/checksum.h"
#include "reft/token_bucket.h"
#include "segment_format.h"

namespace reft::store {

using internal::ActiveRecord;
using internal::ChunkRef;
using internal::Geometry;

namespace {

constexpr size_t kZeroPad = REFT_SEGMENT_PAYLOAD_ALIGN;
const uint8_t kZeros[kZeroPad] = {};

/// pread until `size` bytes or EOF; returns bytes read or -1 with errno.
ssize_t PreadFull(int fd, void* dst, size_t size, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

std::string RangeStr(uint64_t begin, uint64_t end) {
  return "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

struct SegmentImageWriter::Impl {
  Geometry geometry;
  std::vector<RegionSpec> layout;
  std::vector<ImageRegion> regions;
  std::vector<uint8_t> head;  ///< bytes [0, payload_offset): header, tables, zero padding
  uint64_t chunk_table_checksum = 0;
};

Result<SegmentImageWriter> SegmentImageWriter::Prepare(const RankKey& rank, int64_t step,
                                                       std::vector<ImageRegion> regions,
                                                       const ImageOptions& options) {
  REFT_RETURN_NOT_OK(internal::ValidateRankKey(rank));
  if (step < 0) {
    return Status::InvalidArgument("image of " + rank.ToString() + ": step " +
                                   std::to_string(step) + " must be >= 0");
  }
  const uint64_t cs = options.chunk_size;
  if (cs < 4096 || (cs & (cs - 1)) != 0) {
    return Status::InvalidArgument("chunk_size " + std::to_string(cs) +
                                   " must be a power of two >= 4096");
  }
  if (options.checksum_threads < 1 || options.checksum_threads > 256) {
    return Status::InvalidArgument("checksum_threads " +
                                   std::to_string(options.checksum_threads) +
                                   " must be in [1, 256]");
  }
  auto impl = std::make_shared<Impl>();
  for (const auto& r : regions) {
    if (r.size > 0 && r.data == nullptr) {
      return Status::InvalidArgument("region '" + r.name + "' has " + std::to_string(r.size) +
                                     " bytes but no data");
    }
    impl->layout.push_back({r.name, r.size});
  }
  REFT_RETURN_NOT_OK(internal::ValidateLayout(impl->layout));
  impl->geometry = internal::ComputeGeometry(impl->layout, cs);
  const Geometry& g = impl->geometry;

  std::vector<ChunkRef> chunks;
  chunks.reserve(g.chunk_count);
  for (const auto& r : regions) {
    const auto* base = static_cast<const uint8_t*>(r.data);
    for (uint64_t off = 0; off < r.size; off += cs) {
      chunks.push_back({base + off, std::min(cs, r.size - off)});
    }
  }
  impl->head.assign(g.payload_offset, 0);
  uint8_t* head = impl->head.data();
  internal::WriteLayout(head, g, rank, /*slot=*/0);
  internal::ChecksumChunks(chunks, reinterpret_cast<uint64_t*>(head + g.chunk_table_offset),
                           options.checksum_threads);
  impl->chunk_table_checksum = internal::ChunkTableChecksum(head, g);
  internal::WriteRecord(reinterpret_cast<reft_segment_header*>(head), ActiveRecord{},
                        SlotState::kCommitted, step, impl->chunk_table_checksum);
  impl->regions = std::move(regions);
  return SegmentImageWriter(std::move(impl));
}

uint64_t SegmentImageWriter::file_bytes() const { return impl_->geometry.segment_bytes; }
uint64_t SegmentImageWriter::payload_bytes() const { return impl_->geometry.payload_bytes; }
uint64_t SegmentImageWriter::chunk_size() const { return impl_->geometry.chunk_size; }
uint64_t SegmentImageWriter::chunk_count() const { return impl_->geometry.chunk_count; }
uint64_t SegmentImageWriter::chunk_table_checksum() const { return impl_->chunk_table_checksum; }
const std::vector<RegionSpec>& SegmentImageWriter::regions() const { return impl_->layout; }

Status SegmentImageWriter::Stream(const Sink& sink, size_t max_piece) const {
  max_piece = std::max<size_t>(max_piece, 4096);
  const Geometry& g = impl_->geometry;
  uint64_t pos = 0;
  auto emit = [&](const uint8_t* p, uint64_t n) -> Status {
    while (n > 0) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(n, max_piece));
      REFT_RETURN_NOT_OK(sink(p, piece));
      p += piece;
      n -= piece;
      pos += piece;
    }
    return Status::OK();
  };
  auto pad_to = [&](uint64_t target) -> Status {
    while (pos < target) {
      // Padding is always below one alignment unit; the loop only guards the invariant.
      REFT_RETURN_NOT_OK(emit(kZeros, std::min<uint64_t>(target - pos, kZeroPad)));
    }
    return Status::OK();
  };
  REFT_RETURN_NOT_OK(emit(impl_->head.data(), impl_->head.size()));
  for (size_t i = 0; i < g.regions.size(); ++i) {
    REFT_RETURN_NOT_OK(pad_to(g.regions[i].offset));
    REFT_RETURN_NOT_OK(
        emit(static_cast<const uint8_t*>(impl_->regions[i].data), impl_->regions[i].size));
  }
  REFT_RETURN_NOT_OK(pad_to(g.segment_bytes));
  if (pos != g.segment_bytes) {
    return Status::Internal("image stream emitted " + std::to_string(pos) + " bytes, expected " +
                            std::to_string(g.segment_bytes));
  }
  return Status::OK();
}

Status SegmentImageWriter::WriteToFd(int fd, TokenBucket* bucket) const {
  uint64_t offset = 0;
  return Stream([&](const void* data, size_t size) -> Status {
    if (bucket != nullptr) bucket->Acquire(size);
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "writing segment image at offset " +
                                            std::to_string(offset));
      }
      p += n;
      size -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
    return Status::OK();
  });
}

// ---------------------------------------------------------------------------------------------
// Reader

struct SegmentImageReader::Impl {
  int fd = -1;
  std::string name;
  uint64_t file_bytes = 0;
  internal::ParsedSegment parsed;
  std::vector<uint64_t> table;  ///< verified chunk table

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
  Status Corrupted(const std::string& what) const {
    return Status::Corrupted(name + ": " + what);
  }
};

SegmentImageReader::SegmentImageReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SegmentImageReader::~SegmentImageReader() = default;

Result<std::unique_ptr<SegmentImageReader>> SegmentImageReader::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    if (errno == ELOOP) return Status::Corrupted(path + ": is a symlink; refusing to read it");
    return Status::FromErrno(errno, "opening " + path);
  }
  return FromFd(fd, path);
}

Result<std::unique_ptr<SegmentImageReader>> SegmentImageReader::FromFd(int fd,
                                                                       const std::string& name) {
  auto impl = std::make_unique<Impl>();
  impl->fd = fd;  // owned from here on
  impl->name = name;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat " + name);
  if (!S_ISREG(st.st_mode)) return impl->Corrupted("not a regular file");
  impl->file_bytes = static_cast<uint64_t>(st.st_size);

  // The header says how long the region table is; ParseSegment bounds it by the file size
  // before it reads the table, so reading what the (not yet trusted) count says is safe
  // once the count itself is bounded here.
  reft_segment_header h{};
  if (impl->file_bytes < sizeof h) {
    return impl->Corrupted("file of " + std::to_string(impl->file_bytes) +
                           " bytes is shorter than a segment header (truncated?)");
  }
  ssize_t n = PreadFull(fd, &h, sizeof h, 0);
  if (n < 0) return Status::FromErrno(errno, "reading header of " + name);
  if (static_cast<size_t>(n) != sizeof h) return impl->Corrupted("header cut short (truncated)");
  const uint64_t table_bytes = uint64_t{std::min<uint32_t>(h.region_count, 65536)} *
                               sizeof(reft_segment_region);
  std::vector<uint8_t> head(sizeof h + std::min(table_bytes, impl->file_bytes - sizeof h));
  n = PreadFull(fd, head.data(), head.size(), 0);
  if (n < 0) return Status::FromErrno(errno, "reading region table of " + name);
  if (static_cast<size_t>(n) != head.size()) return impl->Corrupted("region table cut short");
  // ParseSegment reads the region table only after checking it fits in `file_bytes`.
  auto parsed = internal::ParseSegment(head.data(), impl->file_bytes);
  if (!parsed.ok()) return impl->Corrupted(parsed.status().message());
  impl->parsed = std::move(parsed).value();
  const auto& rec = impl->parsed.record;
  if (rec.index < 0 || rec.state != SlotState::kCommitted) {
    return impl->Corrupted(std::string("not a sealed image (state ") +
                           (rec.index < 0 ? "none" : SlotStateName(rec.state)) + ")");
  }
  const Geometry& g = impl->parsed.geometry;
  impl->table.resize(g.chunk_count);
  n = PreadFull(fd, impl->table.data(), g.chunk_count * 8, g.chunk_table_offset);
  if (n < 0) return Status::FromErrno(errno, "reading chunk table of " + name);
  if (static_cast<uint64_t>(n) != g.chunk_count * 8) {
    return impl->Corrupted("chunk table cut short");
  }
  if (Checksum64(impl->table.data(), g.chunk_count * 8) != rec.chunk_table_checksum) {
    return impl->Corrupted("chunk table checksum mismatch (chunk table damaged)");
  }
  return std::unique_ptr<SegmentImageReader>(new SegmentImageReader(std::move(impl)));
}

const std::string& SegmentImageReader::name() const { return impl_->name; }
const RankKey& SegmentImageReader::rank() const { return impl_->parsed.rank; }
int64_t SegmentImageReader::step() const { return impl_->parsed.record.step; }
const std::vector<RegionSpec>& SegmentImageReader::regions() const {
  return impl_->parsed.layout;
}
uint64_t SegmentImageReader::chunk_size() const { return impl_->parsed.geometry.chunk_size; }
uint64_t SegmentImageReader::chunk_count() const { return impl_->parsed.geometry.chunk_count; }
uint64_t SegmentImageReader::file_bytes() const { return impl_->file_bytes; }
uint64_t SegmentImageReader::payload_bytes() const {
  return impl_->parsed.geometry.payload_bytes;
}
uint64_t SegmentImageReader::chunk_table_checksum() const {
  return impl_->parsed.record.chunk_table_checksum;
}

Result<size_t> SegmentImageReader::FindRegion(const std::string& region) const {
  const auto& layout = impl_->parsed.layout;
  std::string names;
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].name == region) return i;
    names += (i ? ", " : "") + layout[i].name;
  }
  return Status::NotFound(impl_->name + ": no region '" + region + "' (regions: " + names + ")");
}

Status SegmentImageReader::Read(size_t region, uint64_t offset, void* dst, uint64_t size,
                                TokenBucket* bucket) const {
  const Geometry& g = impl_->parsed.geometry;
  if (region >= g.regions.size()) {
    return Status::InvalidArgument(impl_->name + ": region index " + std::to_string(region) +
                                   " out of range (" + std::to_string(g.regions.size()) +
                                   " regions)");
  }
  const reft_segment_region& r = g.regions[region];
  if (offset > r.size || size > r.size - offset) {
    return Status::InvalidArgument(impl_->name + ": read of " + RangeStr(offset, offset + size) +
                                   " is outside region '" + r.name + "' of " +
                                   std::to_string(r.size) + " bytes");
  }
  if (size == 0) return Status::OK();
  const uint64_t cs = g.chunk_size;
  auto* out = static_cast<uint8_t*>(dst);
  std::vector<uint8_t> scratch;
  for (uint64_t c = offset / cs; c * cs < offset + size; ++c) {
    const uint64_t cbegin = c * cs;
    const uint64_t cend = std::min(cbegin + cs, r.size);
    const uint64_t want_begin = std::max(cbegin, offset);
    const uint64_t want_end = std::min(cend, offset + size);
    const bool whole = want_begin == cbegin && want_end == cend;
    uint8_t* buf;
    if (whole) {
      buf = out + (cbegin - offset);
    } else {
      scratch.resize(cs);
      buf = scratch.data();
    }
    if (bucket != nullptr) bucket->Acquire(cend - cbegin);
    ssize_t n = PreadFull(impl_->fd, buf, cend - cbegin, r.offset + cbegin);
    const std::string where =
        "region '" + std::string(r.name) + "' chunk " + std::to_string(c) + " (" +
        RangeStr(cbegin, cend) + " of the region)";
    if (n < 0) return Status::FromErrno(errno, impl_->name + ": reading " + where);
    if (static_cast<uint64_t>(n) != cend - cbegin) {
      return impl_->Corrupted(where + ": file ends early (truncated after open)");
    }
    if (Checksum64(buf, cend - cbegin) != impl_->table[r.first_chunk + c]) {
      return impl_->Corrupted(where + ": checksum mismatch");
    }
    if (!whole) std::memcpy(out + (want_begin - offset), buf + (want_begin - cbegin),
                            want_end - want_begin);
  }
  return Status::OK();
}

Result<VerifyReport> SegmentImageReader::Verify(TokenBucket* bucket) const {
  const Geometry& g = impl_->parsed.geometry;
  VerifyReport report;
  std::vector<uint8_t> buf(g.chunk_size);
  for (const auto& r : g.regions) {
    for (uint64_t c = 0; c < r.chunk_count; ++c) {
      const uint64_t begin = c * g.chunk_size;
      const uint64_t len = std::min(g.chunk_size, r.size - begin);
      if (bucket != nullptr) bucket->Acquire(len);
      ssize_t n = PreadFull(impl_->fd, buf.data(), len, r.offset + begin);
      if (n < 0) return Status::FromErrno(errno, impl_->name + ": verifying region " + r.name);
      ++report.chunks_checked;
      if (static_cast<uint64_t>(n) != len ||
          Checksum64(buf.data(), len) != impl_->table[r.first_chunk + c]) {
        report.bad.push_back({r.name, c, begin});
      }
    }
  }
  return report;
}

}  // namespace reft::store
