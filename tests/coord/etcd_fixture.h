#pragma once
/// \file etcd_fixture.h
/// \brief Real etcd servers for tests: one member or a three-member cluster on loopback, each a
/// child process with its own data directory on tmpfs, killed and restarted for real.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reft/coord/etcd_control_plane.h"
#include "reft/coord/lease_sizing.h"
#include "reft/peer/peer_node.h"
#include "test_support.h"

namespace reft::testing {

class EtcdCluster {
 public:
  /// Starts `members` etcd processes and waits until the cluster answers a linearizable read
  /// (fails the test with etcd's log otherwise). etcd is looked up as /usr/bin/etcd or on PATH.
  explicit EtcdCluster(int members = 1);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  /// Client endpoints (host:port) of every member, in order.
  std::vector<std::string> endpoints() const;
  /// The same, joined by commas (reftd's --etcd).
  std::string endpoints_csv() const;
  int size() const { return static_cast<int>(members_.size()); }

  /// SIGKILL of member i (its data directory stays).
  void Kill(int i);
  /// Starts member i again on its data directory; waits until the cluster answers.
  void Restart(int i);
  /// SIGSTOP of member i, returning once every thread of it is stopped; SIGCONT.
  void Pause(int i);
  void Resume(int i);
  bool running(int i) const;
  /// Waits until some member answers a linearizable read (a quorum exists). False on timeout.
  bool WaitHealthy(double seconds = 60.0) const;
  /// etcd's own log of member i (for failure messages).
  std::string Log(int i) const;

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    std::string data_dir;
    std::string log_path;
    pid_t pid = -1;
  };
  void Spawn(Member& m, bool new_cluster);

  TempDir dir_;
  std::vector<Member> members_;
  std::string initial_cluster_;
  mutable std::string last_error_;  // of the last health probe
};

/// \brief A TCP port on 127.0.0.1 that was free a moment ago, outside the kernel's ephemeral
/// range (so no port-0 bind or outgoing connection takes it before it is used), never the same
/// twice in one process, and held against every other test process for this one's life.
int FreeLoopbackPort();

/// \brief The etcd control plane for in-process nodes (TestNode), with test timings: 1 s etcd
/// calls, 2 s leases, 50 ms retries, 10 s for a completion report to the coordinator. One
/// client shared by every node built from it.
peer::ControlPlaneFactory EtcdControlPlane(const EtcdCluster& etcd);
/// \brief The same with the leases sized by `lease` (lease_sizing.h).
peer::ControlPlaneFactory EtcdControlPlane(const EtcdCluster& etcd, const coord::LeaseSizing& lease);
/// \brief The same with the test timings changed by `adjust` (a test of one option).
peer::ControlPlaneFactory EtcdControlPlane(
    const EtcdCluster& etcd, const std::function<void(coord::EtcdControlPlaneOptions&)>& adjust);

/// \brief Ends the term of `job`'s coordinator behind its back: deletes the coordinator key and
/// puts it again for `holder` (a new create revision), as a node that won the next campaign
/// would. Throws when etcd refuses.
void TakeCoordinatorKey(const EtcdCluster& etcd, const std::string& job, const std::string& holder);

}  // namespace reft::testing
