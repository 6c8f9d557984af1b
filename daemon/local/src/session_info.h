#pragma once
/// \file session_info.h
/// \brief A session's SessionInfo behind a mutex: written by the session's strand (its
/// snapshot writer too), read by LocalServer::Sessions() from any thread.

#include "reft/local/local_server.h"
#include "reft/mutex.h"

namespace reft::local {

class SessionInfoCell {
 public:
  /// \brief Runs `update(info)` under the lock.
  template <typename Fn>
  void Update(Fn update) {
    MutexLock lock(mu_);
    update(info_);
  }
  SessionInfo Get() const {
    MutexLock lock(mu_);
    return info_;
  }

 private:
  mutable Mutex mu_;
  SessionInfo info_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::local
