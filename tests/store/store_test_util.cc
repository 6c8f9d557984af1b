#include "store_test_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace reft::store::testing {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint8_t PatternByte(int64_t step, size_t region, uint64_t i) {
  // One mixed word per 8 bytes keeps it fast; the step and region make every slot distinct.
  uint64_t w = Mix((static_cast<uint64_t>(step) << 20) ^ (region << 56) ^ (i >> 3));
  return static_cast<uint8_t>(w >> ((i & 7) * 8));
}

void PatternInto(uint8_t* dst, uint64_t size, int64_t step, size_t region) {
  uint64_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w = Mix((static_cast<uint64_t>(step) << 20) ^ (region << 56) ^ (i >> 3));
    std::memcpy(dst + i, &w, 8);
  }
  for (; i < size; ++i) dst[i] = PatternByte(step, region, i);
}

}  // namespace

ShmTestDir::ShmTestDir() {
  std::string base = "/dev/shm";
  if (::access(base.c_str(), W_OK) != 0) {
    const char* t = std::getenv("TMPDIR");
    base = t ? t : "/tmp";
  }
  std::string tmpl = base + "/reft-store-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

ShmTestDir::~ShmTestDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void FillPattern(const SlotRef& slot, int64_t step) {
  for (size_t r = 0; r < slot.info().regions.size(); ++r) {
    PatternInto(slot.region_data(r), slot.region_size(r), step, r);
  }
}

bool CheckPattern(const SlotRef& slot, int64_t step) {
  std::vector<uint8_t> want;
  for (size_t r = 0; r < slot.info().regions.size(); ++r) {
    want.resize(slot.region_size(r));
    PatternInto(want.data(), want.size(), step, r);
    if (std::memcmp(want.data(), slot.region_data(r), want.size()) != 0) return false;
  }
  return true;
}

std::unique_ptr<SnapshotStore> OpenStore(const StoreOptions& o, AdoptionReport* rep) {
  auto s = SnapshotStore::Open(o, rep);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return std::move(*s);
}

StoreOptions TestOptions(const std::string& dir) {
  StoreOptions o;
  o.shm_dir = dir;
  o.chunk_size = 64 << 10;
  o.slots_per_rank = 3;
  o.checksum_threads = 2;
  return o;
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

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  return out;
}

}  // namespace reft::store::testing
