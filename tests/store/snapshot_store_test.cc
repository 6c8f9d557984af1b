// SnapshotStore lifecycle, slot policy, memory limit, verification, concurrency, file modes.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <thread>

#include "reft/store/segment_layout.h"
#include "reft/store/snapshot_store.h"
#include "store_test_util.h"

using namespace reft;
using namespace reft::store;
using reft::store::testing::CheckPattern;
using reft::store::testing::FillPattern;
using reft::store::testing::OpenStore;
using reft::store::testing::ShmTestDir;
using reft::store::testing::TestOptions;

namespace {

const std::vector<RegionSpec> kLayout = {{"params/shard", 300001}, {"optim", 131072}, {"rng", 17}};

void WriteStep(SnapshotStore& st, const RankKey& rank, int64_t step, bool commit = true) {
  auto slot = st.BeginWrite(rank, step);
  INFO(slot.status().ToString());
  REQUIRE(slot.ok());
  FillPattern(**slot, step);
  REQUIRE(st.Seal(rank, step).ok());
  if (commit) REQUIRE(st.Commit(rank, step).ok());
}

ino_t Inode(const std::string& path) {
  struct stat s {};
  REQUIRE(::stat(path.c_str(), &s) == 0);
  return s.st_ino;
}

}  // namespace

TEST_CASE("store: full lifecycle of one slot", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"job-1", 0, 1, 2};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());

  auto w = st->BeginWrite(rank, 7);
  REQUIRE(w.ok());
  const SlotRef& slot = **w;
  CHECK(slot.info().state == SlotState::kWriting);
  CHECK(slot.info().step == 7);
  REQUIRE(slot.info().regions == kLayout);
  for (size_t i = 0; i < kLayout.size(); ++i) {
    CHECK(slot.region_size(i) == kLayout[i].size);
    CHECK(slot.region_file_offset(i) % REFT_SEGMENT_PAYLOAD_ALIGN == 0);
  }
  CHECK(*slot.FindRegion("optim") == 1);
  CHECK(slot.FindRegion("nope").status().code() == StatusCode::kNotFound);
  FillPattern(slot, 7);

  // The dup()ed fd sees the same bytes at region_file_offset (what a trainer maps).
  auto fd = slot.DupFd();
  REQUIRE(fd.ok());
  std::vector<uint8_t> buf(kLayout[0].size);
  REQUIRE(::pread(*fd, buf.data(), buf.size(), static_cast<off_t>(slot.region_file_offset(0))) ==
          static_cast<ssize_t>(buf.size()));
  CHECK(std::memcmp(buf.data(), slot.region_data(0), buf.size()) == 0);
  ::close(*fd);

  CHECK(st->Get(rank, 7).status().code() == StatusCode::kNotFound);  // not sealed yet
  CHECK(st->Commit(rank, 7).code() == StatusCode::kInvalidArgument);
  REQUIRE(st->Seal(rank, 7).ok());
  auto list = st->List();
  REQUIRE(list.size() == 1);
  CHECK(list[0].state == SlotState::kComplete);
  CHECK(!st->NewestCommitted(rank));
  REQUIRE(st->Commit(rank, 7).ok());
  REQUIRE(st->Commit(rank, 7).ok());  // idempotent
  CHECK(st->NewestCommitted(rank) == 7);
  CHECK(st->List()[0].state == SlotState::kCommitted);

  auto got = st->Get(rank, 7);
  REQUIRE(got.ok());
  CHECK(CheckPattern(**got, 7));
  auto v = st->Verify(rank, 7);
  REQUIRE(v.ok());
  CHECK(v->bad.empty());
  CHECK(v->chunks_checked == (300001 + 65535) / 65536 + 2 + 1);

  CHECK(st->BeginWrite(rank, 7).status().code() == StatusCode::kInvalidArgument);
  CHECK(st->BeginWrite(rank, 3).status().code() == StatusCode::kInvalidArgument);

  MemoryUsage u = st->Usage();
  CHECK(u.slots == 1);
  CHECK(u.used == list[0].segment_bytes);
  const std::string path = list[0].path;
  CHECK(::access(path.c_str(), F_OK) == 0);

  CHECK(st->Drop("job-1", 8).code() == StatusCode::kNotFound);
  REQUIRE(st->Drop("job-1", 7).ok());
  CHECK(::access(path.c_str(), F_OK) != 0);  // unlinked
  CHECK(st->List().empty());
  CHECK(st->Usage().used == 0);
  CHECK(CheckPattern(**got, 7));  // a reader keeps its mapping after the drop

  WriteStep(*st, rank, 9);
  RankKey other{"job-2", 0, 0, 0};
  REQUIRE(st->ConfigureRank(other, kLayout).ok());
  WriteStep(*st, other, 1);
  REQUIRE(st->RemoveJob("job-1").ok());
  CHECK(st->Ranks("job-1").empty());
  CHECK(st->List().size() == 1);
  CHECK(st->List()[0].rank == other);
}

