#include "reft/peer/sealed_checksums.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "reft/checksum.h"
#include "reft/store/segment_layout.h"

namespace reft::peer {

namespace {
Status PreadAll(int fd, void* buf, size_t n, uint64_t off, const std::string& what) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, what);
    if (r == 0) return Status::Corrupted(what + ": segment file is truncated");
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return Status::OK();
}
}  // namespace

Result<SealedChecksums> ReadSealedChecksums(const store::SlotRef& slot, size_t region) {
  const std::string what = "reading the chunk table of " + slot.info().path;
  REFT_ASSIGN_OR_RETURN(int fd, slot.DupFd());
  reft_segment_header h{};
  Status s = PreadAll(fd, &h, sizeof(h), 0, what);
  reft_segment_region entry{};
  if (s.ok() && region >= h.region_count) {
    s = Status::Internal(what + ": region index " + std::to_string(region) + " out of range");
  }
  if (s.ok()) {
    s = PreadAll(fd, &entry, sizeof(entry), h.region_table_offset + region * sizeof(entry), what);
  }
  SealedChecksums out;
  if (s.ok()) {
    out.chunk_size = h.chunk_size;
    out.chunks.resize(entry.chunk_count);
    if (entry.first_chunk + entry.chunk_count > h.chunk_count) {
      s = Status::Corrupted(what + ": region chunks exceed the chunk table");
    } else if (entry.chunk_count > 0) {
      s = PreadAll(fd, out.chunks.data(), entry.chunk_count * sizeof(uint64_t),
                   h.chunk_table_offset + entry.first_chunk * sizeof(uint64_t), what);
    }
  }
  ::close(fd);
  if (!s.ok()) return s;
  return out;
}

Status VerifySealedRange(const store::SlotRef& slot, size_t region, uint64_t offset,
                         uint64_t size, const std::string& where) {
  const uint64_t region_size = slot.region_size(region);
  if (offset > region_size || size > region_size - offset) {
    return Status::InvalidArgument("bytes " + std::to_string(offset) + "+" + std::to_string(size) +
                                   " exceed region '" + slot.info().regions[region].name +
                                   "' of " + std::to_string(region_size) + " bytes");
  }
  if (size == 0) return Status::OK();
  REFT_ASSIGN_OR_RETURN(SealedChecksums sealed, ReadSealedChecksums(slot, region));
  const uint64_t c = sealed.chunk_size;
  if (c == 0) return Status::Corrupted(where + ": chunk size 0 in " + slot.info().path);
  const uint8_t* base = slot.region_data(region);
  for (uint64_t i = offset / c; i * c < offset + size; ++i) {
    const uint64_t begin = i * c;
    const uint64_t end = std::min(region_size, begin + c);
    if (i >= sealed.chunks.size() || Checksum64(base + begin, end - begin) != sealed.chunks[i]) {
      return Status::Corrupted(slot.info().rank.ToString() + " step " +
                               std::to_string(slot.info().step) + " region '" +
                               slot.info().regions[region].name + "' on " + where + ": chunk " +
                               std::to_string(i) + " (region bytes " + std::to_string(begin) +
                               ".." + std::to_string(end) + ") fails its sealed checksum");
    }
  }
  return Status::OK();
}

}  // namespace reft::peer
