/// \file reft_load_stream.cc
/// \brief Streamed restore: verified pieces go to the trainer as they arrive.
///
/// Why: a restore into a new memfd touches W bytes of fresh pages, and the kernel's work to
/// hand them out and zero them costs several times what moving the bytes does (measured in
/// docs/bench/recovery.md). Streamed, the bytes land in the trainer's buffers, which exist
/// already; reftd holds a piece per fetch worker, a lost shard it decodes from AEC parity as
/// the others pass (W/M bytes), and, on a replacement node, the slot it regenerates (captured
/// from the stream, so no byte crosses the network twice).

#include <algorithm>
#include <atomic>

#include "reft/coord/restore_source.h"
#include "reft/mutex.h"
#include "group_assembler.h"
#include "reft/recovery/reft_load.h"
#include "slot_rebuilder.h"
#include "state_layout.h"
#include "stream_decode.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;

// The items of a streamed restore of `snapshot`'s rank (labels for the detail line), and the
// decoder of a lost shard; false when this restore cannot be streamed.
Result<bool> PlanStream(const ClusterView& view, const protect::SlotMeta& snapshot,
                        const protect::SgGeometry& g, int64_t step,
                        const std::map<std::string, uint64_t>& offsets, uint64_t size,
                        std::vector<FetchItem>* items, std::vector<std::string>* labels,
                        std::unique_ptr<StreamDecode>* decode) {
  const std::string what =
      MemberRank(snapshot, snapshot.coord.dp).ToString() + " step " + std::to_string(step);
  const std::string sg = "SG pp" + std::to_string(snapshot.coord.pp) + "-tp" +
                         std::to_string(snapshot.coord.tp) + " step " + std::to_string(step);
  // Shards with a copy to read as they are (own slot or ARC) stream; a lost one is decoded from
  // AEC parity as they pass (StreamDecode), or, when it needs more than that, in a memfd.
  std::vector<bool> streamed(static_cast<size_t>(g.m), true);
  for (int d = 0; d < g.m; ++d) {
    if (g.ShardSize(d) == 0) continue;
    FetchItem it;
    it.what = "shard dp" + std::to_string(d) + " of " + sg;
    it.stream_offset = g.shard_begin[d];
    it.size = g.ShardSize(d);
    it.sources = ShardSources(view, snapshot, g, step, d);
    if (it.sources.empty()) {
      streamed[d] = false;
      continue;
    }
    items->push_back(std::move(it));
    labels->push_back("dp" + std::to_string(d));
  }
  if (std::find(streamed.begin(), streamed.end(), false) != streamed.end()) {
    REFT_ASSIGN_OR_RETURN(*decode,
                          StreamDecode::Plan(view, snapshot, g, step, streamed, size, sg));
    if (!*decode) return false;
    for (FetchItem& it : (*decode)->TakeParityItems()) {
      labels->push_back("parity");
      items->push_back(std::move(it));
    }
  }
  for (const auto& name : g.unique) {
    FetchItem it;
    it.what = "unique buffer '" + name + "' of " + what;
    it.stream_offset = offsets.at(name);
    it.size = BufferSize(snapshot, name);
    it.sources = UniqueSources(view, snapshot, step, snapshot.coord.dp, name);
    if (it.size > 0 && it.sources.empty()) return false;
    items->push_back(std::move(it));
    labels->push_back(name);
  }
  return true;
}

// "dp0 <sources>; dp1 <sources>; ...; <what the decoder rebuilt>" for the detail line.
std::string ServedBy(const std::vector<FetchItem>& items, const std::vector<std::string>& labels,
                     const StreamDecode* decode) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i == 0 ? "" : "; ") + labels[i] + " " + items[i].ServedBy();
  }
  if (decode != nullptr) {
    for (const std::string& label : decode->labels()) out += "; " + label;
  }
  return out;
}

}  // namespace

