#include "report_forwarder.h"

namespace reft::coord {

Status ReportForwarder::Forward(const std::string& address, const StepCompletionReport& report) {
  Waiter me{&report, std::nullopt};
  reft::MutexLock lock(mu_);
  Lane& lane = lanes_[address];
  lane.queued.push_back(&me);
  // The first waiter of a lane with nothing in flight sends; everyone else waits for the batch
  // in flight to return (and then maybe sends the next one, its own report among it).
  lock.Wait(cv_, [&]() REFT_REQUIRES(mu_) { return me.answer.has_value() || !lane.in_flight; });
  if (!me.answer) {
    std::vector<Waiter*> batch = TakeQueued(lane);
    std::vector<StepCompletionReport> reports;
    reports.reserve(batch.size());
    for (const Waiter* w : batch) reports.push_back(*w->report);
    lock.Unlock();
    Result<std::vector<Status>> answers = send_(address, reports);
    lock.Lock();
    Answer(batch, answers);
    lane.in_flight = false;
    // Lanes stay (one per coordinator address this node forwarded to: a handful over its life).
    cv_.notify_all();
  }
  return *me.answer;
}

size_t ReportForwarder::queued(const std::string& address) {
  reft::MutexLock lock(mu_);
  auto it = lanes_.find(address);
  return it == lanes_.end() ? 0 : it->second.queued.size();
}

std::vector<ReportForwarder::Waiter*> ReportForwarder::TakeQueued(Lane& lane) {
  std::vector<Waiter*> batch(lane.queued.begin(), lane.queued.end());
  lane.queued.clear();
  lane.in_flight = true;
  return batch;
}

void ReportForwarder::Answer(const std::vector<Waiter*>& batch,
                             const Result<std::vector<Status>>& answers) {
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i]->answer = !answers.ok()            ? answers.status()
                       : i < answers->size() ? (*answers)[i]
                                             : Status::Internal("no answer for a forwarded report");
  }
}

}  // namespace reft::coord
