#pragma once
/// \file peer_options.h
/// \brief Configuration of the node-to-node layer (Peer service, membership, global commit,
/// peer streams). Plain values; the daemon fills them from its TOML config / flags.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace reft::peer {

/// Wire protocol version of proto/reft/v1/peer.proto; peers with another version are refused
/// with an error naming both (docs/peer.md), never half-understood.
/// 2: FetchRegion chunks grew from 1 MiB to kMaxWireChunk (a version-1 receiver rejects them as
///    oversized), slot meta carries the global identity of sharded buffers (reshape).
constexpr uint32_t kProtocolVersion = 2;
/// Largest data chunk of a FetchRegion stream (docs/protocol.md "Wire": big messages are chunked).
/// Equal to the store's default sealed chunk, so a wire chunk is a whole sealed chunk and travels
/// with the checksum Seal() recorded: the holder hashes nothing, the receiver hashes once.
constexpr uint64_t kMaxWireChunk = 4ull << 20;
/// Smallest data chunk every node takes: a caller asking for smaller ones is refused, not served
/// in a flood of tiny messages.
constexpr uint64_t kMinWireChunk = 4096;
/// The most nodes (this one included) the gossip control plane serves: beyond it reftd needs
/// etcd. Its full-table pings, per-member commit pushes and fixed suspicion timeout are sized
/// for this many; docs/coordination.md has the figures behind the number.
constexpr uint32_t kMaxGossipNodes = 16;

struct PeerOptions {
  std::string node_id;             ///< unique per node (reftd --node-id)
  std::string advertise_address;   ///< host:port peers reach this node's Peer service at
  std::vector<std::string> seeds;  ///< --peers list (host:port); may include this node
  uint64_t epoch = 0;              ///< 0 = a fresh one (NewEpoch()); tests may pin it

  std::chrono::milliseconds probe_interval{500};     ///< SWIM protocol period
  std::chrono::milliseconds probe_timeout{250};      ///< deadline of one Ping
  uint32_t indirect_probes = 2;                      ///< k members asked to PingReq
  std::chrono::milliseconds suspicion_timeout{2000}; ///< suspect -> dead
  std::chrono::milliseconds rpc_deadline{2000};      ///< control RPCs (commit, manifest, hello)
  std::chrono::milliseconds fetch_deadline{120000};  ///< one FetchRegion stream
  /// Regions a holder serves to every admitted member, whatever its part in the job
  /// (job_access.h): ones that carry no training state. reftd: the slot meta (buffer names,
  /// sizes, checksums), which operators' restore-check and plan show read from any node.
  std::vector<std::string> job_free_regions;
  std::chrono::milliseconds anti_entropy_interval{500};  ///< commit-state exchange period
  /// Gossip: live members (this node included) beyond which newcomers are refused.
  uint32_t max_gossip_nodes = kMaxGossipNodes;

  uint64_t peer_stream_bandwidth = 0;   ///< bytes/s per peer (shared by its streams); 0 = unlimited
  /// bytes/s of everything this node receives from all peers together (its network link, for
  /// keeping recovery traffic off training and for emulating a link in benchmarks); 0 = unlimited
  uint64_t link_bandwidth = 0;
  uint64_t wire_chunk_bytes = kMaxWireChunk;   ///< <= kMaxWireChunk
  int max_message_bytes = 8 << 20;      ///< gRPC send/receive limit, both ends (> one chunk)
  /// Serve FetchRegion's bytes on a plain TCP listener at this "host:port" (port 0 = any) to
  /// callers that ask for it (BulkListener); "" = gRPC streams only.
  std::string bulk_listen;
  /// Ask holders for the bulk transport on every FetchRegion (falls back to the gRPC stream
  /// when a holder does not offer it or its bulk port cannot be reached).
  bool bulk_fetch = false;
};

/// \brief A fresh epoch: nanoseconds of the realtime clock, strictly increasing in the process.
uint64_t NewEpoch();

/// \brief Process-wide glibc malloc settings that keep gRPC's per-read receive buffers (up to
/// ~1 MiB each) from being returned to the kernel and faulted in again on every read: one arena,
/// mmap threshold 32 MiB, trim threshold 512 MiB, top pad 64 MiB. On the shared VM this took
/// FetchRegion over loopback from ~0.2 to ~1.1 GB/s (page faults are expensive under a
/// hypervisor). Call once at the start of main(), before any thread exists. Returns false if
/// mallopt refused a setting.
bool TuneMallocForPeerStreams();

/// \brief Turns off Abseil's debug-only mutex deadlock detector for the process. Debian's
/// Abseil is built without NDEBUG, so every absl::Mutex acquisition — gRPC takes them for each
/// call, completion and timer — also records lock-order edges in one process-wide graph under a
/// global lock. In a process with hundreds of threads in gRPC calls at once (the scale bench's
/// pooled members; a reftd answering a burst of peer calls) that bookkeeping took most of the
/// CPU (docs/bench/coordination.md). And a cycle the detector believes it saw aborts the
/// process: a daemon must not die of a diagnostic. reft's own locks are std::mutex, checked at
/// compile time (thread-safety annotations), not by this detector. Call once at the start of
/// main(), before any thread exists.
void DisableAbslLockGraph();

/// \brief Faults in `bytes` of the malloc heap now and frees them back into it, where the trim
/// threshold above keeps them: a freshly started reftd (a replacement node's) then runs its
/// first restore on warm pages for gRPC's receive buffers and the fetch workers' pieces, instead
/// of faulting new ones in the middle of it (up to 2.5 s per GiB on a VM whose hypervisor backs
/// each new page; docs/bench/recovery.md). Call after TuneMallocForPeerStreams, from one thread.
void WarmHeap(uint64_t bytes);

/// \brief Checks ranges (non-empty node id and address, timeouts > 0, chunk sizes).
struct PeerOptionsCheck {
  static std::string Validate(const PeerOptions& o);  ///< "" when fine, else the bad field
};

}  // namespace reft::peer
