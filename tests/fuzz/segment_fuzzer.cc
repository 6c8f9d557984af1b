// Fuzz target: the segment header / region table / chunk table parser of the store
// (daemon/store/src/segment_format.h ParseSegment), the image reader built on it
// (reft/store/segment_image.h SegmentImageReader::FromFd) and, on request, the store's
// adoption of a segment left in shm_dir (SnapshotStore::Open). Segments are read back after
// crashes and from the persistent tier, so they are untrusted input (docs/failure-model.md).
//
// Input: one control byte, then the file image. Control bits (harness aids, so that mutated
// headers get past the XXH3 checksums and reach the checks behind them; the parser itself
// always sees plain bytes):
//   bit 0  recompute the layout checksum, both state records' checksums and the records'
//          chunk-table checksum after the other fix-ups (a "consistent but lying" header);
//   bit 1  rewrite the chunk table from the payload, as the region table describes it;
//   bit 2  zero-pad the image to the header's segment_bytes (at most 1 MiB), so small inputs
//          can stand for files with a large payload;
//   bit 3  also adopt the image: write it as a 0600 segment file into a fresh shm_dir named as
//          its header says, then SnapshotStore::Open it and check what was adopted.
// Properties checked: anything ParseSegment accepts satisfies the format invariants of
// segment_layout.h (sizes and offsets inside the file, aligned, ordered, chunk ranges
// consecutive); a reader that opened an image returns exactly the file's bytes from Read, and
// Read succeeds on every region Verify finds clean; out-of-range reads fail; adopted slots
// verify clean and read back the file's bytes; nothing crashes, leaks or hits UB.
#include <algorithm>
#include <cstring>

#include "chunk_checksums.h"
#include "fuzz_util.h"
#include "naming.h"
#include "reft/checksum.h"
#include "reft/store/segment_image.h"
#include "reft/store/segment_layout.h"
#include "reft/store/snapshot_store.h"
#include "segment_format.h"

using namespace reft;
using namespace reft::store;
using reft::fuzz::Bytes;

