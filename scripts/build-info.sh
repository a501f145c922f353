#!/usr/bin/env bash
# Write build/build-info.json: the git commit this build comes from, for
# `mup --version` ("unknown" outside a git checkout, e.g. from a source
# tarball; "-dirty" appended when tracked files differ from it). Rewritten
# only when it changes, so nothing that depends on it rebuilds for nothing.
#
#   scripts/build-info.sh                 write build/build-info.json
#   scripts/build-info.sh --deb-version   print the .deb's version, write nothing:
#     <package.json version>+git<UTC commit date YYYYMMDDHHMMSS>.<12-digit commit>
#     and, for a tree with changes to tracked files, .dirty<UTC build time>.
#     Later commits sort higher (dpkg --compare-versions), so `apt-get install
#     ./new.deb` upgrades; the same commit builds the same version; a dirty
#     build sorts above its commit's clean one and below the next commit.
#     Refused outside git: a version without the commit would not sort.
set -euo pipefail
cd "$(dirname "$0")/.."
# This checkout is the one whose scripts are running: trusting its .git is no
# wider than that. Without it, git refuses a checkout owned by another user
# ("dubious ownership", e.g. `sudo make deb` in a user's clone). Given on the
# command line, so no git config file changes.
top=$(pwd -P)
g() { git -c safe.directory="$top" "$@"; }

if [ "${1:-}" = --deb-version ]; then
  if ! sha=$(g rev-parse --verify -q --short=12 HEAD 2>/dev/null); then
    echo "build-info.sh: no git commit to version the package by (build it from a git checkout)" >&2
    exit 1
  fi
  date=$(TZ=UTC0 g show -s --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
  version="$(node -p "require('./package.json').version")+git$date.$sha"
  g diff --quiet HEAD -- || version="$version.dirty$(date -u +%Y%m%d%H%M%S)"
  echo "$version"
  exit 0
fi

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
