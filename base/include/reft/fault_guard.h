#pragma once
/// \file fault_guard.h
/// \brief Turns a SIGBUS on a file mapping that another process may shrink into a recorded,
/// survivable event instead of the death of reftd.
///
/// reftd hands every trainer a writable fd of its own slot file (the trainer copies its host
/// buffers straight into the slot). A writable fd can always be truncated, and a file cannot be
/// sealed unless it is a memfd: a hostile or buggy trainer can shrink a slot file under reftd's
/// mapping at any time, even after the step committed, and the next access of any reftd thread
/// (a pull, a seal, a peer's fetch, a restore) would raise SIGBUS and kill the daemon and every
/// job of the node. So such mappings are registered here. A process-wide SIGBUS handler finds
/// the faulting address in the registered ranges and replaces the whole range with anonymous
/// zero memory (one mmap(MAP_FIXED), async-signal-safe), so the faulting instruction and every
/// later access succeed; the range counts the fault. The bytes read from then on are zeros,
/// which the chunk checksums of a sealed slot reject (the slot reads as corrupt), and the
/// writer of a slot checks Damaged() before it seals (the step fails for that session only).
/// A fault outside every registered range goes to the previous handler (or the default
/// action: the process dies as before).
///
/// Deviation from a per-access guard (sigsetjmp around each copy): reftd reads slots from many
/// threads and libraries (gRPC fetches, checksums, persist), so a guard around every access is
/// neither complete nor cheap; the remap repairs the mapping for all of them at once.

#include <cstddef>
#include <cstdint>

namespace reft {

class FaultGuardedRange {
 public:
  FaultGuardedRange() = default;
  /// \brief Registers [addr, addr + len) (installing the handler on first use). A full table
  /// (65536 ranges) leaves the range unguarded: registered() is false.
  FaultGuardedRange(void* addr, size_t len);
  ~FaultGuardedRange();
  FaultGuardedRange(FaultGuardedRange&& o) noexcept;
  FaultGuardedRange& operator=(FaultGuardedRange&& o) noexcept;
  FaultGuardedRange(const FaultGuardedRange&) = delete;
  FaultGuardedRange& operator=(const FaultGuardedRange&) = delete;

  bool registered() const { return slot_ >= 0; }
  /// \brief True once a fault in the range was repaired: its bytes are no longer the file's.
  bool Damaged() const;
  /// \brief Unregisters (call before unmapping the range).
  void Reset();

 private:
  int slot_ = -1;
};

/// \brief Faults repaired in this process so far (every range).
uint64_t RepairedFaults();

}  // namespace reft
