#!/usr/bin/env bash
# Install what srv6-mup needs on a fresh Debian 12 machine (run as root).
# Debian packages named on the command line, then the npm packages from the
# lockfile. Idempotent: skips apt when everything is already installed.
set -euo pipefail
# Node.js >= 20 (package.json's engines) with npm, checked first: Debian 12's
# own nodejs is 18, so it comes from NodeSource (the README's command) or
# Debian 13; this script does not add a repository by itself.
node_version=$(node --version 2>/dev/null) || node_version='no node on PATH'
major=${node_version#v}
major=${major%%.*}
if ! [[ $major =~ ^[0-9]+$ ]] || ((major < 20)) || ! command -v npm >/dev/null; then
  command -v npm >/dev/null || node_version="$node_version, no npm"
  echo "deps: Node.js >= 20 with npm is needed (found: $node_version). On Debian 12, as root:" >&2
  echo "  curl -fsSL https://deb.nodesource.com/setup_20.x | bash - && apt-get install -y nodejs" >&2
  echo "then run this again (Debian 13: apt-get install nodejs npm)." >&2
  exit 1
fi
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "deps: need root to install packages (run as root, or install: ${missing[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "${missing[@]}"
fi
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "deps: installing npm packages"
  npm ci --no-audit --no-fund
fi
