#include "store_impl.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chunk_checksums.h"
#include "naming.h"
#include "reft/checksum.h"
#include "reft/units.h"

namespace reft::store::internal {
namespace {

/// A mapped slot handed out to writers and readers; holds the mapping alive.
class SlotRefImpl final : public SlotRef {
 public:
  SlotRefImpl(SlotInfo info, std::shared_ptr<SegmentFile> file, Geometry g)
      : info_(std::move(info)), file_(std::move(file)), g_(std::move(g)) {}
  const SlotInfo& info() const override { return info_; }
  uint8_t* region_data(size_t i) const override { return file_->data() + g_.regions.at(i).offset; }
  uint64_t region_size(size_t i) const override { return g_.regions.at(i).size; }
  Result<size_t> FindRegion(const std::string& name) const override {
    for (size_t i = 0; i < info_.regions.size(); ++i) {
      if (info_.regions[i].name == name) return i;
    }
    return Status::NotFound("region '" + name + "' is not in slot " + info_.path);
  }
  Result<int> DupFd() const override {
    int fd = ::fcntl(file_->fd(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return Status::FromErrno(errno, "dup of segment fd " + info_.path);
    return fd;
  }
  uint64_t region_file_offset(size_t i) const override { return g_.regions.at(i).offset; }
  Status CheckIntact() const override { return file_->CheckIntact(info_.path); }
  Status PinOnce(const void* owner, uint8_t* addr, const std::function<Status()>& pin,
                 std::function<void()> unpin) const override {
    return file_->PinOnce(owner, addr, pin, std::move(unpin));
  }
  Status Populate(uint8_t* at, uint64_t size) const override {
    return file_->Populate(at, size).WithContext(info_.path);
  }

 private:
  SlotInfo info_;
  std::shared_ptr<SegmentFile> file_;
  Geometry g_;
};

std::string StepStr(int64_t step) { return "step " + std::to_string(step); }

}  // namespace

RankState* StoreImpl::FindRankLocked(const RankKey& rank) {
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? nullptr : &it->second;
}

std::shared_ptr<Slot> StoreImpl::FindSlotLocked(RankState& rs, int64_t step,
                                                bool include_writing) {
  for (auto& [i, s] : rs.slots) {
    if (s->step() != step || s->removed) continue;
    if (s->state() == SlotState::kComplete || s->state() == SlotState::kCommitted) return s;
    if (include_writing && s->state() == SlotState::kWriting) return s;
  }
  return nullptr;
}

std::optional<int64_t> StoreImpl::NewestCommittedLocked(const RankState& rs) const {
  std::optional<int64_t> newest;
  for (const auto& [i, s] : rs.slots) {
    if (s->state() == SlotState::kCommitted && (!newest || s->step() > *newest)) newest = s->step();
  }
  return newest;
}

SlotInfo StoreImpl::InfoLocked(const RankKey& rank, const Slot& slot) const {
  SlotInfo info;
  info.rank = rank;
  info.index = slot.index;
  info.state = slot.state();
  info.step = slot.state() == SlotState::kFree ? -1 : slot.step();
  info.payload_bytes = slot.geometry.payload_bytes;
  info.segment_bytes = slot.file ? slot.file->size() : 0;
  info.regions = slot.layout;
  info.path = slot.path;
  return info;
}

void StoreImpl::TransitionLocked(Slot& slot, SlotState state, int64_t step, uint64_t ctc) {
  // Published bytes belong to one write of one step: a new write or a free slot has none.
  if (state == SlotState::kFree || state == SlotState::kWriting) slot.published.clear();
  auto* h = reinterpret_cast<reft_segment_header*>(slot.file->data());
  slot.record = WriteRecord(h, slot.record, state, state == SlotState::kFree ? -1 : step, ctc);
}

void StoreImpl::DeleteSegmentLocked(Slot& slot) {
  if (!slot.file) return;
  ::unlink(slot.path.c_str());
  used_ -= slot.file->size();
  slot.file.reset();
  slot.record = ActiveRecord{};
  slot.layout.clear();
  slot.geometry = Geometry{};
}

bool StoreImpl::MakeRoomLocked(uint64_t needed, const Slot* keep) {
  const uint64_t limit = options_.memory_limit;
  if (limit == 0 || used_ + needed <= limit) return true;
  // Only free, unreferenced segments are reclaimed: they hold no snapshot. Nothing complete or
  // committed is ever evicted to make room (docs/failure-model.md).
  for (auto& [key, rs] : ranks_) {
    for (auto& [i, s] : rs.slots) {
      if (s.get() == keep || s->busy || !s->file || s->referenced()) continue;
      if (s->state() != SlotState::kFree) continue;
      DeleteSegmentLocked(*s);
      if (used_ + needed <= limit) return true;
    }
  }
  return used_ + needed <= limit;
}

Status StoreImpl::ConfigureRank(const RankKey& rank, const std::vector<RegionSpec>& layout) {
  REFT_RETURN_NOT_OK(ValidateRankKey(rank));
  REFT_RETURN_NOT_OK(ValidateLayout(layout).WithContext("rank " + rank.ToString()));
  MutexLock lock(mu_);
  // Slots keep their own layout; BeginWrite re-lays-out or re-creates free and uncommitted
  // ones lazily, committed ones stay as they are until a newer step commits.
  ranks_[rank].layout = layout;
  return Status::OK();
}

Result<std::shared_ptr<SlotRef>> StoreImpl::BeginWrite(const RankKey& rank, int64_t step,
                                                       NewPages pages) {
  REFT_RETURN_NOT_OK(ValidateRankKey(rank));
  if (step < 0) return Status::InvalidArgument(StepStr(step) + " is negative");
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  if (rs == nullptr || rs->layout.empty()) {
    return Status::NotFound("rank " + rank.ToString() + " has no slot layout: ConfigureRank first");
  }
  auto newest = NewestCommittedLocked(*rs);
  if (newest && step <= *newest) {
    return Status::InvalidArgument(StepStr(step) + " of " + rank.ToString() +
                                   " is not newer than its committed " + StepStr(*newest));
  }
  std::shared_ptr<Slot> slot;
  for (auto& [i, s] : rs->slots) {
    if (s->busy && s->pending_step == step) {
      return Status::Busy(StepStr(step) + " of " + rank.ToString() + " is already being written");
    }
    if (s->removed || s->state() == SlotState::kFree || s->step() != step) continue;
    if (s->state() == SlotState::kWriting || s->busy) {
      return Status::Busy(StepStr(step) + " of " + rank.ToString() + " is already being written");
    }
    // A complete but uncommitted snapshot of the same step (a trainer restarted from the
    // previous commit and redoes the step): it is replaced in place.
    if (s->referenced()) {
      return Status::Busy(StepStr(step) + " of " + rank.ToString() +
                          " is complete and being read; cannot rewrite it now");
    }
    slot = s;
  }
  const std::vector<RegionSpec> layout = rs->layout;
  const Geometry g = ComputeGeometry(layout, options_.chunk_size);

  // Pick the slot: a free one (preferably with a reusable segment nobody maps), else a new
  // index, else the oldest complete-but-uncommitted one. Never a committed or writing slot.
  auto score = [&](const Slot& s) {
    int v = 0;
    if (s.file && s.file->size() == g.segment_bytes) v += 2;
    if (!s.referenced()) v += 1;
    return v;
  };
  for (auto& [i, s] : rs->slots) {
    if (slot && slot->state() == SlotState::kComplete) break;  // same step, replaced
    if (s->busy || s->removed || s->state() != SlotState::kFree) continue;
    if (!slot || score(*s) > score(*slot)) slot = s;
  }
  if (!slot && rs->slots.size() < options_.slots_per_rank) {
    uint32_t idx = 0;
    while (rs->slots.count(idx)) ++idx;
    slot = std::make_shared<Slot>();
    slot->index = idx;
    slot->path = options_.shm_dir + "/" + SegmentFileName(rank, idx);
    rs->slots[idx] = slot;
  }
  if (!slot) {
    for (auto& [i, s] : rs->slots) {
      if (s->busy || s->removed || s->state() != SlotState::kComplete || s->referenced()) continue;
      if (!slot || s->step() < slot->step()) slot = s;
    }
  }
  if (!slot) {
    return Status::Busy("no slot free for " + StepStr(step) + " of " + rank.ToString() + ": all " +
                        std::to_string(rs->slots.size()) +
                        " slots are committed, being written or being read");
  }

  const bool reuse = slot->file && slot->file->size() == g.segment_bytes && !slot->referenced();
  if (reuse) {
    // Re-use the pre-faulted segment: no allocation, no page faults. One a writer populated
    // range by range may have holes (a rebuild given up on): a trainer writing there must not
    // fault, nor meet a full tmpfs as a SIGBUS.
    if (!slot->file->populated()) {
      REFT_RETURN_NOT_OK(slot->file->PopulateAll(options_.checksum_threads)
                             .WithContext(StepStr(step) + " of " + rank.ToString()));
    }
    if (slot->state() != SlotState::kFree) TransitionLocked(*slot, SlotState::kFree, -1, 0);
    if (!(slot->layout == layout)) {
      WriteLayout(slot->file->data(), g, rank, slot->index);
      slot->layout = layout;
      slot->geometry = g;
    }
    TransitionLocked(*slot, SlotState::kWriting, step, 0);
    return std::shared_ptr<SlotRef>(
        std::make_shared<SlotRefImpl>(InfoLocked(rank, *slot), slot->file, slot->geometry));
  }

  // A new segment is needed. Check the limit before touching the chosen slot (if it is a
  // complete snapshot and the new one does not fit, the complete one stays).
  const uint64_t old_bytes = slot->file ? slot->file->size() : 0;
  const uint64_t limit = options_.memory_limit;
  if (limit != 0 && used_ - old_bytes + g.segment_bytes > limit &&
      !MakeRoomLocked(g.segment_bytes > old_bytes ? g.segment_bytes - old_bytes : 0, slot.get())) {
    if (!slot->file && slot->state() == SlotState::kFree) rs->slots.erase(slot->index);
    return Status::OutOfMemory(
        "memory limit reached: " + StepStr(step) + " of " + rank.ToString() + " needs " +
        FormatBytes(g.segment_bytes) + ", " + FormatBytes(used_) + " in use, limit " +
        FormatBytes(limit) + "; snapshot refused, nothing committed was evicted");
  }
  DeleteSegmentLocked(*slot);  // unlinked; a reader still holding it keeps its mapping
  used_ += g.segment_bytes;    // reserved while the segment is created outside the lock
  slot->busy = true;
  slot->pending_step = step;
  const std::string path = slot->path;
  const uint32_t index = slot->index;
  lock.Unlock();

  const SegmentFile::Pages new_pages =
      pages == NewPages::kByWriter ? SegmentFile::Pages::kOnDemand
      : options_.prefault          ? SegmentFile::Pages::kPopulate
                                   : SegmentFile::Pages::kReserve;
  auto created = SegmentFile::Create(path, g.segment_bytes, options_.file_mode,
                                     options_.file_group, new_pages, options_.checksum_threads);
  std::shared_ptr<SegmentFile> file;
  if (created.ok() && new_pages == SegmentFile::Pages::kOnDemand) {
    // The store's own part (header, region and chunk tables) it populates itself.
    Status st = (*created)->Populate((*created)->data(), g.payload_offset);
    if (!st.ok()) {
      ::unlink(path.c_str());
      created = st;
    }
  }
  if (created.ok()) {
    file = *created;
    WriteLayout(file->data(), g, rank, index);
  }

  lock.Lock();
  slot->busy = false;
  slot->pending_step = -1;
  if (!created.ok() || slot->removed) {
    used_ -= g.segment_bytes;
    if (file) ::unlink(path.c_str());
    rs = FindRankLocked(rank);
    if (rs != nullptr) {
      auto it = rs->slots.find(index);
      if (it != rs->slots.end() && it->second == slot && !slot->file) rs->slots.erase(it);
    }
    if (!created.ok()) return created.status().WithContext(StepStr(step) + " of " + rank.ToString());
    return Status::Cancelled(StepStr(step) + " of " + rank.ToString() +
                             ": the job was removed while its slot was being created");
  }
  slot->file = file;
  slot->layout = layout;  // the layout `g` was computed from (ConfigureRank may race)
  slot->geometry = g;
  slot->record = ActiveRecord{};
  TransitionLocked(*slot, SlotState::kWriting, step, 0);
  return std::shared_ptr<SlotRef>(
      std::make_shared<SlotRefImpl>(InfoLocked(rank, *slot), slot->file, slot->geometry));
}

Status StoreImpl::Seal(const RankKey& rank, int64_t step) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  std::shared_ptr<Slot> slot = rs ? FindSlotLocked(*rs, step, true) : nullptr;
  if (!slot) return Status::NotFound("no slot of " + rank.ToString() + " holds " + StepStr(step));
  if (slot->state() != SlotState::kWriting) return Status::OK();  // already sealed: idempotent
  if (slot->busy) return Status::Busy(StepStr(step) + " of " + rank.ToString() + " is being sealed");
  slot->busy = true;
  std::shared_ptr<SegmentFile> file = slot->file;
  const Geometry g = slot->geometry;
  lock.Unlock();

