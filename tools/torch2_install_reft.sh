#!/usr/bin/env bash
# Installs reft from this checkout into .venv/torch2 as a user does (pip install ".[torch,test]",
# the dependencies pinned by tools/requirements-torch2.txt), unless the installed one was built
# from the same sources. tools/test.sh runs it before the tests: the torch2 leg tests the
# package pip builds, not the build tree.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="$here/.venv/torch2"
[ -x "$venv/bin/python" ] || exit 0
cd "$here"
# What the wheel is built from: tracked and untracked files of these paths, with their contents.
sources=(CMakeLists.txt pyproject.toml cmake base proto kernels protect client)
if git rev-parse --git-dir >/dev/null 2>&1; then
  fingerprint=$( { git ls-files -s -- "${sources[@]}"; git diff HEAD -- "${sources[@]}";
                   git ls-files -o --exclude-standard -- "${sources[@]}" | xargs -r sha1sum; } |
                 sha1sum | cut -d' ' -f1)
else
  fingerprint="not a git checkout: always rebuilt"
fi
if [ "$(cat "$venv/.reft-source" 2>/dev/null)" = "$fingerprint" ] && [ "${fingerprint:0:3}" != "not" ]; then
  exit 0
fi
start=$(date +%s)
"$venv/bin/pip" install -q --disable-pip-version-check -c tools/requirements-torch2.txt ".[torch,test]"
echo "$fingerprint" > "$venv/.reft-source"
echo "setup: reft $("$venv/bin/python" -c 'import reft; print(reft.__version__)') built and installed into .venv/torch2 in $(( $(date +%s) - start )) s"
