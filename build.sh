#!/usr/bin/env bash
# build.sh - builds the programs of train.h. Needs only a C compiler (gcc or
# clang); everything else is optional and skipped with one line that names
# the Debian package which brings it.
#
#   ./build.sh          examples/ and tools/ (quick: what the README's first
#                       command needs); their CUDA programs too where nvcc
#                       and a working CUDA driver with a GPU are present
#   ./build.sh bench    the same, and bench/ (bench/*.cpp: C++ programs on
#                       the CUDA-on-CPU harness, such as gpt2_plan)
#   ./build.sh cuda     the same, and every CUDA program (*.cu) whether or
#                       not this machine has a GPU (needs nvcc)
#   ./build.sh test     everything: examples, tools, bench, tests/ and their
#                       sanitizer builds, CUDA programs compile-checked where
#                       nvcc exists; then runs the suite (tests/run.sh)
#   ./build.sh clean    remove what was built
#
# Each source is one program, built next to it (examples/gpt2.c ->
# examples/gpt2; tests/test_x.c -> tests/bin/test_x). Sources are found by
# name: examples/*.c tools/*.c bench/*.c tests/*.c tests/*.cpp and *.cu
# in those folders. A source may say, in its first 60 lines:
#   // build: -lfoo               extra compiler/linker flags
#   // requires: <shell test>     build only where the test succeeds; the test
#                                 may use the probes below
#   // asan: no                   (tests) no sanitizer build
# Probes for optional libraries (compile and link a tiny program; on failure
# the skip line names the package):
#   have_lib PACKAGE HEADER SYMBOL -lLIB...        with the C compiler
#   have_cuda_lib PACKAGE HEADER SYMBOL -lLIB...   with nvcc
# Environment: CC (default: cc, gcc or clang, the first found), CXX
# (c++, g++ or clang++), CFLAGS (replaces the default flags), NVCC, JOBS
# (programs compiled at once; default: the number of cores).
set -u
cd "$(dirname "$0")"

first_of() { local c; for c in "$@"; do command -v "$c" >/dev/null 2>&1 && { echo "$c"; return 0; }; done; return 1; }
CC=${CC:-$(first_of cc gcc clang || true)}
CXX=${CXX:-$(first_of c++ g++ clang++ || true)}
NVCC=${NVCC:-$(command -v nvcc || true)}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
WARN="-Wall -Wextra -Wno-unused-parameter -Wno-unused-function"
C_STD="-std=c99"
# train.h turns POSIX on itself when it is the first #include (examples and
# tools show that); tests and benchmarks include other headers first
POSIX_DEFS="-D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L"
ASAN="-O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
# sm_80 (A100) and sm_90 (H100) machine code, and compute_90 PTX that the
# driver compiles for newer GPUs
NVCC_FLAGS="-O3 -I. -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -Xcompiler -fopenmp"
# every CUDA program where ./build.sh test can only compile-check it (nvcc,
# no GPU): sm_90 alone, a third of nvcc's time; examples/gpt2_cuda.cu still
# builds for every target above, so code that breaks only for sm_80 still
# fails the build (./build.sh cuda builds them all for every target)
NVCC_CHECK_FLAGS="-O3 -I. -std=c++17 -gencode arch=compute_90,code=sm_90 -Xcompiler -fopenmp"
HEADERS="train.h train_cuda.h train_nccl.h extras/train_data.h extras/train_unicode.h extras/train_loop.h extras/train_run.h extras/train_generate.h extras/train_ops.h extras/train_json.h tests/check.h examples/gpt2.c tests/cuda_on_cpu.h tests/nccl_on_cpu.h bench/gpt2_sites.h"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/build.sh.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

meta() { sed -n "1,60s|^// $1: ||p" "$2" | head -1; }

