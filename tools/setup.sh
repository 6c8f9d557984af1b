#!/usr/bin/env bash
# Installs every Debian bookworm package reft needs to build, test and run its demo.
# Idempotent: packages already present are skipped by apt. Run as root (or with sudo).
#   --torch2   also creates .venv/torch2 (tools/torch2_venv.sh): the current torch from the
#              package index, for the tests' torch2 leg (tools/test.sh passes it)
set -euo pipefail
torch2=0
for arg in "$@"; do
  case "$arg" in
    --torch2) torch2=1 ;;
    *) echo "usage: tools/setup.sh [--torch2]" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config git
  libboost-dev                       # Boost.Interprocess (header-only)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev catch2 libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libisal-dev libxxhash-dev libsystemd-dev systemd
  prometheus-cpp-dev
  pybind11-dev python3-dev python3-pybind11 python3-numpy python3-pytest python3-jsonschema
  python3-venv                       # .venv/torch2 and the wheel test's fresh venvs
  python3-torch libopenblas0-pthread # Debian torch runs ~27x slower on reference BLAS
  etcd-server etcd-client            # the control plane (docs/coordination.md); tests start one
  iproute2 procps
  clang-14 libclang-rt-14-dev         # libFuzzer + ASan/UBSan for tests/fuzz (docs/fuzzing.md)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ((torch2)); then
  bash "$(dirname "$0")/torch2_venv.sh"
fi
