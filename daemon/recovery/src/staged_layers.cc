/// \file staged_layers.cc
/// \brief StagedLayers: layers moved to this node by a transfer plan, served to reshaped
/// restores.

#include "reft/recovery/staged_layers.h"

#include <cstring>

namespace reft::recovery {

std::optional<uint64_t> StagedLayers::Staged(const std::string& job, int64_t step, int layer) const {
  MutexLock lock(mu_);
  auto it = layers_.find(Key{job, step, layer});
  if (it == layers_.end()) return std::nullopt;
  uint64_t bytes = 0;
  for (const StagedBuffer& b : it->second->buffers) bytes += b.end - b.begin;
  return bytes;
}

void StagedLayers::Put(const std::string& job, int64_t step, int layer, MappedMemfd memory,
                       std::vector<StagedBuffer> buffers) {
  DropBefore(job, step);
  auto entry = std::make_shared<Layer>();
  const uint64_t size = memory.size();
  entry->memory = std::move(memory);
  entry->buffers = std::move(buffers);
  MutexLock lock(mu_);
  auto [it, inserted] = layers_.emplace(Key{job, step, layer}, entry);
  if (inserted) {
    bytes_ += size;
  } else {  // staged again (a retried move): the newer copy replaces the older
    bytes_ += size - it->second->memory.size();
    it->second = entry;
  }
}

std::vector<RangeRequest> StagedLayers::Serve(const std::string& job, int64_t step,
                                              const std::vector<RangeRequest>& requests,
                                              uint64_t* served) const {
  std::vector<std::shared_ptr<const Layer>> staged;
  {
    MutexLock lock(mu_);
    for (auto it = layers_.lower_bound(Key{job, step, INT32_MIN});
         it != layers_.end() && std::get<0>(it->first) == job && std::get<1>(it->first) == step; ++it) {
      staged.push_back(it->second);
    }
  }
  if (staged.empty()) return requests;
  std::vector<RangeRequest> rest;
  for (const RangeRequest& r : requests) {
    bool done = false;
    for (const auto& layer : staged) {
      for (const StagedBuffer& b : layer->buffers) {
        if (r.pp >= 0 || b.name != r.name || b.tp != r.tp || r.begin < b.begin || r.end > b.end) continue;
        std::memcpy(r.dst, layer->memory.data() + b.offset + (r.begin - b.begin), r.end - r.begin);
        *served += r.end - r.begin;
        done = true;
        break;
      }
      if (done) break;
    }
    if (!done) rest.push_back(r);
  }
  return rest;
}

void StagedLayers::DropBefore(const std::string& job, int64_t step) {
  MutexLock lock(mu_);
  for (auto it = layers_.lower_bound(Key{job, INT64_MIN, INT32_MIN});
       it != layers_.end() && std::get<0>(it->first) == job && std::get<1>(it->first) < step;) {
    bytes_ -= it->second->memory.size();
    it = layers_.erase(it);
  }
}

uint64_t StagedLayers::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

}  // namespace reft::recovery
