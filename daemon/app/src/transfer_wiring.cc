/// \file transfer_wiring.cc
/// \brief Peer.StageLayers served by ReftLoad; the planner's Stager calling it.

#include "transfer_wiring.h"

#include <spdlog/spdlog.h>

namespace reft::app {

namespace {

// A request names at most this many layers (a model has far fewer; a bound for a bad caller).
constexpr int kMaxLayersPerRequest = 1 << 16;

replan::StageOutcome Outcome(const recovery::StageReport& rep) {
  replan::StageOutcome o;
  for (const auto& l : rep.layers) o.bytes_staged += l.bytes;
  o.bytes_fetched = rep.stats.bytes_local + rep.stats.bytes_peer;
  o.bytes_peer = rep.stats.bytes_peer;
  return o;
}

}  // namespace

void ServeTransferPlans(peer::PeerNode* peer, recovery::ReftLoad* restore,
                        const recovery::StagedLayers* staged, replan::JobPlanner* planner,
                        observability::Metrics* metrics, std::chrono::milliseconds timeout) {
  peer->SetStageHandler([restore, staged, metrics](const v1::StageLayersRequest& req)
                            -> Result<v1::StageLayersResponse> {
    if (req.job().empty() || req.layers_size() == 0 || req.layers_size() > kMaxLayersPerRequest) {
      return Status::InvalidArgument("StageLayers needs a job and 1.." +
                                     std::to_string(kMaxLayersPerRequest) + " layers");
    }
    std::vector<int> layers(req.layers().begin(), req.layers().end());
    const auto start = std::chrono::steady_clock::now();
    REFT_ASSIGN_OR_RETURN(recovery::StageReport rep, restore->StageLayers(req.job(), req.step(), layers));
    const replan::StageOutcome o = Outcome(rep);
    v1::StageLayersResponse resp;
    for (const auto& l : rep.layers) {
      auto* out = resp.add_layers();
      out->set_layer(l.layer);
      out->set_bytes(l.bytes);
      out->set_already(l.already);
    }
    resp.set_bytes_fetched(o.bytes_fetched);
    resp.set_bytes_peer(o.bytes_peer);
    resp.set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    metrics->AddStagedBytes(o.bytes_staged);
    metrics->SetStagedBytes(static_cast<double>(staged->bytes()));
    spdlog::info("staged {} layer(s) of job {} step {} for the transfer plan: {} bytes ({} read, {} "
                 "from peers) in {:.3f}s{}",
                 rep.layers.size(), req.job(), req.step(), o.bytes_staged, o.bytes_fetched,
                 o.bytes_peer, resp.seconds(), rep.stats.detail.empty() ? "" : ": " + rep.stats.detail);
    return resp;
  });

  const std::string self = peer->membership().node_id();
  planner->SetStager([peer, restore, metrics, self, timeout](
                         const std::string& node, const std::string& job, int64_t step,
                         const std::vector<int>& layers) -> Result<replan::StageOutcome> {
    auto staged_on = [&]() -> Result<replan::StageOutcome> {
      if (node == self) {
        REFT_ASSIGN_OR_RETURN(recovery::StageReport rep, restore->StageLayers(job, step, layers));
        return Outcome(rep);
      }
      const auto status = peer->membership().Lookup({node});
      if (status.empty() || status[0].liveness != peer::NodeLiveness::kAlive || !status[0].info) {
        return Status::Unavailable("receiving node '" + node + "' is not alive");
      }
      REFT_ASSIGN_OR_RETURN(v1::StageLayersResponse resp,
                            peer->client().StageLayers(status[0].info->address, job, step, layers, timeout));
      replan::StageOutcome o;
      for (const auto& l : resp.layers()) o.bytes_staged += l.bytes();
      o.bytes_fetched = resp.bytes_fetched();
      o.bytes_peer = resp.bytes_peer();
      return o;
    };
    auto r = staged_on();
    metrics->IncTransferHosts(r.ok());
    if (!r.ok()) spdlog::warn("transfer plan of job {}: staging on {} failed: {}", job, node, r.status().ToString());
    return r;
  });
}

}  // namespace reft::app
