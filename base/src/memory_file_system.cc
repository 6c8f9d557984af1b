#include "reft/memory_file_system.h"

#include <linux/magic.h>
#include <sys/vfs.h>

#include <cstdio>

namespace reft {

std::string NonMemoryFileSystem(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return "";
  switch (static_cast<unsigned long>(fs.f_type)) {
    case TMPFS_MAGIC:
    case HUGETLBFS_MAGIC:
      return "";
    case EXT4_SUPER_MAGIC:  // ext2, ext3 and ext4 share it
      return "ext2/ext3/ext4";
    case XFS_SUPER_MAGIC:
      return "xfs";
    case BTRFS_SUPER_MAGIC:
      return "btrfs";
    case OVERLAYFS_SUPER_MAGIC:
      return "overlayfs";
    case NFS_SUPER_MAGIC:
      return "nfs";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(fs.f_type));
      return hex;
    }
  }
}

}  // namespace reft
