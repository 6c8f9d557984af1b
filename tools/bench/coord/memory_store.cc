#include "memory_store.h"

namespace reft::bench {

namespace {

class InfoOnlySlot final : public store::SlotRef {
 public:
  explicit InfoOnlySlot(store::SlotInfo info) : info_(std::move(info)) {}
  const store::SlotInfo& info() const override { return info_; }
  uint8_t* region_data(size_t) const override { return nullptr; }
  uint64_t region_size(size_t) const override { return 0; }
  Result<size_t> FindRegion(const std::string& name) const override {
    return Status::NotFound("region " + name + " (the bench store holds no bytes)");
  }
  Result<int> DupFd() const override { return Status::Unsupported("bench store: no segments"); }
  uint64_t region_file_offset(size_t) const override { return 0; }
  Status CheckIntact() const override { return Status::OK(); }  // nothing mapped
  Status PinOnce(const void*, uint8_t*, const std::function<Status()>&,
                 std::function<void()>) const override {
    return Status::Unsupported("the control-plane bench store maps no memory to pin");
  }
  Status Populate(uint8_t*, uint64_t) const override {
    return Status::Unsupported("the control-plane bench store maps no memory");
  }

 private:
  store::SlotInfo info_;
};

Status NotHere(const char* what) {
  return Status::Unsupported(std::string(what) + " is not part of the control-plane bench");
}

}  // namespace

Status MemoryStore::Seal(const store::RankKey& rank, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_[rank][step] = store::SlotState::kComplete;
  return Status::OK();
}

Status MemoryStore::Commit(const store::RankKey& rank, int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& steps = slots_[rank];
    auto it = steps.find(step);
    if (it == steps.end()) return Status::NotFound("no slot of " + rank.ToString());
    it->second = store::SlotState::kCommitted;
    steps.erase(steps.begin(), it);  // older slots are freed by the commit, as in the store
  }
  if (on_commit_) on_commit_(rank, step);
  return Status::OK();
}

Result<std::shared_ptr<store::SlotRef>> MemoryStore::Get(const store::RankKey& rank,
                                                         int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = slots_.find(rank);
  if (r == slots_.end() || r->second.count(step) == 0) {
    return Status::NotFound("no slot of " + rank.ToString() + " step " + std::to_string(step));
  }
  store::SlotInfo info;
  info.rank = rank;
  info.step = step;
  info.state = r->second.at(step);
  return std::shared_ptr<store::SlotRef>(std::make_shared<InfoOnlySlot>(info));
}

std::optional<int64_t> MemoryStore::NewestCommitted(const store::RankKey& rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = slots_.find(rank);
  if (r == slots_.end()) return std::nullopt;
  for (auto it = r->second.rbegin(); it != r->second.rend(); ++it) {
    if (it->second == store::SlotState::kCommitted) return it->first;
  }
  return std::nullopt;
}

Status MemoryStore::Drop(const std::string& job, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  bool any = false;
  for (auto& [rank, steps] : slots_) {
    if (rank.job == job) any |= steps.erase(step) > 0;
  }
  return any ? Status::OK() : Status::NotFound("no slot of step " + std::to_string(step));
}

std::vector<store::SlotInfo> MemoryStore::List(const std::optional<std::string>& job) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<store::SlotInfo> out;
  for (const auto& [rank, steps] : slots_) {
    if (job && rank.job != *job) continue;
    for (const auto& [step, state] : steps) {
      store::SlotInfo info;
      info.rank = rank;
      info.step = step;
      info.state = state;
      out.push_back(std::move(info));
    }
  }
  return out;
}

std::vector<store::RankKey> MemoryStore::Ranks(const std::optional<std::string>& job) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<store::RankKey> out;
  for (const auto& [rank, steps] : slots_) {
    if (!job || rank.job == *job) out.push_back(rank);
  }
  return out;
}

Status MemoryStore::ConfigureRank(const store::RankKey&, const std::vector<store::RegionSpec>&) {
  return NotHere("ConfigureRank");
}
Result<std::shared_ptr<store::SlotRef>> MemoryStore::BeginWrite(const store::RankKey&, int64_t,
                                                                store::NewPages) {
  return NotHere("BeginWrite");
}
Status MemoryStore::Abort(const store::RankKey&, int64_t) { return NotHere("Abort"); }
Status MemoryStore::Publish(const store::RankKey&, int64_t, const std::vector<std::string>&) {
  return NotHere("Publish");
}
Result<std::shared_ptr<store::SlotRef>> MemoryStore::GetPublished(const store::RankKey&, int64_t,
                                                                  const std::string&) {
  return NotHere("GetPublished");
}
Result<store::VerifyReport> MemoryStore::Verify(const store::RankKey&, int64_t) {
  return NotHere("Verify");
}
Status MemoryStore::RemoveJob(const std::string&) { return NotHere("RemoveJob"); }

}  // namespace reft::bench
