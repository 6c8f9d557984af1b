#pragma once
/// \file report_forwarder.h
/// \brief An aggregator's side of the report tree (docs/coordination.md "Reports aggregate on
/// the way"): other nodes' completion reports carried to the job's coordinator in batches.
///
/// Group commit, per coordinator address: while one batch is in flight, reports arriving
/// queue; when it returns, everything queued meanwhile goes as the next batch (no linger timer:
/// the batch size follows the load). Forward returns only once the coordinator answered the
/// batch that carried the report, with its answer to that report, or the call's error: a
/// report is never "accepted, then lost" here. Thread-safe; the calling threads send the
/// batches themselves (one of the waiters at a time), so it owns no thread.

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reft/coord/agreement.h"
#include "reft/mutex.h"
#include "reft/result.h"

namespace reft::coord {

class ReportForwarder {
 public:
  /// Sends one batch to the coordinator at `address`: one answer per report, in order, or the
  /// call's error (then every report of the batch failed).
  using Send = std::function<Result<std::vector<Status>>(
      const std::string& address, const std::vector<StepCompletionReport>& batch)>;

  explicit ReportForwarder(Send send) : send_(std::move(send)) {}

  /// Carries `report` to the coordinator at `address` with whatever else is queued for it.
  Status Forward(const std::string& address, const StepCompletionReport& report);

  /// Reports waiting for the batch in flight to `address` to return (they go in the next one).
  size_t queued(const std::string& address);

 private:
  struct Waiter {
    const StepCompletionReport* report;
    std::optional<Status> answer;
  };
  struct Lane {
    bool in_flight = false;
    std::deque<Waiter*> queued;
  };

  /// Takes what `lane` has queued (this thread's own report among it) as the batch in flight.
  static std::vector<Waiter*> TakeQueued(Lane& lane);
  /// Answers the waiters of a batch that returned.
  static void Answer(const std::vector<Waiter*>& batch, const Result<std::vector<Status>>& answers);

  const Send send_;
  reft::Mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Lane> lanes_ REFT_GUARDED_BY(mu_);
};

}  // namespace reft::coord
