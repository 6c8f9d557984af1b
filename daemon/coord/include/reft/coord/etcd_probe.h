#pragma once
/// \file etcd_probe.h
/// \brief A bounded look at the etcd cluster, for `reftctl status`: whether each member answers
/// and which one leads (etcd's Maintenance.Status, answered by a member on its own), and which
/// node coordinates each of some jobs (their coordinator keys, docs/coordination.md).
///
/// Separate from the control plane's EtcdClient on purpose: that one fails over and retries for
/// up to its request timeout per member, while a status must answer within a small budget
/// whatever state etcd is in (stopped, paused, without quorum). Thread-safe.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace etcdserverpb {
class KV;
class Maintenance;
}  // namespace etcdserverpb

namespace reft::coord {

struct EtcdMemberHealth {
  std::string address;
  bool healthy = false;  ///< answered, follows a leader, raised no alarm
  bool leader = false;   ///< it is the leader
  std::string error;     ///< why not healthy ("" when healthy)
};

struct EtcdHealth {
  std::vector<EtcdMemberHealth> members;  ///< in endpoint order
  /// job -> the node holding its coordinator key; jobs without one (or unread) are absent.
  std::map<std::string, std::string> coordinators;
  std::string error;  ///< what is wrong with the cluster as a whole ("" when nothing)
};

class EtcdProbe {
 public:
  /// Channels to `endpoints` (host:port) with `credentials` (nullptr = plain text); no call yet.
  EtcdProbe(std::vector<std::string> endpoints,
            std::shared_ptr<grpc::ChannelCredentials> credentials);
  ~EtcdProbe();
  EtcdProbe(const EtcdProbe&) = delete;
  EtcdProbe& operator=(const EtcdProbe&) = delete;

  /// \brief Asks every member at once, then reads the coordinator keys of `jobs` from a
  /// healthy member (the leader if one answered); returns within about `budget` in any case.
  EtcdHealth Probe(const std::vector<std::string>& jobs, std::chrono::milliseconds budget) const;

 private:
  struct Member;
  /// Fills `out->coordinators`; returns "" or what went wrong.
  std::string ReadCoordinators(const Member& m, const std::vector<std::string>& jobs,
                               std::chrono::system_clock::time_point deadline,
                               EtcdHealth* out) const;

  std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace reft::coord
