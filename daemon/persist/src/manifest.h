#pragma once
/// \file manifest.h
/// \brief The per-node, per-step manifest (`manifest.<node_id>.json`) as JSON:
///
///   {"format": "reft-persist-manifest", "version": 1, "job": "run-1", "step": 42,
///    "node_id": "node-a", "layout": {"pp": 1, "tp": 1, "dp": 4}, "created_unix_ms": ...,
///    "files": [{"file": "pp0-tp0-dp1.reft", "pp": 0, "tp": 0, "dp": 1,
///               "bytes": 1052672, "payload_bytes": 1048641, "chunk_size": 4194304,
///               "chunk_count": 3, "chunk_table_xxh3": "9f86d081884c7d65",
///               "regions": [{"name": "meta", "size": 65}, ...]}, ...],
///    "owner": {"uid": 1000, "gid": 2000, "group": "team"}}
///
/// `owner` (docs/security.md "Jobs belong to their owner") is the job's owner when the files
/// were written: `gid` and `group` null when it has no group. Absent or null = unknown (an
/// older reftd wrote none), read as std::nullopt; the version stays 1, older readers ignore it.
///
/// `chunk_table_xxh3` (16 hex digits: JSON numbers lose precision above 2^53) is the XXH3-64
/// of the file's chunk table, the value its header's state record carries: it identifies the
/// whole content (each payload chunk is pinned by its entry in the table) and can be compared
/// with a file by reading its header only.

#include <string>

#include "reft/persist/types.h"
#include "reft/result.h"

namespace reft::persist::internal {

std::string EncodeManifest(const Manifest& m);
/// \brief Parses and validates a manifest; Corrupted (prefixed with `name`) if anything is off.
Result<Manifest> DecodeManifest(const std::string& text, const std::string& name);

}  // namespace reft::persist::internal