  // The chunk table is not covered by the `writing` record, so it can be filled in place; the
  // `complete` record written afterwards pins it with its checksum.
  auto* table = reinterpret_cast<uint64_t*>(file->data() + g.chunk_table_offset);
  ChecksumChunks(ListChunks(file->data(), g), table, options_.checksum_threads);
  const uint64_t ctc = ChunkTableChecksum(file->data(), g);

  lock.Lock();
  slot->busy = false;
  if (slot->removed || slot->file != file || slot->state() != SlotState::kWriting ||
      slot->step() != step) {
    return Status::NotFound(StepStr(step) + " of " + rank.ToString() +
                            " was dropped while it was being sealed");
  }
  TransitionLocked(*slot, SlotState::kComplete, step, ctc);
  return Status::OK();
}

Status StoreImpl::Abort(const RankKey& rank, int64_t step) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  if (rs != nullptr) {
    for (auto& [i, s] : rs->slots) {
      if (s->removed || s->state() != SlotState::kWriting || s->step() != step) continue;
      if (s->busy) return Status::Busy(StepStr(step) + " of " + rank.ToString() + " is being sealed");
      TransitionLocked(*s, SlotState::kFree, -1, 0);
      return Status::OK();
    }
  }
  return Status::NotFound("no slot of " + rank.ToString() + " is writing " + StepStr(step));
}

Status StoreImpl::Commit(const RankKey& rank, int64_t step) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  std::shared_ptr<Slot> slot = rs ? FindSlotLocked(*rs, step, true) : nullptr;
  if (!slot) return Status::NotFound("no slot of " + rank.ToString() + " holds " + StepStr(step));
  if (slot->state() == SlotState::kWriting) {
    return Status::InvalidArgument(StepStr(step) + " of " + rank.ToString() +
                                   " is not sealed yet (state writing)");
  }
  auto newest = NewestCommittedLocked(*rs);
  if (newest && step < *newest) {
    return Status::InvalidArgument(StepStr(step) + " of " + rank.ToString() +
                                   " is older than its committed " + StepStr(*newest));
  }
  // Publish the new commit first; only then release older snapshots, so that a crash between
  // the two leaves two committed slots (adoption keeps the newest), never zero.
  if (slot->state() != SlotState::kCommitted) {
    TransitionLocked(*slot, SlotState::kCommitted, step, slot->record.chunk_table_checksum);
  }
  for (auto& [i, s] : rs->slots) {
    if (s.get() == slot.get() || s->busy || s->removed || s->step() >= step) continue;
    if (s->state() == SlotState::kCommitted || s->state() == SlotState::kComplete) {
      TransitionLocked(*s, SlotState::kFree, -1, 0);
    }
  }
  return Status::OK();
}

