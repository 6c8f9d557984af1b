#pragma once
/// \file test_support.h
/// \brief Helpers every test may use: scoped temp dirs, unique names, and a seeded RNG whose
/// seed is printed when a test fails.

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace reft::testing {

/// \brief A fresh directory under $TMPDIR (or /tmp), removed recursively on destruction.
class TempDir {
 public:
  /// Under `base`, or $TMPDIR (else /tmp) when `base` is empty.
  explicit TempDir(const std::string& prefix = "reft-test", const std::string& base = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// \brief A name unique to this process and call, for shm objects, sockets and jobs.
std::string UniqueName(const std::string& prefix);

/// \brief `size` pseudo-random bytes from `seed`.
std::vector<uint8_t> RandomBytes(size_t size, uint64_t seed);

/// \brief Seed from env REFT_TEST_SEED, else `fallback`; log it with Catch's INFO at call site.
uint64_t TestSeed(uint64_t fallback);

/// \brief Polls `pred` every millisecond until it holds or `timeout` passes; its last value.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace reft::testing
