// Persistent-tier benchmark: ratios against raw file I/O of the same bytes to the same
// directory, paired in the same run (docs/bench/persist.md).
//  - write: PersistentTier::WriteRank of one rank image (checksum every chunk, fallocate,
//           header + tables + payload, fdatasync, rename, directory fsync) vs write(2) of the
//           same buffer into a new file + fdatasync;
//  - read:  PersistedRank::ReadRegion (pread per chunk + XXH3 verify) vs pread(2) of the raw
//           file into the same destination, both from the page cache ("hot") and after
//           posix_fadvise(DONTNEED) evicted the file ("cold": from the device).
// Output: one JSON object per line; ratio = raw time / tier time (throughput of the tier over
// throughput of raw I/O; 1.0 = as fast as raw, higher is better).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "reft/checksum.h"
#include "reft/persist/persistent_tier.h"
#include "bench_util.h"

using namespace reft;
using namespace reft::persist;

using bench::Die;
using bench::SecondsOf;

namespace {

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

void CheckErrno(bool ok, const std::string& what) {
  if (!ok) Die(what + ": " + std::strerror(errno));
}

struct Stats {
  double min, med, max;
};
Stats Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

std::string FsName(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53: return "ext4";
    case 0x01021994: return "tmpfs";
    case 0x58465342: return "xfs";
    case 0x6969: return "nfs";
    case 0x9123683E: return "btrfs";
    case 0x794C7630: return "overlayfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(s.f_type));
      return buf;
    }
  }
}

void Emit(const char* bench, uint64_t bytes, const std::string& dir, const std::string& fs,
          const std::vector<double>& tier_s, const std::vector<double>& raw_s) {
  std::vector<double> ratios;
  for (size_t i = 0; i < tier_s.size(); ++i) ratios.push_back(raw_s[i] / tier_s[i]);
  Stats r = Summarise(ratios), t = Summarise(tier_s), w = Summarise(raw_s);
  const double gb = double(bytes) / 1e9;
  std::printf(
      "{\"bench\":\"%s\",\"bytes\":%llu,\"runs\":%zu,\"dir\":\"%s\",\"fs\":\"%s\","
      "\"ratio_min\":%.3f,\"ratio_med\":%.3f,\"ratio_max\":%.3f,"
      "\"tier_gbps_med\":%.3f,\"raw_gbps_med\":%.3f,\"raw_gbps_min\":%.3f,\"raw_gbps_max\":%.3f}\n",
      bench, static_cast<unsigned long long>(bytes), ratios.size(), dir.c_str(), fs.c_str(),
      r.min, r.med, r.max, gb / t.med, gb / w.med, gb / w.max, gb / w.min);
  std::fflush(stdout);
}

/// Raw reference: write(2) the buffer in 8 MiB pieces into a new file, then fdatasync.
void RawWrite(const std::string& path, const std::vector<uint8_t>& buf) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  CheckErrno(fd >= 0, "open " + path);
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t n = ::write(fd, buf.data() + off, std::min<size_t>(buf.size() - off, 8u << 20));
    if (n < 0 && errno == EINTR) continue;
    CheckErrno(n > 0, "write " + path);
    off += static_cast<size_t>(n);
  }
  CheckErrno(::fdatasync(fd) == 0, "fdatasync " + path);
  ::close(fd);
}

/// Raw reference: pread the first `size` bytes in 4 MiB pieces (the tier's chunk size).
void RawRead(const std::string& path, uint8_t* dst, size_t size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CheckErrno(fd >= 0, "open " + path);
  size_t off = 0;
  while (off < size) {
    ssize_t n = ::pread(fd, dst + off, std::min<size_t>(size - off, 4u << 20), off);
    if (n < 0 && errno == EINTR) continue;
    CheckErrno(n > 0, "pread " + path);
    off += static_cast<size_t>(n);
  }
  ::close(fd);
}

/// The tier read's physical limit: the raw pread above plus one XXH3 pass over the bytes read
/// (what a verified read cannot avoid), in the same 4 MiB pieces.
void RawReadHash(const std::string& path, uint8_t* dst, size_t size) {
  RawRead(path, dst, size);
  uint64_t sink = 0;
  for (size_t off = 0; off < size; off += 4u << 20) {
    sink ^= Checksum64(dst + off, std::min<size_t>(size - off, 4u << 20));
  }
  if (sink == 42) std::fprintf(stderr, " ");  // keeps the hash from being optimised away
}

