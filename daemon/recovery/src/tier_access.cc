/// \file tier_access.cc
#include "reft/recovery/tier_access.h"

#include "reft/unix_time.h"

namespace reft::recovery {

namespace {

// Codes that may mean "the directory is gone, unwritable or another mount now".
bool DropsTier(StatusCode c) {
  return c == StatusCode::kNotFound || c == StatusCode::kPermissionDenied ||
         c == StatusCode::kIoError;
}

}  // namespace

TierAccess::TierAccess(persist::PersistOptions options, std::chrono::milliseconds retry_interval)
    : options_(std::move(options)), retry_interval_(retry_interval) {
  health_.enabled = !options_.dir.empty();
  health_.dir = options_.dir;
}

Result<std::shared_ptr<persist::PersistentTier>> TierAccess::Get(bool force) {
  if (!enabled()) {
    return Status::Unsupported("no persistent tier is configured on this node (persist_dir)");
  }
  MutexLock lock(mu_);
  if (tier_) return tier_;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now < next_open_ && !open_error_.ok()) return open_error_;
  // Open does a stat, a probe file and the stale-temp cleanup: small, bounded file-system work.
  auto opened = persist::PersistentTier::Open(options_);
  next_open_ = now + retry_interval_;
  if (!opened.ok()) {
    open_error_ = opened.status();
    error_from_open_ = true;
    health_.healthy = false;
    health_.last_error = opened.status().ToString();
    health_.last_error_unix_ms = UnixMs();
    return open_error_;
  }
  open_error_ = Status::OK();
  tier_ = std::shared_ptr<persist::PersistentTier>(std::move(*opened));
  // An open that works again resolves an open failure (the directory is back); it says
  // nothing about a failed write (a full directory opens fine): that needs a write to succeed.
  if (error_from_open_) {
    health_.last_error.clear();
    error_from_open_ = false;
  }
  health_.healthy = health_.last_error.empty();
  return tier_;
}

void TierAccess::Report(const Status& status) {
  MutexLock lock(mu_);
  if (status.ok()) {
    health_.healthy = tier_ != nullptr;
    health_.last_error.clear();
    health_.last_ok_unix_ms = UnixMs();
    return;
  }
  health_.healthy = false;
  health_.last_error = status.ToString();
  health_.last_error_unix_ms = UnixMs();
  error_from_open_ = false;
  if (DropsTier(status.code())) {
    tier_.reset();
    open_error_ = status;
    // The next user may retry at once: the operation failed, not the open.
    next_open_ = std::chrono::steady_clock::now();
  }
}

TierHealth TierAccess::Health() const {
  MutexLock lock(mu_);
  return health_;
}

}  // namespace reft::recovery
