/// \file reshape_catalog.cc
/// \brief CatalogStep: the buffers of a committed step by global name.

#include <set>

#include "group_assembler.h"
#include "reft/recovery/reshape.h"

namespace reft::recovery {

namespace {

std::string GroupName(int pp, int tp) {
  return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp);
}

}  // namespace

Result<const SavedBuffer*> StepCatalog::Find(const std::string& name, int tp, int pp) const {
  auto it = buffers.find(name);
  if (it == buffers.end() || it->second.empty()) {
    return Status::NotFound("buffer '" + name + "' does not exist in committed step " +
                            std::to_string(step) + " of job '" + job + "' (saved under layout " +
                            layout.ToString() +
                            "): a reshape finds buffers by name, so names must not depend on "
                            "the layout (e.g. 'layers.5.mlp.weight', not 'stage1/block2')");
  }
  const SavedBuffer* any = &it->second.front();
  if (pp >= 0) {
    for (const SavedBuffer& b : it->second) {
      if (groups[b.group].tp == tp && groups[b.group].pp == pp) return &b;
    }
    return Status::NotFound("buffer '" + name + "' was not saved by sharding group pp" +
                            std::to_string(pp) + "-tp" + std::to_string(tp) + " in step " +
                            std::to_string(step));
  }
  for (const SavedBuffer& b : it->second) {
    if (groups[b.group].tp == tp) return &b;
  }
  // A name only other tensor-parallel ranks saved: usable only when tp cannot tell them apart.
  std::set<int> tps;
  for (const SavedBuffer& b : it->second) tps.insert(groups[b.group].tp);
  if (tps.size() == 1) return any;
  return Status::NotFound("buffer '" + name + "' of committed step " + std::to_string(step) +
                          " was saved by several tensor-parallel ranks but not by tp " +
                          std::to_string(tp) + ": tp cannot change in a reshape");
}

Status AddGroup(StepCatalog* catalog, SavedGroup g) {
  const size_t index = catalog->groups.size();
  for (const auto& b : g.meta.meta.ForMember(0).buffers) {
    auto& saved = catalog->buffers[b.name];
    for (const SavedBuffer& other : saved) {
      const protect::BufferSpec& o = other.spec;
      const SavedGroup& og = catalog->groups[other.group];
      if (og.tp != g.tp || b.kind != protect::BufferKind::kReplicated) continue;
      if (o.size != b.size || o.dtype != b.dtype || o.kind != b.kind) {
        return Status::InvalidArgument(
            "committed step " + std::to_string(catalog->step) + " of job '" + catalog->job +
            "': buffer '" + b.name + "' was saved as " + std::to_string(o.size) + " bytes of " +
            o.dtype + " by sharding group " + GroupName(og.pp, og.tp) + " and as " +
            std::to_string(b.size) + " bytes of " + b.dtype + " by " + GroupName(g.pp, g.tp) +
            ": one name must mean one tensor");
      }
    }
    saved.push_back(SavedBuffer{index, b});
  }
  catalog->groups.push_back(std::move(g));
  return Status::OK();
}

Result<StepCatalog> CatalogStep(const ClusterView& view, const std::string& job, int64_t step,
                                const RegionReader& reader,
                                std::chrono::steady_clock::time_point deadline) {
  StepCatalog out;
  out.job = job;
  out.step = step;
  // The saved layout: from any slot of the step.
  std::vector<const SlotEntry*> all;
  for (const auto& s : view.slots) {
    if (s.step == step) all.push_back(&s);
  }
  if (all.empty()) {
    return Status::Lost("no live node holds any slot of committed step " + std::to_string(step) +
                        " of job '" + job + "'");
  }
  REFT_ASSIGN_OR_RETURN(LocatedMeta any, ReadSnapshotMeta(all, reader, deadline));
  out.layout = any.meta.layout;
  out.scheme = any.meta.scheme.ToString();
  for (int pp = 0; pp < out.layout.pp; ++pp) {
    for (int tp = 0; tp < out.layout.tp; ++tp) {
      std::vector<const SlotEntry*> members;
      for (int d = 0; d < out.layout.dp; ++d) {
        for (const SlotEntry* s : view.Find({job, pp, tp, d}, step)) members.push_back(s);
      }
      SavedGroup g;
      g.pp = pp;
      g.tp = tp;
      if (members.empty()) {
        return Status::Lost("committed step " + std::to_string(step) + " of job '" + job +
                            "': no live node holds a slot of sharding group " +
                            GroupName(pp, tp) + " (layout " + out.layout.ToString() + ")");
      }
      auto meta = ReadSnapshotMeta(members, reader, deadline);
      if (!meta.ok()) {
        return Status(meta.status().code() == StatusCode::kTimeout ? StatusCode::kTimeout
                                                                   : StatusCode::kLost,
                      "sharding group " + GroupName(pp, tp) + " of committed step " +
                          std::to_string(step) + ": " + meta.status().message());
      }
      g.meta = std::move(*meta);
      REFT_ASSIGN_OR_RETURN(g.geometry, g.meta.meta.Geometry());
      REFT_RETURN_NOT_OK(AddGroup(&out, std::move(g)));
    }
  }
  return out;
}

}  // namespace reft::recovery
