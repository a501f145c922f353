#!/usr/bin/env bash
# Write build/build-info.json: the git commit this build comes from, for
# `mup --version` ("unknown" outside a git checkout, e.g. from a source
# tarball; "-dirty" appended when tracked files differ from it). Rewritten
# only when it changes, so nothing that depends on it rebuilds for nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# This checkout is the one whose scripts are running: trusting its .git is no
# wider than that. Without it, git refuses a checkout owned by another user
# ("dubious ownership", e.g. `sudo make deb` in a user's clone). Given on the
# command line, so no git config file changes.
top=$(pwd -P)
g() { git -c safe.directory="$top" "$@"; }

if commit=$(g rev-parse --verify -q HEAD 2>/dev/null); then
  g diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
else
  commit=unknown
fi
mkdir -p build
new="{\"commit\": \"$commit\"}"
if [ "$(cat build/build-info.json 2>/dev/null)" != "$new" ]; then
  echo "$new" > build/build-info.json
fi
