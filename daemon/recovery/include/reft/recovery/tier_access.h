#pragma once
/// \file tier_access.h
/// \brief The persistent tier as reftd uses it: opened lazily and reopened after a failure, so a
/// missing or full `--persist-dir` is an error reported (health, last error) instead of a
/// reason not to start, and an NFS mount that appears later is picked up without a restart
/// (docs/failure-model.md "persistent directory full or missing: error reported; in-memory snapshots
/// unaffected").
///
/// Every user (the Persister, the restore fallback, the Admin service) calls Get() for the
/// tier and Report() with the outcome of what it did with it. A failure that may mean the
/// directory went away or changed (NotFound, PermissionDenied, IoError) drops the open tier, so
/// the next Get() opens it again (PersistentTier::Open checks existence, writability and the
/// mount identity). Opening is retried at most every `retry_interval` unless forced.
/// Thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "reft/mutex.h"
#include "reft/persist/persistent_tier.h"
#include "reft/result.h"

namespace reft::recovery {

/// \brief What `reftctl status` shows about the tier.
struct TierHealth {
  bool enabled = false;  ///< a directory is configured
  std::string dir;
  bool healthy = false;    ///< open, and no failure since the last successful write
  std::string last_error;  ///< the last failure ("" when none since the last success)
  int64_t last_error_unix_ms = 0;
  int64_t last_ok_unix_ms = 0;
};

class TierAccess {
 public:
  /// `options.dir` empty = the tier is disabled (Get() answers Unsupported).
  explicit TierAccess(persist::PersistOptions options,
                      std::chrono::milliseconds retry_interval = std::chrono::seconds(5));

  bool enabled() const { return !options_.dir.empty(); }
  const persist::PersistOptions& options() const { return options_; }

  /// \brief The open tier, opening it first when needed. `force` ignores the retry interval
  /// (an operator's explicit request). Unsupported when disabled; the Open error (NotFound
  /// "persistent directory ... does not exist", PermissionDenied, ...) otherwise, also when it
  /// failed less than retry_interval ago (the remembered error).
  Result<std::shared_ptr<persist::PersistentTier>> Get(bool force = false);

  /// \brief Records the outcome of an operation on the tier. Any failure is remembered as the
  /// last error; NotFound, PermissionDenied and IoError also drop the tier (reopened on the
  /// next Get). Report OK only for a successful *write*: it clears the last error (a read that
  /// works says nothing about a full directory). A successful reopen clears an open failure.
  void Report(const Status& status);

  TierHealth Health() const;

 private:
  persist::PersistOptions options_;
  std::chrono::milliseconds retry_interval_;
  mutable Mutex mu_;
  std::shared_ptr<persist::PersistentTier> tier_ REFT_GUARDED_BY(mu_);
  Status open_error_ REFT_GUARDED_BY(mu_);
  /// last_error came from Open (cleared by a good reopen)
  bool error_from_open_ REFT_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point next_open_ REFT_GUARDED_BY(mu_){};
  TierHealth health_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::recovery
