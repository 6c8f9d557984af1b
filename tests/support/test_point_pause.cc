#include "test_point_pause.h"

namespace reft::test_point {

Pause::Pause(std::string point, std::string job, const void* who)
    : state_(std::make_shared<State>()) {
  hook_ = std::make_unique<ScopedHook>([s = state_, point = std::move(point), job = std::move(job),
                                        who](const Arrival& a) {
    if (a.point != point || a.job != job || (who != nullptr && a.who != who)) return;
    MutexLock lock(s->mu);
    if (s->released || s->held) return;  // the first arrival only
    s->held = true;
    s->cv.notify_all();
    lock.Wait(s->cv, [&]() REFT_REQUIRES(s->mu) { return s->released; });
  });
}

Pause::~Pause() {
  Release();
  hook_.reset();
}

bool Pause::WaitHeld(std::chrono::milliseconds timeout) {
  MutexLock lock(state_->mu);
  return lock.WaitFor(state_->cv, timeout, [&]() REFT_REQUIRES(state_->mu) { return state_->held; });
}

void Pause::Release() {
  {
    MutexLock lock(state_->mu);
    state_->released = true;
  }
  state_->cv.notify_all();
}

}  // namespace reft::test_point