Result<std::shared_ptr<SlotRef>> StoreImpl::Get(const RankKey& rank, int64_t step) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  std::shared_ptr<Slot> slot = rs ? FindSlotLocked(*rs, step, false) : nullptr;
  if (!slot) {
    return Status::NotFound("no complete or committed snapshot of " + StepStr(step) + " for " +
                            rank.ToString());
  }
  return std::shared_ptr<SlotRef>(
      std::make_shared<SlotRefImpl>(InfoLocked(rank, *slot), slot->file, slot->geometry));
}

std::optional<int64_t> StoreImpl::NewestCommitted(const RankKey& rank) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  return rs ? NewestCommittedLocked(*rs) : std::nullopt;
}

Status StoreImpl::Publish(const RankKey& rank, int64_t step,
                          const std::vector<std::string>& regions) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  std::shared_ptr<Slot> slot = rs ? FindSlotLocked(*rs, step, true) : nullptr;
  if (!slot || !slot->file) {
    return Status::NotFound("no slot of " + rank.ToString() + " holds " + StepStr(step));
  }
  std::shared_ptr<SegmentFile> file = slot->file;
  const Geometry g = slot->geometry;
  const bool sealed = slot->state() != SlotState::kWriting;
  lock.Unlock();

  std::vector<ChunkRef> chunks;
  std::vector<uint64_t> first;
  for (const auto& name : regions) {
    auto it = std::find_if(g.regions.begin(), g.regions.end(),
                           [&](const reft_segment_region& r) { return name == r.name; });
    if (it == g.regions.end()) {
      return Status::NotFound("region '" + name + "' is not in the slot of " + StepStr(step) +
                              " of " + rank.ToString());
    }
    AppendRegionChunks(file->data(), g, *it, &chunks);
    for (uint64_t c = 0; c < it->chunk_count; ++c) first.push_back(it->first_chunk + c);
  }
  if (!sealed) {
    // A writing slot's chunk table is not pinned by its state record yet: fill these entries
    // now (Seal() recomputes the whole table and pins it). A sealed slot already has them.
    std::vector<uint64_t> sums(chunks.size());
    ChecksumChunks(chunks, sums.data(), options_.checksum_threads);
    auto* table = reinterpret_cast<uint64_t*>(file->data() + g.chunk_table_offset);
    for (size_t i = 0; i < sums.size(); ++i) table[first[i]] = sums[i];
  }

  lock.Lock();
  if (slot->removed || slot->file != file || slot->step() != step ||
      slot->state() == SlotState::kFree) {
    return Status::NotFound(StepStr(step) + " of " + rank.ToString() +
                            " was dropped while it was being published");
  }
  slot->published.insert(regions.begin(), regions.end());
  return Status::OK();
}

