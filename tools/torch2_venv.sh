#!/usr/bin/env bash
# Creates .venv/torch2 (tools/setup.sh --torch2): a venv of Debian's /usr/bin/python3 with the
# torch of tools/requirements-torch2.txt and reft installed as a user installs it
# (pip install ".[torch,test]"). The tests' torch2 leg runs in it, without PYTHONPATH.
#
# Never half installed: .venv/torch2/.requirements (a copy of the requirements) is written
# last, and a venv without it is deleted and built again. When the package index cannot be reached, .venv/torch2.unavailable says why and the
# torch2 tests report *skipped* with that reason. pip's cache stays outside the clone (~/.cache).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="$here/.venv/torch2"
reqs="$here/tools/requirements-torch2.txt"
stamp="$venv/.requirements"
mkdir -p "$here/.venv"
rm -f "$here/.venv/torch2.unavailable"

if [ -x "$venv/bin/python" ] && cmp -s "$reqs" "$stamp"; then
  exit 0  # up to date; tools/test.sh refreshes reft itself (tools/torch2_install_reft.sh)
fi

free_gb=$(df -Pk "$here/.venv" | awk 'NR==2 {print int($4 / 1048576)}')
if [ "$free_gb" -lt 10 ]; then
  echo "setup: $free_gb GB free under $here/.venv; the torch2 venv needs 10 GB (torch's CUDA" \
       "wheels): free some space, or run the tests without the torch2 leg (ctest -LE torch2)" >&2
  exit 1
fi

unavailable() {
  echo "$1" > "$here/.venv/torch2.unavailable"
  echo "setup: WARNING: $1; the torch2 tests will be skipped" >&2
  rm -rf "$venv"
  exit 0
}

if ! /usr/bin/python3 -c 'import urllib.request as u; u.urlopen("https://pypi.org/simple/torch/", timeout=15).close()' 2>/dev/null; then
  unavailable "the Python package index (https://pypi.org) cannot be reached"
fi

rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
start=$(date +%s)
echo "setup: installing $(grep -v '^#' "$reqs" | tr '\n' ' ')into .venv/torch2 (first time: ~4 GB)"
if ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs"; then
  unavailable "pip could not install tools/requirements-torch2.txt (see the output above)"
fi
echo "setup: torch2 packages downloaded and installed in $(( $(date +%s) - start )) s"
bash "$here/tools/torch2_install_reft.sh"
cp "$reqs" "$stamp"