TEST_CASE("store: BeginWrite without a layout and Abort", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"j", 0, 0, 0};
  CHECK(st->BeginWrite(rank, 1).status().code() == StatusCode::kNotFound);
  CHECK(st->ConfigureRank(rank, {}).code() == StatusCode::kInvalidArgument);
  CHECK(st->ConfigureRank(rank, {{"a", 1}, {"a", 2}}).code() == StatusCode::kInvalidArgument);
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  auto w = st->BeginWrite(rank, 1);
  REQUIRE(w.ok());
  const std::string path = (*w)->info().path;
  CHECK(st->BeginWrite(rank, 1).status().code() == StatusCode::kBusy);
  REQUIRE(st->Abort(rank, 1).ok());
  CHECK(st->Abort(rank, 1).code() == StatusCode::kNotFound);
  CHECK(st->List().empty());
  w = {Status::Internal("released")};
  // The aborted slot's segment is re-used for the next step (same file, not re-created).
  const ino_t ino = Inode(path);
  WriteStep(*st, rank, 2);
  CHECK(Inode(path) == ino);
  CHECK(st->Usage().slots == 1);
}

TEST_CASE("store: the newest committed snapshot is never overwritten", "[store]") {
  ShmTestDir dir;
  auto o = TestOptions(dir.shm_dir());
  o.slots_per_rank = 2;
  auto st = OpenStore(o);
  RankKey rank{"job", 1, 0, 3};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  WriteStep(*st, rank, 0);
  std::set<ino_t> inodes;
  for (int64_t s = 1; s <= 30; ++s) {
    auto w = st->BeginWrite(rank, s);
    REQUIRE(w.ok());
    inodes.insert(Inode((*w)->info().path));
    FillPattern(**w, s);
    // Both slots are taken (committed s-1, writing s): a third step must wait.
    CHECK(st->BeginWrite(rank, s + 1).status().code() == StatusCode::kBusy);
    auto old = st->Get(rank, s - 1);
    REQUIRE(old.ok());
    CHECK(old.value()->info().state == SlotState::kCommitted);
    CHECK(CheckPattern(**old, s - 1));
    REQUIRE(st->Seal(rank, s).ok());
    CHECK(st->NewestCommitted(rank) == s - 1);
    REQUIRE(st->Commit(rank, s).ok());
    CHECK(st->NewestCommitted(rank) == s);
    CHECK(st->Get(rank, s - 1).status().code() == StatusCode::kNotFound);  // released
    old = {Status::Internal("released")};
  }
  CHECK(inodes.size() == 2);  // two segments, re-used 30 times, never re-created
  CHECK(st->Usage().slots == 2);
}

TEST_CASE("store: complete but uncommitted slots and the two-phase commit", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));  // 3 slots
  RankKey rank{"job", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  WriteStep(*st, rank, 1);
  WriteStep(*st, rank, 2, /*commit=*/false);
  WriteStep(*st, rank, 3, /*commit=*/false);
  // Slots: committed 1, complete 2, complete 3. Step 4 takes the oldest complete (2).
  auto w = st->BeginWrite(rank, 4);
  REQUIRE(w.ok());
  FillPattern(**w, 4);
  CHECK(st->Get(rank, 2).status().code() == StatusCode::kNotFound);
  REQUIRE(st->Seal(rank, 4).ok());
  // Committing 3 keeps the newer complete 4 and releases 1.
  REQUIRE(st->Commit(rank, 3).ok());
  CHECK(st->Get(rank, 1).status().code() == StatusCode::kNotFound);
  CHECK(st->Get(rank, 4).ok());
  CHECK(st->Commit(rank, 1).code() == StatusCode::kNotFound);
  REQUIRE(st->Commit(rank, 4).ok());
  CHECK(st->NewestCommitted(rank) == 4);
  CHECK(st->List().size() == 1);
}

