/// \file reft_load.cc
/// \brief REFT-load: restore of one rank, rebuild of lost ranks, restore check.

#include "reft/recovery/reft_load.h"

#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "reft/coord/restore_source.h"
#include "reft/mapped_memfd.h"
#include "reft/peer/peer_node.h"
#include "reft/recovery/fetcher.h"
#include "group_assembler.h"
#include "reft/recovery/reshape.h"
#include "slot_rebuilder.h"
#include "reft/recovery/snapshot_meta.h"
#include "reft/test_point.h"
#include "state_layout.h"

namespace reft::recovery {

namespace {

using Clock = std::chrono::steady_clock;

std::string SgName(int pp, int tp) {
  return "SG pp" + std::to_string(pp) + "-tp" + std::to_string(tp);
}

// Every located slot of the SG's members at `step`, `first` member's slots first.
std::vector<const SlotEntry*> GroupSlots(const ClusterView& view, const std::string& job, int pp,
                                         int tp, int m, int first, int64_t step) {
  std::vector<const SlotEntry*> out;
  for (int i = 0; i < m; ++i) {
    const int d = (first + i) % m;
    for (const SlotEntry* s : view.Find({job, pp, tp, d}, step)) out.push_back(s);
  }
  return out;
}

// The "meta" region size RebuildSlot should use, from the slot the meta was read from.
uint64_t MetaRegionSize(const LocatedMeta& m) {
  return m.region_size == m.encoded_size ? 0 : m.region_size;
}

// True when the rank registered buffers and all of them are reft.torch.dcp's.
bool DcpBuffersOnly(const protect::SlotMeta& meta) {
  if (meta.buffers.empty()) return false;
  for (const auto& b : meta.buffers) {
    if (b.name.rfind(kDcpBufferPrefix, 0) != 0) return false;
  }
  return true;
}

}  // namespace

ReftLoad::ReftLoad(store::SnapshotStore* store, peer::PeerNode* peer, RecoveryAgreement agreement,
                   RecoveryOptions options)
    : store_(store),
      peer_(peer),
      agreement_(agreement),
      options_(std::move(options)),
      locator_(store, peer, agreement.slots),
      reader_(store, peer) {}

Result<local::RestoredState> ReftLoad::Restore(const protect::SlotMeta& meta,
                                               const local::RestoreRequest& request) {
  RestoreStats stats;
  return Restore(meta, &stats, nullptr, request);
}

Result<local::RestoredState> ReftLoad::Restore(const protect::SlotMeta& meta, RestoreStats* stats,
                                               const ProgressCallback& progress,
                                               const local::RestoreRequest& request) {
  RestoreStats own;
  RestoreStats* st = stats != nullptr ? stats : &own;
  *st = RestoreStats{};
  const auto start = Clock::now();
  auto r = RestoreConsistent(meta, st, progress, request);
  if (r.ok()) {
    r->agreement = st->agreement;
    r->agreement_detail = st->agreement_detail;
    r->elapsed = Clock::now() - start;
  }
  if (observer_) observer_("restore", r.status(), *st);
  return r;
}

Result<ClusterView> ReftLoad::Locate(const std::string& job, Clock::time_point deadline,
                                     RestoreStats* stats, const ProgressCallback& progress) {
  Settling settling;
  const auto until = std::min(deadline, Clock::now() + options_.agreement_timeout);
  REFT_ASSIGN_OR_RETURN(ClusterView view,
                        locator_.CollectSettled(job, options_.locate_timeout, until, &settling,
                                                [&progress](const std::string& line) {
                                                  spdlog::info("{}", line);
                                                  if (progress) {
                                                    progress(Progress{Phase::kLocate, 0, 0, line});
                                                  }
                                                }));
  stats->agreement += settling.waited;
  if (!settling.reason.empty()) {
    stats->agreement_detail +=
        (stats->agreement_detail.empty() ? "" : "; ") + settling.reason + " (waited " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(settling.waited).count()) +
        " ms)";
  }
  for (const auto& u : view.unreachable) stats->warnings.push_back("manifest unreadable: " + u);
  return view;
}

