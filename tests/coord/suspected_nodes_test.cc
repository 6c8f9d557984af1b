// Suspicions (coord::SuspectedNodes) with scripted registrations, knocks and revokes, and the
// knock itself (peer::Knock) against real sockets: a listening port accepts, a closed one
// refuses. The system test with real reftd is tests/system/test_failure_reports.py.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "reft/mutex.h"
#include "reft/peer/knock.h"
#include "reft/unique_fd.h"
#include "suspected_nodes.h"

using namespace std::chrono_literals;
using reft::coord::SuspectedNodes;
using reft::peer::KnockAnswer;

namespace {

// Scripted hooks: each node's registration, the answers its port gives in turn, the revokes.
struct Script {
  reft::Mutex mu;
  std::map<std::string, SuspectedNodes::Registration> registered REFT_GUARDED_BY(mu);
  std::map<std::string, std::deque<KnockAnswer>> answers REFT_GUARDED_BY(mu);  // by address
  std::vector<std::string> knocked REFT_GUARDED_BY(mu);
  std::vector<int64_t> revoked REFT_GUARDED_BY(mu);

  SuspectedNodes::Hooks Hooks() {
    SuspectedNodes::Hooks h;
    h.registration = [this](const std::string& node) -> std::optional<SuspectedNodes::Registration> {
      reft::MutexLock lock(mu);
      auto it = registered.find(node);
      if (it == registered.end()) return std::nullopt;
      return it->second;
    };
    h.knock = [this](const std::string& address) {
      reft::MutexLock lock(mu);
      knocked.push_back(address);
      auto& q = answers[address];
      if (q.empty()) return KnockAnswer::kNoAnswer;
      const KnockAnswer a = q.front();
      q.pop_front();
      return a;
    };
    h.revoke = [this](int64_t lease) {
      reft::MutexLock lock(mu);
      revoked.push_back(lease);
      return reft::Status::OK();
    };
    return h;
  }
};

reft::coord::SuspectedNodesOptions Fast() {
  reft::coord::SuspectedNodesOptions o;
  o.knock_gap = 1ms;
  o.quiet_after = 1h;
  o.own_thread = false;  // the tests drive every look with JudgeOne
  return o;
}

// A loopback TCP port that listens (or, after close, refuses).
struct Port {
  reft::UniqueFd fd{::socket(AF_INET, SOCK_STREAM, 0)};
  uint16_t port = 0;
  Port() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd.get(), 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

}  // namespace

TEST_CASE("a suspected node whose port refuses twice has its lease revoked", "[suspicion]") {
  Script s;
  {
    reft::MutexLock lock(s.mu);
    s.registered["n2"] = {"10.0.0.2:7000", 42};
    s.answers["10.0.0.2:7000"] = {KnockAnswer::kRefused, KnockAnswer::kRefused};
  }
  SuspectedNodes judge(Fast(), s.Hooks());
  judge.Suspect("n2", "collective failed");
  REQUIRE(judge.JudgeOne());
  reft::MutexLock lock(s.mu);
  CHECK(s.revoked == std::vector<int64_t>{42});
  CHECK(s.knocked.size() == 2);
  const auto st = judge.stats();
  CHECK(st.received_total == 1);
  CHECK(st.confirmed_total == 1);
}

TEST_CASE("a suspicion is never a death unless the port refuses twice in a row", "[suspicion]") {
  struct Row {
    std::deque<KnockAnswer> answers;
    uint64_t refuted, unresolved;
  };
  // Accepted at once (alive, or stopped: the kernel still holds its listening socket); no
  // answer (cut off); refused once, then accepted (a restarted reftd on the same port); refused
  // once, then no answer.
  const std::vector<Row> rows = {{{KnockAnswer::kAccepted}, 1, 0},
                                 {{KnockAnswer::kNoAnswer}, 0, 1},
                                 {{KnockAnswer::kRefused, KnockAnswer::kAccepted}, 1, 0},
                                 {{KnockAnswer::kRefused, KnockAnswer::kNoAnswer}, 0, 1}};
  for (const Row& r : rows) {
    Script s;
    {
      reft::MutexLock lock(s.mu);
      s.registered["n2"] = {"10.0.0.2:7000", 42};
      s.answers["10.0.0.2:7000"] = r.answers;
    }
    SuspectedNodes judge(Fast(), s.Hooks());
    judge.Suspect("n2", "worker group failed");
    REQUIRE(judge.JudgeOne());
    reft::MutexLock lock(s.mu);
    CHECK(s.revoked.empty());
    const auto st = judge.stats();
    CHECK(st.confirmed_total == 0);
    CHECK(st.refuted_total == r.refuted);
    CHECK(st.unresolved_total == r.unresolved);
  }
}

TEST_CASE("a node gone already, repeated reports and a flood cost nothing more", "[suspicion]") {
  Script s;
  auto o = Fast();
  o.max_pending = 2;
  SuspectedNodes judge(o, s.Hooks());
  // Not registered: nothing is knocked at, nothing revoked.
  judge.Suspect("gone", "x");
  REQUIRE(judge.JudgeOne());
  // The same node reported again within quiet_after: merged, not looked into again.
  judge.Suspect("gone", "x");
  CHECK_FALSE(judge.JudgeOne());
  // More distinct nodes than max_pending: the rest are dropped, counted.
  {
    reft::MutexLock lock(s.mu);
    for (const char* n : {"a", "b", "c", "d"}) s.registered[n] = {std::string(n) + ":1", 1};
  }
  for (const char* n : {"a", "b", "c", "d"}) judge.Suspect(n, "flood");
  int looked = 0;
  while (judge.JudgeOne()) ++looked;
  CHECK(looked == 2);
  reft::MutexLock lock(s.mu);
  CHECK(s.knocked.size() == 2);  // a and b: no answer scripted
  CHECK(s.revoked.empty());
  const auto st = judge.stats();
  CHECK(st.received_total == 6);
  CHECK(st.dropped_total == 2);
}

TEST_CASE("the thread looks into a suspicion on its own", "[suspicion]") {
  Script s;
  {
    reft::MutexLock lock(s.mu);
    s.registered["n3"] = {"10.0.0.3:7000", 7};
    s.answers["10.0.0.3:7000"] = {KnockAnswer::kRefused, KnockAnswer::kRefused};
  }
  auto o = Fast();
  o.own_thread = true;
  SuspectedNodes judge(o, s.Hooks());
  judge.Suspect("n3", "peer call refused");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (judge.stats().confirmed_total == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(judge.stats().confirmed_total == 1);
}

TEST_CASE("a knock tells a listening port from a closed one", "[suspicion][knock]") {
  auto port = std::make_unique<Port>();
  const std::string address = port->address();
  CHECK(reft::peer::Knock(address, 1000ms) == KnockAnswer::kAccepted);
  port.reset();  // nothing listens there now
  CHECK(reft::peer::Knock(address, 1000ms) == KnockAnswer::kRefused);
  // An address it cannot use is no evidence either way.
  CHECK(reft::peer::Knock("not-an-address", 100ms) == KnockAnswer::kNoAnswer);
  CHECK(reft::peer::Knock("127.0.0.1:99999", 100ms) == KnockAnswer::kNoAnswer);
}
