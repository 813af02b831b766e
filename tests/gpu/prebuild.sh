#!/usr/bin/env bash
# tests/gpu/prebuild.sh - builds, on a machine with nvcc and no GPU, every
# CUDA program tests/gpu/run.sh needs, for the H100 (sm_90), into one folder
# to carry to the GPU machine, so that the GPU's minutes go to running.
#
#   bash tests/gpu/prebuild.sh [DIR]        default DIR: gpu-prebuilt (git ignores it)
#
# DIR gets one executable per program and MANIFEST, one line per program:
#   NAME SOURCE SHA256
# where SHA256 is tests/gpu/run.sh's fingerprint of what the program is
# built from (its source and the headers, see src_hash in run.sh). run.sh
# uses a binary only where the fingerprint still matches the tree it runs
# in and the binary's libraries resolve there (ldd); anything else it
# builds on the GPU machine. JOBS (default: the cores) programs at once;
# NVCC, ARCH (default sm_90) as for run.sh.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/programs.sh
dir=${1:-gpu-prebuilt}
NVCC=${NVCC:-$(command -v nvcc || true)}
[ -n "$NVCC" ] || { echo "tests/gpu/prebuild.sh: nvcc not found (Debian package nvidia-cuda-toolkit)"; exit 2; }
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
mkdir -p "$dir" || exit 1
: >"$dir/MANIFEST.new"
failed=0 running=0
for p in $(gpu_programs); do
    src=$(gpu_source "$p")
    (
        if gpu_build "$NVCC" "$src" "$dir/$p" >"$dir/$p.buildlog" 2>&1; then
            echo "  built $dir/$p"; rm -f "$dir/$p.buildlog"
        else
            echo "FAILED to build $dir/$p from $src (log: $dir/$p.buildlog)"; exit 1
        fi
    ) &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then wait -n || failed=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done
for p in $(gpu_programs); do
    src=$(gpu_source "$p")
    [ -x "$dir/$p" ] && echo "$p $src $(src_hash "$src")" >>"$dir/MANIFEST.new"
done
mv "$dir/MANIFEST.new" "$dir/MANIFEST"
du -sh "$dir" | awk '{print "tests/gpu/prebuild.sh: " $1 " in " $2 " (the device tool carries at most 64 MiB)"}'
[ "$failed" = 0 ]
