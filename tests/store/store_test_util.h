#pragma once
/// \file store_test_util.h
/// \brief Helpers for the store tests: a tmpfs directory, deterministic slot contents.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reft/store/snapshot_store.h"

namespace reft::store::testing {

/// \brief A fresh directory on tmpfs (/dev/shm when writable, else $TMPDIR), removed with
/// everything in it on destruction. `shm_dir()` is a not-yet-existing child the store creates.
class ShmTestDir {
 public:
  ShmTestDir();
  ~ShmTestDir();
  const std::string& path() const { return path_; }
  std::string shm_dir() const { return path_ + "/shm"; }

 private:
  std::string path_;
};

/// \brief Fills every region of `slot` with the pattern of `step`.
void FillPattern(const SlotRef& slot, int64_t step);
/// \brief True when every region of `slot` holds the pattern of `step`.
bool CheckPattern(const SlotRef& slot, int64_t step);

/// \brief Opens a store with `o` (the test fails if it cannot), the adoption report in `rep`.
std::unique_ptr<SnapshotStore> OpenStore(const StoreOptions& o, AdoptionReport* rep = nullptr);

/// \brief Options for a test store in `dir` with small chunks.
StoreOptions TestOptions(const std::string& dir);

/// \brief Flips one bit of the byte at `offset` of file `path` (through pread/pwrite).
void FlipByte(const std::string& path, uint64_t offset);

/// \brief Names in a directory (without . and ..).
std::vector<std::string> ListDir(const std::string& dir);

}  // namespace reft::store::testing
