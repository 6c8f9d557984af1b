#pragma once
/// \file etcd_credentials.h
/// \brief The client credentials reftd uses towards etcd: mutual TLS when [etcd] tls_* is
/// configured, plain text otherwise (nullptr).

#include <memory>

#include <grpcpp/grpcpp.h>

#include "config.h"
#include "reft/result.h"
#include "reft/security/grpc_auth.h"

namespace reft::app {

inline Result<std::shared_ptr<grpc::ChannelCredentials>> MakeEtcdCredentials(
    const DaemonConfig& c) {
  if (c.etcd_tls_ca.empty()) return std::shared_ptr<grpc::ChannelCredentials>();
  security::SecurityOptions so;
  so.tls_ca = c.etcd_tls_ca;
  so.tls_cert = c.etcd_tls_cert;
  so.tls_key = c.etcd_tls_key;
  return security::MakeChannelCredentials(so);
}

}  // namespace reft::app
