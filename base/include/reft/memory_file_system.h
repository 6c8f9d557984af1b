#pragma once
/// \file memory_file_system.h
/// \brief Whether a path lives on a memory file system (tmpfs or hugetlbfs). Only there can a
/// shared file mapping be page-locked for device DMA: Linux (since 6.5) refuses long-term pins
/// (cudaHostRegister, hipHostRegister) of shared mappings of files whose file system writes
/// dirty pages back, and such a file system also writes snapshot slots back to disk.

#include <string>

namespace reft {

/// \brief The file system type of `path` when it is not tmpfs/hugetlbfs ("ext2/ext3/ext4",
/// "xfs", ..., or its magic number in hex), "" when it is, or when statfs fails (cannot tell).
std::string NonMemoryFileSystem(const std::string& path);

}  // namespace reft