# probe COMPILER FLAGS... < SOURCE: does a tiny program compile and link?
probe() {
    local cc=$1 ext=c; shift
    case "$cc" in *nvcc) ext=cu ;; *++) ext=cpp ;; esac
    cat > "$TMP/probe.$ext"
    "$cc" "$TMP/probe.$ext" -o "$TMP/probe" "$@" >/dev/null 2>&1
}
# a program that really uses SYMBOL (through a volatile, so the reference
# stays and the linker must find it)
tiny() { printf '#include <%s>\nint main(void) { volatile size_t p = (size_t)&%s; return p == 0; }\n' "$1" "$2"; }
# the probes run inside `requires:` subshells: their answers are kept in
# files, so each library is probed once per build
probe_once() { # probe_once COMPILER HEADER SYMBOL FLAGS...
    local key cc=$1 h=$2 sym=$3; shift 3
    key="$TMP/lib.$(printf '%s ' "$cc" "$h" "$sym" "$@" | cksum | cut -d' ' -f1)"
    if [ ! -e "$key" ]; then
        if tiny "$h" "$sym" | probe "$cc" "$@"; then echo 0 > "$key"; else echo 1 > "$key"; fi
    fi
    return "$(cat "$key")"
}
have_lib() { # have_lib PACKAGE HEADER SYMBOL FLAGS...
    local pkg=$1 h=$2 sym=$3; shift 3
    probe_once "$CC" "$h" "$sym" -I. "$@" && return 0
    echo "needs $pkg (<$h> with $* does not compile and link)"; return 1
}
have_cuda_lib() { # have_cuda_lib PACKAGE HEADER SYMBOL FLAGS...
    local pkg=$1 h=$2 sym=$3; shift 3
    [ -n "$NVCC" ] || { echo "needs nvcc (nvidia-cuda-toolkit)"; return 1; }
    probe_once "$NVCC" "$h" "$sym" "$@" && return 0
    echo "needs $pkg (<$h> with $* does not compile and link under nvcc)"; return 1
}

# a CUDA driver that can run programs: nvidia-smi sees a GPU, or without
# nvidia-smi, libcuda is installed and a device node exists
cuda_usable() {
    if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>/dev/null | grep -q '^GPU'; return; fi
    { ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; } && ls /dev/nvidia[0-9]* >/dev/null 2>&1
}

# C and C++ flags: OpenMP where the compiler has it (clang needs libomp-dev)
omp_flag() { # omp_flag COMPILER
    printf '#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n' | probe "$1" -fopenmp && echo -fopenmp
}
setup_flags() {
    [ -n "$CC" ] || { echo "build.sh: no C compiler found (install gcc or clang, or set CC)" >&2; exit 1; }
    local omp
    if [ -z "${CFLAGS:-}" ]; then
        omp=$(omp_flag "$CC")
        [ -n "$omp" ] || echo "  note  $CC has no OpenMP (for clang: Debian package libomp-dev): programs run on one core"
        CFLAGS="-O3 -march=native $omp $WARN -I."
    fi
    CXXFLAGS="$CFLAGS"
    if [ -n "$CXX" ] && [[ "$CFLAGS" == *-fopenmp* ]] && [ -z "$(omp_flag "$CXX")" ]; then
        CXXFLAGS=${CFLAGS/-fopenmp/}
    fi
    ASAN_FLAGS="$ASAN ${CFLAGS/-O3/}"
}

# --- planning (serial: probes, up-to-date checks), then compiling in parallel
declare -A probe_cache
n_jobs=0
failed=0

needs_build() { # needs_build OUT SRC: OUT missing or older than SRC or a header
    [ -e "$1" ] || return 0
    for f in "$2" $HEADERS; do [ -e "$f" ] && [ "$f" -nt "$1" ] && return 0; done
    return 1
}