// A step that looks unrecoverable while some holder is alive but silent is not lost: it is
// undecided, and the answer is to try again later, never to give the bytes up.
Status ReftLoad::LostOrUndecided(const Status& lost, const ClusterView& view) {
  if (lost.code() != StatusCode::kLost || view.waiting.empty()) return lost;
  std::string who;
  for (const auto& n : view.waiting) who += (who.empty() ? "" : ", ") + n;
  return Status::Unavailable("node(s) " + who + " of job '" + view.job +
                             "' are alive but did not answer within the agreement timeout; "
                             "without them: " + lost.message());
}

Result<int64_t> ReftLoad::ChooseStep(const std::string& job, RestoreStats* stats) {
  Status sync = agreement_.timeline->SyncNow(job, options_.sync_timeout);
  if (!sync.ok()) stats->warnings.push_back(sync.message());
  auto newest = agreement_.ledger->NewestCommitted(job);
  if (!newest) return Status::NotFound("job '" + job + "' has no committed step");
  return *newest;
}

Result<local::RestoredState> ReftLoad::RestoreImpl(const protect::SlotMeta& meta,
                                                   RestoreStats* stats,
                                                   const ProgressCallback& progress,
                                                   const local::RestoreRequest& request,
                                                   Known known) {
  const auto start = Clock::now();
  const auto deadline = start + options_.restore_timeout;
  REFT_RETURN_NOT_OK(meta.Plan().status().WithContext("the restoring trainer's declaration"));
  const store::RankKey rank = MemberRank(meta, meta.coord.dp);
  if (progress) progress(Progress{Phase::kLocate, 0, 0, "locating step of " + rank.ToString()});
  // The step the job decided on: never chosen a second time here.
  const int64_t step = known.step;
  stats->step = step;
  std::optional<ClusterView> located = std::move(known.view);
  if (!located) {
    REFT_ASSIGN_OR_RETURN(located, Locate(meta.job, deadline, stats, progress));
  }
  const ClusterView& view = *located;
  const std::string sg = SgName(meta.coord.pp, meta.coord.tp);
  const std::string what = rank.ToString() + " step " + std::to_string(step);

  auto candidates =
      GroupSlots(view, meta.job, meta.coord.pp, meta.coord.tp, meta.layout.dp, meta.coord.dp, step);
  const bool own_group = !candidates.empty();
  if (!own_group) {  // the rank's group may not exist in the saved layout: any slot tells it
    for (const auto& s : view.slots) {
      if (s.step == step) candidates.push_back(&s);
    }
  }
  auto lost_group = [&] {
    std::string why = "step " + std::to_string(step) + " of job '" + meta.job +
                      "' is committed, but no live node holds a slot of " + sg +
                      " at it: all its members are lost";
    if (!view.unreachable.empty()) why += " (unreachable: " + view.unreachable.front() + ")";
    return LostOrUndecided(Status::Lost(why), view);
  };
  if (candidates.empty()) return lost_group();
  std::optional<LocatedMeta> checked;  // the group's meta, read by this node's check
  if (own_group) {
    auto it = known.metas.find({meta.coord.pp, meta.coord.tp});
    if (it != known.metas.end()) checked = std::move(it->second);
  }
  auto snap = checked ? Result<LocatedMeta>(std::move(*checked))
                      : ReadSnapshotMeta(candidates, reader_, deadline);
  if (!snap.ok()) {
    if (snap.status().code() == StatusCode::kTimeout) return snap.status();
    return LostOrUndecided(Status::Lost(what + ": " + snap.status().message()), view);
  }
  (snap->from->local ? stats->bytes_local : stats->bytes_peer) += snap->region_size;
  (snap->from->local ? stats->bytes_own_local : stats->bytes_own_peer) += snap->region_size;
  stats->bytes_other += snap->region_size;
  const JobLayout& saved_layout = snap->meta.layout;
  const protect::SlotMeta snapshot = snap->meta.ForMember(meta.coord.dp);
  const std::string diff = meta.DifferenceFrom(snapshot, "snapshot");
  if (!(saved_layout == meta.layout) && !request.reshape) {
    return Status::InvalidArgument(
        "step " + std::to_string(step) + " of job '" + meta.job + "' was saved under layout " +
        saved_layout.ToString() + ", this trainer (" + rank.ToString() + ") declares layout " +
        meta.layout.ToString() +
        ": restore with reshape enabled to restore it into the new layout (Python: "
        "restore(reshape=True))");
  }
  if (request.probe) {
    local::RestoredState probed;
    probed.step = step;
    probed.source = coord::RestoreSourceName(coord::RestoreSource::kMemory);
    probed.reshaped = !(saved_layout == meta.layout);
    probed.from_layout = saved_layout.ToString();
    probed.detail = "probe: step " + std::to_string(step) + " was saved under layout " +
                    probed.from_layout;
    stats->detail = probed.detail;
    stats->locate = Clock::now() - start;
    return probed;
  }
  if (!(saved_layout == meta.layout) || (request.reshape && !diff.empty()) ||
      !request.remap.empty() || !request.reads.empty()) {
    stats->locate = Clock::now() - start;
    return ReshapeImpl(meta, step, view, request, stats, progress, deadline);
  }
  if (!own_group) return lost_group();
  if (!diff.empty()) {
    return Status::InvalidArgument("the restarted trainer of " + rank.ToString() +
                                   " declares another job layout than its snapshot of step " +
                                   std::to_string(step) + ": " + diff);
  }
  stats->locate = Clock::now() - start;
  return AssembleRank(meta, *snap, step, view, request, stats, progress, deadline);
}