namespace {

constexpr uint8_t kFixChecksums = 1, kFixChunkTable = 2, kPad = 4, kAdopt = 8;
constexpr uint64_t kMaxPad = 1 << 20;
constexpr size_t kRecordBody = offsetof(reft_segment_state_record, checksum);
constexpr size_t kLayoutCovered = offsetof(reft_segment_header, layout_checksum);

reft_segment_header HeaderOf(const Bytes& img) {
  reft_segment_header h{};
  std::memcpy(&h, img.data(), std::min(img.size(), sizeof h));
  return h;
}

void ApplyFixups(uint8_t control, Bytes* img) {
  if (img->size() < REFT_SEGMENT_HEADER_SIZE) return;
  reft_segment_header h = HeaderOf(*img);
  if ((control & kPad) && h.segment_bytes > img->size() && h.segment_bytes <= kMaxPad) {
    img->resize(h.segment_bytes, 0);
  }
  const uint64_t size = img->size();
  const uint64_t regions_end =
      REFT_SEGMENT_HEADER_SIZE + uint64_t{h.region_count} * sizeof(reft_segment_region);
  const bool table_fits = h.region_count <= 65536 && regions_end <= size;
  const bool chunks_fit = h.chunk_table_offset <= size && h.chunk_count <= size / 8 &&
                          h.chunk_table_offset + h.chunk_count * 8 <= size;
  if ((control & kFixChunkTable) && table_fits && chunks_fit && h.chunk_size >= 1) {
    uint64_t budget = 4 << 20;  // bytes hashed at most, whatever the table claims
    for (uint32_t i = 0; i < h.region_count; ++i) {
      reft_segment_region r;
      std::memcpy(&r, img->data() + REFT_SEGMENT_HEADER_SIZE + i * sizeof r, sizeof r);
      for (uint64_t c = 0; c < r.chunk_count && budget > 0; ++c) {
        if (r.first_chunk > h.chunk_count || c >= h.chunk_count - r.first_chunk) break;
        if (c > r.size / h.chunk_size) break;
        const uint64_t begin = r.offset + c * h.chunk_size;
        if (begin > size) break;
        const uint64_t len = std::min({h.chunk_size, r.size - c * h.chunk_size, size - begin});
        const uint64_t sum = Checksum64(img->data() + begin, len);
        std::memcpy(img->data() + h.chunk_table_offset + (r.first_chunk + c) * 8, &sum, 8);
        budget -= std::min(budget, len + 1);
      }
    }
  }
  if (control & kFixChecksums) {
    auto* hp = reinterpret_cast<reft_segment_header*>(img->data());
    for (auto& rec : hp->records) {
      if (chunks_fit) rec.chunk_table_checksum = Checksum64(img->data() + h.chunk_table_offset, h.chunk_count * 8);
      rec.checksum = Checksum64(&rec, kRecordBody);
    }
    if (table_fits) {
      ChecksumStream s;
      s.Update(img->data(), kLayoutCovered);
      s.Update(img->data() + REFT_SEGMENT_HEADER_SIZE, regions_end - REFT_SEGMENT_HEADER_SIZE);
      hp->layout_checksum = s.Digest();
    }
  }
}

void CheckParsed(const internal::ParsedSegment& p, uint64_t file_size) {
  const internal::Geometry& g = p.geometry;
  FUZZ_CHECK(g.segment_bytes == file_size, "segment_bytes %lu != file size %lu",
             (unsigned long)g.segment_bytes, (unsigned long)file_size);
  FUZZ_CHECK(internal::ValidateRankKey(p.rank).ok(), "invalid rank accepted");
  FUZZ_CHECK(internal::ValidateLayout(p.layout).ok(), "invalid layout accepted");
  FUZZ_CHECK(g.chunk_size >= 4096 && (g.chunk_size & (g.chunk_size - 1)) == 0, "chunk_size");
  FUZZ_CHECK(g.region_table_offset == REFT_SEGMENT_HEADER_SIZE, "region table offset");
  FUZZ_CHECK(g.chunk_table_offset == g.region_table_offset + g.regions.size() * 160,
             "chunk table offset");
  FUZZ_CHECK(g.chunk_table_offset + g.chunk_count * 8 <= g.payload_offset &&
                 g.payload_offset % REFT_SEGMENT_PAYLOAD_ALIGN == 0 && g.payload_offset <= file_size,
             "payload offset %lu", (unsigned long)g.payload_offset);
  FUZZ_CHECK(g.regions.size() == p.layout.size(), "region count");
  uint64_t next_offset = g.payload_offset, next_chunk = 0, payload = 0;
  for (size_t i = 0; i < g.regions.size(); ++i) {
    const auto& r = g.regions[i];
    FUZZ_CHECK(r.offset >= next_offset && r.offset % REFT_SEGMENT_PAYLOAD_ALIGN == 0,
               "region %zu offset %lu", i, (unsigned long)r.offset);
    FUZZ_CHECK(r.size <= file_size && r.offset <= file_size - r.size,
               "region %zu [%lu, +%lu) outside the file of %lu bytes", i, (unsigned long)r.offset,
               (unsigned long)r.size, (unsigned long)file_size);
    FUZZ_CHECK(r.first_chunk == next_chunk &&
                   r.chunk_count == (r.size + g.chunk_size - 1) / g.chunk_size,
               "region %zu chunk range", i);
    FUZZ_CHECK(p.layout[i].size == r.size && std::string(r.name, strnlen(r.name, sizeof r.name)) ==
                                                  p.layout[i].name,
               "region %zu differs from the layout", i);
    next_offset = r.offset + r.size;
    next_chunk += r.chunk_count;
    payload += r.size;
  }
  FUZZ_CHECK(next_chunk == g.chunk_count && payload == g.payload_bytes, "chunk/payload totals");
  FUZZ_CHECK(p.record.index >= -1 && p.record.index <= 1, "record index");
  FUZZ_CHECK(static_cast<uint32_t>(p.record.state) <= 3, "record state");
}

void CheckReader(const Bytes& img, const internal::ParsedSegment* parsed) {
  static int memfd = -1;
  if (memfd < 0) memfd = ::memfd_create("reft-fuzz-image", MFD_CLOEXEC);
  FUZZ_CHECK(memfd >= 0, "memfd_create");
  FUZZ_CHECK(::ftruncate(memfd, 0) == 0 && ::pwrite(memfd, img.data(), img.size(), 0) ==
                                               static_cast<ssize_t>(img.size()),
             "writing the memfd");
  auto reader = SegmentImageReader::FromFd(::dup(memfd), "fuzz-image");
  if (!reader.ok()) {
    FUZZ_CHECK(reader.status().code() == StatusCode::kCorrupted ||
                   reader.status().code() == StatusCode::kIoError,
               "FromFd failed with %s", reader.status().ToString().c_str());
    return;
  }
  const SegmentImageReader& r = **reader;
  reft::fuzz::Count("reader opened");
  FUZZ_CHECK(parsed != nullptr, "the reader opened an image ParseSegment refuses");
  FUZZ_CHECK(r.step() >= 0 && r.regions() == parsed->layout && r.rank() == parsed->rank,
             "reader and parser disagree");
  auto report = r.Verify();
  FUZZ_CHECK(report.ok(), "Verify: %s", report.status().ToString().c_str());
  reft::fuzz::Count(report->bad.empty() ? "reader verify clean" : "reader verify bad chunks");
  FUZZ_CHECK(report->chunks_checked == r.chunk_count(), "Verify checked %lu of %lu chunks",
             (unsigned long)report->chunks_checked, (unsigned long)r.chunk_count());
  const auto& regions = parsed->geometry.regions;
  Bytes buf;
  for (size_t i = 0; i < regions.size() && i < 64; ++i) {
    const auto& reg = regions[i];
    bool clean = true;
    for (const auto& b : report->bad) clean = clean && b.region != r.regions()[i].name;
    FUZZ_CHECK(r.FindRegion(r.regions()[i].name).ValueOr(SIZE_MAX) == i, "FindRegion");
    buf.assign(reg.size, 0);
    Status s = r.Read(i, 0, buf.data(), reg.size);
    FUZZ_CHECK(s.ok() || !clean, "Read of clean region %zu failed: %s", i, s.ToString().c_str());
    if (s.ok()) {
      FUZZ_CHECK(std::memcmp(buf.data(), img.data() + reg.offset, reg.size) == 0,
                 "Read of region %zu returned bytes that are not the file's", i);
    } else {
      FUZZ_CHECK(s.code() == StatusCode::kCorrupted, "Read failed with %s", s.ToString().c_str());
    }
    const uint64_t off = reg.size / 3, len = reg.size / 2;
    s = r.Read(i, off, buf.data(), len);
    if (s.ok()) {
      FUZZ_CHECK(std::memcmp(buf.data(), img.data() + reg.offset + off, len) == 0,
                 "partial Read of region %zu returned wrong bytes", i);
    }
    FUZZ_CHECK(r.Read(i, reg.size, buf.data(), 1).code() == StatusCode::kInvalidArgument,
               "read past the end of region %zu accepted", i);
  }
  uint8_t one;
  FUZZ_CHECK(!r.Read(regions.size(), 0, &one, 1).ok(), "read of a region that does not exist");
}

// ---- adoption ----

void CheckAdoption(const Bytes& img, const internal::ParsedSegment* parsed) {
  static reft::fuzz::TempDir dir("reft-fuzz-segment");  // removed at exit
  dir.Clean();
  const std::string store_dir = dir.path() + "/shm";
  FUZZ_CHECK(::mkdir(store_dir.c_str(), 0700) == 0, "mkdir %s", store_dir.c_str());
  // The file name the header claims (adoption quarantines a mismatch); a generic one otherwise.
  RankKey rank{"fuzz", 0, 0, 0};
  uint32_t slot = 0;
  if (parsed != nullptr) {
    rank = parsed->rank;
    slot = parsed->slot;
  } else if (img.size() >= sizeof(reft_segment_header)) {
    reft_segment_header h = HeaderOf(img);
    RankKey claimed{std::string(h.job, std::min<uint32_t>(h.job_len, sizeof h.job)), h.pp, h.tp,
                    h.dp};
    if (internal::ValidateRankKey(claimed).ok()) {
      rank = claimed;
      slot = h.slot_index;
    }
  }
  const std::string file = store_dir + "/" + internal::SegmentFileName(rank, slot);
  int fd = ::open(file.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  FUZZ_CHECK(fd >= 0, "create %s", file.c_str());
  FUZZ_CHECK(::write(fd, img.data(), img.size()) == static_cast<ssize_t>(img.size()), "write");
  ::close(fd);

  StoreOptions options;
  options.shm_dir = store_dir;
  options.prefault = false;
  AdoptionReport report;
  auto store = SnapshotStore::Open(options, &report);
  FUZZ_CHECK(store.ok(), "Open: %s", store.status().ToString().c_str());
  FUZZ_CHECK(report.adopted.size() + report.discarded_partial.size() + report.quarantined.size() <= 2,
             "one file, %zu outcomes", report.adopted.size() + report.discarded_partial.size() +
                                             report.quarantined.size());
  reft::fuzz::Count(!report.adopted.empty()             ? "adopted"
                    : !report.quarantined.empty()       ? "quarantined"
                    : !report.discarded_partial.empty() ? "discarded partial"
                                                        : "adoption: nothing");
  for (const auto& info : report.adopted) {
    FUZZ_CHECK(parsed != nullptr && info.rank == parsed->rank && info.regions == parsed->layout,
               "adopted a slot the parser refuses or describes differently");
    auto ref = (*store)->Get(info.rank, info.step);
    FUZZ_CHECK(ref.ok(), "adopted slot not readable: %s", ref.status().ToString().c_str());
    auto verify = (*store)->Verify(info.rank, info.step);
    FUZZ_CHECK(verify.ok() && verify->bad.empty(), "adopted slot fails verification");
    for (size_t i = 0; i < info.regions.size(); ++i) {
      const auto& reg = parsed->geometry.regions[i];
      FUZZ_CHECK((*ref)->region_size(i) == reg.size &&
                     std::memcmp((*ref)->region_data(i), img.data() + reg.offset, reg.size) == 0,
                 "adopted region %zu is not the file's bytes", i);
    }
  }
  (*store)->List();
  (*store)->Usage();
}

// ---- seeds ----

Bytes Image(const RankKey& rank, int64_t step, const std::vector<std::pair<std::string, Bytes>>& regions,
            uint64_t chunk_size) {
  std::vector<ImageRegion> spans;
  for (const auto& [name, bytes] : regions) spans.push_back({name, bytes.data(), bytes.size()});
  ImageOptions o;
  o.chunk_size = chunk_size;
  auto w = SegmentImageWriter::Prepare(rank, step, spans, o);
  FUZZ_CHECK(w.ok(), "Prepare: %s", w.status().ToString().c_str());
  Bytes out;
  Status s = w->Stream([&](const void* d, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(d), static_cast<const uint8_t*>(d) + n);
    return Status::OK();
  });
  FUZZ_CHECK(s.ok(), "Stream");
  return out;
}

Bytes With(uint8_t control, const Bytes& img) {
  Bytes out{control};
  out.insert(out.end(), img.begin(), img.end());
  return out;
}

void WriteSeeds(const reft::fuzz::SeedSink& sink) {
  Bytes meta(100), shard(10000), arc(5000);
  for (size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < meta.size(); ++i) meta[i] = static_cast<uint8_t>('a' + i % 26);
  const Bytes img = Image({"run-1", 0, 1, 2}, 42, {{"meta", meta}, {"rep/shard", shard}, {"rep/arc+1", arc}}, 4096);
  sink("image_committed", With(0, img));
  sink("image_adopt", With(kAdopt, img));
  // Header and tables only; the harness pads the payload and fixes every checksum, so the
  // fuzzer works on the header fields themselves.
  internal::ParsedSegment p = *internal::ParseSegment(img.data(), img.size());
  Bytes head(img.begin(), img.begin() + p.geometry.payload_offset);
  sink("header_fixups", With(kFixChecksums | kFixChunkTable | kPad, head));
  sink("header_fixups_adopt", With(kFixChecksums | kFixChunkTable | kPad | kAdopt, head));
  // The same slot "complete" (not yet committed) and "writing": adoption keeps / discards.
  for (auto [state, name] : {std::pair<uint32_t, const char*>{2, "complete"}, {1, "writing"}}) {
    Bytes s = img;
    auto* h = reinterpret_cast<reft_segment_header*>(s.data());
    h->records[0].state = state;
    sink(std::string("state_") + name, With(kFixChecksums | kAdopt, s));
  }
  // A flipped payload byte: the reader and adoption must report it, never return it.
  Bytes bad = img;
  bad[p.geometry.regions[1].offset + 5000] ^= 0x40;
  sink("payload_flip", With(kAdopt, bad));
  // Two records, the newer one torn (checksum wrong): the older state stays in force.
  Bytes torn = img;
  auto* th = reinterpret_cast<reft_segment_header*>(torn.data());
  th->records[1] = th->records[0];
  th->records[1].seqno = 2;
  th->records[1].state = 1;
  sink("torn_record", With(kAdopt, torn));
  // Larger chunks and a single big region (chunk_size 64 KiB, 3 chunks).
  Bytes big(150000, 0x5a);
  const Bytes img2 = Image({"job.with.dots", 3, 0, 0}, 0, {{"unique/rng", big}}, 65536);
  internal::ParsedSegment p2 = *internal::ParseSegment(img2.data(), img2.size());
  sink("big_chunks_header", With(kFixChecksums | kFixChunkTable | kPad,
                                 Bytes(img2.begin(), img2.begin() + p2.geometry.payload_offset)));
  sink("blank_adopt", With(kAdopt, Bytes(4096, 0)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  reft::fuzz::MaybeWriteSeeds(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  Bytes img(data + 1, data + size);
  ApplyFixups(control, &img);

  (void)internal::HeaderIsBlank(img.data(), img.size());
  auto parsed = internal::ParseSegment(img.data(), img.size());
  reft::fuzz::Count(parsed.ok() ? "parse ok" : "parse refused");
  if (parsed.ok()) {
    reft::fuzz::Count(parsed->record.index < 0 ? "parse ok, no record" : "parse ok, record");
    CheckParsed(*parsed, img.size());
  } else {
    FUZZ_CHECK(parsed.status().code() == StatusCode::kCorrupted, "ParseSegment failed with %s",
               parsed.status().ToString().c_str());
  }
  const internal::ParsedSegment* p = parsed.ok() ? &*parsed : nullptr;
  CheckReader(img, p);
  if (control & kAdopt) CheckAdoption(img, p);
  return 0;
}