void StoreImpl::Unpublish(const RankKey& rank) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  if (rs == nullptr) return;
  for (auto& [i, s] : rs->slots) s->published.clear();
}

Result<std::shared_ptr<SlotRef>> StoreImpl::GetPublished(const RankKey& rank, int64_t step,
                                                         const std::string& region) {
  MutexLock lock(mu_);
  const std::string what =
      "region '" + region + "' of " + StepStr(step) + " of " + rank.ToString();
  RankState* rs = FindRankLocked(rank);
  if (rs == nullptr) return Status::NotFound(what + " is not published (yet)");
  std::shared_ptr<Slot> slot = FindSlotLocked(*rs, step, true);
  if (slot && slot->published.count(region)) {
    return std::shared_ptr<SlotRef>(
        std::make_shared<SlotRefImpl>(InfoLocked(rank, *slot), slot->file, slot->geometry));
  }
  // The owner already writes or published a newer step in this session: this one will not be
  // published any more (its slot was re-used), so a copier need not wait for it.
  for (const auto& [i, s] : rs->slots) {
    if (s->removed || s->step() <= step) continue;
    if (s->state() == SlotState::kWriting || !s->published.empty()) {
      return Status::Lost(what + " was superseded by " + StepStr(s->step()) +
                          " before it was copied");
    }
  }
  return Status::NotFound(what + " is not published (yet)");
}

