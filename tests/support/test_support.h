#pragma once
/// \file test_support.h
/// \brief Helpers every test may use: scoped temp dirs, unique names, and a seeded RNG whose
/// seed is printed when a test fails.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace reft::testing {

/// \brief A fresh directory under $TMPDIR (or /tmp), removed recursively on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "reft-test");
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

}  // namespace reft::testing
