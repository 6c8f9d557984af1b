#pragma once
/// \file held_deaths.h
/// \brief Lease lapses held while the control plane is suspect, until a second signal
/// confirms or refutes them (docs/coordination.md "Deaths held while the control plane is
/// suspect").
///
/// A lapse that ControlPlaneSuspicion says to hold is not a death yet. Every `probe_every` the
/// held nodes are looked at again, a few per round: registered again (its reftd re-registered
/// after the stall; etcd is asked only once it is trusted again, so holds add no load to an
/// overloaded etcd) — released, it never died; its reftd answers a direct probe over the Peer
/// service — still held, alive; `probes_to_declare` probes in a row without an answer — declared dead. A node
/// that keeps answering but cannot register again (cut off from etcd alone) is declared once
/// the control plane has been trusted again for two windows: without etcd it cannot take part
/// in any agreement, and it is fenced by its new epoch when it comes back.
/// Thread-safe; one thread ("reft-death-hold").

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reft/mutex.h"
#include "reft/thread.h"

namespace reft::coord {

/// What a direct probe of a node's reftd found.
enum class ProbeAnswer { kAnswered, kNoAnswer };

struct HeldDeathsOptions {
  std::chrono::milliseconds probe_every{500};
  int probes_to_declare = 2;
  /// Held nodes looked at per round, the longest unchecked first: a mass expiry holds many
  /// nodes at once, while etcd is already overloaded, and each look costs it a read (and the
  /// node a probe). With H held, each is looked at every ⌈H / this⌉ rounds.
  size_t checks_per_round = 16;
};

/// \brief Counters for status and metrics.
struct HeldDeathStats {
  uint64_t held_total = 0;      ///< lapses held so far
  uint64_t released_total = 0;  ///< held nodes that registered again: no death
  uint64_t declared_total = 0;  ///< held nodes declared dead after all
};

class HeldDeaths {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    /// Whether the node is registered in etcd now (nothing: etcd did not answer).
    std::function<std::optional<bool>(const std::string& node)> registered;
    /// A direct probe of the node's reftd.
    std::function<ProbeAnswer(const std::string& node)> probe;
    /// Whether the control plane is suspect now, and the window a signal lasts.
    std::function<bool()> suspect;
    std::function<std::chrono::milliseconds()> window;
    /// The node is dead after all: tell the departure listeners (called without locks held).
    std::function<void(const std::string& node)> declare;
  };

  HeldDeaths(HeldDeathsOptions options, Hooks hooks);
  ~HeldDeaths();
  HeldDeaths(const HeldDeaths&) = delete;
  HeldDeaths& operator=(const HeldDeaths&) = delete;

  /// Holds `node`'s lapse (from the registrations watch: returns at once).
  void Hold(const std::string& node);
  bool IsHeld(const std::string& node) const;
  std::vector<std::string> Held() const;
  HeldDeathStats stats() const;
  /// Looks at up to `checks_per_round` held nodes, the longest unchecked first (what the thread
  /// does every `probe_every`; tests call it).
  void CheckOnce();
  void Stop();

 private:
  struct Entry {
    Clock::time_point since;
    Clock::time_point checked{};              // the last look (never: the epoch)
    int unanswered = 0;                       // probes in a row
    std::optional<Clock::time_point> trusted;  // since when the control plane is trusted again
  };
  enum class Verdict { kHold, kRelease, kDeclare };
  Verdict Judge(const std::string& node, Entry* e, Clock::time_point now);
  void Loop();

  const HeldDeathsOptions options_;
  const Hooks hooks_;
  mutable reft::Mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> held_ REFT_GUARDED_BY(mu_);
  HeldDeathStats stats_ REFT_GUARDED_BY(mu_);
  bool stop_ REFT_GUARDED_BY(mu_) = false;
  reft::Thread thread_;
};

}  // namespace reft::coord
