#!/usr/bin/env bash
# build.sh - builds every example, tool, test and benchmark of train.h.
#
#   ./build.sh          build (examples/, tools/, bench/, tests/)
#   ./build.sh test     build, then run the whole test suite (tests/run.sh)
#   ./build.sh clean    remove what was built
#
# Each .c file is one program, built next to its source (examples/gpt2.c ->
# examples/gpt2). A source may say, in its first 40 lines:
#   // build: -lopenblas          extra compiler/linker flags
#   // requires: <shell test>     build only where the test succeeds
#   // asan: no                   (tests) skip the sanitizer build
# .cu files are built with nvcc where nvcc exists (sm_80 and sm_90).
# Environment: CC (default cc), CFLAGS, NVCC, JOBS.
set -u
cd "$(dirname "$0")"

CC=${CC:-cc}
CXX=${CXX:-c++}
BASE_FLAGS="-O3 -march=native -fopenmp -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -I."
CFLAGS=${CFLAGS:-$BASE_FLAGS}
ASAN_FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -march=native -fopenmp -I. -Wall -Wno-unused-parameter -Wno-unused-function"
NVCC=${NVCC:-$(command -v nvcc || true)}
NVCC_FLAGS="-O3 -I. -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -Xcompiler -fopenmp"
HEADERS="train.h train_cuda.h train_nccl.h tests/check.h examples/gpt2.c tests/cuda_on_cpu.h"
failed=0

meta() { sed -n "1,40s|^// $1: ||p" "$2" | head -1; }

# needs_build OUT SRC: true when OUT is missing or older than SRC or a header
needs_build() {
    [ -e "$1" ] || return 0
    for f in "$2" $HEADERS; do [ -e "$f" ] && [ "$f" -nt "$1" ] && return 0; done
    return 1
}

compile() { # compile COMPILER FLAGS OUT SRC
    local cc=$1 flags=$2 out=$3 src=$4 extra req
    req=$(meta requires "$src")
    if [ -n "$req" ] && ! (eval "$req") >/dev/null 2>&1; then
        echo "  skip  $out (requires: $req)"; return 0
    fi
    extra=$(meta build "$src")
    needs_build "$out" "$src" || return 0
    echo "  build $out"
    mkdir -p "$(dirname "$out")"
    # shellcheck disable=SC2086
    if ! $cc $flags -o "$out" "$src" $extra -lm; then
        echo "build.sh: FAILED to build $out from $src" >&2; failed=1
    fi
}

build_all() {
    local src out
    for src in examples/*.c tools/*.c bench/*.c; do
        [ -e "$src" ] || continue
        compile "$CC" "$CFLAGS -std=c99 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE" "${src%.c}" "$src"
    done
    for src in tests/*.c; do
        [ -e "$src" ] || continue
        out="tests/bin/$(basename "${src%.c}")"
        compile "$CC" "$CFLAGS -std=c99 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE" "$out" "$src"
        if [ "$(meta asan "$src")" != "no" ]; then
            compile "$CC" "$ASAN_FLAGS -std=c99 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE" "tests/bin/asan/$(basename "${src%.c}")" "$src"
        fi
    done
    for src in tests/*.cpp; do
        [ -e "$src" ] || continue
        compile "$CXX" "$CFLAGS -std=c++17" "tests/bin/$(basename "${src%.cpp}")" "$src"
    done
    if [ -n "$NVCC" ]; then
        for src in examples/*.cu bench/*.cu tests/*.cu; do
            [ -e "$src" ] || continue
            case "$src" in tests/*) out="tests/bin/$(basename "${src%.cu}")" ;; *) out="${src%.cu}" ;; esac
            compile "$NVCC" "$NVCC_FLAGS" "$out" "$src"
        done
    else
        echo "  (nvcc not found: CUDA programs not built)"
    fi
}

case "${1:-}" in
    clean)
        for src in examples/*.c tools/*.c bench/*.c examples/*.cu bench/*.cu; do
            [ -e "$src" ] && rm -f "${src%.*}"
        done
        rm -rf tests/bin; exit 0 ;;
    test)
        echo "build.sh: building"; build_all
        [ "$failed" = 0 ] || { echo "build.sh: build failed"; echo "0 passed, 1 failed"; exit 1; }
        exec bash tests/run.sh ;;
    ""|build)
        echo "build.sh: building"; build_all
        [ "$failed" = 0 ] || { echo "build.sh: build failed"; exit 1; }
        echo "build.sh: done" ;;
    *) echo "usage: ./build.sh [test|clean]" >&2; exit 2 ;;
esac
