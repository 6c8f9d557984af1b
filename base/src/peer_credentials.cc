#include "reft/peer_credentials.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // Linux >= 4.13
#endif

namespace reft {

bool PeerCredentials::InGroup(uint32_t g) const {
  return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
}

Result<PeerCredentials> ReadPeerCredentials(int fd) {
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::FromErrno(errno, "SO_PEERCRED");
  }
  PeerCredentials peer;
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  std::vector<uint32_t> groups(64);
  for (;;) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      break;
    }
    if (errno == ERANGE && groups.size() < 65536) {
      groups.resize(std::max<size_t>(groups.size() * 2, glen / sizeof(gid_t)));
      continue;
    }
    groups.clear();  // an older kernel: the primary group only
    break;
  }
  peer.groups = std::move(groups);
  return peer;
}

}  // namespace reft