Result<local::RestoredState> ReftLoad::AssembleRank(const protect::SlotMeta& meta,
                                                    const LocatedMeta& snap, int64_t step,
                                                    const ClusterView& view,
                                                    const local::RestoreRequest& request,
                                                    RestoreStats* stats,
                                                    const ProgressCallback& progress,
                                                    Clock::time_point deadline) {
  const store::RankKey rank = MemberRank(meta, meta.coord.dp);
  const std::string what = rank.ToString() + " step " + std::to_string(step);
  const protect::SlotMeta snapshot = snap.meta.ForMember(meta.coord.dp);
  REFT_ASSIGN_OR_RETURN(protect::SgGeometry g, snapshot.Geometry());

  // The state: the SG's canonical replicated vector at 0, then the unique buffers.
  StateLayout state = ComputeStateLayout(snapshot, g);
  std::map<std::string, uint64_t>& offsets = state.offsets;
  Fetcher fetcher(&reader_, options_, stats, progress);
  // Node rebuild: a replacement node regenerates the slot it now hosts.
  bool local = false;
  for (const SlotEntry* s : view.Find(rank, step)) local |= s->local;
  const bool rebuild = options_.rebuild_on_restore && !local;
  if (request.sink != nullptr) {
    REFT_ASSIGN_OR_RETURN(std::optional<local::RestoredState> streamed,
                          StreamImpl(snapshot, g, offsets, state.size, step, view, rebuild,
                                     MetaRegionSize(snap), &fetcher, request.sink, stats,
                                     deadline));
    if (streamed) {
      if (progress) progress(Progress{Phase::kDeliver, state.size, state.size, what});
      return std::move(*streamed);
    }
  }

  const auto t_allocate = Clock::now();
  REFT_ASSIGN_OR_RETURN(MappedMemfd mem, MappedMemfd::Create("reft-restore " + what, state.size));
  stats->allocate = Clock::now() - t_allocate;

  std::vector<FetchItem> unique_items;
  for (const auto& name : g.unique) {
    FetchItem it;
    it.what = "unique buffer '" + name + "' of " + what;
    it.dst = mem.data() + offsets[name];
    it.size = BufferSize(snapshot, name);
    it.sources = UniqueSources(view, snapshot, step, meta.coord.dp, name);
    unique_items.push_back(std::move(it));
  }
  auto assembled =
      AssembleGroup(view, snapshot, step, mem.data(), &fetcher, &unique_items, stats, deadline);
  if (!assembled.ok()) return LostOrUndecided(assembled.status(), view);
  GroupOutcome group = std::move(*assembled);
  std::string detail = what + " from memory: " + DescribeGroup(group);
  std::map<std::string, protect::ConstSpan> unique;
  for (size_t i = 0; i < unique_items.size(); ++i) {
    const FetchItem& it = unique_items[i];
    if (!it.status.ok()) return LostOrUndecided(UniqueLoss(it), view);
    unique[g.unique[i]] = {mem.data() + offsets[g.unique[i]], it.size};
    detail += "; " + g.unique[i] + " " + it.ServedBy();
  }

  if (rebuild) {
    if (progress) progress(Progress{Phase::kRebuild, 0, 0, "regenerating the slot of " + what});
    AssembledRank ar{snapshot, g, step, mem.data(), unique, MetaRegionSize(snap)};
    Status rs = RebuildSlot(store_, view, &fetcher, ar, stats, deadline);
    if (rs.ok()) rs = agreement_.slots->RecordSlot(rank, step);
    if (rs.ok()) {
      detail += "; slot regenerated on this node";
    } else {
      stats->warnings.push_back("the slot of " + what +
                                " was not regenerated here: " + rs.ToString());
    }
  }

  detail += "; " + std::to_string(stats->bytes_peer) + " bytes from peers";  // as a reshaped restore says

  const auto t_deliver = Clock::now();
  local::RestoredState out;
  out.step = step;
  out.source = coord::RestoreSourceName(coord::RestoreSource::kMemory);
  out.size = mem.size();
  out.offsets = std::move(offsets);
  out.fd = mem.Release();
  out.detail = detail;
  stats->detail = detail;
  stats->deliver = Clock::now() - t_deliver;
  if (progress) progress(Progress{Phase::kDeliver, out.size, out.size, what});
  return out;
}

