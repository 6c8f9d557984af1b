// Restart: a new store adopts what the previous one left in shm_dir.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "reft/checksum.h"
#include "reft/store/segment_layout.h"
#include "reft/store/snapshot_store.h"
#include "store_test_util.h"

using namespace reft;
using namespace reft::store;
using reft::store::testing::CheckPattern;
using reft::store::testing::FillPattern;
using reft::store::testing::OpenStore;

namespace {

const std::vector<RegionSpec> kLayout = {{"params", 400000}, {"rng", 33}};

void WriteStep(SnapshotStore& st, const RankKey& rank, int64_t step, bool commit = true) {
  auto slot = st.BeginWrite(rank, step);
  REQUIRE(slot.ok());
  FillPattern(**slot, step);
  REQUIRE(st.Seal(rank, step).ok());
  if (commit) REQUIRE(st.Commit(rank, step).ok());
}

}  // namespace

TEST_CASE("store: restart adopts committed and complete slots, discards partial ones", "[store]") {
  testing::ShmTestDir dir;
  auto o = testing::TestOptions(dir.shm_dir());
  RankKey r0{"job", 0, 0, 0}, r1{"job", 0, 0, 1};
  uint64_t used = 0;
  {
    auto st = OpenStore(o);
    REQUIRE(st->ConfigureRank(r0, kLayout).ok());
    REQUIRE(st->ConfigureRank(r1, kLayout).ok());
    WriteStep(*st, r0, 1);
    WriteStep(*st, r0, 2, /*commit=*/false);
    WriteStep(*st, r1, 1);
    auto w = st->BeginWrite(r1, 2);  // left writing: the "daemon" dies here
    REQUIRE(w.ok());
    FillPattern(**w, 2);
    used = st->Usage().used;
  }
  AdoptionReport rep;
  auto st = OpenStore(o, &rep);
  CHECK(rep.quarantined.empty());
  REQUIRE(rep.discarded_partial.size() == 1);
  CHECK(rep.discarded_partial[0].find("writing") != std::string::npos);
  CHECK(rep.adopted.size() == 3);
  CHECK(st->NewestCommitted(r0) == 1);
  CHECK(st->NewestCommitted(r1) == 1);
  CHECK(st->Get(r1, 2).status().code() == StatusCode::kNotFound);
  auto c = st->Get(r0, 2);
  REQUIRE(c.ok());
  CHECK(c.value()->info().state == SlotState::kComplete);
  CHECK(CheckPattern(**c, 2));
  CHECK(CheckPattern(**st->Get(r0, 1), 1));
  CHECK(CheckPattern(**st->Get(r1, 1), 1));
  // Usage is rebuilt from the files, and the layout too: BeginWrite works without ConfigureRank.
  CHECK(st->Usage().used == used);
  CHECK(st->Usage().slots == 4);
  CHECK(st->Ranks("job").size() == 2);
  REQUIRE(st->Commit(r0, 2).ok());  // roll the complete step forward, as the coordinator does
  WriteStep(*st, r1, 2);
  CHECK(st->Usage().used == used);  // the discarded slot's segment was re-used
}