Result<VerifyReport> StoreImpl::Verify(const RankKey& rank, int64_t step) {
  MutexLock lock(mu_);
  RankState* rs = FindRankLocked(rank);
  std::shared_ptr<Slot> slot = rs ? FindSlotLocked(*rs, step, false) : nullptr;
  if (!slot) {
    return Status::NotFound("no complete or committed snapshot of " + StepStr(step) + " for " +
                            rank.ToString());
  }
  std::shared_ptr<SegmentFile> file = slot->file;  // keeps the mapping while we read
  const Geometry g = slot->geometry;
  const uint64_t expected_table = slot->record.chunk_table_checksum;
  lock.Unlock();

  VerifyReport report;
  std::vector<uint64_t> table(g.chunk_count);
  std::memcpy(table.data(), file->data() + g.chunk_table_offset, g.chunk_count * 8);
  if (Checksum64(table.data(), table.size() * 8) != expected_table) {
    report.bad.push_back({"(chunk table)", 0, 0});
  }
  std::vector<uint64_t> actual(g.chunk_count);
  ChecksumChunks(ListChunks(file->data(), g), actual.data(), options_.checksum_threads);
  report.chunks_checked = g.chunk_count;
  for (const auto& r : g.regions) {
    for (uint64_t c = 0; c < r.chunk_count; ++c) {
      uint64_t k = r.first_chunk + c;
      if (actual[k] != table[k]) report.bad.push_back({r.name, c, c * g.chunk_size});
    }
  }
  return report;
}

