#pragma once
/// \file peer_credentials.h
/// \brief Who is at the other end of a connected Unix socket: SO_PEERCRED (pid, uid, gid as
/// of connect()) and, where the kernel has it (Linux >= 4.13), SO_PEERGROUPS (the
/// supplementary groups). Used by every local endpoint that authorizes by uid or group.

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "reft/result.h"

namespace reft {

struct PeerCredentials {
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  ///< supplementary groups; empty on kernels without SO_PEERGROUPS

  /// \brief True when `gid` is the peer's primary or one of its supplementary groups.
  bool InGroup(uint32_t gid) const;
};

/// \brief Reads the credentials of the peer of the connected Unix socket `fd`.
Result<PeerCredentials> ReadPeerCredentials(int fd);

}  // namespace reft