TEST_CASE("store: memory limit refuses a snapshot and keeps the earlier one", "[store]") {
  ShmTestDir dir;
  auto o = TestOptions(dir.shm_dir());
  {
    // Size one segment first.
    auto probe = OpenStore(TestOptions(dir.path() + "/probe"));
    REQUIRE(probe->ConfigureRank({"p", 0, 0, 0}, kLayout).ok());
    REQUIRE(probe->BeginWrite({"p", 0, 0, 0}, 0).ok());
    o.memory_limit = probe->Usage().used + 4096;  // room for one segment only
  }
  auto st = OpenStore(o);
  RankKey rank{"job", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  WriteStep(*st, rank, 1);
  auto w = st->BeginWrite(rank, 2);
  REQUIRE(w.status().code() == StatusCode::kOutOfMemory);
  const std::string& msg = w.status().message();
  INFO(msg);
  CHECK(msg.find("needs") != std::string::npos);
  CHECK(msg.find("in use") != std::string::npos);
  CHECK(msg.find("limit") != std::string::npos);
  CHECK(msg.find("job/pp0-tp0-dp0") != std::string::npos);
  // The committed snapshot is intact and still verifies.
  auto got = st->Get(rank, 1);
  REQUIRE(got.ok());
  CHECK(CheckPattern(**got, 1));
  CHECK(st->Verify(rank, 1)->bad.empty());
  CHECK(st->NewestCommitted(rank) == 1);
  CHECK(st->Usage().slots == 1);
  // Another rank does not fit either, and nothing committed is evicted for it.
  RankKey r2{"job", 0, 0, 1};
  REQUIRE(st->ConfigureRank(r2, kLayout).ok());
  CHECK(st->BeginWrite(r2, 1).status().code() == StatusCode::kOutOfMemory);
  CHECK(st->Ranks().size() == 2);
  CHECK(st->List().size() == 1);
  // Free (empty) segments are reclaimed for other ranks: after a drop and an aborted write
  // rank 0 holds one free segment, which r2's snapshot takes over.
  REQUIRE(st->Drop("job", 1).ok());
  CHECK(st->Usage().used == 0);
  REQUIRE(st->BeginWrite(rank, 2).ok());
  REQUIRE(st->Abort(rank, 2).ok());
  CHECK(st->Usage().slots == 1);
  WriteStep(*st, r2, 1);
  CHECK(st->Usage().slots == 1);
  CHECK(st->NewestCommitted(r2) == 1);
}

TEST_CASE("store: a flipped byte is reported by Verify", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"job", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  WriteStep(*st, rank, 5);
  auto got = st->Get(rank, 5);
  REQUIRE(got.ok());
  const uint64_t off = (*got)->region_file_offset(0) + 3 * 65536 + 123;  // chunk 3 of region 0
  testing::FlipByte((*got)->info().path, off);
  auto v = st->Verify(rank, 5);
  REQUIRE(v.ok());
  REQUIRE(v->bad.size() == 1);
  CHECK(v->bad[0].region == "params/shard");
  CHECK(v->bad[0].chunk == 3);
  CHECK(v->bad[0].offset == 3 * 65536);
}

TEST_CASE("store: concurrent writers on several ranks", "[store]") {
  ShmTestDir dir;
  auto o = TestOptions(dir.shm_dir());
  o.checksum_threads = 3;
  auto st = OpenStore(o);
  constexpr int kRanks = 4, kSteps = 12;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      RankKey rank{"job", 0, 0, r};
      std::vector<RegionSpec> layout = {{"a", 200000u + 4096u * r}, {"b", 777}};
      if (!st->ConfigureRank(rank, layout).ok()) errors[r] = "configure";
      for (int64_t s = 1; s <= kSteps && errors[r].empty(); ++s) {
        auto w = st->BeginWrite(rank, s);
        if (!w.ok()) { errors[r] = w.status().ToString(); break; }
        FillPattern(**w, s * 100 + r);
        Status ss = st->Seal(rank, s);
        if (ss.ok()) ss = st->Commit(rank, s);
        if (!ss.ok()) { errors[r] = ss.ToString(); break; }
        auto g = st->Get(rank, s);
        if (!g.ok() || !CheckPattern(**g, s * 100 + r)) errors[r] = "content of step " + std::to_string(s);
        (void)st->List();
        (void)st->Usage();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
  CHECK(st->List().size() == kRanks);
  for (int r = 0; r < kRanks; ++r) {
    RankKey rank{"job", 0, 0, r};
    CHECK(st->NewestCommitted(rank) == kSteps);
    CHECK(st->Verify(rank, kSteps)->bad.empty());
  }
}

TEST_CASE("store: file and directory modes", "[store]") {
  ShmTestDir dir;
  const mode_t old_umask = ::umask(0077);  // must not narrow the configured mode
  for (mode_t mode : {mode_t{0600}, mode_t{0640}}) {
    auto o = TestOptions(dir.path() + "/m" + std::to_string(mode));
    o.file_mode = mode;
    auto st = OpenStore(o);
    RankKey rank{"job", 0, 0, 0};
    REQUIRE(st->ConfigureRank(rank, kLayout).ok());
    WriteStep(*st, rank, 1);
    struct stat fs {}, ds {};
    REQUIRE(::stat(st->List()[0].path.c_str(), &fs) == 0);
    REQUIRE(::stat(o.shm_dir.c_str(), &ds) == 0);
    CHECK((fs.st_mode & 07777) == mode);
    CHECK((ds.st_mode & 07777) == (mode == 0640 ? 0750u : 0700u));
    CHECK(fs.st_uid == ::geteuid());
  }
  ::umask(old_umask);
  auto o = TestOptions(dir.path() + "/bad");
  o.file_mode = 0644;
  auto bad = SnapshotStore::Open(o);
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("0644") != std::string::npos);
  o.file_mode = 0600;
  o.slots_per_rank = 1;
  CHECK(SnapshotStore::Open(o).status().code() == StatusCode::kInvalidArgument);
  o.slots_per_rank = 2;
  o.chunk_size = 5000;
  CHECK(SnapshotStore::Open(o).status().code() == StatusCode::kInvalidArgument);
  // A world-writable shm_dir is refused.
  o.chunk_size = 1 << 16;
  const std::string open_dir = dir.path() + "/open";
  REQUIRE(::mkdir(open_dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0777) == 0);
  o.shm_dir = open_dir;
  CHECK(SnapshotStore::Open(o).status().code() == StatusCode::kPermissionDenied);
}

TEST_CASE("store: layout change keeps the committed snapshot until a newer commit", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"job", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  WriteStep(*st, rank, 1);
  std::vector<RegionSpec> bigger = {{"params/shard", 500000}, {"extra", 4096}};
  REQUIRE(st->ConfigureRank(rank, bigger).ok());
  auto old = st->Get(rank, 1);
  REQUIRE(old.ok());
  CHECK(old.value()->info().regions == kLayout);
  CHECK(CheckPattern(**old, 1));
  auto w = st->BeginWrite(rank, 2);
  REQUIRE(w.ok());
  CHECK((*w)->info().regions == bigger);
  FillPattern(**w, 2);
  REQUIRE(st->Seal(rank, 2).ok());
  REQUIRE(st->Commit(rank, 2).ok());
  CHECK(CheckPattern(**st->Get(rank, 2), 2));
  CHECK(st->List().size() == 1);
}

TEST_CASE("store: racing BeginWrite of the same step hands out one slot", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"job", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, {{"big", 8u << 20}}).ok());
  for (int64_t step = 1; step <= 6; ++step) {
    std::vector<Result<std::shared_ptr<SlotRef>>> got(3, Status::Internal("unset"));
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t) ts.emplace_back([&, t] { got[t] = st->BeginWrite(rank, step); });
    for (auto& t : ts) t.join();
    int ok = 0;
    for (auto& g : got) {
      if (g.ok()) {
        ++ok;
      } else {
        CHECK(g.status().code() == StatusCode::kBusy);
      }
    }
    REQUIRE(ok == 1);
    REQUIRE(st->Seal(rank, step).ok());
    REQUIRE(st->Commit(rank, step).ok());
  }
  CHECK(st->Usage().slots <= 3);
}

