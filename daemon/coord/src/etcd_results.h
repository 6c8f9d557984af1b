#pragma once
/// \file etcd_results.h
/// \brief Small readings of etcd results shared by the files of EtcdJobCoordinator (private to
/// daemon/coord).

#include <optional>
#include <string>
#include <vector>

#include "reft/coord/etcd_client.h"
#include "reft/coord/records.h"

namespace reft::coord {

/// A compare-and-swap on a key (`expected_version` its mod revision) plus fences that failed:
/// true when the key itself was not replaced (absent, or still at `expected_version`), i.e. a
/// fence failed; false when another writer replaced it (r.gets[0].kvs[0] is the winner).
inline bool KeyUnchanged(const TxnResult& r, int64_t expected_version) {
  return r.gets.empty() || r.gets[0].kvs.empty() || r.gets[0].kvs[0].mod_revision == expected_version;
}

/// The first key of a range read, if any.
inline std::optional<KeyValue> FirstKey(const RangeResult& r) {
  if (r.kvs.empty()) return std::nullopt;
  return r.kvs.front();
}

/// Whether the coordinator key `kv` is held by `node` under `lease`.
inline bool HeldBy(const std::optional<KeyValue>& kv, const std::string& node, int64_t lease) {
  if (!kv || kv->lease != lease) return false;
  auto ref = DecodeNodeRef(kv->key, kv->value);
  return ref.ok() && ref->node == node;
}

/// "a, b, c".
inline std::string CommaList(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace reft::coord