Status StoreImpl::Drop(const std::string& job, int64_t step) {
  MutexLock lock(mu_);
  int dropped = 0;
  for (auto& [key, rs] : ranks_) {
    if (key.job != job) continue;
    for (auto it = rs.slots.begin(); it != rs.slots.end();) {
      Slot& s = *it->second;
      if (s.state() == SlotState::kFree || s.step() != step || s.removed) {
        ++it;
        continue;
      }
      ++dropped;
      s.removed = true;
      DeleteSegmentLocked(s);
      it = rs.slots.erase(it);
    }
  }
  if (dropped == 0) {
    return Status::NotFound("job '" + job + "' has no snapshot of " + StepStr(step) + " here");
  }
  return Status::OK();
}

Status StoreImpl::RemoveJob(const std::string& job) {
  MutexLock lock(mu_);
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    if (it->first.job != job) {
      ++it;
      continue;
    }
    for (auto& [i, s] : it->second.slots) {
      s->removed = true;
      DeleteSegmentLocked(*s);
    }
    it = ranks_.erase(it);
  }
  return Status::OK();
}

std::vector<SlotInfo> StoreImpl::List(const std::optional<std::string>& job) {
  MutexLock lock(mu_);
  std::vector<SlotInfo> out;
  for (const auto& [key, rs] : ranks_) {
    if (job && key.job != *job) continue;
    for (const auto& [i, s] : rs.slots) {
      if (s->state() != SlotState::kFree && !s->removed) out.push_back(InfoLocked(key, *s));
    }
  }
  std::sort(out.begin(), out.end(), [](const SlotInfo& a, const SlotInfo& b) {
    if (!(a.rank == b.rank)) return a.rank < b.rank;
    return a.step < b.step;
  });
  return out;
}

std::vector<RankKey> StoreImpl::Ranks(const std::optional<std::string>& job) {
  MutexLock lock(mu_);
  std::vector<RankKey> out;
  for (const auto& [key, rs] : ranks_) {
    if (!job || key.job == *job) out.push_back(key);
  }
  return out;
}

MemoryUsage StoreImpl::Usage() {
  MutexLock lock(mu_);
  MemoryUsage u;
  u.used = used_;
  u.limit = options_.memory_limit;
  for (const auto& [key, rs] : ranks_) {
    for (const auto& [i, s] : rs.slots) u.slots += s->file ? 1 : 0;
  }
  return u;
}

}  // namespace reft::store::internal