TEST_CASE("store: without pre-faulting, with a file group", "[store]") {
  ShmTestDir dir;
  auto o = TestOptions(dir.shm_dir());
  o.prefault = false;  // space is still reserved (fallocate): no SIGBUS later
  o.file_mode = 0640;
  o.file_group = ::getegid();
  auto st = OpenStore(o);
  RankKey rank{"job", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  WriteStep(*st, rank, 1);
  CHECK(CheckPattern(**st->Get(rank, 1), 1));
  struct stat fs {};
  REQUIRE(::stat(st->List()[0].path.c_str(), &fs) == 0);
  CHECK(fs.st_gid == ::getegid());
  CHECK((fs.st_mode & 07777) == 0640u);
  CHECK(static_cast<uint64_t>(fs.st_blocks) * 512 >= static_cast<uint64_t>(fs.st_size));
}

TEST_CASE("store: published regions are readable before the seal, until withdrawn", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"job-p", 0, 0, 1};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  auto w = st->BeginWrite(rank, 3);
  REQUIRE(w.ok());
  FillPattern(**w, 3);
  CHECK(st->GetPublished(rank, 3, "rng").status().code() == StatusCode::kNotFound);
  CHECK(st->Publish(rank, 3, {"nope"}).code() == StatusCode::kNotFound);
  CHECK(st->Publish(rank, 4, {"rng"}).code() == StatusCode::kNotFound);
  REQUIRE(st->Publish(rank, 3, {"rng", "optim"}).ok());
  auto pub = st->GetPublished(rank, 3, "rng");
  REQUIRE(pub.ok());
  CHECK((*pub)->info().state == SlotState::kWriting);
  CHECK(st->GetPublished(rank, 3, "params/shard").status().code() == StatusCode::kNotFound);
  // Still unsealed for everyone else, and the seal keeps what was published.
  CHECK(st->Get(rank, 3).status().code() == StatusCode::kNotFound);
  REQUIRE(st->Seal(rank, 3).ok());
  CHECK(st->GetPublished(rank, 3, "optim").ok());
  auto report = st->Verify(rank, 3);
  REQUIRE(report.ok());
  CHECK(report->bad.empty());
  // The trainer went away: a redo of step 3 may write other bytes, so nothing is served.
  st->Unpublish(rank);
  CHECK(st->GetPublished(rank, 3, "rng").status().code() == StatusCode::kNotFound);
  REQUIRE(st->Publish(rank, 3, {"rng"}).ok());
  // A new write of the same step clears the publication.
  pub->reset();
  w->reset();
  auto redo = st->BeginWrite(rank, 3);
  REQUIRE(redo.ok());
  CHECK(st->GetPublished(rank, 3, "rng").status().code() == StatusCode::kNotFound);
}

