#!/usr/bin/env bash
# README command 1: installs what it needs, builds reft, and runs the main job on an embedded
# local cluster (reftd on loopback, a torch trainer, crashes, verified restores).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bash "$here/tools/build.sh" reftd reftctl reft_python reft_sample_trainer
cd "$here"
REFT_BUILD_DIR="${REFT_BUILD_DIR:-build}" exec /usr/bin/python3 tools/demo/demo.py