# sanitizer runtimes a build needs: each -fsanitize=... must link; else
# the reason is left in $why
sanitizers_ok() { # sanitizers_ok COMPILER FLAGS
    local s key
    for s in $2; do
        case "$s" in -fsanitize=*) ;; *) continue ;; esac
        key="$1 $s"
        if [ -z "${probe_cache[$key]+x}" ]; then
            probe_cache[$key]=1
            printf 'int main(void) { return 0; }\n' | probe "$1" "$s" || probe_cache[$key]=0
        fi
        if [ "${probe_cache[$key]}" != 1 ]; then
            why="needs the ${s#-fsanitize=} sanitizer runtime for $1 (gcc: libasan8 libubsan1 libtsan2; clang: libclang-rt-14-dev)"
            return 1
        fi
    done
}

plan() { # plan COMPILER FLAGS OUT SRC
    local cc=$1 flags=$2 out=$3 src=$4 extra req why
    extra=$(meta build "$src")
    req=$(meta requires "$src")
    if [ -n "$req" ]; then
        if [ -z "${probe_cache[req:$req]+x}" ]; then
            why=$(eval "$req" 2>/dev/null) && probe_cache[req:$req]="" || probe_cache[req:$req]="${why:-requires: $req}"
        fi
        why=${probe_cache[req:$req]}
        if [ -n "$why" ]; then echo "  skip  $out: $why"; return 0; fi
    fi
    if ! sanitizers_ok "$cc" "$flags $extra"; then echo "  skip  $out: $why"; return 0; fi
    needs_build "$out" "$src" || return 0
    n_jobs=$((n_jobs + 1))
    printf '%s\n%s\n%s\n%s\n%s\n' "$cc" "$flags" "$out" "$src" "$extra" > "$TMP/job.$n_jobs"
}

run_job() { # run_job N: compile job N, report, mark failure
    local cc flags out src extra log="$TMP/log.$1" t0=$SECONDS
    { read -r cc; read -r flags; read -r out; read -r src; read -r extra; } < "$TMP/job.$1"
    mkdir -p "$(dirname "$out")"
    # the source's own flags after it: libraries must follow what uses them
    # shellcheck disable=SC2086
    if $cc $flags -o "$out" "$src" $extra -lm > "$log" 2>&1; then
        echo "  built $out ($((SECONDS - t0)) s)"; cat "$log"
    else
        cat "$log"; echo "build.sh: FAILED to build $out from $src"; touch "$TMP/failed.$1"
    fi
}

compile_all() {
    local i running=0
    for ((i = 1; i <= n_jobs; i++)); do
        if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
        run_job "$i" &
        running=$((running + 1))
    done
    wait
    ls "$TMP"/failed.* >/dev/null 2>&1 && failed=1
    n_jobs=0
}