Result<local::RestoredState> ReftLoad::ReshapeImpl(const protect::SlotMeta& meta, int64_t step,
                                                   const ClusterView& view,
                                                   const local::RestoreRequest& request,
                                                   RestoreStats* stats,
                                                   const ProgressCallback& progress,
                                                   Clock::time_point deadline) {
  if (progress) {
    progress(Progress{Phase::kLocate, 0, 0, "reshaping step " + std::to_string(step) + " into " +
                                                meta.coord.ToString()});
  }
  auto catalog = CatalogStep(view, meta.job, step, reader_, deadline);
  if (!catalog.ok()) return LostOrUndecided(catalog.status(), view);
  Fetcher fetcher(&reader_, options_, stats, progress);
  auto r = ReshapeRank(meta, *catalog, [&](const std::vector<RangeRequest>& requests,
                                            std::string* detail) {
    // Layers a transfer plan staged here first, if they were staged for this very commit of
    // the step (its timeline stamp); the rest from wherever the step holds it.
    uint64_t staged = 0;
    const coord::JobGeneration committed = agreement_.timeline->Generation(meta.job);
    const bool same_commit = staged_ != nullptr && committed.newest_committed == step;
    const std::vector<RangeRequest> rest =
        same_commit ? staged_->Serve(meta.job, committed.committed_in, step, requests, &staged)
                    : requests;
    stats->bytes_staged += staged;
    stats->bytes_local += staged;
    const uint64_t peer_before = stats->bytes_peer;
    Status s = rest.empty() ? Status::OK()
                            : AssembleRanges(*catalog, view, &fetcher, rest, stats, deadline, detail);
    if (s.ok() && staged > 0) {
      *detail = std::to_string(staged) + " bytes from layers staged on this node" +
                (detail->empty() ? "" : "; " + *detail);
    }
    if (s.ok()) {
      *detail += (detail->empty() ? "" : "; ") + std::to_string(stats->bytes_peer - peer_before) +
                 " bytes from peers";
    }
    return s;
  }, request);
  if (!r.ok()) return LostOrUndecided(r.status(), view);
  r->source = coord::RestoreSourceName(coord::RestoreSource::kMemory);
  stats->detail = r->detail;
  if (progress) progress(Progress{Phase::kDeliver, r->size, r->size, r->detail});
  return r;
}

Result<ReftLoad::StepDescription> ReftLoad::DescribeNewest(const std::string& job) {
  const auto deadline = Clock::now() + options_.restore_timeout;
  RestoreStats stats;
  REFT_ASSIGN_OR_RETURN(int64_t step, ChooseStep(job, &stats));
  REFT_ASSIGN_OR_RETURN(ClusterView view, Locate(job, deadline, &stats, nullptr));
  auto catalog = CatalogStep(view, job, step, reader_, deadline);
  if (!catalog.ok()) return LostOrUndecided(catalog.status(), view);
  return StepDescription{std::move(*catalog), std::move(view)};
}

