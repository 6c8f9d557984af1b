// The store's segment-image API (reft/store/segment_image.h): the persistent tier's file format.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>

#include "persist_test_util.h"
#include "reft/store/segment_image.h"
#include "reft/store/segment_layout.h"
#include "test_support.h"

using namespace reft;
using namespace reft::store;
namespace pt = reft::persist::testing;

namespace {

const RankKey kRank{"img-job", 1, 2, 3};

int WriteImageFile(const std::string& path, const SegmentImageWriter& w) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  Status s = w.WriteToFd(fd);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return fd;
}

}  // namespace

TEST_CASE("segment image: write then read back every region and sub-range", "[persist][image]") {
  reft::testing::TempDir dir("reft-image");
  pt::RankData data(kRank, 42);
  auto img = data.image();
  ImageOptions opt;
  opt.chunk_size = 4096;
  opt.checksum_threads = GENERATE(1, 3);
  auto w = SegmentImageWriter::Prepare(kRank, 42, img.regions, opt);
  INFO(w.status().ToString());
  REQUIRE(w.ok());
  CHECK(w->file_bytes() % REFT_SEGMENT_PAYLOAD_ALIGN == 0);
  CHECK(w->chunk_count() == 1 + 4 + 1 + 1 + 0);
  const std::string path = dir.path() + "/a.img";
  ::close(WriteImageFile(path, *w));
  CHECK(pt::FileSize(path) == w->file_bytes());

  auto r = SegmentImageReader::Open(path);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  const SegmentImageReader& rd = **r;
  CHECK(rd.rank() == kRank);
  CHECK(rd.step() == 42);
  CHECK(rd.regions() == data.layout());
  CHECK(rd.chunk_table_checksum() == w->chunk_table_checksum());
  CHECK(rd.payload_bytes() == w->payload_bytes());

  const uint64_t seed = reft::testing::TestSeed(7);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < data.layout().size(); ++i) {
    const auto& want = data.bytes(i);
    std::vector<uint8_t> got(want.size());
    REQUIRE(rd.Read(i, 0, got.data(), got.size()).ok());
    CHECK(got == want);
    for (int k = 0; k < 20 && !want.empty(); ++k) {
      uint64_t off = rng() % want.size();
      uint64_t len = rng() % (want.size() - off + 1);
      std::vector<uint8_t> part(len);
      REQUIRE(rd.Read(i, off, part.data(), len).ok());
      CHECK(std::equal(part.begin(), part.end(), want.begin() + off));
    }
  }
  // Out-of-range reads are refused.
  uint8_t b;
  CHECK(rd.Read(0, 37, &b, 1).code() == StatusCode::kInvalidArgument);
  CHECK(rd.Read(99, 0, &b, 1).code() == StatusCode::kInvalidArgument);
  CHECK(rd.FindRegion("nope").status().code() == StatusCode::kNotFound);
  auto v = rd.Verify();
  REQUIRE(v.ok());
  CHECK(v->bad.empty());
  CHECK(v->chunks_checked == w->chunk_count());

  // The header really is the store's format in state committed(42), record A, seqno 1.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  reft_segment_header h{};
  REQUIRE(::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
  ::close(fd);
  CHECK(h.magic == REFT_SEGMENT_MAGIC);
  CHECK(h.records[0].state == REFT_SEGMENT_COMMITTED);
  CHECK(h.records[0].step == 42);
  CHECK(h.records[0].seqno == 1);
  CHECK(h.records[1].seqno == 0);
}

