#pragma once
/// \file handler_slot.h
/// \brief One handler the daemon registers with the Peer service after the server started
/// (the persister, the staging of layers, the coordinator's completion inbox), called on gRPC
/// threads. A call takes a reference to the handler it started with, so replacing or clearing
/// the handler while calls run neither blocks them nor pulls the function from under them.

#include <memory>
#include <utility>

#include "reft/mutex.h"

namespace reft::peer {

template <typename Handler>
class HandlerSlot {
 public:
  /// Replaces the handler; an empty `handler` clears it.
  void Set(Handler handler) {
    auto next = handler ? std::make_shared<const Handler>(std::move(handler)) : nullptr;
    MutexLock lock(mu_);
    handler_ = std::move(next);
  }
  /// The handler now, or null: callable for as long as the caller holds it.
  std::shared_ptr<const Handler> Get() const {
    MutexLock lock(mu_);
    return handler_;
  }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const Handler> handler_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::peer
