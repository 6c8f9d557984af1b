#include "persist_test_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "reft/store/segment_layout.h"
#include "test_support.h"

namespace reft::persist::testing {

std::vector<store::RegionSpec> DefaultRegions() {
  return {{"meta", 37},
          {"rep/shard", 3 * 4096 + 123},
          {"unique/optim", 4096},
          {"unique/rng", 1},
          {"unique/empty", 0}};
}

RankData::RankData(store::RankKey rank, int64_t step, const std::vector<store::RegionSpec>& layout)
    : rank_(std::move(rank)), step_(step), layout_(layout) {
  for (size_t i = 0; i < layout_.size(); ++i) {
    const uint64_t seed = (uint64_t(step) << 32) ^ (uint64_t(rank_.pp) << 24) ^
                          (uint64_t(rank_.tp) << 16) ^ (uint64_t(rank_.dp) << 8) ^ i;
    bytes_.push_back(reft::testing::RandomBytes(layout_[i].size, seed * 0x9E3779B97F4A7C15ull + 1));
  }
}

RankImage RankData::image() const {
  RankImage img;
  img.rank = rank_;
  for (size_t i = 0; i < layout_.size(); ++i) {
    img.regions.push_back({layout_[i].name, bytes_[i].data(), bytes_[i].size()});
  }
  return img;
}

std::vector<RankData> AllRanks(const std::string& job, const JobLayout& layout, int64_t step,
                               const std::vector<store::RegionSpec>& regions) {
  std::vector<RankData> out;
  for (int32_t pp = 0; pp < layout.pp; ++pp) {
    for (int32_t tp = 0; tp < layout.tp; ++tp) {
      for (int32_t dp = 0; dp < layout.dp; ++dp) {
        out.emplace_back(store::RankKey{job, pp, tp, dp}, step, regions);
      }
    }
  }
  return out;
}

std::vector<RankImage> Images(const std::vector<RankData>& ranks) {
  std::vector<RankImage> out;
  for (const auto& r : ranks) out.push_back(r.image());
  return out;
}

PersistOptions TestOptions(const std::string& dir, const std::string& node) {
  PersistOptions o;
  o.dir = dir;
  o.node_id = node;
  o.chunk_size = 4096;
  o.keep = 0;
  return o;
}

std::unique_ptr<PersistentTier> OpenTier(const PersistOptions& o, CleanupReport* report) {
  auto t = PersistentTier::Open(o, report);
  INFO(t.status().ToString());
  REQUIRE(t.ok());
  return std::move(t).value();
}

bool ReadsBack(PersistentTier& tier, const RankData& data) {
  auto r = tier.OpenRank(data.rank(), data.step());
  if (!r.ok()) {
    UNSCOPED_INFO("OpenRank " << data.rank().ToString() << ": " << r.status().ToString());
    return false;
  }
  const PersistedRank& pr = **r;
  if (pr.regions() != data.layout()) {
    UNSCOPED_INFO("region table differs for " << data.rank().ToString());
    return false;
  }
  for (size_t i = 0; i < data.layout().size(); ++i) {
    std::vector<uint8_t> got(data.layout()[i].size);
    Status s = pr.ReadRegion(data.layout()[i].name, got.data(), got.size());
    if (!s.ok() || got != data.bytes(i)) {
      UNSCOPED_INFO("region " << data.layout()[i].name << " of " << data.rank().ToString()
                              << ": " << s.ToString());
      return false;
    }
  }
  return true;
}

std::string StepPath(const std::string& dir, const std::string& job, int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%012lld", static_cast<long long>(step));
  std::string jd;
  for (unsigned char c : job) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      jd.push_back(static_cast<char>(c));
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      jd += hex;
    }
  }
  return dir + "/" + jd + "/" + buf;
}

std::string RankPath(const std::string& dir, const store::RankKey& rank, int64_t step) {
  return StepPath(dir, rank.job, step) + "/pp" + std::to_string(rank.pp) + "-tp" +
         std::to_string(rank.tp) + "-dp" + std::to_string(rank.dp) + ".reft";
}

namespace {
reft_segment_header ReadHeader(int fd) {
  reft_segment_header h{};
  if (::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    throw std::runtime_error("pread header");
  }
  return h;
}
}  // namespace

uint64_t RegionOffset(const std::string& path, const std::string& name) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path);
  reft_segment_header h = ReadHeader(fd);
  for (uint32_t i = 0; i < h.region_count; ++i) {
    reft_segment_region r{};
    ::pread(fd, &r, sizeof r, static_cast<off_t>(h.region_table_offset + i * sizeof r));
    if (name == r.name) {
      ::close(fd);
      return r.offset;
    }
  }
  ::close(fd);
  throw std::runtime_error("no region " + name + " in " + path);
}

uint64_t ChunkTableOffset(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path);
  reft_segment_header h = ReadHeader(fd);
  ::close(fd);
  return h.chunk_table_offset;
}

void FlipByte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path);
  uint8_t b = 0;
  if (::pread(fd, &b, 1, static_cast<off_t>(offset)) != 1) throw std::runtime_error("pread");
  b ^= 0x10;
  if (::pwrite(fd, &b, 1, static_cast<off_t>(offset)) != 1) throw std::runtime_error("pwrite");
  ::close(fd);
}

void Truncate(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
    throw std::runtime_error("truncate " + path);
  }
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> TempFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& n : ListDir(dir)) {
    if (n.rfind(".tmp~", 0) == 0) out.push_back(n);
  }
  return out;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool ContainsNoCase(const std::string& haystack, const std::string& needle) {
  std::string h = haystack, n = needle;
  for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return Contains(h, n);
}

}  // namespace reft::persist::testing
