#pragma once
/// \file job_access.h
/// \brief Which nodes a holder serves a job's bytes to.
///
/// The problem: a holder's slots are a job's training state, and any node of the cluster can
/// call FetchRegion. Authenticating the node (mutual TLS, the token) says who calls, not whether
/// it has any business with the job: a node where a stranger opened a session could otherwise
/// pull a job it has nothing to do with. So a holder serves job J's bytes (FetchRegion and its
/// bulk tickets, StageLayers, PersistStep) to node N only if the control plane ties N to J: N
/// has a rank of J joined, holds a slot of J, is a target of J's published plan, runs an
/// operator's command on J (rebuild, persist), or is J's coordinator. The owner of each trainer was checked on its own node, at
/// join. Slot metas (buffer names, sizes and checksums: no training state) are served to every
/// authenticated node: operators ask any node for `restore-check` and `plan show`, which read
/// them.

#include <string>

#include "reft/result.h"

namespace reft::peer {

class JobAccess {
 public:
  virtual ~JobAccess() = default;
  /// \brief OK when this node may serve `job`'s bytes to `node`; PermissionDenied ("node N
  /// has no part in job J") otherwise; Unavailable when the control plane cannot tell.
  virtual Status MayServe(const std::string& node, const std::string& job) = 0;
  /// \brief An operator's command on `job` starts on this node (`reftctl rebuild`, which
  /// regenerates the job's lost ranks here, or `reftctl persist`, which asks every holder to
  /// persist): holders serve this node the job until EndOperatorCommand. Unavailable when it
  /// cannot be recorded. Only operators reach these commands (Admin).
  virtual Status BeginOperatorCommand(const std::string& job) = 0;
  virtual void EndOperatorCommand(const std::string& job) = 0;
};

}  // namespace reft::peer
