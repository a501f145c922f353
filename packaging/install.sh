#!/usr/bin/env bash
# Install the built tree (`make all`) as an operator's system gets it:
#   $PREFIX/lib/srv6-mup/   package.json, bin/, dist/, build/*.bpf.o and
#                           build-info.json, native/build/Release/, bpf/cflags,
#                           node_modules/ (the runtime dependencies only)
#   $PREFIX/bin/mup         -> ../lib/srv6-mup/bin/mup.js
#   $UNITDIR/mup@.service   the templated unit (paths filled in)
#   $UNITDIR/mup-bgp@.service  the BGP MUP sidecar's unit (gobgpd; docs/bgp.md)
#   $SYSCONFDIR/mup/example.yaml, $PREFIX/share/man/man1/mup.1.gz,
#   $PREFIX/share/doc/srv6-mup/ (README, docs, example configs)
# all under $DESTDIR. The layout inside lib/srv6-mup is the checkout's, so
# the program finds its BPF objects and addon relative to itself
# (src/host/paths.ts). Used by `make install` and packaging/deb.sh.
#
#   packaging/install.sh [--destdir DIR] [--prefix /usr/local] [--sysconfdir /etc] [--unitdir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DESTDIR=
PREFIX=/usr/local
SYSCONFDIR=/etc
UNITDIR=
while [ $# -gt 0 ]; do
  case "$1" in
    --destdir) DESTDIR=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --sysconfdir) SYSCONFDIR=$2; shift 2 ;;
    --unitdir) UNITDIR=$2; shift 2 ;;
    *) echo "install.sh: unknown argument '$1' (--destdir, --prefix, --sysconfdir, --unitdir)" >&2; exit 2 ;;
  esac
done
case "$PREFIX" in /*) ;; *) echo "install.sh: --prefix must be an absolute path, got '$PREFIX'" >&2; exit 2 ;; esac
# Debian 12 keeps the units it ships in /lib/systemd/system; other prefixes
# in their own lib/systemd/system (systemd reads /usr/local/lib/systemd/system too).
if [ -z "$UNITDIR" ]; then
  if [ "$PREFIX" = /usr ]; then UNITDIR=/lib/systemd/system; else UNITDIR=$PREFIX/lib/systemd/system; fi
fi
LIBDIR=$PREFIX/lib/srv6-mup
ADDON=native/build/Release/mup_tstamp.node
for f in dist/cli/main.js build/mup.bpf.o build/build-info.json "$ADDON"; do
  if [ ! -f "$f" ]; then
    echo "install.sh: $f is missing: run 'make all' first" >&2
    exit 1
  fi
done

lib=$DESTDIR$LIBDIR
rm -rf "$lib"
install -d "$lib/bin" "$lib/build" "$lib/bpf" "$lib/native/build/Release" "$lib/node_modules"
install -m 0644 package.json "$lib/"
install -m 0755 bin/mup.js "$lib/bin/"
# The compiled code without its source maps (they point into src/, not shipped).
(cd dist && find . -name '*.js' -print0 | tar --null -cf - -T -) | tar -xf - -C "$lib" --transform 's,^\./,dist/,'
install -m 0644 build/*.bpf.o build/build-info.json "$lib/build/"
install -m 0644 bpf/cflags "$lib/bpf/"
install -m 0755 "$ADDON" "$lib/native/build/Release/"
# Runtime dependencies: what `npm ls --omit=dev` names, copied from the
# installed node_modules (no registry, no network). Its complaints are shown
# only when it fails.
npm_err=$(mktemp)
if ! deps=$(npm ls --omit=dev --all --parseable 2>"$npm_err"); then
  { echo "install.sh: npm ls --omit=dev failed, so the runtime dependencies to copy are unknown (node_modules does not match package.json: 'npm ci' installs the lockfile's):"
    cat "$npm_err"; } >&2
  rm -f "$npm_err"
  exit 1
fi
rm -f "$npm_err"
printf '%s\n' "$deps" | tail -n +2 | while read -r dep; do
  rel=${dep#"$PWD/"}
  [ -e "$lib/$rel" ] || { mkdir -p "$(dirname "$lib/$rel")"; cp -a "$rel" "$lib/$rel"; }
done
# Source maps point at sources that are not shipped.
find "$lib/node_modules" -name '*.map' -delete

bin=$DESTDIR$PREFIX/bin
install -d "$bin"
ln -sfn ../lib/srv6-mup/bin/mup.js "$bin/mup"

install -d "$DESTDIR$UNITDIR"
sed -e "s|@BINDIR@|$PREFIX/bin|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" packaging/mup@.service.in > "$DESTDIR$UNITDIR/mup@.service"
chmod 0644 "$DESTDIR$UNITDIR/mup@.service"
sed -e "s|@BINDIR@|$PREFIX/bin|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" packaging/mup-bgp@.service.in > "$DESTDIR$UNITDIR/mup-bgp@.service"
chmod 0644 "$DESTDIR$UNITDIR/mup-bgp@.service"

install -d "$DESTDIR$SYSCONFDIR/mup"
install -m 0644 config/daemon.example.yaml "$DESTDIR$SYSCONFDIR/mup/example.yaml"

man=$DESTDIR$PREFIX/share/man/man1
install -d "$man"
node scripts/man.mjs --lib "$lib" --as "$LIBDIR" --sysconfdir "$SYSCONFDIR" | gzip -9n > "$man/mup.1.gz"
chmod 0644 "$man/mup.1.gz"

doc=$DESTDIR$PREFIX/share/doc/srv6-mup
install -d "$doc/docs" "$doc/examples"
install -m 0644 README.md "$doc/"
install -m 0644 docs/*.md "$doc/docs/"
install -m 0644 config/*.yaml "$doc/examples/"
