#pragma once
/// \file suspected_nodes.h
/// \brief Suspicions that a node died, looked into without declaring anything on their own
/// (docs/coordination.md "Suspicions: faster detection without false deaths").
///
/// The problem: a node's death is its lease lapsing, a TTL after its last renewal (5 s by
/// default, 13 s at 4,096 nodes), yet the processes that talk to a dead node notice long before:
/// a trainer's collective fails, a peer call is refused. Taking their word for it would turn
/// every slow or partitioned node into a false death. So a suspicion only starts a check that
/// asks the kernel of the suspected node: its registered port is knocked at (peer::Knock) twice,
/// `knock_gap` apart. Refused both times — nothing listens, the process that registered is
/// gone — and its lease is revoked: every node then sees the same departure as a lapse, a TTL
/// early. Accepted (some process holds the port: alive, stopped or overloaded) or no answer (cut
/// off) leaves the node to its lease. A node is looked into at most once per `quiet_after`, and
/// at most `max_pending` nodes wait at once (a flood of reports costs a bounded amount).
/// Thread-safe; one thread ("reft-suspect").

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "reft/mutex.h"
#include "reft/peer/knock.h"
#include "reft/peer/node_directory.h"
#include "reft/result.h"
#include "reft/thread.h"

namespace reft::coord {

struct SuspectedNodesOptions {
  std::chrono::milliseconds knock_gap{100};
  std::chrono::milliseconds quiet_after{1000};
  size_t max_pending = 64;
  bool own_thread = true;  ///< false: suspicions wait for JudgeOne calls (tests)
};

class SuspectedNodes {
 public:
  using Clock = std::chrono::steady_clock;
  /// A node's registration as etcd holds it now.
  struct Registration {
    std::string address;
    int64_t lease = 0;
  };
  struct Hooks {
    /// The node's registration now; nothing when it is not registered (gone already) or etcd
    /// did not answer.
    std::function<std::optional<Registration>(const std::string& node)> registration;
    std::function<peer::KnockAnswer(const std::string& address)> knock;
    /// Revokes `lease` (the node's keys go at once; every watcher sees the departure).
    std::function<Status(int64_t lease)> revoke;
  };

  SuspectedNodes(SuspectedNodesOptions options, Hooks hooks);
  ~SuspectedNodes();
  SuspectedNodes(const SuspectedNodes&) = delete;
  SuspectedNodes& operator=(const SuspectedNodes&) = delete;

  /// Queues a look at `node` (returns at once; merged with one already waiting or made within
  /// `quiet_after`).
  void Suspect(const std::string& node, const std::string& reason);
  peer::SuspicionStats stats() const;
  /// Looks into the oldest waiting suspicion (what the thread does; tests call it). False when
  /// none waits.
  bool JudgeOne();
  void Stop();

 private:
  enum class Verdict { kGone, kConfirmed, kRefuted, kUnresolved };
  Verdict Judge(const std::string& node, const std::string& reason);
  /// Waits `d` unless stopped; false when stopped.
  bool Pause(std::chrono::milliseconds d);
  void Loop();

  const SuspectedNodesOptions options_;
  const Hooks hooks_;
  mutable reft::Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::string>> pending_ REFT_GUARDED_BY(mu_);  // node, reason
  /// When each node was last queued; entries older than quiet_after are dropped as new come.
  std::map<std::string, Clock::time_point> last_queued_ REFT_GUARDED_BY(mu_);
  peer::SuspicionStats stats_ REFT_GUARDED_BY(mu_);
  bool stop_ REFT_GUARDED_BY(mu_) = false;
  reft::Thread thread_;
};

}  // namespace reft::coord
