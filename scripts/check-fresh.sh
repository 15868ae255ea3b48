#!/bin/bash
# check-fresh.sh — `make check` from a fresh clone in a clean Debian root, as a
# new user (or CI on a new machine) would run it: proves that every package
# the tests need is installed by the project's own files (scripts/
# install-deps.sh), not by hand on the developer's machine.
#   scripts/check-fresh.sh BUILD
# Steps: a minimal root of the host's Debian release (debootstrap
# --variant=minbase, made once and kept as BUILD/fresh/base.tar), unpacked
# anew; the host's apt sources copied in (the root fetches from the same
# registry); the committed HEAD cloned into it; then, inside, exactly what
# README.md tells a new user: `apt-get update && apt-get install make`,
# then `make check`. Needs root (chroot, mounts). FRESH_REBUILD=1 makes the
# base root again; FRESH_KEEP=1 keeps the root afterwards (BUILD/fresh/root).
# Exits with make check's status.
set -euo pipefail
BUILD=${1:?usage: scripts/check-fresh.sh BUILD}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$BUILD"
WORK=$(cd "$BUILD" && pwd)/fresh
say() { echo "check-fresh: $*"; }

[ "$(id -u)" -eq 0 ] || { say "needs root (debootstrap, chroot, mounts); run it as root" >&2; exit 2; }
"$ROOT/scripts/install-deps.sh" debootstrap

# The host's release and the registry its apt already uses (deb822 or
# one-line sources), so the root is fetched from where this machine may fetch.
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:?}")
sources=()
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && sources+=("$f")
done
mirror=""
[ ${#sources[@]} -gt 0 ] && mirror=$(awk -v s="$suite" '
    /^URIs:/ { uri = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s && uri != "" && !found) { print uri; found = 1 } }
    /^deb / && $3 == s && !found { print $2; found = 1 }' "${sources[@]}")
[ -n "$mirror" ] || { say "no apt source for '$suite' found in /etc/apt" >&2; exit 2; }

mkdir -p "$WORK"
if [ ! -s "$WORK/base.tar" ] || [ "${FRESH_REBUILD:-0}" = 1 ]; then
    say "making a minimal $suite root (debootstrap, once)"
    rm -rf "$WORK/base-root" "$WORK/base.tar"
    debootstrap --variant=minbase "$suite" "$WORK/base-root" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -20 "$WORK/debootstrap.log"; say "debootstrap failed" >&2; exit 1; }
    tar -C "$WORK/base-root" -cf "$WORK/base.tar.part" . && mv "$WORK/base.tar.part" "$WORK/base.tar"
    rm -rf "$WORK/base-root"
fi

R=$WORK/root
mounted=()
cleanup() {
    local m i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do m=${mounted[i]}; umount -l "$m" 2>/dev/null || true; done
    [ "${FRESH_KEEP:-0}" = 1 ] || rm -rf "$R"
}
trap cleanup EXIT
rm -rf "$R" && mkdir -p "$R"
tar -C "$R" -xf "$WORK/base.tar"

# apt: the host's sources and settings (proxies, registry options); names only.
rm -f "$R/etc/apt/sources.list" # debootstrap's; the host's replace it
cp -a /etc/apt/sources.list.d/. "$R/etc/apt/sources.list.d/" 2>/dev/null || true
[ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$R/etc/apt/"
cp -a /etc/apt/apt.conf.d/. "$R/etc/apt/apt.conf.d/" 2>/dev/null || true
[ -d /etc/apt/auth.conf.d ] && cp -a /etc/apt/auth.conf.d/. "$R/etc/apt/auth.conf.d/"
cp -L /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true

# A fresh clone of what is committed, with shared/ beside it as CI has it.
mkdir -p "$R/src"
git clone -q --no-hardlinks "$ROOT" "$R/src/clshim"
git -C "$R/src/clshim" checkout -q "$(git -C "$ROOT" rev-parse HEAD)"
[ -d "$ROOT/../shared" ] && cp -a "$ROOT/../shared" "$R/src/shared"
say "clone of $(git -C "$ROOT" rev-parse --short HEAD) in a clean $suite root"

for m in proc sys dev dev/pts; do
    mkdir -p "$R/$m"
    case $m in
        proc) mount -t proc proc "$R/proc" ;;
        sys) mount -t sysfs sysfs "$R/sys" ;;
        dev) mount --bind /dev "$R/dev" ;;
        dev/pts) mount --bind /dev/pts "$R/dev/pts" ;;
    esac
    mounted+=("$R/$m")
done
mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm" && mounted+=("$R/dev/shm")

# What README.md says a new Debian machine needs, and nothing more.
set +e
chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM=dumb CI=true /bin/bash -c '
    set -e
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends make >/dev/null
    cd /src/clshim
    make check' 2>&1 | tee "$WORK/check.log"
rc=${PIPESTATUS[0]}
set -e
say "make check in the clean root: exit $rc (log: $WORK/check.log)"
exit "$rc"
