// Txn: an etcd transaction built as compares, then-operations and else-operations
// (reft/coord/etcd_client.h); EtcdClient::Commit sends it.

#include "reft/coord/etcd_client.h"

#include "etcd/rpc.grpc.pb.h"

namespace reft::coord {

namespace pb = etcdserverpb;

namespace {

pb::Compare::CompareResult ToPb(Compare op) {
  switch (op) {
    case Compare::kEqual: return pb::Compare::EQUAL;
    case Compare::kGreater: return pb::Compare::GREATER;
    case Compare::kLess: return pb::Compare::LESS;
    case Compare::kNotEqual: return pb::Compare::NOT_EQUAL;
  }
  return pb::Compare::EQUAL;
}

void FillGet(pb::RequestOp* op, const std::string& key, const std::string& range_end) {
  auto* r = op->mutable_request_range();
  r->set_key(key);
  if (!range_end.empty()) r->set_range_end(range_end);
}

void FillPut(pb::RequestOp* op, const std::string& key, const std::string& value, int64_t lease) {
  auto* p = op->mutable_request_put();
  p->set_key(key);
  p->set_value(value);
  p->set_lease(lease);
}

}  // namespace

Txn::Txn() : request_(std::make_unique<pb::TxnRequest>()) {}
Txn::~Txn() = default;
Txn::Txn(Txn&&) noexcept = default;
Txn& Txn::operator=(Txn&&) noexcept = default;

Txn& Txn::IfModRevision(const std::string& key, Compare op, int64_t revision) {
  auto* c = request_->add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::MOD);
  c->set_result(ToPb(op));
  c->set_mod_revision(revision);
  return *this;
}

Txn& Txn::IfPrefixModRevision(const std::string& prefix, Compare op, int64_t revision) {
  IfModRevision(prefix, op, revision);
  request_->mutable_compare(request_->compare_size() - 1)->set_range_end(PrefixEnd(prefix));
  return *this;
}

Txn& Txn::IfCreateRevision(const std::string& key, Compare op, int64_t revision) {
  auto* c = request_->add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::CREATE);
  c->set_result(ToPb(op));
  c->set_create_revision(revision);
  return *this;
}

Txn& Txn::IfValue(const std::string& key, Compare op, const std::string& value) {
  auto* c = request_->add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::VALUE);
  c->set_result(ToPb(op));
  c->set_value(value);
  return *this;
}

Txn& Txn::ThenPut(const std::string& key, const std::string& value, int64_t lease) {
  FillPut(request_->add_success(), key, value, lease);
  return *this;
}

Txn& Txn::ThenDelete(const std::string& key) {
  request_->add_success()->mutable_request_delete_range()->set_key(key);
  return *this;
}

Txn& Txn::ThenDeleteRange(const std::string& key, const std::string& range_end) {
  auto* d = request_->add_success()->mutable_request_delete_range();
  d->set_key(key);
  d->set_range_end(range_end);
  return *this;
}

Txn& Txn::ThenGet(const std::string& key) {
  FillGet(request_->add_success(), key, "");
  return *this;
}

Txn& Txn::ThenGetPrefix(const std::string& prefix) {
  FillGet(request_->add_success(), prefix, PrefixEnd(prefix));
  return *this;
}

Txn& Txn::ElsePut(const std::string& key, const std::string& value, int64_t lease) {
  FillPut(request_->add_failure(), key, value, lease);
  return *this;
}

Txn& Txn::ElseGet(const std::string& key) {
  FillGet(request_->add_failure(), key, "");
  return *this;
}

Txn& Txn::ElseGetPrefix(const std::string& prefix) {
  FillGet(request_->add_failure(), prefix, PrefixEnd(prefix));
  return *this;
}

size_t Txn::operations() const {
  return static_cast<size_t>(request_->success_size()) +
         static_cast<size_t>(request_->failure_size());
}

}  // namespace reft::coord