Result<std::optional<local::RestoredState>> ReftLoad::StreamImpl(
    const protect::SlotMeta& snapshot, const protect::SgGeometry& g,
    const std::map<std::string, uint64_t>& offsets, uint64_t size, int64_t step,
    const ClusterView& view, bool rebuild, uint64_t meta_region_size, Fetcher* fetcher,
    local::RestoreSink* sink, RestoreStats* stats, Clock::time_point deadline) {
  // RestoredState owns an fd (move-only): each return builds its own empty optional.
  const auto not_streamed = [] { return std::optional<local::RestoredState>(); };
  if (!sink->Available()) return not_streamed();
  const store::RankKey rank = MemberRank(snapshot, snapshot.coord.dp);
  const std::string what = rank.ToString() + " step " + std::to_string(step);
  std::vector<FetchItem> items;
  std::vector<std::string> labels;  // per item, for the detail line
  std::unique_ptr<StreamDecode> decode;
  REFT_ASSIGN_OR_RETURN(const bool streamable,
                        PlanStream(view, snapshot, g, step, offsets, size, &items, &labels,
                                   &decode));
  if (!streamable) return not_streamed();

  // A replacement node regenerates the rank's slot from the bytes as they pass.
  std::unique_ptr<SlotRebuild> slot;
  if (rebuild) {
    if (!SlotRebuild::Capturable(snapshot)) return not_streamed();
    auto begun = SlotRebuild::Begin(store_, view, fetcher, snapshot, g, step, meta_region_size,
                                    deadline, store::NewPages::kByWriter);
    Status prepared = begun.ok() ? (*begun)->PrepareCapture(offsets) : begun.status();
    if (prepared.ok()) {
      slot = std::move(*begun);
    } else {
      stats->warnings.push_back("the slot of " + what + " was not regenerated here: " +
                                prepared.ToString());
    }
  }

  REFT_RETURN_NOT_OK(
      sink->Begin(offsets, size, fetcher->LargestPiece(items), fetcher->concurrency()));
  const auto t0 = Clock::now();
  // A slot that cannot take a piece (its pages are populated as they arrive: tmpfs may fill up
  // mid-way) is given up on; the trainer's stream goes on.
  Mutex slot_mu;
  Status slot_failed;
  std::atomic<bool> capturing{slot != nullptr};
  const PieceSink deliver = [&](uint64_t offset, const uint8_t* data, uint64_t n) -> Status {
    if (capturing.load(std::memory_order_acquire)) {
      Status captured = slot->Capture(offset, data, n);
      if (!captured.ok()) {
        capturing.store(false, std::memory_order_release);
        MutexLock lock(slot_mu);
        if (slot_failed.ok()) slot_failed = captured;
      }
    }
    return sink->Write(offset, data, n);
  };
  const PieceSink to_trainer = [&](uint64_t offset, const uint8_t* data, uint64_t n) -> Status {
    if (decode) {
      REFT_RETURN_NOT_OK(decode->Absorb(offset, data, n, deliver));
      if (decode->IsParity(offset)) return Status::OK();
    }
    return deliver(offset, data, n);
  };
  // Pieces are read into memory the trainer copies out of (its stream's ring): verified there,
  // captured from there, handed over without another copy.
  const PieceMemory lent{[sink](uint64_t n) { return sink->Borrow(n); },
                         [sink](uint8_t* p) { sink->GiveBack(p); }};
  // A decode wants the pieces feeding one decoded stretch together (StreamDecode::ScheduleRank).
  PieceOrder order;
  if (decode) order = [&decode](uint64_t offset) { return decode->ScheduleRank(offset); };
  Status sunk = fetcher->Run(&items, deadline, to_trainer, &lent, order);
  stats->fetch += Clock::now() - t0;
  if (!sunk.ok()) {
    sink->End(false);
    return sunk.WithContext("streaming the restore of " + what);
  }
  for (const FetchItem& it : items) {
    if (it.status.ok()) continue;
    // A source failed for good part-way: the memfd path re-analyses and decodes. What was
    // streamed stays valid bytes; the memfd overwrites all of it.
    sink->End(false);
    stats->warnings.push_back("the streamed restore of " + what +
                              " went on in a memfd: " + it.status.message());
    return not_streamed();
  }
  if (decode) {
    // Decoded as the pieces passed (inside the fetch): what is left is the check.
    Status decoded = decode->Finish();
    if (!decoded.ok()) {
      sink->End(false);
      return decoded.WithContext("streaming the restore of " + what);
    }
    stats->bytes_rebuilt += decode->decoded_bytes();
  }
  sink->End(true);
  if (slot && !capturing.load(std::memory_order_acquire)) {
    MutexLock lock(slot_mu);
    stats->warnings.push_back("the slot of " + what + " was not regenerated here: " +
                              slot_failed.ToString());
    slot.reset();  // aborted: no partial slot stays
  }

  std::string detail = what + " from memory, streamed: " + ServedBy(items, labels, decode.get());
  // The trainer has every byte now; the slot is sealed and committed while its client reads
  // the rest of the stream and waits for the reply.
  if (slot) {
    Status rs = slot->Finish(stats);
    if (rs.ok()) rs = agreement_.slots->RecordSlot(rank, step);
    if (rs.ok()) {
      detail += "; slot regenerated on this node";
    } else {
      stats->warnings.push_back("the slot of " + what + " was not regenerated here: " +
                                rs.ToString());
    }
  }
  detail += "; " + std::to_string(stats->bytes_peer) + " bytes from peers";
  local::RestoredState out;
  out.step = step;
  out.source = coord::RestoreSourceName(coord::RestoreSource::kMemory);
  out.size = size;
  out.offsets = offsets;
  out.streamed = true;
  out.detail = detail;
  stats->detail = detail;
  return std::optional<local::RestoredState>(std::move(out));
}

}  // namespace reft::recovery