TEST_CASE("segment image: Stream emits exactly the bytes WriteToFd writes", "[persist][image]") {
  pt::RankData data(kRank, 5);
  ImageOptions opt;
  opt.chunk_size = 4096;
  auto w = SegmentImageWriter::Prepare(kRank, 5, data.image().regions, opt);
  REQUIRE(w.ok());
  std::vector<uint8_t> streamed;
  size_t biggest = 0;
  REQUIRE(w->Stream(
               [&](const void* p, size_t n) {
                 biggest = std::max(biggest, n);
                 streamed.insert(streamed.end(), static_cast<const uint8_t*>(p),
                                 static_cast<const uint8_t*>(p) + n);
                 return Status::OK();
               },
               4096)
              .ok());
  CHECK(streamed.size() == w->file_bytes());
  CHECK(biggest <= 4096);
  // A memfd holding the streamed bytes opens as a valid image.
  int fd = ::memfd_create("img", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, streamed.data(), streamed.size()) == static_cast<ssize_t>(streamed.size()));
  auto r = SegmentImageReader::FromFd(fd, "memfd");
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK((*r)->step() == 5);
  // A failing sink stops the stream with its own status.
  int calls = 0;
  Status s = w->Stream([&](const void*, size_t) {
    return ++calls == 2 ? Status::IoError("sink full") : Status::OK();
  });
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message() == "sink full");
  CHECK(calls == 2);
}

TEST_CASE("segment image: Prepare rejects bad input", "[persist][image]") {
  std::vector<uint8_t> buf(10);
  std::vector<ImageRegion> ok{{"a", buf.data(), buf.size()}};
  CHECK(SegmentImageWriter::Prepare({"bad/job", 0, 0, 0}, 1, ok).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(SegmentImageWriter::Prepare({"", 0, 0, 0}, 1, ok).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(SegmentImageWriter::Prepare({"j", -1, 0, 0}, 1, ok).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(SegmentImageWriter::Prepare(kRank, -1, ok).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(SegmentImageWriter::Prepare(kRank, 1, {}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(SegmentImageWriter::Prepare(kRank, 1, {{"a", buf.data(), 1}, {"a", buf.data(), 2}})
            .status()
            .code() == StatusCode::kInvalidArgument);
  CHECK(SegmentImageWriter::Prepare(kRank, 1, {{"a", nullptr, 5}}).status().code() ==
        StatusCode::kInvalidArgument);
  ImageOptions bad;
  bad.chunk_size = 5000;
  CHECK(SegmentImageWriter::Prepare(kRank, 1, ok, bad).status().code() ==
        StatusCode::kInvalidArgument);
  // Zero-sized regions with no data are fine.
  CHECK(SegmentImageWriter::Prepare(kRank, 1, {{"empty", nullptr, 0}}).ok());
}

TEST_CASE("segment image: damaged headers or records and truncation are Corrupted",
          "[persist][image]") {
  reft::testing::TempDir dir("reft-image");
  pt::RankData data(kRank, 9);
  ImageOptions opt;
  opt.chunk_size = 4096;
  auto w = SegmentImageWriter::Prepare(kRank, 9, data.image().regions, opt);
  REQUIRE(w.ok());
  const std::string path = dir.path() + "/a.img";
  auto fresh = [&] { ::close(WriteImageFile(path, *w)); };
  auto open_error = [&]() -> Status {
    auto r = SegmentImageReader::Open(path);
    return r.ok() ? Status::OK() : r.status();
  };

  SECTION("fixed header") {
    fresh();
    pt::FlipByte(path, offsetof(reft_segment_header, payload_bytes));
    Status s = open_error();
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK(pt::Contains(s.message(), path));
    CHECK(pt::Contains(s.message(), "layout checksum"));
  }
  SECTION("state record") {
    fresh();
    pt::FlipByte(path, offsetof(reft_segment_header, records) + 16);
    Status s = open_error();
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK(pt::Contains(s.message(), "not a sealed image"));
  }
  SECTION("chunk table") {
    fresh();
    pt::FlipByte(path, pt::ChunkTableOffset(path) + 8 * 3 + 1);
    Status s = open_error();
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK(pt::Contains(s.message(), "chunk table"));
  }
  SECTION("truncated by one page") {
    fresh();
    pt::Truncate(path, w->file_bytes() - 4096);
    Status s = open_error();
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK(pt::Contains(s.message(), "bytes"));
  }
  SECTION("truncated inside the header") {
    fresh();
    pt::Truncate(path, 100);
    Status s = open_error();
    CHECK(s.code() == StatusCode::kCorrupted);
    CHECK(pt::Contains(s.message(), "shorter than a segment header"));
  }
  SECTION("missing file") {
    CHECK(open_error().code() == StatusCode::kNotFound);
  }
}
