#include "suspected_nodes.h"

#include <spdlog/spdlog.h>

namespace reft::coord {

SuspectedNodes::SuspectedNodes(SuspectedNodesOptions options, Hooks hooks)
    : options_(options), hooks_(std::move(hooks)) {
  if (options_.own_thread) thread_ = reft::Thread("reft-suspect", [this] { Loop(); });
}

SuspectedNodes::~SuspectedNodes() { Stop(); }

void SuspectedNodes::Stop() {
  {
    reft::MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SuspectedNodes::Suspect(const std::string& node, const std::string& reason) {
  {
    reft::MutexLock lock(mu_);
    ++stats_.received_total;
    const auto now = Clock::now();
    for (auto it = last_queued_.begin(); it != last_queued_.end();) {
      it = now - it->second >= options_.quiet_after ? last_queued_.erase(it) : std::next(it);
    }
    if (last_queued_.count(node) != 0) return;  // waiting, or looked into a moment ago
    if (pending_.size() >= options_.max_pending) {
      ++stats_.dropped_total;
      return;
    }
    last_queued_[node] = now;
    pending_.emplace_back(node, reason);
  }
  cv_.notify_all();
}

peer::SuspicionStats SuspectedNodes::stats() const {
  reft::MutexLock lock(mu_);
  return stats_;
}

bool SuspectedNodes::Pause(std::chrono::milliseconds d) {
  reft::MutexLock lock(mu_);
  return !lock.WaitFor(cv_, d, [&]() REFT_REQUIRES(mu_) { return stop_; });
}

SuspectedNodes::Verdict SuspectedNodes::Judge(const std::string& node, const std::string& reason) {
  auto reg = hooks_.registration(node);
  if (!reg || reg->address.empty()) return Verdict::kGone;
  for (int knock = 0; knock < 2; ++knock) {
    if (knock > 0 && !Pause(options_.knock_gap)) return Verdict::kUnresolved;
    switch (hooks_.knock(reg->address)) {
      case peer::KnockAnswer::kAccepted:
        return Verdict::kRefuted;
      case peer::KnockAnswer::kNoAnswer:
        return Verdict::kUnresolved;
      case peer::KnockAnswer::kRefused:
        break;
    }
  }
  // The lease seen with the address: a node that registered again since has another one, so
  // a new incarnation is never revoked for its predecessor's closed port.
  if (Status s = hooks_.revoke(reg->lease); !s.ok()) {
    spdlog::warn(
        "node {}: suspected ({}), its port {} refused twice, but its lease could not "
        "be revoked: {} (its death waits for the lease to lapse)",
        node, reason, reg->address, s.ToString());
    return Verdict::kUnresolved;
  }
  spdlog::warn(
      "node {}: suspected ({}), its port {} refused twice: its process is gone; its "
      "lease is revoked, a TTL before it would have lapsed",
      node, reason, reg->address);
  return Verdict::kConfirmed;
}

bool SuspectedNodes::JudgeOne() {
  std::pair<std::string, std::string> next;
  {
    reft::MutexLock lock(mu_);
    if (pending_.empty()) return false;
    next = std::move(pending_.front());
    pending_.pop_front();
  }
  const Verdict v = Judge(next.first, next.second);
  reft::MutexLock lock(mu_);
  // Quiet for `quiet_after` from the verdict, not from the report.
  last_queued_[next.first] = Clock::now();
  switch (v) {
    case Verdict::kGone:
      break;
    case Verdict::kConfirmed:
      ++stats_.confirmed_total;
      break;
    case Verdict::kRefuted:
      ++stats_.refuted_total;
      break;
    case Verdict::kUnresolved:
      ++stats_.unresolved_total;
      break;
  }
  return true;
}

void SuspectedNodes::Loop() {
  reft::MutexLock lock(mu_);
  while (!stop_) {
    if (pending_.empty()) {
      lock.Wait(cv_, [&]() REFT_REQUIRES(mu_) { return stop_ || !pending_.empty(); });
      continue;
    }
    lock.Unlock();
    JudgeOne();
    lock.Lock();
  }
}

}  // namespace reft::coord
