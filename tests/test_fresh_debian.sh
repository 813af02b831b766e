#!/usr/bin/env bash
# tests/test_fresh_debian.sh - the README's first command on a truly fresh
# machine: a minimal Debian root (debootstrap --variant=minbase) with only a
# C compiler added, a clean clone of HEAD (git archive) copied in, and
#     ./build.sh && ./examples/gpt2 --steps 20
# run there under chroot; once with gcc (+ libc6-dev), once with clang
# (+ libc6-dev, no gcc package, no `cc` link: build.sh must find clang).
#
# Needs root, debootstrap, chroot and the Debian mirror; without them it
# prints a SKIP line and "0 passed, 0 failed" (tests/run.sh shows "skip").
# The roots are built once and cached, keyed by suite, mirror and package
# list: $FRESH_CACHE (default /var/cache/train-h-fresh-debian; the first run
# downloads about 150 MB and takes a few minutes, later runs seconds).
# It tests what is committed (HEAD), not uncommitted changes.
#   FRESH_SUITE=bookworm  FRESH_MIRROR=http://deb.debian.org/debian
#   FRESH_VARIANTS="gcc clang"
set -u
cd "$(dirname "$0")/.."
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
skip_all() { echo "SKIP test_fresh_debian: $1"; echo "0 passed, 0 failed"; exit 0; }

SUITE=${FRESH_SUITE:-bookworm}
MIRROR=${FRESH_MIRROR:-http://deb.debian.org/debian}
CACHE=${FRESH_CACHE:-/var/cache/train-h-fresh-debian}
VARIANTS=${FRESH_VARIANTS:-gcc clang}

# --- can we run at all? (each missing piece is a skip, said once) ----------
[ "$(id -u)" = 0 ] || skip_all "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || skip_all "debootstrap not installed (Debian package debootstrap)"
command -v chroot >/dev/null || skip_all "chroot not found"
git rev-parse --verify -q HEAD >/dev/null 2>&1 || skip_all "not a git checkout (needs git archive HEAD)"
if command -v wget >/dev/null; then
    wget -q -T 15 -t 1 -O /dev/null "$MIRROR/dists/$SUITE/Release" || skip_all "mirror $MIRROR not reachable"
fi
mkdir -p "$CACHE/debs" || skip_all "cannot create $CACHE"
mnt_probe=$(mktemp -d)
if ! mount -t proc proc "$mnt_probe" 2>/dev/null; then rmdir "$mnt_probe"; skip_all "cannot mount /proc (no CAP_SYS_ADMIN?)"; fi
umount "$mnt_probe"; rmdir "$mnt_probe"

mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null; done
}
trap cleanup EXIT

# root_for VARIANT PACKAGES: a cached root with PACKAGES, built if missing
root_for() {
    local variant=$1 pkgs=$2 key root log
    key=$(printf '%s\n' "$SUITE" "$MIRROR" minbase "$pkgs" | cksum | cut -d' ' -f1)
    root="$CACHE/$variant-$SUITE-$key"
    if [ ! -e "$root/.train-h-complete" ]; then
        rm -rf "$root"
        log="$CACHE/$variant-$SUITE-$key.log"
        echo "# building $root (debootstrap --variant=minbase --include=$pkgs; log $log)" >&2
        if ! debootstrap --variant=minbase --include="$pkgs" --cache-dir="$CACHE/debs" "$SUITE" "$root" "$MIRROR" \
            >"$log" 2>&1; then
            tail -5 "$log" >&2
            rm -rf "$root"
            return 1
        fi
        rm -f "$root"/var/cache/apt/archives/*.deb
        touch "$root/.train-h-complete"
    fi
    echo "$root"
}

# run_variant NAME PACKAGES
run_variant() {
    local name=$1 pkgs=$2 root src out t0 t1 rc
    if ! root=$(root_for "$name" "$pkgs"); then bad "$name: debootstrap failed"; return; fi
    t0=$(date +%s)
    src="$root/root/train.h"
    rm -rf "$src" && mkdir -p "$src"
    git archive HEAD | tar -x -C "$src" || { bad "$name: git archive HEAD"; return; }
    mount -t proc proc "$root/proc" && mounted+=("$root/proc")
    mount --bind /dev "$root/dev" && mounted+=("$root/dev")
    out="$root/root/run.out"
    # a clean environment, as a new user's shell: nothing of ours leaks in
    timeout 900 chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root \
        LANG=C.UTF-8 /bin/bash -c 'cd /root/train.h && s=$(date +%s) && ./build.sh && b=$(date +%s) &&
            ./examples/gpt2 --steps 20 && echo "times: build $((b - s)) s, gpt2 $(($(date +%s) - b)) s"' >"$out" 2>&1
    rc=$?
    t1=$(date +%s)
    cleanup; mounted=()
    if [ "$rc" = 0 ] && grep -q '^build.sh: done' "$out" && ! grep -q 'FAILED' "$out"; then
        ok "$name: ./build.sh on minbase + $pkgs"
    else
        bad "$name: ./build.sh on minbase + $pkgs (exit $rc)"
    fi
    if [ "$rc" = 0 ] && grep -q '^trained steps 1\.\.20 ' "$out" && grep -q '^---- sample' "$out"; then
        ok "$name: ./examples/gpt2 --steps 20 trains and samples ($((t1 - t0)) s with the build)"
    else
        bad "$name: ./examples/gpt2 --steps 20 (exit $rc)"
    fi
    if [ "$rc" != 0 ] || [ -n "${FRESH_VERBOSE:-}" ]; then tail -25 "$out" | sed "s/^/  $name| /"; fi
    grep -E '^(build.sh|  skip|  note|times:)' "$out" | sed "s/^/  $name| /"
    rm -rf "$src"
}

for v in $VARIANTS; do
    case "$v" in
        gcc) run_variant gcc "gcc,libc6-dev" ;;
        clang) run_variant clang "clang,libc6-dev" ;;
        *) bad "unknown variant $v" ;;
    esac
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
