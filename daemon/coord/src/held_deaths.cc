#include "held_deaths.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace reft::coord {

HeldDeaths::HeldDeaths(HeldDeathsOptions options, Hooks hooks)
    : options_(options), hooks_(std::move(hooks)) {
  thread_ = reft::Thread("reft-death-hold", [this] { Loop(); });
}

HeldDeaths::~HeldDeaths() { Stop(); }

void HeldDeaths::Stop() {
  {
    reft::MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeldDeaths::Hold(const std::string& node) {
  {
    reft::MutexLock lock(mu_);
    if (!held_.emplace(node, Entry{Clock::now()}).second) return;
    ++stats_.held_total;
  }
  cv_.notify_all();
}

bool HeldDeaths::IsHeld(const std::string& node) const {
  reft::MutexLock lock(mu_);
  return held_.count(node) != 0;
}

std::vector<std::string> HeldDeaths::Held() const {
  reft::MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [node, e] : held_) out.push_back(node);
  return out;
}

HeldDeathStats HeldDeaths::stats() const {
  reft::MutexLock lock(mu_);
  return stats_;
}

HeldDeaths::Verdict HeldDeaths::Judge(const std::string& node, Entry* e, Clock::time_point now) {
  // etcd is asked only once it is trusted again: while it is suspect (overloaded, perhaps) the
  // held nodes cost it nothing; the probes go to the nodes themselves.
  const bool suspect = hooks_.suspect();
  if (!suspect && hooks_.registered(node).value_or(false)) return Verdict::kRelease;
  if (hooks_.probe(node) == ProbeAnswer::kNoAnswer) {
    return ++e->unanswered >= options_.probes_to_declare ? Verdict::kDeclare : Verdict::kHold;
  }
  e->unanswered = 0;
  // Alive, not registered: held while etcd is suspect; declared once it has been trusted for
  // two windows and the node still did not come back to it.
  if (suspect) {
    e->trusted.reset();
    return Verdict::kHold;
  }
  if (!e->trusted) e->trusted = now;
  return now - *e->trusted > 2 * hooks_.window() ? Verdict::kDeclare : Verdict::kHold;
}

void HeldDeaths::CheckOnce() {
  std::map<std::string, Entry> held;
  {
    reft::MutexLock lock(mu_);
    std::vector<std::pair<Clock::time_point, std::string>> order;
    for (const auto& [node, e] : held_) order.emplace_back(e.checked, node);
    const size_t n = std::min(order.size(), options_.checks_per_round);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end());
    for (size_t i = 0; i < n; ++i) held.emplace(order[i].second, held_.at(order[i].second));
  }
  // Probes run without the lock: IsHeld answers lookups meanwhile.
  std::vector<std::pair<std::string, const char*>> declared;  // node, why
  std::vector<std::string> released;
  const auto now = Clock::now();
  for (auto& [node, e] : held) {
    e.checked = now;
    switch (Judge(node, &e, now)) {
      case Verdict::kHold: break;
      case Verdict::kRelease: released.push_back(node); break;
      case Verdict::kDeclare:
        declared.emplace_back(node, e.unanswered > 0 ? "no answer to direct probes"
                                                     : "it answers but did not register again "
                                                       "once etcd was healthy");
        break;
    }
  }
  {
    reft::MutexLock lock(mu_);
    for (auto& [node, e] : held) {
      auto it = held_.find(node);
      if (it != held_.end()) it->second = e;
    }
    for (const auto& node : released) stats_.released_total += held_.erase(node);
    for (const auto& d : declared) stats_.declared_total += held_.erase(d.first);
  }
  for (const auto& node : released) {
    spdlog::info("node {} registered again: its lease lapse was not a death", node);
  }
  for (const auto& [node, why] : declared) {
    spdlog::warn("node {}: its lease lapse is confirmed ({}): declared dead", node, why);
    hooks_.declare(node);
  }
}

void HeldDeaths::Loop() {
  reft::MutexLock lock(mu_);
  while (!stop_) {
    if (held_.empty()) {
      lock.Wait(cv_, [&]() REFT_REQUIRES(mu_) { return stop_ || !held_.empty(); });
      continue;
    }
    if (lock.WaitFor(cv_, options_.probe_every, [&]() REFT_REQUIRES(mu_) { return stop_; })) break;
    lock.Unlock();
    CheckOnce();
    lock.Lock();
  }
}

}  // namespace reft::coord