Result<RebuildReport> ReftLoad::RebuildLostRanks(const std::string& job,
                                                 const ProgressCallback& progress) {
  auto r = RebuildImpl(job, progress);
  if (observer_) {
    RestoreStats empty;
    observer_("rebuild", r.status(), r.ok() ? r->stats : empty);
  }
  return r;
}

Result<RebuildReport> ReftLoad::RebuildImpl(const std::string& job,
                                            const ProgressCallback& progress) {
  const auto start = Clock::now();
  const auto deadline = start + options_.restore_timeout;
  RebuildReport rep;
  rep.job = job;
  RestoreStats* stats = &rep.stats;
  REFT_ASSIGN_OR_RETURN(int64_t step, ChooseStep(job, stats));
  rep.step = step;
  stats->step = step;
  REFT_ASSIGN_OR_RETURN(ClusterView view, Locate(job, deadline, stats, progress));
  std::vector<const SlotEntry*> all;
  for (const auto& s : view.slots) {
    if (s.step == step) all.push_back(&s);
  }
  if (all.empty()) {
    return Status::NotFound("no live node holds any slot of step " + std::to_string(step) +
                            " of job '" + job + "'");
  }
  REFT_ASSIGN_OR_RETURN(LocatedMeta any, ReadSnapshotMeta(all, reader_, deadline));
  const JobLayout layout = any.meta.layout;
  stats->locate = Clock::now() - start;
  Fetcher fetcher(&reader_, options_, stats, progress);

  for (int pp = 0; pp < layout.pp; ++pp) {
    for (int tp = 0; tp < layout.tp; ++tp) {
      std::vector<int> missing;
      for (int d = 0; d < layout.dp; ++d) {
        if (view.Find({job, pp, tp, d}, step).empty()) missing.push_back(d);
      }
      if (missing.empty()) continue;
      auto fail_all = [&](const Status& s) {
        for (int d : missing) rep.ranks.push_back({{job, pp, tp, d}, s, ""});
      };
      const auto candidates = GroupSlots(view, job, pp, tp, layout.dp, 0, step);
      if (candidates.empty()) {
        fail_all(Status::Lost("every member of " + SgName(pp, tp) + " is lost at step " +
                              std::to_string(step)));
        continue;
      }
      auto snap = ReadSnapshotMeta(candidates, reader_, deadline);
      if (!snap.ok()) {
        fail_all(snap.status());
        continue;
      }
      auto g = snap->meta.Geometry();
      if (!g.ok()) {
        fail_all(g.status());
        continue;
      }
      auto canonical = MappedMemfd::Create("reft-rebuild " + SgName(pp, tp), g->total);
      if (!canonical.ok()) {
        fail_all(canonical.status());
        continue;
      }
      // Unique buffers of every missing rank: from dp-1's peer/AOR copies.
      std::map<int, std::map<std::string, std::vector<uint8_t>>> uniq;
      std::vector<FetchItem> items;
      std::vector<std::pair<int, std::string>> item_of;
      for (int d : missing) {
        const protect::SlotMeta member = snap->meta.ForMember(d);
        for (const auto& name : g->unique) {
          auto& buf = uniq[d][name];
          buf.resize(BufferSize(member, name));
          FetchItem it;
          it.what = "unique buffer '" + name + "' of " + job + "/" + member.coord.ToString();
          it.dst = buf.data();
          it.size = buf.size();
          it.sources = UniqueSources(view, member, step, d, name);
          items.push_back(std::move(it));
          item_of.emplace_back(d, name);
        }
      }
      auto group = AssembleGroup(view, snap->meta, step, canonical->data(), &fetcher, &items, stats,
                                 deadline);
      if (!group.ok()) {
        fail_all(group.status());
        continue;
      }
      for (int d : missing) {
        RankRebuild rr{{job, pp, tp, d}, Status::OK(), DescribeGroup(*group)};
        AssembledRank ar{snap->meta.ForMember(d), *g, step,
                         canonical->data(),       {}, MetaRegionSize(*snap)};
        for (size_t i = 0; i < items.size(); ++i) {
          if (item_of[i].first != d) continue;
          if (!items[i].status.ok() && rr.status.ok()) rr.status = UniqueLoss(items[i]);
          const auto& buf = uniq[d][item_of[i].second];
          ar.unique[item_of[i].second] = {buf.data(), buf.size()};
        }
        if (rr.status.ok()) {
          if (progress) {
            progress(Progress{Phase::kRebuild, 0, 0, "regenerating " + rr.rank.ToString()});
          }
          rr.status = RebuildSlot(store_, view, &fetcher, ar, stats, deadline);
          if (rr.status.ok()) rr.status = agreement_.slots->RecordSlot(rr.rank, step);
        }
        rep.ranks.push_back(std::move(rr));
      }
    }
  }
  return rep;
}

