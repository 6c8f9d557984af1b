#include "recovery_fixture.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>

#include "reft/protect/codec.h"

namespace reft::recovery::test {

using namespace std::chrono_literals;

namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

uint64_t Seed(const JobSpec& spec, const RankCoord& c, const protect::BufferSpec& b,
              int64_t step) {
  uint64_t h = std::hash<std::string>{}(spec.job + "/" + b.name);
  h = Mix(h, static_cast<uint64_t>(c.pp));
  h = Mix(h, static_cast<uint64_t>(c.tp));
  if (b.kind == protect::BufferKind::kUnique) h = Mix(h, 1000 + static_cast<uint64_t>(c.dp));
  return Mix(h, static_cast<uint64_t>(step));
}

void Fail(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

}  // namespace

protect::SlotMeta JobSpec::Meta(const RankCoord& c) const {
  protect::SlotMeta m;
  m.job = job;
  m.coord = c;
  m.layout = layout;
  m.scheme = scheme;
  m.shard_chunk = shard_chunk;
  m.buffers = buffers;
  return m;
}

std::vector<RankCoord> JobSpec::Ranks() const {
  std::vector<RankCoord> out;
  for (int pp = 0; pp < layout.pp; ++pp) {
    for (int tp = 0; tp < layout.tp; ++tp) {
      for (int dp = 0; dp < layout.dp; ++dp) out.push_back({pp, tp, dp});
    }
  }
  return out;
}

JobSpec MakeJob(int dp, int tp, int pp, const std::string& scheme, bool with_unique,
                uint64_t scale) {
  JobSpec s;
  s.layout.dp = dp;
  s.layout.tp = tp;
  s.layout.pp = pp;
  auto parsed = protect::Scheme::Parse(scheme);
  Fail(parsed.status());
  s.scheme = *parsed;
  if (s.scheme.aor) s.layout.zero = 1;
  auto buf = [](std::string name, uint64_t elems, std::string dtype, int esize) {
    protect::BufferSpec b;
    b.name = std::move(name);
    b.size = elems * static_cast<uint64_t>(esize);
    b.dtype = std::move(dtype);
    return b;
  };
  // Registration order differs from name order on purpose (the canonical vector sorts).
  s.buffers.push_back(buf("w.layers", 100003 * scale, "fp32", 4));
  s.buffers.push_back(buf("emb", 77777 * scale, "bf16", 2));
  s.buffers.push_back(buf("norm", 1237, "fp16", 2));
  if (with_unique) {
    auto rng = buf("rng", 5003, "uint8", 1);
    rng.kind = protect::BufferKind::kUnique;
    s.buffers.push_back(rng);
    auto opt = buf("optim.shard", 20011, "fp32", 4);
    opt.kind = protect::BufferKind::kUnique;
    opt.optimizer = true;
    s.buffers.push_back(opt);
  }
  return s;
}

std::vector<uint8_t> BufferBytes(const JobSpec& spec, const RankCoord& c,
                                 const protect::BufferSpec& b, int64_t step) {
  std::mt19937_64 rng(Seed(spec, c, b, step));
  std::vector<uint8_t> out(b.size);
  if (b.dtype == "fp32") {
    std::normal_distribution<float> n(0.0f, 0.02f);
    for (uint64_t i = 0; i + 4 <= b.size; i += 4) {
      float f = n(rng);
      std::memcpy(out.data() + i, &f, 4);
    }
  } else if (b.dtype == "bf16") {
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (uint64_t i = 0; i + 2 <= b.size; i += 2) {
      float f = n(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(out.data() + i, &h, 2);
    }
  } else {  // fp16 and raw bytes: any bit pattern must survive bit-exactly
    for (auto& v : out) v = static_cast<uint8_t>(rng());
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> SlotRegions(const JobSpec& spec,
                                                                      const RankCoord& c,
                                                                      int64_t step) {
  const protect::SlotMeta meta = spec.Meta(c);
  auto plan = meta.Plan();
  Fail(plan.status());
  auto g = meta.Geometry();
  Fail(g.status());
  std::map<std::string, std::vector<uint8_t>> own;
  protect::ReplicatedSource source;
  for (const auto& b : spec.buffers) {
    own[b.name] = BufferBytes(spec, c, b, step);
    if (b.kind == protect::BufferKind::kReplicated) {
      source[b.name] = {own[b.name].data(), own[b.name].size()};
    }
  }
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  out.emplace_back(protect::kRegionMeta, meta.Encode());
  std::map<std::string, protect::MutableSpan> rep;
  for (const auto& r : plan->regions) out.emplace_back(r.name, std::vector<uint8_t>(r.size));
  for (auto& [name, bytes] : out) {
    if (name.rfind("rep/", 0) == 0) rep[name] = {bytes.data(), bytes.size()};
  }
  Fail(protect::EncodeMember(*g, spec.scheme, c.dp, source, rep));
  const int m = spec.layout.dp;
  for (auto& [name, bytes] : out) {
    for (const auto& b : spec.buffers) {
      if (b.kind != protect::BufferKind::kUnique) continue;
      if (name == protect::UniqueRegionName(b.name)) bytes = own[b.name];
      if (name == protect::PeerRegionName(b.name) || name == protect::AorRegionName(b.name)) {
        // The ring neighbour's unique buffer (the peer copy / AOR replica of dp+1).
        bytes = BufferBytes(spec, {c.pp, c.tp, (c.dp + 1) % m}, b, step);
      }
    }
  }
  return out;
}

void WriteContractSlot(store::SnapshotStore* store, const JobSpec& spec,
                       const RankCoord& c, int64_t step, bool commit) {
  auto regions = SlotRegions(spec, c, step);
  std::vector<store::RegionSpec> layout;
  for (const auto& [name, bytes] : regions) layout.push_back({name, bytes.size()});
  const store::RankKey key = spec.Key(c);
  Fail(store->ConfigureRank(key, layout));
  auto w = store->BeginWrite(key, step);
  Fail(w.status());
  for (size_t i = 0; i < regions.size(); ++i) {
    if (!regions[i].second.empty()) {
      std::memcpy((*w)->region_data(i), regions[i].second.data(), regions[i].second.size());
    }
  }
  w->reset();
  Fail(store->Seal(key, step));
  if (commit) Fail(store->Commit(key, step));
}

void CheckRestored(const local::RestoredState& st, const JobSpec& spec, const RankCoord& c,
                   int64_t step) {
  CheckRestoredFrom(st, spec, c, step, "memory");
}

void CheckRestoredFrom(const local::RestoredState& st, const JobSpec& spec,
                       const RankCoord& c, int64_t step, const std::string& source) {
  INFO(spec.Key(c).ToString() << ": " << st.detail);
  REQUIRE(st.step == step);
  REQUIRE(st.fd.valid());
  REQUIRE(st.source == source);
  // Handed to an untrusted trainer: it can neither shrink nor change what the daemon maps.
  const int seals = ::fcntl(st.fd.get(), F_GET_SEALS);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK((seals & F_SEAL_WRITE) != 0);
  void* p = ::mmap(nullptr, st.size, PROT_READ, MAP_SHARED, st.fd.get(), 0);
  REQUIRE(p != MAP_FAILED);
  const auto* base = static_cast<const uint8_t*>(p);
  for (const auto& b : spec.buffers) {
    INFO("buffer " << b.name);
    auto it = st.offsets.find(b.name);
    REQUIRE(it != st.offsets.end());
    REQUIRE(it->second + b.size <= st.size);
    const auto want = BufferBytes(spec, c, b, step);
    CHECK(std::memcmp(base + it->second, want.data(), want.size()) == 0);
  }
  ::munmap(p, st.size);
}

void FlipByteInSegment(store::SnapshotStore* store, const store::RankKey& rank, int64_t step,
                       const std::string& region, uint64_t offset) {
  auto ref = store->Get(rank, step);
  REQUIRE(ref.ok());
  auto idx = (*ref)->FindRegion(region);
  REQUIRE(idx.ok());
  REQUIRE(offset < (*ref)->region_size(*idx));
  const int fd = ::open((*ref)->info().path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const off_t at = static_cast<off_t>((*ref)->region_file_offset(*idx) + offset);
  uint8_t b = 0;
  REQUIRE(::pread(fd, &b, 1, at) == 1);
  b ^= 0x10;
  REQUIRE(::pwrite(fd, &b, 1, at) == 1);
  ::close(fd);
}

void CheckSlotEqualsOriginal(store::SnapshotStore* store, const JobSpec& spec,
                             const RankCoord& c, int64_t step) {
  INFO("slot of " << spec.Key(c).ToString() << " step " << step);
  REQUIRE(store->NewestCommitted(spec.Key(c)) == step);
  auto ref = store->Get(spec.Key(c), step);
  REQUIRE(ref.ok());
  const auto want = SlotRegions(spec, c, step);
  REQUIRE((*ref)->info().regions.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("region " << want[i].first);
    CHECK((*ref)->info().regions[i].name == want[i].first);
    REQUIRE((*ref)->region_size(i) == want[i].second.size());
    CHECK(std::memcmp((*ref)->region_data(i), want[i].second.data(), want[i].second.size()) == 0);
  }
  auto report = store->Verify(spec.Key(c), step);
  REQUIRE(report.ok());
  CHECK(report->bad.empty());
}

RecoveryOptions TestOptions() {
  RecoveryOptions o;
  o.concurrency = 3;
  o.piece_bytes = 64 << 10;
  o.piece_timeout = 1500ms;
  o.restore_timeout = 20000ms;
  o.sync_timeout = 1000ms;
  o.locate_timeout = 1000ms;
  return o;
}

Cluster::Cluster(int n, uint64_t chunk_size, uint64_t bandwidth,
                 peer::ControlPlaneFactory control_plane)
    : chunk_size_(chunk_size), bandwidth_(bandwidth), control_plane_(std::move(control_plane)) {
  for (int i = 0; i < n; ++i) Add("n" + std::to_string(i));
}

Cluster::~Cluster() {
  for (auto& n : nodes_) {
    if (n) n->Kill();
  }
  nodes_.clear();
}

size_t Cluster::Add(const std::string& id) {
  owned_dirs_.push_back(std::make_unique<reft::testing::TempDir>("reft-recovery"));
  return Add(id, owned_dirs_.back()->path());
}

size_t Cluster::Add(const std::string& id, const std::string& shm_dir) {
  std::vector<std::string> seeds;
  for (auto& n : nodes_) {
    if (n) {
      seeds.push_back(n->address);
      break;
    }
  }
  dirs_.push_back(shm_dir);
  nodes_.push_back(std::make_unique<TestNode>(id, shm_dir, seeds, 0, chunk_size_,
                                              bandwidth_, nullptr, control_plane_));
  return nodes_.size() - 1;
}

void Cluster::KillAndWipe(size_t i) {
  nodes_.at(i)->Kill();
  nodes_[i].reset();
  for (const auto& e : std::filesystem::directory_iterator(dirs_[i])) {
    std::filesystem::remove_all(e.path());
  }
}

void Cluster::Converge(std::chrono::milliseconds timeout) {
  const bool ok = peer::test::Eventually(
      [&] {
        for (auto& n : nodes_) {
          if (!n) continue;
          for (auto& o : nodes_) {
            if (!o || o.get() == n.get()) continue;
            if (peer::test::StateOf(*n, o->node_id) != peer::MemberState::kAlive) return false;
          }
          for (const auto& m : n->peer->membership().LiveMembers()) {
            bool known_live = false;
            for (auto& o : nodes_) known_live |= o && o->node_id == m.node_id;
            if (!known_live) return false;  // a killed node not yet declared dead
          }
        }
        return true;
      },
      timeout);
  REQUIRE(ok);
}

void Cluster::WriteStep(const JobSpec& spec, const std::map<std::string, size_t>& placement,
                        int64_t step) {
  const JobLayout& layout = spec.layout;
  for (const auto& c : spec.Ranks()) {
    TestNode& n = node(placement.at(c.ToString()));
    const std::string key = n.node_id + "/" + spec.Key(c).ToString();
    if (!joined_[key]) {
      Fail(n.peer->coordinator()->Join(spec.Key(c), layout));
      joined_[key] = true;
    }
    WriteContractSlot(n.store.get(), spec, c, step);
    Fail(n.peer->coordinator()->Complete(spec.Key(c), step, n.peer->coordinator()->RestoreEpoch(spec.Key(c).job)));
  }
  for (auto& n : nodes_) {
    if (n) REQUIRE(n->peer->coordinator()->WaitCommitted(spec.job, step, 5s));
  }
  for (const auto& c : spec.Ranks()) {
    TestNode& n = node(placement.at(c.ToString()));
    REQUIRE(
        peer::test::Eventually([&] { return n.store->NewestCommitted(spec.Key(c)) == step; }, 3s));
  }
}

std::map<std::string, size_t> RotatedPlacement(const JobSpec& spec, size_t nodes) {
  std::map<std::string, size_t> out;
  for (const auto& c : spec.Ranks()) {
    out[c.ToString()] = static_cast<size_t>(c.dp + c.pp + c.tp) % nodes;
  }
  return out;
}

}  // namespace reft::recovery::test
