#include "node_local_hooks.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "reft/mapped_memfd.h"
#include "reft/protect/codec.h"

namespace reft::testing {

Status NodeLocalPeerCopier::CopyPublished(const store::RankKey& from, int64_t step,
                                          const std::string& region, uint8_t* dst, uint64_t size,
                                          std::chrono::milliseconds timeout,
                                          const std::function<Status()>& abandon) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    auto slot = store_->GetPublished(from, step, region);
    if (slot.ok()) {
      REFT_ASSIGN_OR_RETURN(size_t idx, (*slot)->FindRegion(region));
      if ((*slot)->region_size(idx) != size) {
        return Status::InvalidArgument("peer copy: region '" + region + "' of " + from.ToString() +
                                       " has " + std::to_string((*slot)->region_size(idx)) +
                                       " bytes, this rank's copy has room for " +
                                       std::to_string(size));
      }
      std::memcpy(dst, (*slot)->region_data(idx), size);
      return Status::OK();
    }
    if (slot.status().code() == StatusCode::kLost) return slot.status();  // never published
    if (abandon) {
      REFT_RETURN_NOT_OK(abandon().WithContext("peer copy of '" + region + "' of " + from.ToString()));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string slots;  // what the neighbour holds instead
      for (const auto& info : store_->List(from.job)) {
        if (!(info.rank == from)) continue;
        slots += (slots.empty() ? "" : ", ") + std::string(store::SlotStateName(info.state)) +
                 " step " + std::to_string(info.step);
      }
      return Status::Timeout("peer copy: " + from.ToString() + " did not publish '" + region +
                             "' of step " + std::to_string(step) + " within " +
                             std::to_string(timeout.count()) + " ms (its slots: " + slots + ")");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

Result<local::RestoredState> NodeLocalRestoreProvider::Restore(const protect::SlotMeta& meta,
                                                               const local::RestoreRequest& request) {
  local::RestoredState out;
  auto newest = coordinator_->NewestCommitted(meta.job);
  if (!newest) return out;  // nothing committed: a fresh start
  const int64_t step = *newest;
  REFT_ASSIGN_OR_RETURN(protect::SgGeometry g, meta.Geometry());
  // Each member's slot: checksums verified, meta equal to what the trainer declares.
  std::vector<std::shared_ptr<store::SlotRef>> slots(static_cast<size_t>(g.m));
  std::vector<protect::ConstSpan> shards(static_cast<size_t>(g.m));
  for (int d = 0; d < g.m; ++d) {
    const store::RankKey rank{meta.job, meta.coord.pp, meta.coord.tp, d};
    auto slot = store_->Get(rank, step);
    if (!slot.ok()) {
      return Status::Lost("step " + std::to_string(step) + " of job '" + meta.job +
                          "' is committed, but the snapshot of " + rank.ToString() +
                          " is not on this node and this reftd has no cluster layer to fetch or "
                          "rebuild it");
    }
    REFT_ASSIGN_OR_RETURN(store::VerifyReport report, store_->Verify(rank, step));
    if (!report.bad.empty()) {
      const auto& b = report.bad.front();
      return Status::Corrupted("refusing to restore step " + std::to_string(step) + " of " +
                               rank.ToString() + ": region '" + b.region + "' chunk " +
                               std::to_string(b.chunk) + " (offset " + std::to_string(b.offset) +
                               ") fails its checksum (" + std::to_string(report.bad.size()) +
                               " bad chunk(s))");
    }
    REFT_ASSIGN_OR_RETURN(size_t mi, (*slot)->FindRegion(protect::kRegionMeta));
    REFT_ASSIGN_OR_RETURN(protect::SlotMeta saved,
                          protect::SlotMeta::Decode((*slot)->region_data(mi), (*slot)->region_size(mi)));
    const std::string diff = meta.ForMember(d).DifferenceFrom(saved, "snapshot");
    if (!diff.empty()) {
      return Status::InvalidArgument("the snapshot of step " + std::to_string(step) + " of " +
                                     rank.ToString() + " does not match what this trainer "
                                     "registered (" + diff + ")");
    }
    REFT_ASSIGN_OR_RETURN(size_t si, (*slot)->FindRegion(protect::kRegionShard));
    shards[d] = {(*slot)->region_data(si), (*slot)->region_size(si)};
    slots[d] = std::move(*slot);
  }
  uint64_t total = 0;
  for (const auto& b : meta.buffers) {
    out.offsets[b.name] = total;
    total += b.size;
  }
  REFT_ASSIGN_OR_RETURN(MappedMemfd mem, MappedMemfd::Create("reft-restore", total));
  std::map<std::string, protect::MutableSpan> spans;
  for (const auto& b : meta.buffers) {
    if (b.kind == protect::BufferKind::kReplicated) {
      spans[b.name] = {mem.data() + out.offsets[b.name], b.size};
    }
  }
  REFT_RETURN_NOT_OK(protect::AssembleBuffers(g, shards, spans));
  const auto& own = *slots[static_cast<size_t>(meta.coord.dp)];
  for (const auto& b : meta.buffers) {
    if (b.kind != protect::BufferKind::kUnique) continue;
    REFT_ASSIGN_OR_RETURN(size_t ui, own.FindRegion(protect::UniqueRegionName(b.name)));
    std::memcpy(mem.data() + out.offsets[b.name], own.region_data(ui), b.size);
  }
  out.step = step;
  out.source = "memory";
  out.detail = "all " + std::to_string(g.m) + " shards of the sharding group from this node";
  out.size = total;
  if (request.sink != nullptr && request.sink->Available()) {
    // Streamed as reftd's cluster layer streams it: records of at most a MiB, out of order,
    // every other one read into memory the sink lends (the fetch path), the rest written from
    // this process's own memory (the decode path).
    constexpr uint64_t kRecord = 1 << 20;
    REFT_RETURN_NOT_OK(request.sink->Begin(out.offsets, total, kRecord, 2));
    std::vector<uint64_t> starts;
    for (uint64_t at = 0; at < total; at += kRecord) starts.push_back(at);
    std::reverse(starts.begin(), starts.end());
    for (size_t i = 0; i < starts.size(); ++i) {
      const uint64_t at = starts[i];
      const uint64_t n = std::min(kRecord, total - at);
      Status written;
      Result<uint8_t*> lent = i % 2 == 0 ? request.sink->Borrow(n) : Result<uint8_t*>(nullptr);
      if (!lent.ok()) {
        written = lent.status();
      } else if (*lent != nullptr) {
        std::memcpy(*lent, mem.data() + at, n);
        written = request.sink->Write(at, *lent, n);
        request.sink->GiveBack(*lent);
      } else {
        written = request.sink->Write(at, mem.data() + at, n);
      }
      if (!written.ok()) {
        request.sink->End(false);
        return written;
      }
    }
    request.sink->End(true);
    out.streamed = true;
    out.detail += ", streamed";
    return out;
  }
  out.fd = mem.Release();
  return out;
}

}  // namespace reft::testing
