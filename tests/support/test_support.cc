#include "test_support.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace reft::testing {

TempDir::TempDir(const std::string& prefix, const std::string& base) {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string under = !base.empty() ? base : tmpdir && *tmpdir ? tmpdir : "/tmp";
  std::string templ = under + "/" + prefix + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + templ);
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string UniqueName(const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

std::vector<uint8_t> RandomBytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(size);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    for (int b = 0; b < 8; ++b) out[i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  uint64_t v = rng();
  for (; i < size; ++i, v >>= 8) out[i] = static_cast<uint8_t>(v);
  return out;
}

uint64_t TestSeed(uint64_t fallback) {
  const char* env = std::getenv("REFT_TEST_SEED");
  return env && *env ? std::strtoull(env, nullptr, 0) : fallback;
}

}  // namespace reft::testing
