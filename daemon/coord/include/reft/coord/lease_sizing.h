#pragma once
/// \file lease_sizing.h
/// \brief How long a node's etcd lease lives, as the cluster grows. Every node renews its lease
/// every TTL/3, so N nodes ask etcd for 3N/TTL renewals a second — and etcd serves each
/// renewal only after applying what it has committed, so a renewal load past what etcd keeps
/// up with under writes turns into leases expiring on live nodes. The TTL is therefore the
/// configured one (the failure-detection time of a small cluster) or, in a large cluster, the
/// shortest one whose renewals stay within a budget: failure detection slows with the
/// cluster, as a Kubernetes node lease (40 s, renewed every 10 s) does.

#include <chrono>
#include <cstdint>

namespace reft::coord {

struct LeaseSizing {
  /// The TTL of a small cluster, and never less (reftd.toml `etcd.lease_ttl_s`).
  std::chrono::seconds floor{5};
  /// Renewals per second the whole cluster may ask of etcd (`etcd.lease_renewals_per_s`);
  /// 0 keeps `floor` at every size.
  double renewals_per_s = 1000;
  /// How often a node counts the registered nodes to size its lease again (jittered ±50%).
  std::chrono::milliseconds check_every{60000};
};

/// The TTL for a cluster of `nodes` registered nodes.
std::chrono::seconds SizedLeaseTtl(const LeaseSizing& sizing, int64_t nodes);

/// Whether a node on a lease of `current` moves to one of `wanted`: only when the TTL changes
/// by a factor of two or more, so that a cluster growing node by node does not move every
/// node's lease at every arrival.
bool ShouldMoveLease(std::chrono::seconds current, std::chrono::seconds wanted);

}  // namespace reft::coord
