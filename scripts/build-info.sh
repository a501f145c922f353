#!/usr/bin/env bash
# Write build/build-info.json: the git commit this build comes from, for
# `mup --version` ("unknown" outside a git checkout, e.g. from a source
# tarball; "-dirty" appended when tracked files differ from it). Rewritten
# only when it changes, so nothing that depends on it rebuilds for nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
if commit=$(git rev-parse --verify -q HEAD 2>/dev/null); then
  git diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
else
  commit=unknown
fi
mkdir -p build
new="{\"commit\": \"$commit\"}"
if [ "$(cat build/build-info.json 2>/dev/null)" != "$new" ]; then
  echo "$new" > build/build-info.json
fi
