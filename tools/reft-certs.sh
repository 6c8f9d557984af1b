#!/usr/bin/env bash
# Makes the certificates of reft's mutual TLS (docs/security.md) with openssl: a CA for reft
# alone, one certificate per node whose common name and DNS subject alternative name are the
# node id (reftd refuses a Peer call whose claimed node id its certificate does not name), and
# an operator certificate for reftctl.
#
#   tools/reft-certs.sh [options] DIR NODE[=SAN,...] ...
#
#   NODE          node id (reftd --node-id); its certificate is DIR/NODE.pem, key DIR/NODE.key
#   =SAN,...      extra subject alternative names of that node, the addresses its peers dial:
#                 node7=IP:10.0.0.7,DNS:gpu07.example.com (peers verify the address they dial)
#   --san SAN     extra SAN for every node certificate (repeatable; default IP:127.0.0.1, the
#                 loopback address of a local cluster)
#   --operator N  operator certificate DIR/operator.pem for reftctl, common name N
#                 (default reft-operator; "" = none)
#   --days D      validity (default 365)
#   --force       re-issue certificates that exist (the CA is always reused when present)
#
# Keys are ECDSA P-256, written 0600. Running again adds the certificates that are missing.
# For the local cluster: tools/reft-certs.sh /tmp/reft-tls node0 node1 node2 node3
# Needs: openssl (Debian package openssl).
set -euo pipefail

usage() { sed -n '2,22p' "$0" >&2; exit 2; }
days=365 operator=reft-operator force=0 sans=() default_sans=1
while [ $# -gt 0 ]; do
  case "$1" in
    --days) days=$2; shift 2 ;;
    --operator) operator=$2; shift 2 ;;
    --san) sans+=("$2"); default_sans=0; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) usage ;;
    --*) echo "reft-certs: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
command -v openssl >/dev/null || { echo "reft-certs: openssl not installed (apt-get install openssl)" >&2; exit 1; }
dir=$1; shift
[ "$default_sans" = 1 ] && sans=("IP:127.0.0.1")
mkdir -p "$dir"
umask 077

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# issue NAME CN EXTENSIONS: DIR/NAME.pem signed by the CA
issue() {
  local name=$1 cn=$2 ext=$3
  if [ -f "$dir/$name.pem" ] && [ "$force" = 0 ]; then return; fi
  newkey "$dir/$name.key"
  openssl req -new -key "$dir/$name.key" -subj "/O=reft/CN=$cn" -out "$dir/$name.csr"
  printf '%s\n' "$ext" > "$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days "$days" -sha256 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
  echo "issued $dir/$name.pem (CN=$cn)"
}

if [ ! -f "$dir/ca.pem" ]; then
  newkey "$dir/ca.key"
  openssl req -x509 -new -key "$dir/ca.key" -subj "/O=reft/CN=reft-ca" -days "$days" -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/ca.pem"
  echo "created CA $dir/ca.pem"
fi

for arg in "$@"; do
  node=${arg%%=*}
  extra=""; [ "$arg" != "$node" ] && extra=",${arg#*=}"
  case "$node" in ''|*/*|*' '*) echo "reft-certs: bad node id '$node'" >&2; exit 2 ;; esac
  san="DNS:$node"
  for s in "${sans[@]}"; do san+=",$s"; done
  issue "$node" "$node" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san$extra"
done
if [ -n "$operator" ]; then
  issue operator "$operator" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
fi
chmod 0644 "$dir"/*.pem
