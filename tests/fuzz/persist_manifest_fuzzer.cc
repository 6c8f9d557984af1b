// Fuzz target: the persistent tier's per-node manifests (daemon/persist manifest.h,
// `manifest.<node>.json`). They are written by other nodes into a shared directory and read
// back after crashes, by restore-check and by the restore fallback: untrusted input.
//
// The input is a control byte followed by the manifest's text. Properties:
//  - DecodeManifest refuses with Corrupted and a message that starts with the file's name;
//  - an accepted manifest round-trips: Decode(Encode(m)) succeeds and re-encodes identically,
//    and each file entry is named after its own coordinates (no other name, no path);
//  - control bit 0: the text is also placed as another node's manifest of a step in a real
//    tier directory that holds a persisted rank file, and the tier reads it (ReadManifests,
//    CheckStep, NewestCompleteStep, CompleteSteps with the manifest's own layout): errors are
//    fine, crashes, sanitizer reports and non-round-tripping manifests are not.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "manifest.h"
#include "paths.h"
#include "reft/persist/persistent_tier.h"

using namespace reft;
using namespace reft::persist;
using reft::fuzz::Bytes;

namespace {

constexpr char kJob[] = "run-1";
constexpr int64_t kStep = 7;

Manifest SampleManifest() {
  Manifest m;
  m.node_id = "node-b";
  m.job = kJob;
  m.step = kStep;
  m.layout.pp = 1;
  m.layout.tp = 1;
  m.layout.dp = 2;
  m.created_unix_ms = 1700000000000;
  for (int dp = 0; dp < 2; ++dp) {
    RankFileInfo f;
    f.rank = store::RankKey{kJob, 0, 0, dp};
    f.step = kStep;
    f.file = internal::RankFileName(f.rank);
    f.file_bytes = 1052672;
    f.payload_bytes = 1048641;
    f.chunk_size = 4194304;
    f.chunk_count = 1;
    f.chunk_table_checksum = 0x9f86d081884c7d65ull + static_cast<uint64_t>(dp);
    f.regions = {{"meta", 65}, {"rep/shard", 1048576}};
    m.files.push_back(f);
  }
  return m;
}

Bytes WithControl(uint8_t control, const std::string& text) {
  Bytes b{control};
  b.insert(b.end(), text.begin(), text.end());
  return b;
}

void WriteSeeds(const reft::fuzz::SeedSink& sink) {
  const std::string good = internal::EncodeManifest(SampleManifest());
  sink("manifest", WithControl(0, good));
  sink("manifest_in_tier", WithControl(1, good));
  std::string s = good;
  s.replace(s.find("\"version\": 1"), 12, "\"version\": 2");
  sink("other_version", WithControl(0, s));
  s = good;
  s.replace(s.find("pp0-tp0-dp1.reft"), 16, "../../etc/passwd");
  sink("file_not_its_coordinates", WithControl(1, s));
  s = good;
  s.replace(s.find("\"dp\": 2"), 7, "\"dp\": 0");
  sink("layout_dp0_in_tier", WithControl(1, s));
  sink("not_json", WithControl(1, "{\"format\": \"reft-persist-manifest\", \"files\": ["));
}

// A tier directory with one persisted step (rank dp0 of a dp=2 job, written by "node-a") for
// the tier-level mode; each input adds its manifest as node-b's and removes it afterwards.
struct Fixture {
  Fixture() {
    const char* base = std::getenv("REFT_FUZZ_TMPDIR");
    dir = std::string(base ? base : "/dev/shm") + "/reft-fuzz-manifest-" + std::to_string(getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    PersistOptions o;
    o.dir = dir;
    o.node_id = "node-a";
    auto t = PersistentTier::Open(o);
    FUZZ_CHECK(t.ok(), "tier: %s", t.status().ToString().c_str());
    tier = std::move(*t);
    RankImage image;
    image.rank = store::RankKey{kJob, 0, 0, 0};
    static std::vector<uint8_t> bytes(10000, 0x5a);
    image.regions = {{"meta", bytes.data(), 100}, {"rep/shard", bytes.data(), bytes.size()}};
    JobLayout layout;
    layout.dp = 2;
    auto r = tier->PersistStep(kJob, kStep, layout, {image});
    FUZZ_CHECK(r.ok(), "persist: %s", r.status().ToString().c_str());
    manifest_path = dir + "/" + internal::JobDirName(kJob) + "/" + internal::StepDirName(kStep) +
                    "/" + internal::ManifestFileName("node-b");
  }
  ~Fixture() {
    tier.reset();
    std::filesystem::remove_all(dir);
  }
  static Fixture& F();
  std::string dir;
  std::string manifest_path;
  std::unique_ptr<PersistentTier> tier;
};

Fixture& Fixture::F() {
  static Fixture f;
  return f;
}

void CheckRoundTrip(const Manifest& m) {
  const std::string e1 = internal::EncodeManifest(m);
  auto again = internal::DecodeManifest(e1, "again");
  FUZZ_CHECK(again.ok(), "re-encoded manifest refused: %s", again.status().ToString().c_str());
  FUZZ_CHECK(internal::EncodeManifest(*again) == e1, "encode(decode(encode(m))) != encode(m)");
  for (const auto& f : m.files) {
    FUZZ_CHECK(f.file == internal::RankFileName(f.rank), "entry '%s' is not its rank's file",
               f.file.c_str());
    FUZZ_CHECK(f.file.find('/') == std::string::npos, "entry '%s' is a path", f.file.c_str());
  }
}

void ReadThroughTier(const std::string& text, const JobLayout& layout) {
  Fixture& f = Fixture::F();
  { std::ofstream(f.manifest_path, std::ios::binary) << text; }
  auto manifests = f.tier->ReadManifests(kJob, kStep);
  if (manifests.ok()) {
    for (const auto& m : *manifests) CheckRoundTrip(m);
  } else {
    FUZZ_CHECK(!manifests.status().message().empty(), "ReadManifests refused without a message");
  }
  (void)f.tier->CheckStep(kJob, kStep, layout);
  (void)f.tier->NewestCompleteStep(kJob, layout);
  (void)f.tier->CompleteSteps(kJob, layout);
  std::filesystem::remove(f.manifest_path);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  reft::fuzz::MaybeWriteSeeds(WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  const uint8_t control = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto m = internal::DecodeManifest(text, "manifest.node-b.json");
  JobLayout layout;
  layout.dp = 2;
  if (m.ok()) {
    reft::fuzz::Count("accepted");
    CheckRoundTrip(*m);
    layout = m->layout;
  } else {
    FUZZ_CHECK(m.status().code() == StatusCode::kCorrupted, "refused with %s",
               m.status().ToString().c_str());
    FUZZ_CHECK(m.status().message().rfind("manifest.node-b.json: ", 0) == 0,
               "refusal does not name the file: %s", m.status().message().c_str());
  }
  if (control & 1) {
    reft::fuzz::Count("tier");
    ReadThroughTier(text, layout);
  }
  return 0;
}
