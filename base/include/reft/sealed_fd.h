#pragma once
/// \file sealed_fd.h
/// \brief The check reftd applies before it maps a file a client handed it: a client that can
/// shrink the file under the mapping turns reftd's next access into a SIGBUS, which would kill
/// the daemon and every job of the node. Only memfds sealed against shrinking
/// (F_SEAL_SHRINK) are mapped.

#include <cstdint>
#include <string>

#include "reft/status.h"

namespace reft {

/// \brief OK when `fd` is a regular file of at least `min_size` bytes sealed with
/// F_SEAL_SHRINK; InvalidArgument (too small, not a file) or PermissionDenied (not sealed)
/// naming `what` otherwise.
Status RequireShrinkSealed(int fd, uint64_t min_size, const std::string& what);

}  // namespace reft