Result<RestoreCheck> ReftLoad::CheckRestore(const std::string& job,
                                            const ProgressCallback& progress) {
  // The job trains on while the check reads: a step committed meanwhile frees the slots of the
  // step being checked, whose reads then find nothing (NotFound, or shards that look lost). A
  // check that failed so while a newer step committed is made again, of the newer step.
  constexpr int kChecks = 3;
  for (int n = 1;; ++n) {
    RestoreStats scratch;
    auto step = ChooseStep(job, &scratch);
    if (!step.ok()) {
      if (step.status().code() != StatusCode::kNotFound) return step.status();
      RestoreCheck nothing;  // nothing committed: step -1, and why
      nothing.job = job;
      nothing.warnings = std::move(scratch.warnings);
      nothing.warnings.push_back(step.status().message());
      return nothing;
    }
    Result<RestoreCheck> check = CheckRestoreOn(job, progress, *step, nullptr);
    if (check.ok()) {
      check->warnings.insert(check->warnings.begin(), scratch.warnings.begin(),
                             scratch.warnings.end());
    }
    const bool doubtful =
        check.ok() ? !check->recoverable : check.status().code() == StatusCode::kNotFound;
    const std::optional<int64_t> newest = agreement_.ledger->NewestCommitted(job);
    if (!doubtful || n == kChecks || !newest || *newest <= *step) return check;
  }
}

Result<RestoreCheck> ReftLoad::CheckRestoreOn(const std::string& job,
                                              const ProgressCallback& progress, int64_t committed,
                                              Known* located) {
  const auto deadline = Clock::now() + options_.restore_timeout;
  RestoreCheck out;
  out.job = job;
  RestoreStats scratch;
  out.step = committed;
  test_point::Reach(kCheckStepChosen, job, this);
  REFT_ASSIGN_OR_RETURN(ClusterView view, Locate(job, deadline, &scratch, progress));
  out.unreachable = view.unreachable;
  out.waiting = view.waiting;
  out.settled = scratch.agreement_detail;
  std::vector<const SlotEntry*> all;
  for (const auto& s : view.slots) {
    if (s.step == out.step) all.push_back(&s);
  }
  if (all.empty()) {
    out.warnings.push_back("no live node holds any slot of step " + std::to_string(out.step));
    return out;
  }
  REFT_ASSIGN_OR_RETURN(LocatedMeta any, ReadSnapshotMeta(all, reader_, deadline));
  const JobLayout layout = any.meta.layout;
  std::map<std::pair<int32_t, int32_t>, LocatedMeta> metas;
  out.recoverable = true;
  out.dcp = DcpBuffersOnly(any.meta);
  const uint64_t groups = static_cast<uint64_t>(layout.pp) * static_cast<uint64_t>(layout.tp);
  for (int pp = 0; pp < layout.pp; ++pp) {
    for (int tp = 0; tp < layout.tp; ++tp) {
      if (progress) {
        progress(Progress{Phase::kLocate, out.groups.size(), groups, "checking " + SgName(pp, tp)});
      }
      GroupCheck gc = CheckGroup(job, out.step, pp, tp, view, any, deadline, &out, &metas);
      out.recoverable &= gc.recoverable;
      out.groups.push_back(std::move(gc));
    }
  }
  if (located != nullptr) {
    located->step = out.step;
    located->view = std::move(view);  // a move keeps the slots where `metas` point
    located->metas = std::move(metas);
  }
  return out;
}