# --- what each command builds
plan_c() { # plan_c GLOB...: C programs next to their sources
    local src defs
    for src in "$@"; do
        [ -e "$src" ] || continue
        case "$src" in bench/*) defs=$POSIX_DEFS ;; *) defs="" ;; esac
        plan "$CC" "$CFLAGS $C_STD $defs" "${src%.c}" "$src"
    done
}
plan_cxx() { # plan_cxx GLOB...: C++ programs next to their sources (bench/gpt2_plan.cpp: the harness's dry run)
    local src
    [ -n "$CXX" ] || { echo "  skip  bench/*.cpp: no C++ compiler (Debian package g++ or clang)"; return 0; }
    for src in "$@"; do
        [ -e "$src" ] && plan "$CXX" "$CXXFLAGS -std=c++17 $POSIX_DEFS" "${src%.cpp}" "$src"
    done
}
plan_cuda() { # plan_cuda WHEN GLOB... (WHEN: as for plan_cuda_for below)
    local when=$1 src out flags; shift
    for src in "$@"; do
        [ -e "$src" ] || continue
        flags=$NVCC_FLAGS
        case "$src" in
            tests/*) out="tests/bin/$(basename "${src%.cu}")"
                     [ "$when" = check ] && flags=$NVCC_CHECK_FLAGS ;;
            *) out="${src%.cu}"
               # compile-check only (no GPU): one program keeps every target
               # so that code which breaks only for sm_80 still fails
               [ "$when" = check ] && [ "$src" != examples/gpt2_cuda.cu ] && flags=$NVCC_CHECK_FLAGS ;;
        esac
        plan "$NVCC" "$flags" "$out" "$src"
    done
}
plan_tests() {
    local src name
    for src in tests/*.c; do
        [ -e "$src" ] || continue
        name=$(basename "${src%.c}")
        plan "$CC" "$CFLAGS $C_STD $POSIX_DEFS" "tests/bin/$name" "$src"
        [ "$(meta asan "$src")" = no ] || plan "$CC" "$ASAN_FLAGS $C_STD $POSIX_DEFS" "tests/bin/asan/$name" "$src"
    done
    if [ -z "$CXX" ]; then
        echo "  skip  tests/*.cpp: no C++ compiler (Debian package g++ or clang)"
    else
        for src in tests/*.cpp; do
            [ -e "$src" ] && plan "$CXX" "$CXXFLAGS -std=c++17" "tests/bin/$(basename "${src%.cpp}")" "$src"
        done
    fi
}
# CUDA programs: plan_cuda_for WHEN GLOBS..., WHEN = always (./build.sh
# cuda), usable (only with a GPU driver) or check (wherever nvcc is)
plan_cuda_for() {
    local when=$1; shift
    if [ -z "$NVCC" ]; then
        [ "$when" = always ] && { echo "build.sh: ./build.sh cuda needs nvcc (Debian package nvidia-cuda-toolkit)" >&2; exit 1; }
        [ -n "$(ls examples/*.cu 2>/dev/null)" ] && echo "  note  nvcc not found: CUDA programs not built (Debian package nvidia-cuda-toolkit)"
        return 0
    fi
    if [ "$when" = usable ] && ! cuda_usable; then
        echo "  note  nvcc found but no CUDA driver with a GPU: CUDA programs not built (./build.sh cuda builds them)"
        return 0
    fi
    # with a GPU the suite runs its CUDA programs: every target
    [ "$when" = check ] && cuda_usable && when=usable
    plan_cuda "$when" "$@"
}

finish() {
    compile_all
    [ "$failed" = 0 ] || { echo "build.sh: build failed"; return 1; }
    echo "build.sh: done"
}

case "${1:-}" in
    clean)
        for src in examples/*.c tools/*.c bench/*.c bench/*.cpp examples/*.cu tools/*.cu bench/*.cu; do
            [ -e "$src" ] && rm -f "${src%.*}"
        done
        rm -rf tests/bin; exit 0 ;;
    ""|build|bench|cuda)
        echo "build.sh: building ($CC, $JOBS at once)"
        setup_flags
        # shellcheck disable=SC2046
        plan_c examples/*.c tools/*.c $([ "${1:-}" = bench ] && echo bench/*.c)
        if [ "${1:-}" = bench ]; then plan_cxx bench/*.cpp; fi
        case "${1:-}" in
            cuda) plan_cuda_for always examples/*.cu tools/*.cu bench/*.cu tests/*.cu ;;
            bench) plan_cuda_for usable examples/*.cu tools/*.cu bench/*.cu ;;
            *) plan_cuda_for usable examples/*.cu tools/*.cu ;;
        esac
        finish ;;
    test)
        echo "build.sh: building everything ($CC, $JOBS at once)"
        setup_flags
        plan_c examples/*.c tools/*.c bench/*.c
        plan_cxx bench/*.cpp
        plan_tests
        plan_cuda_for check examples/*.cu tools/*.cu bench/*.cu tests/*.cu
        finish || { echo "0 passed, 1 failed"; exit 1; }
        exec bash tests/run.sh ;;
    *) echo "usage: ./build.sh [bench|cuda|test|clean]" >&2; exit 2 ;;
esac