TEST_CASE("store: a step whose slot was re-used for a newer one is reported lost to copiers",
          "[store]") {
  // The owner runs ahead of a slow neighbour: with every slot taken it re-uses its oldest
  // complete step, which then is never published again. A copier waiting for it learns so at
  // once instead of waiting out its timeout. A newer slot left from a previous session (its
  // trainer gone, nothing published) does not count: the redo of the step will publish it.
  ShmTestDir dir;
  auto opts = TestOptions(dir.shm_dir());
  opts.slots_per_rank = 2;
  auto st = OpenStore(opts);
  RankKey rank{"job-s", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  for (int64_t step : {1, 2}) {
    auto w = st->BeginWrite(rank, step);
    REQUIRE(w.ok());
    FillPattern(**w, step);
    REQUIRE(st->Publish(rank, step, {"rng"}).ok());
    REQUIRE(st->Seal(rank, step).ok());
  }
  CHECK(st->GetPublished(rank, 2, "rng").ok());
  CHECK(st->GetPublished(rank, 3, "rng").status().code() == StatusCode::kNotFound);  // not yet
  auto w3 = st->BeginWrite(rank, 3);  // re-uses step 1's slot
  REQUIRE(w3.ok());
  auto gone = st->GetPublished(rank, 1, "rng");
  CHECK(gone.status().code() == StatusCode::kLost);
  CHECK_THAT(gone.status().message(), Catch::Contains("superseded by step 3"));
  w3->reset();
  st->Unpublish(rank);  // the trainer went away
  CHECK(st->Abort(rank, 3).ok());
  CHECK(st->GetPublished(rank, 1, "rng").status().code() == StatusCode::kNotFound);
}

TEST_CASE("store: publishing checksums the chunks a peer copy is verified against", "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"job-q", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  auto w = st->BeginWrite(rank, 1);
  REQUIRE(w.ok());
  FillPattern(**w, 1);
  REQUIRE(st->Publish(rank, 1, {"optim"}).ok());
  // The chunk table entries of the published region equal what Seal() computes later.
  const auto& info = (*w)->info();
  std::vector<uint8_t> before(4096), after(4096);
  auto read_table = [&](std::vector<uint8_t>* out) {
    auto fd = (*w)->DupFd();
    REQUIRE(fd.ok());
    reft_segment_header h{};
    REQUIRE(::pread(*fd, &h, sizeof(h), 0) == static_cast<ssize_t>(sizeof(h)));
    out->resize(h.chunk_count * 8);
    REQUIRE(::pread(*fd, out->data(), out->size(), static_cast<off_t>(h.chunk_table_offset)) ==
            static_cast<ssize_t>(out->size()));
    ::close(*fd);
  };
  read_table(&before);
  REQUIRE(st->Seal(rank, 1).ok());
  read_table(&after);
  REQUIRE(info.regions.size() == 3);
  // Region order: params/shard, optim, rng; compare optim's entries only.
  const uint64_t chunk = TestOptions(dir.shm_dir()).chunk_size;
  const uint64_t first = (kLayout[0].size + chunk - 1) / chunk;
  const uint64_t count = (kLayout[1].size + chunk - 1) / chunk;
  CHECK(std::memcmp(before.data() + first * 8, after.data() + first * 8, count * 8) == 0);
}

TEST_CASE("store: a pinned slot region is pinned once and unpinned before its pages go",
          "[store]") {
  ShmTestDir dir;
  auto st = OpenStore(TestOptions(dir.shm_dir()));
  RankKey rank{"job-pin", 0, 0, 0};
  REQUIRE(st->ConfigureRank(rank, kLayout).ok());
  int pins = 0, unpins = 0, failures_left = 1;
  const int owner = 0;  // stands for a device backend
  auto pin = [&] {
    if (failures_left > 0) {
      --failures_left;
      return Status::IoError("HostRegister: invalid argument");
    }
    ++pins;
    return Status::OK();
  };
  // Stands for UnpinHost: it must run while the pages are still mapped.
  std::vector<bool> mapped_at_unpin;
  {
    auto w = st->BeginWrite(rank, 1);
    REQUIRE(w.ok());
    uint8_t* base = (*w)->region_data(0);
    auto unpin = [&, base] {
      ++unpins;
      volatile uint8_t b = *base;  // a fault here means the mapping went first
      (void)b;
      mapped_at_unpin.push_back(true);
    };
    CHECK((*w)->PinOnce(&owner, base, pin, unpin).code() == StatusCode::kIoError);
    REQUIRE((*w)->PinOnce(&owner, base, pin, unpin).ok());  // a failure is retried
    REQUIRE((*w)->PinOnce(&owner, base, pin, unpin).ok());
    REQUIRE((*w)->PinOnce(&owner, (*w)->region_data(1), pin, unpin).ok());
    CHECK(pins == 2);  // once per region, not once per call
    FillPattern(**w, 1);
    REQUIRE(st->Seal(rank, 1).ok());
    REQUIRE(st->Commit(rank, 1).ok());
    auto reader = st->Get(rank, 1);
    REQUIRE(reader.ok());
    REQUIRE(st->Drop("job-pin", 1).ok());
    CHECK(unpins == 0);  // the writer's and the reader's refs still hold the mapping
    REQUIRE((*reader)->PinOnce(&owner, base, pin, unpin).ok());
    CHECK(pins == 2);  // the same mapping seen through another ref: still pinned
  }
  CHECK(unpins == 2);
  CHECK(mapped_at_unpin.size() == 2);
}
