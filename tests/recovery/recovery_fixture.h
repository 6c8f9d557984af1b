#pragma once
// Multi-node fixture for daemon/recovery: real stores in temp dirs, real PeerNodes and gRPC on
// loopback (tests/peer's TestNode), and slots written by the slot layout contract: "meta", then
// SlotMeta::Plan() regions, redundancy encoded with EncodeMember from deterministic fp32 / fp16 /
// bf16 buffers of odd sizes, unique buffers and the ring neighbour's peer copies.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "peer_fixture.h"
#include "reft/local/recovery_hooks.h"
#include "reft/protect/slot_meta.h"
#include "reft/recovery/recovery_options.h"

namespace reft::recovery::test {

using peer::test::TestNode;

/// \brief A job: layout, protection and the buffers every rank registers.
struct JobSpec {
  std::string job = "job";
  JobLayout layout;
  protect::Scheme scheme;
  uint64_t shard_chunk = 4096;
  std::vector<protect::BufferSpec> buffers;

  protect::SlotMeta Meta(const RankCoord& c) const;
  std::vector<RankCoord> Ranks() const;
  store::RankKey Key(const RankCoord& c) const { return {job, c.pp, c.tp, c.dp}; }
};

/// \brief fp32/bf16/fp16 replicated buffers of odd sizes, a unique RNG state and (optionally) a
/// unique optimizer shard.
JobSpec MakeJob(int dp, int tp, int pp, const std::string& scheme, bool with_unique = true,
                uint64_t scale = 1);

/// \brief The bytes of buffer `b` of rank `c` at `step` (replicated buffers are identical across
/// the SG; unique ones differ per rank).
std::vector<uint8_t> BufferBytes(const JobSpec& spec, const RankCoord& c,
                                 const protect::BufferSpec& b, int64_t step);

/// \brief The rank's slot, region by region, as the save path writes it.
std::vector<std::pair<std::string, std::vector<uint8_t>>> SlotRegions(const JobSpec& spec,
                                                                      const RankCoord& c,
                                                                      int64_t step);

/// \brief Writes and seals the rank's slot of `step` in `store`; commits it too when `commit`.
void WriteContractSlot(store::SnapshotStore* store, const JobSpec& spec,
                       const RankCoord& c, int64_t step, bool commit = false);

/// \brief Checks that `st` holds every buffer of rank `c` at `step` bit-exactly, restored from
/// memory.
void CheckRestored(const local::RestoredState& st, const JobSpec& spec, const RankCoord& c,
                   int64_t step);

/// \brief The same for a state from `source` ("memory" or "tier").
void CheckRestoredFrom(const local::RestoredState& st, const JobSpec& spec,
                       const RankCoord& c, int64_t step, const std::string& source);

/// \brief Flips one byte (XOR 0x10) of `region` at `offset` of the rank's slot in its segment
/// file, behind the store's back (memory corruption after sealing).
void FlipByteInSegment(store::SnapshotStore* store, const store::RankKey& rank, int64_t step,
                       const std::string& region, uint64_t offset);

/// \brief Checks that `store` holds the rank's committed slot of `step`, equal region by region
/// to the slot the save path wrote.
void CheckSlotEqualsOriginal(store::SnapshotStore* store, const JobSpec& spec,
                             const RankCoord& c, int64_t step);

/// \brief Options with short deadlines and small pieces (several pieces per shard).
RecoveryOptions TestOptions();

/// \brief Nodes n0..n{k-1} in temp dirs; nodes can be killed (and their store wiped) and
/// replacement nodes added. Gossip between them, or `control_plane` (etcd) for every node.
class Cluster {
 public:
  explicit Cluster(int n, uint64_t chunk_size = 64 << 10, uint64_t bandwidth = 0,
                   peer::ControlPlaneFactory control_plane = nullptr);
  ~Cluster();
  TestNode& node(size_t i) { return *nodes_.at(i); }
  size_t size() const { return nodes_.size(); }
  bool alive(size_t i) const { return nodes_.at(i) != nullptr; }
  /// Adds a node (a replacement) seeded with the first live node; returns its index.
  size_t Add(const std::string& id);
  /// Adds a node whose segments live in `shm_dir` (a tiny tmpfs, say), which it does not own.
  size_t Add(const std::string& id, const std::string& shm_dir);
  /// Stops node i (its server goes away at once), closes its store and deletes its segments.
  void KillAndWipe(size_t i);
  /// Waits until every live node sees every other live node alive and every killed one dead.
  /// SWIM declares a killed member dead after its probe and suspicion rounds, which a CI
  /// machine running two test processes at once can stretch past 5 s (one CI run failed so):
  /// the wait returns as soon as the views agree, so a long bound costs nothing when they do.
  void Converge(std::chrono::milliseconds timeout = std::chrono::milliseconds(20000));
  const std::string& dir(size_t i) const { return dirs_.at(i); }

  /// Placement: rank -> node index. Writes `step` of every rank on its node through the real
  /// commit path (Join once, seal, Complete) and waits until every live node committed it.
  void WriteStep(const JobSpec& spec, const std::map<std::string, size_t>& placement, int64_t step);

 private:
  uint64_t chunk_size_;
  uint64_t bandwidth_;
  peer::ControlPlaneFactory control_plane_;
  std::vector<std::string> dirs_;  // per node
  std::vector<std::unique_ptr<reft::testing::TempDir>> owned_dirs_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
  std::map<std::string, bool> joined_;
};

/// \brief Placement where SG member d of (pp, tp) sits on node (d + pp + tp) mod nodes, so the
/// members of one SG are on distinct nodes and every node holds several ranks.
std::map<std::string, size_t> RotatedPlacement(const JobSpec& spec, size_t nodes);

}  // namespace reft::recovery::test
