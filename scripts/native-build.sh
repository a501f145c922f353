#!/usr/bin/env bash
# Build the node-addon-api addon in native/ with node-gyp (from
# node_modules: a devDependency) against the headers of the node that runs
# it. No download: node-gyp is pointed at the installed headers. Fails with
# one line naming what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in node python3 make g++; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    case "$tool" in
      python3) pkg=python3 ;; make) pkg=make ;; g++) pkg=g++ ;; node) pkg=nodejs ;;
    esac
    echo "native: cannot build native/ (node-gyp): '$tool' is not installed; install it (Debian: apt-get install $pkg, or run 'make deps' as root)" >&2
    exit 1
  fi
done
gyp=node_modules/.bin/node-gyp
if [ ! -x "$gyp" ]; then
  echo "native: cannot build native/: node-gyp is missing from node_modules; run 'make deps' (npm ci)" >&2
  exit 1
fi
nodedir=$(node -p "require('path').resolve(process.execPath, '..', '..')")
if [ ! -f "$nodedir/include/node/node_api.h" ]; then
  echo "native: cannot build native/: Node's headers are not in $nodedir/include/node (node_api.h); install the headers that match $(node --version)" >&2
  exit 1
fi
# Configure once (and again when binding.gyp changes); then an incremental build.
if [ ! -f native/build/Makefile ] || [ native/binding.gyp -nt native/build/Makefile ]; then
  (cd native && "../$gyp" configure --nodedir="$nodedir" --loglevel=warn)
fi
(cd native && "../$gyp" build --nodedir="$nodedir" --loglevel=warn)
