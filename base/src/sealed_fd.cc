#include "reft/sealed_fd.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

namespace reft {

Status RequireShrinkSealed(int fd, uint64_t min_size, const std::string& what) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return Status::InvalidArgument(what + ": not an open file");
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < min_size) {
    return Status::InvalidArgument(what + " holds " + std::to_string(st.st_size) +
                                   " bytes, at least " + std::to_string(min_size) + " expected");
  }
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return Status::PermissionDenied(what + " is not sealed against shrinking (F_SEAL_SHRINK)");
  }
  return Status::OK();
}

}  // namespace reft