GroupCheck ReftLoad::CheckGroup(const std::string& job, int64_t step, int pp, int tp,
                                const ClusterView& view, const LocatedMeta& any,
                                Clock::time_point deadline, RestoreCheck* out,
                                std::map<std::pair<int32_t, int32_t>, LocatedMeta>* metas) {
  const JobLayout& layout = any.meta.layout;
  GroupCheck gc;
  gc.pp = pp;
  gc.tp = tp;
  gc.members = layout.dp;
  gc.scheme = any.meta.scheme.ToString();
  for (int d = 0; d < layout.dp; ++d) {
    RankCheck rc;
    rc.rank = {job, pp, tp, d};
    for (const SlotEntry* s : view.Find(rc.rank, step)) rc.nodes.push_back(s->node);
    if (!rc.nodes.empty()) gc.alive.push_back(d);
    gc.ranks.push_back(std::move(rc));
  }
  const auto candidates = GroupSlots(view, job, pp, tp, layout.dp, 0, step);
  // The meta read for the layout serves its own group (one read fewer for a single group).
  const bool any_here = std::find(candidates.begin(), candidates.end(), any.from) !=
                        candidates.end();
  auto snap = candidates.empty() ? Result<LocatedMeta>(Status::NotFound("no slot"))
              : any_here         ? Result<LocatedMeta>(any)
                                 : ReadSnapshotMeta(candidates, reader_, deadline);
  if (snap.ok()) {
    out->dcp &= DcpBuffersOnly(snap->meta);
    metas->emplace(std::make_pair(pp, tp), *snap);
  }
  auto plan =
      snap.ok() ? PlanGroup(view, snap->meta, step) : Result<GroupOutcome>(snap.status());
  if (!plan.ok()) {
    gc.lost = candidates.empty() ? "every member's slot is lost"
                                 : "no readable snapshot meta: " + plan.status().ToString();
    for (int d = 0; d < layout.dp; ++d) {
      gc.shards.push_back({d, "lost", "", "the whole shard"});
      gc.ranks[d].unique = "lost";
    }
    return gc;
  }
  gc.scheme = snap->meta.scheme.ToString();
  const protect::SgGeometry g = *snap->meta.Geometry();
  const auto& a = plan->analysis;
  for (int d = 0; d < layout.dp; ++d) {
    ShardCheck sc;
    sc.dp = d;
    std::string lost;
    for (const auto& l : a.lost) {
      if (l.shard != d) continue;
      lost += (lost.empty() ? "" : ", ") +
              ("bytes [" + std::to_string(l.begin) + "," + std::to_string(l.end) + ")" +
               (l.buffers.empty() ? "" : " (" + l.buffers + ")"));
    }
    if (plan->alive[d]) {
      sc.state = "slot";
      sc.node = view.Find(MemberRank(snap->meta, d), step).front()->node;
      sc.detail = plan->member_source[d];
    } else if (!lost.empty()) {
      sc.state = "lost";
      sc.detail = lost;
    } else {
      sc.state = "rebuilt";
      sc.detail = plan->member_source[d];
    }
    gc.shards.push_back(std::move(sc));
  }
  bool unique_lost = false;
  for (int d = 0; d < layout.dp; ++d) {
    RankCheck& rc = gc.ranks[d];
    if (g.unique.empty()) {
      rc.unique = "none";
    } else {
      auto src = UniqueSources(view, snap->meta.ForMember(d), step, d, g.unique.front());
      rc.unique = src.empty() ? "lost" : src.front().Label();
      unique_lost |= src.empty();
    }
    const int next = (d + 1) % layout.dp;
    const bool neighbour_ok = g.unique.empty() || layout.dp < 2 ||
                              !view.Find(MemberRank(snap->meta, next), step).empty();
    rc.rebuildable = rc.nodes.empty() && a.lost.empty() && rc.unique != "lost" && neighbour_ok;
  }
  gc.recoverable = a.lost.empty() && !unique_lost;
  if (!gc.recoverable) gc.lost = a.Describe() + LostMembersNote(plan->alive);
  return gc;
}

}  // namespace reft::recovery