/// Evicts a (synced) file from the page cache so the next read comes from the device.
void Evict(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CheckErrno(fd >= 0, "open " + path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t bytes = 512ull << 20;
  int runs = 3;
  int threads = 1;
  bool preallocate = true;
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bytes" && i + 1 < argc) {
      bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      base = argv[++i];
    } else if (a == "--checksum-threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--no-preallocate") {
      preallocate = false;
    } else {
      std::fprintf(stderr,
                   "usage: persist_bench [--bytes N] [--runs R] [--dir DIR] "
                   "[--checksum-threads T] [--no-preallocate]\n");
      return 2;
    }
  }
  if (runs < 1 || bytes < 4096) Die("need --runs >= 1 and --bytes >= 4096");
  const std::string dir = base + "/reft-persist-bench-" + std::to_string(::getpid());
  CheckErrno(::mkdir(dir.c_str(), 0700) == 0, "mkdir " + dir);
  const std::string fs = FsName(dir);

  // Source: a pre-faulted buffer of pseudo-random bytes (an in-memory snapshot), and a
  // pre-faulted destination for reads.
  std::vector<uint8_t> src(bytes), dst(bytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&src[i], &x, 8);
  }
  std::memset(dst.data(), 1, dst.size());

  PersistOptions o;
  o.dir = dir;
  o.node_id = "bench";
  o.keep = 0;
  o.checksum_threads = threads;
  o.preallocate = preallocate;
  auto opened = PersistentTier::Open(o);
  Check(opened.status(), "open tier");
  PersistentTier& tier = **opened;
  const store::RankKey rank{"bench-job", 0, 0, 0};
  const std::vector<store::ImageRegion> regions{{"rep/shard", src.data(), bytes}};
  const std::string raw = dir + "/raw.bin";

  std::vector<double> w_tier, w_raw, rh_tier, rh_raw, rc_tier, rc_raw;
  std::vector<double> rh_tier2, rh_hash, rc_tier2, rc_hash;
  for (int run = 0; run <= runs; ++run) {  // run 0 is a warm-up, not reported
    const int64_t step = run;
    std::string path;
    double wt = 0, wr = 0;
    // Alternate the order so neither side always writes into a freshly flushed device queue.
    auto tier_write = [&] {
      wt = SecondsOf([&] {
        auto r = tier.WriteRank(rank, step, regions);
        Check(r.status(), "WriteRank");
        path = r->path;
      });
    };
    auto raw_write = [&] {
      std::filesystem::remove(raw);
      wr = SecondsOf([&] { RawWrite(raw, src); });
    };
    if (run % 2 == 0) {
      tier_write();
      raw_write();
    } else {
      raw_write();
      tier_write();
    }
    auto pr = tier.OpenRank(rank, step);
    Check(pr.status(), "OpenRank");
    // Hot: both files are in the page cache right after being written.
    const double rth = SecondsOf([&] { Check((*pr)->ReadRegion("rep/shard", dst.data(), bytes), "read"); });
    if (std::memcmp(dst.data(), src.data(), bytes) != 0) Die("tier read back different bytes");
    const double rrh = SecondsOf([&] { RawRead(raw, dst.data(), bytes); });
    // Cold: evicted, read from the device.
    Evict(path);
    Evict(raw);
    const double rtc = SecondsOf([&] { Check((*pr)->ReadRegion("rep/shard", dst.data(), bytes), "read"); });
    const double rrc = SecondsOf([&] { RawRead(raw, dst.data(), bytes); });
    if (std::memcmp(dst.data(), src.data(), bytes) != 0) Die("raw read back different bytes");
    // The same against pread + one hash pass (hot, then cold again).
    const double rhh = SecondsOf([&] { RawReadHash(raw, dst.data(), bytes); });
    const double rth2 = SecondsOf([&] { Check((*pr)->ReadRegion("rep/shard", dst.data(), bytes), "read"); });
    Evict(path);
    Evict(raw);
    const double rtc2 = SecondsOf([&] { Check((*pr)->ReadRegion("rep/shard", dst.data(), bytes), "read"); });
    const double rhc = SecondsOf([&] { RawReadHash(raw, dst.data(), bytes); });
    pr = Status::Internal("closed");
    std::filesystem::remove_all(dir + "/bench-job");
    if (run == 0) continue;
    w_tier.push_back(wt);
    w_raw.push_back(wr);
    rh_tier.push_back(rth);
    rh_raw.push_back(rrh);
    rc_tier.push_back(rtc);
    rc_raw.push_back(rrc);
    rh_tier2.push_back(rth2);
    rh_hash.push_back(rhh);
    rc_tier2.push_back(rtc2);
    rc_hash.push_back(rhc);
  }
  Emit("persist_write_vs_raw_write_fdatasync", bytes, base, fs, w_tier, w_raw);
  Emit("persist_read_verify_vs_raw_read_hot", bytes, base, fs, rh_tier, rh_raw);
  Emit("persist_read_verify_vs_raw_read_cold", bytes, base, fs, rc_tier, rc_raw);
  Emit("persist_read_verify_vs_raw_read_hash_hot", bytes, base, fs, rh_tier2, rh_hash);
  Emit("persist_read_verify_vs_raw_read_hash_cold", bytes, base, fs, rc_tier2, rc_hash);
  std::filesystem::remove_all(dir);
  return 0;
}
