// A size-limited tmpfs for "the directory is full" tests (docs/failure-model.md: full persistent directory).
#pragma once

#include <string>

namespace reft::testing {

/// A tmpfs mounted with `options` (e.g. "size=128k") on a fresh directory under /tmp; unmounted
/// (lazily, so a leaked fd cannot keep it) and removed on destruction, whatever the test did.
/// Mounting needs root / CAP_SYS_ADMIN: without it the test process exits 77, which CTest
/// reports as skipped (SKIP_RETURN_CODE), never as passed.
class TinyTmpfs {
 public:
  explicit TinyTmpfs(const std::string& options, bool read_only = false);
  ~TinyTmpfs();
  TinyTmpfs(const TinyTmpfs&) = delete;
  TinyTmpfs& operator=(const TinyTmpfs&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace reft::testing