TEST_CASE("store: adoption finishes an interrupted commit", "[store]") {
  testing::ShmTestDir dir;
  auto o = testing::TestOptions(dir.shm_dir());
  RankKey r{"job", 0, 0, 0};
  std::string older_path;
  {
    auto st = OpenStore(o);
    REQUIRE(st->ConfigureRank(r, kLayout).ok());
    WriteStep(*st, r, 1);
    older_path = st->List()[0].path;
    WriteStep(*st, r, 2, false);
  }
  // Simulate a crash between "publish committed(2)" and "free committed(1)": mark slot 1 of
  // step 2 committed by hand through its inactive state record.
  {
    auto st = OpenStore(o);
    auto slot = st->Get(r, 2);
    REQUIRE(slot.ok());
    // Re-publish the same record content with state committed, as Commit would.
    int fd = ::open(slot.value()->info().path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    reft_segment_header h;
    REQUIRE(::pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
    int active = h.records[0].seqno > h.records[1].seqno ? 0 : 1;
    reft_segment_state_record rec = h.records[active];
    rec.seqno += 1;
    rec.state = REFT_SEGMENT_COMMITTED;
    rec.checksum = Checksum64(&rec, offsetof(reft_segment_state_record, checksum));
    REQUIRE(::pwrite(fd, &rec, sizeof rec,
                     offsetof(reft_segment_header, records) + (1 - active) * sizeof rec) ==
            static_cast<ssize_t>(sizeof rec));
    ::close(fd);
  }
  AdoptionReport rep;
  auto st = OpenStore(o, &rep);
  CHECK(rep.quarantined.empty());
  CHECK(st->NewestCommitted(r) == 2);
  CHECK(st->Get(r, 1).status().code() == StatusCode::kNotFound);  // released on adoption
  CHECK(CheckPattern(**st->Get(r, 2), 2));
  CHECK(::access(older_path.c_str(), F_OK) == 0);  // kept as a free segment for re-use
}

TEST_CASE("store: adoption quarantines damaged segments", "[store]") {
  testing::ShmTestDir dir;
  auto o = testing::TestOptions(dir.shm_dir());
  RankKey r{"job", 0, 0, 0}, h{"job", 0, 0, 1}, m{"job", 0, 0, 2};
  std::string payload_path, header_path, mode_path;
  {
    auto st = OpenStore(o);
    for (const auto& k : {r, h, m}) {
      REQUIRE(st->ConfigureRank(k, kLayout).ok());
      WriteStep(*st, k, 4);
    }
    auto s = st->Get(r, 4);
    payload_path = s.value()->info().path;
    testing::FlipByte(payload_path, s.value()->region_file_offset(0) + 200000);
    header_path = st->Get(h, 4).value()->info().path;
    testing::FlipByte(header_path, offsetof(reft_segment_header, dp));
    mode_path = st->Get(m, 4).value()->info().path;
    REQUIRE(::chmod(mode_path.c_str(), 0666) == 0);
  }
  AdoptionReport rep;
  auto st = OpenStore(o, &rep);
  REQUIRE(rep.quarantined.size() == 3);
  std::string all;
  for (const auto& q : rep.quarantined) all += q + "\n";
  INFO(all);
  CHECK(all.find(payload_path + ": step 4 (committed) fails the checksum of payload chunk 3") !=
        std::string::npos);
  CHECK(all.find(header_path + ": layout checksum mismatch") != std::string::npos);
  CHECK(all.find(mode_path + ": mode 0666") != std::string::npos);
  CHECK(::access(payload_path.c_str(), F_OK) != 0);
  CHECK(testing::ListDir(o.shm_dir + "/quarantine").size() == 3);
  CHECK(!st->NewestCommitted(r));
  CHECK(!st->NewestCommitted(h));
  CHECK(st->Usage().used == 0);
  // The rank starts over cleanly.
  REQUIRE(st->ConfigureRank(r, kLayout).ok());
  WriteStep(*st, r, 5);
}

TEST_CASE("store: adoption of torn state records keeps the previous state", "[store]") {
  testing::ShmTestDir dir;
  auto o = testing::TestOptions(dir.shm_dir());
  RankKey r{"job", 0, 0, 0};
  std::string path;
  {
    auto st = OpenStore(o);
    REQUIRE(st->ConfigureRank(r, kLayout).ok());
    WriteStep(*st, r, 3);
    path = st->List()[0].path;
  }
  // A torn write of the next record: garbage in the inactive record with a higher seqno.
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  reft_segment_header hd;
  REQUIRE(::pread(fd, &hd, sizeof hd, 0) == static_cast<ssize_t>(sizeof hd));
  int active = hd.records[0].seqno > hd.records[1].seqno ? 0 : 1;
  reft_segment_state_record torn = hd.records[active];
  torn.seqno += 1;
  torn.state = REFT_SEGMENT_FREE;  // half-written: checksum not updated
  REQUIRE(::pwrite(fd, &torn, sizeof torn,
                   offsetof(reft_segment_header, records) + (1 - active) * sizeof torn) ==
          static_cast<ssize_t>(sizeof torn));
  ::close(fd);
  AdoptionReport rep;
  auto st = OpenStore(o, &rep);
  CHECK(rep.quarantined.empty());
  CHECK(st->NewestCommitted(r) == 3);
  CHECK(CheckPattern(**st->Get(r, 3), 3));
}

TEST_CASE("store: adoption ignores foreign files and removes blank segments", "[store]") {
  testing::ShmTestDir dir;
  auto o = testing::TestOptions(dir.shm_dir());
  REQUIRE(::mkdir(o.shm_dir.c_str(), 0700) == 0);
  const std::string foreign = o.shm_dir + "/notes.txt";
  const std::string blank = o.shm_dir + "/job.pp0-tp0-dp0.s0.seg";
  for (const auto& p : {foreign, blank}) {
    int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 1 << 20) == 0);
    ::close(fd);
  }
  AdoptionReport rep;
  auto st = OpenStore(o, &rep);
  CHECK(rep.quarantined.empty());
  CHECK(rep.discarded_partial.size() == 1);
  CHECK(::access(blank.c_str(), F_OK) != 0);
  CHECK(::access(foreign.c_str(), F_OK) == 0);
}

