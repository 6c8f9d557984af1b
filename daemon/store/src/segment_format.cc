#include "segment_format.h"

#include <atomic>
#include <cstring>

#include "naming.h"
#include "reft/checksum.h"

namespace reft::store::internal {
namespace {

constexpr size_t kRecordBody = offsetof(reft_segment_state_record, checksum);
constexpr size_t kLayoutCovered = offsetof(reft_segment_header, layout_checksum);

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t LayoutChecksum(const uint8_t* base, uint64_t region_count) {
  ChecksumStream s;
  s.Update(base, kLayoutCovered);
  s.Update(base + REFT_SEGMENT_HEADER_SIZE, region_count * sizeof(reft_segment_region));
  return s.Digest();
}

bool RecordValid(const reft_segment_state_record& r) {
  return r.seqno != 0 && r.checksum == Checksum64(&r, kRecordBody) &&
         r.state <= static_cast<uint32_t>(SlotState::kCommitted);
}

}  // namespace

Geometry ComputeGeometry(const std::vector<RegionSpec>& layout, uint64_t chunk_size) {
  Geometry g;
  g.chunk_size = chunk_size;
  g.region_table_offset = REFT_SEGMENT_HEADER_SIZE;
  g.chunk_table_offset = g.region_table_offset + layout.size() * sizeof(reft_segment_region);
  uint64_t chunks = 0;
  for (const auto& r : layout) chunks += (r.size + chunk_size - 1) / chunk_size;
  g.chunk_count = chunks;
  g.payload_offset = AlignUp(g.chunk_table_offset + chunks * 8, REFT_SEGMENT_PAYLOAD_ALIGN);
  uint64_t off = g.payload_offset;
  uint64_t first = 0;
  for (const auto& r : layout) {
    reft_segment_region e{};
    std::memcpy(e.name, r.name.data(), r.name.size());
    e.offset = off;
    e.size = r.size;
    e.first_chunk = first;
    e.chunk_count = (r.size + chunk_size - 1) / chunk_size;
    first += e.chunk_count;
    off = AlignUp(off + r.size, REFT_SEGMENT_PAYLOAD_ALIGN);
    g.payload_bytes += r.size;
    g.regions.push_back(e);
  }
  g.segment_bytes = std::max<uint64_t>(off, g.payload_offset);
  return g;
}

void WriteLayout(uint8_t* base, const Geometry& g, const RankKey& rank, uint32_t slot) {
  auto* h = reinterpret_cast<reft_segment_header*>(base);
  reft_segment_header fixed{};
  fixed.magic = REFT_SEGMENT_MAGIC;
  fixed.layout_version = REFT_SEGMENT_LAYOUT_VERSION;
  fixed.header_size = REFT_SEGMENT_HEADER_SIZE;
  fixed.segment_bytes = g.segment_bytes;
  fixed.payload_offset = g.payload_offset;
  fixed.payload_bytes = g.payload_bytes;
  fixed.chunk_size = g.chunk_size;
  fixed.chunk_count = g.chunk_count;
  fixed.region_table_offset = g.region_table_offset;
  fixed.chunk_table_offset = g.chunk_table_offset;
  fixed.region_count = static_cast<uint32_t>(g.regions.size());
  fixed.slot_index = slot;
  fixed.pp = rank.pp;
  fixed.tp = rank.tp;
  fixed.dp = rank.dp;
  fixed.job_len = static_cast<uint32_t>(rank.job.size());
  std::memcpy(fixed.job, rank.job.data(), rank.job.size());
  std::memcpy(base + g.region_table_offset, g.regions.data(),
              g.regions.size() * sizeof(reft_segment_region));
  std::memcpy(base, &fixed, kLayoutCovered);
  h->layout_checksum = LayoutChecksum(base, g.regions.size());
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

ActiveRecord ReadActiveRecord(const reft_segment_header* h) {
  ActiveRecord a;
  for (int i = 0; i < 2; ++i) {
    reft_segment_state_record r;
    std::memcpy(&r, &h->records[i], sizeof r);  // copy first: the bytes are shared memory
    if (!RecordValid(r) || r.seqno <= a.seqno) continue;
    a.index = i;
    a.seqno = r.seqno;
    a.state = static_cast<SlotState>(r.state);
    a.step = r.step;
    a.chunk_table_checksum = r.chunk_table_checksum;
  }
  return a;
}

ActiveRecord WriteRecord(reft_segment_header* h, const ActiveRecord& current, SlotState state,
                         int64_t step, uint64_t chunk_table_checksum) {
  ActiveRecord next;
  next.index = current.index == 0 ? 1 : 0;
  next.seqno = current.seqno + 1;
  next.state = state;
  next.step = step;
  next.chunk_table_checksum = chunk_table_checksum;
  reft_segment_state_record r{};
  r.seqno = next.seqno;
  r.state = static_cast<uint32_t>(state);
  r.step = step;
  r.chunk_table_checksum = chunk_table_checksum;
  r.checksum = Checksum64(&r, kRecordBody);
  // Everything before (payload, chunk table) must be in memory before the record that
  // publishes it; the record must be complete before anything the caller does next.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::memcpy(&h->records[next.index], &r, sizeof r);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return next;
}

uint64_t ChunkTableChecksum(const uint8_t* base, const Geometry& g) {
  return Checksum64(base + g.chunk_table_offset, g.chunk_count * 8);
}

bool HeaderIsBlank(const uint8_t* base, uint64_t file_size) {
  uint64_t n = std::min<uint64_t>(file_size, REFT_SEGMENT_HEADER_SIZE);
  for (uint64_t i = 0; i < n; ++i) {
    if (base[i] != 0) return false;
  }
  return true;
}

Result<ParsedSegment> ParseSegment(const uint8_t* base, uint64_t file_size) {
  if (file_size < REFT_SEGMENT_HEADER_SIZE) {
    return Status::Corrupted("file of " + std::to_string(file_size) +
                             " bytes is shorter than a segment header");
  }
  reft_segment_header h;
  std::memcpy(&h, base, sizeof h);  // copy once, validate the copy (TOCTOU)
  if (h.magic != REFT_SEGMENT_MAGIC) return Status::Corrupted("bad magic");
  if (h.layout_version != REFT_SEGMENT_LAYOUT_VERSION) {
    return Status::Corrupted("layout version " + std::to_string(h.layout_version) +
                             " (this daemon reads " +
                             std::to_string(REFT_SEGMENT_LAYOUT_VERSION) + ")");
  }
  if (h.header_size != REFT_SEGMENT_HEADER_SIZE) return Status::Corrupted("bad header_size");
  if (h.segment_bytes != file_size) {
    return Status::Corrupted("header says " + std::to_string(h.segment_bytes) +
                             " bytes, file has " + std::to_string(file_size));
  }
  if (h.region_count == 0 || h.region_count > 65536 ||
      REFT_SEGMENT_HEADER_SIZE + uint64_t{h.region_count} * sizeof(reft_segment_region) >
          file_size) {
    return Status::Corrupted("bad region_count " + std::to_string(h.region_count));
  }
  if (h.layout_checksum != LayoutChecksum(base, h.region_count)) {
    return Status::Corrupted("layout checksum mismatch (header or region table damaged)");
  }
  if (h.chunk_size < 4096 || (h.chunk_size & (h.chunk_size - 1)) != 0) {
    return Status::Corrupted("bad chunk_size " + std::to_string(h.chunk_size));
  }
  if (h.job_len == 0 || h.job_len > REFT_SEGMENT_JOB_MAX) return Status::Corrupted("bad job_len");
  ParsedSegment p;
  p.rank.job.assign(h.job, h.job_len);
  p.rank.pp = h.pp;
  p.rank.tp = h.tp;
  p.rank.dp = h.dp;
  p.slot = h.slot_index;
  Status rs = ValidateRankKey(p.rank);
  if (!rs.ok()) return Status::Corrupted("header names an invalid rank: " + rs.message());
  std::vector<reft_segment_region> regions(h.region_count);
  std::memcpy(regions.data(), base + REFT_SEGMENT_HEADER_SIZE,
              regions.size() * sizeof(reft_segment_region));
  for (const auto& e : regions) {
    size_t len = strnlen(e.name, sizeof e.name);
    if (len == sizeof e.name) return Status::Corrupted("region name not NUL-terminated");
    p.layout.push_back({std::string(e.name, len), e.size});
  }
  Status ls = ValidateLayout(p.layout);
  if (!ls.ok()) return Status::Corrupted("bad region table: " + ls.message());
  // Recompute the geometry from the region sizes: every offset must match exactly.
  p.geometry = ComputeGeometry(p.layout, h.chunk_size);
  const Geometry& g = p.geometry;
  if (g.segment_bytes != h.segment_bytes || g.payload_offset != h.payload_offset ||
      g.payload_bytes != h.payload_bytes || g.chunk_count != h.chunk_count ||
      g.chunk_table_offset != h.chunk_table_offset ||
      g.region_table_offset != h.region_table_offset) {
    return Status::Corrupted("sizes and offsets in the header are inconsistent");
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    if (std::memcmp(&regions[i], &g.regions[i], sizeof(reft_segment_region)) != 0) {
      return Status::Corrupted("region table entry " + std::to_string(i) + " is inconsistent");
    }
  }
  p.record = ReadActiveRecord(reinterpret_cast<const reft_segment_header*>(base));
  if (p.record.index >= 0 && p.record.state != SlotState::kFree && p.record.step < 0) {
    return Status::Corrupted("negative step in a non-free record");
  }
  return p;
}

}  // namespace reft::store::internal