TEST_CASE("store: any single flipped header bit is caught or harmless", "[store]") {
  // Segment headers are read back after crashes: treat them as untrusted. Flip one bit at many
  // offsets of the header, region table and chunk table; adoption must never crash, never
  // adopt wrong bytes, and never report a committed step whose content is not the original.
  testing::ShmTestDir dir;
  auto o = testing::TestOptions(dir.shm_dir());
  RankKey r{"job", 0, 0, 0};
  std::string path;
  uint64_t payload_offset = 0;
  {
    auto st = OpenStore(o);
    REQUIRE(st->ConfigureRank(r, kLayout).ok());
    WriteStep(*st, r, 1);
    WriteStep(*st, r, 2);  // records: both used, active one committed
    auto g = st->Get(r, 2);
    path = g.value()->info().path;
    payload_offset = g.value()->region_file_offset(0);
  }
  std::vector<uint8_t> original(payload_offset);
  {
    int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(::pread(fd, original.data(), original.size(), 0) ==
            static_cast<ssize_t>(original.size()));
    ::close(fd);
  }
  const uint64_t meta_end = REFT_SEGMENT_HEADER_SIZE + 2 * sizeof(reft_segment_region) + 8 * 8;
  size_t quarantined = 0, adopted = 0, dropped = 0;
  for (uint64_t off = 0; off < meta_end; off += 3) {
    INFO("offset " << off);
    {
      int fd = ::open(path.c_str(), O_RDWR);
      REQUIRE(::pwrite(fd, original.data(), original.size(), 0) ==
              static_cast<ssize_t>(original.size()));
      ::close(fd);
    }
    testing::FlipByte(path, off);
    AdoptionReport rep;
    auto st = OpenStore(o, &rep);
    quarantined += rep.quarantined.size();
    auto newest = st->NewestCommitted(r);
    if (newest) {
      ++adopted;
      CHECK(*newest == 2);
      CHECK(CheckPattern(**st->Get(r, 2), 2));
    } else if (rep.quarantined.empty()) {
      ++dropped;  // a damaged state record fell back to an older state of this slot
    }
    st.reset();
    if (!rep.quarantined.empty()) {
      // Put the file back for the next round.
      for (const auto& q : testing::ListDir(o.shm_dir + "/quarantine")) {
        REQUIRE(::rename((o.shm_dir + "/quarantine/" + q).c_str(), path.c_str()) == 0);
      }
    } else if (::access(path.c_str(), F_OK) != 0) {
      FAIL("segment vanished without a report");
    }
  }
  INFO("quarantined " << quarantined << " adopted " << adopted << " fell back " << dropped);
  CHECK(quarantined > 0);
  CHECK(adopted > 0);
}
