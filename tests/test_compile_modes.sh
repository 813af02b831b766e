#!/usr/bin/env bash
# tests/test_compile_modes.sh - a new user's first program (examples/minimal.c)
# compiles with no warning however it is compiled: gcc and clang, -std=c99 and -std=c11,
# -Wall -Wextra -pedantic -Werror, with and without -fopenmp, TRAIN_STATIC, and as C++
# (g++, clang++: -std=c++11 and c++17). No feature-test macros on the
# command line: train.h turns POSIX on itself. Each build is also run.
# Then: a file that includes <stdio.h> before train.h under -std=c99 gets,
# as its first error, train.h's #error saying what to do (glibc), rather
# than a pile of implicit declarations. The companions (extras/train_data.h,
# extras/train_loop.h) compile in C and C++ beside train.h, and say so when
# they are included in the wrong order. A missing compiler is a SKIP line, not a pass.
set -u
cd "$(dirname "$0")/.."
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
D=$(mktemp -d /tmp/test_compile_modes.XXXXXX)
trap 'rm -rf "$D"' EXIT

# examples/minimal.c, the smallest complete training program (a new
# user's first copy), in C89-compatible style so that -std=c99 -pedantic
# sees only train.h's constructs. Each build must also learn: the last line
# has a loss below 0.2 and an accuracy of at least 90%.
cp examples/minimal.c "$D/first.c"
cp "$D/first.c" "$D/first.cpp"

omp_ok() { printf '#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n' > "$D/omp.c" &&
    "$1" -fopenmp -x c "$D/omp.c" -o "$D/omp" >/dev/null 2>&1; }

# -O0 for the language modes (front-end warnings, quick); -O2 -march=native
# where the optimizer's warnings (maybe-uninitialized ...) can appear
build_run() { # build_run COMPILER SOURCE FLAGS...
    local cc=$1 src=$2 what; shift 2
    what="$cc $*"
    if ! "$cc" -Wall -Wextra -pedantic -Werror "$@" -I. -o "$D/prog" "$src" -lm > "$D/log" 2>&1; then
        bad "$what: $(grep -m3 -E 'warning|error' "$D/log" | tr '\n' ' ')"; return
    fi
    if "$D/prog" > "$D/out" 2>&1 && tail -1 "$D/out" | awk '$1 == "step" && $4 < 0.2 && $6 + 0 >= 90 { ok = 1 } END { exit !ok }'; then
        ok "$what: no warning, runs, learns ($(tail -1 "$D/out" | tr -s ' '))"
    else
        bad "$what: runs: $(tail -3 "$D/out" | tr '\n' ' ')"
    fi
}

for cc in gcc clang; do
    if ! command -v "$cc" >/dev/null; then echo "SKIP $cc: not installed"; continue; fi
    for std in c99 c11; do build_run "$cc" "$D/first.c" -O0 -std=$std; done
    if omp_ok "$cc"; then build_run "$cc" "$D/first.c" -O2 -march=native -std=c99 -fopenmp
    else echo "SKIP $cc -fopenmp: no OpenMP for $cc (libomp-dev)"; build_run "$cc" "$D/first.c" -O2 -march=native -std=c99; fi
done
for cxx in g++ clang++; do
    if ! command -v "$cxx" >/dev/null; then echo "SKIP $cxx: not installed"; continue; fi
    build_run "$cxx" "$D/first.cpp" -O0 -std=c++11
    omp=""; omp_ok "$cxx" && omp=-fopenmp
    build_run "$cxx" "$D/first.cpp" -O2 -march=native -std=c++17 $omp
done

# TRAIN_STATIC (every function static): a program that uses a few of them
# gets no -Wunused-function for the rest (issue 24: 117 warnings before)
{ printf '#define TRAIN_STATIC\n'; cat "$D/first.c"; } > "$D/static.c"
for cc in gcc clang; do
    command -v "$cc" >/dev/null && build_run "$cc" "$D/static.c" -O0 -std=c99
done
# the companions (extras/): the same program with both included and used,
# under the strictest flags of each language
sed -e 's|^#include "train.h"$|#include "train.h"\n#include "extras/train_data.h"\n#include "extras/train_loop.h"\n#include "extras/train_run.h"\n#include "extras/train_generate.h"\n#include "extras/train_ops.h"\n#include "extras/train_json.h"|' \
    -e 's|^int main(\(.*\)) {$|int main(\1) {\n    { trn_tokenizer tok; char buf[16]; trn_tokenizer_init_bytes(\&tok); if (tok.vocab_size != 256 \|\| strcmp(trn_duration_str(75.0, buf, sizeof buf), "1:15")) return 7; }|' \
    "$D/first.c" > "$D/extras.c"
cp "$D/extras.c" "$D/extras.cpp"
if grep -q 'train_loop.h' "$D/extras.c" && grep -q 'trn_duration_str' "$D/extras.c"; then
    for cc in gcc clang; do command -v "$cc" >/dev/null && build_run "$cc" "$D/extras.c" -O0 -std=c99; done
    for cxx in g++ clang++; do command -v "$cxx" >/dev/null && build_run "$cxx" "$D/extras.cpp" -O0 -std=c++11; done
else
    bad "could not make the companions' program from first.c"
fi
# a companion before train.h, or its implementation without train.h's: one #error saying what to do
printf '#include "extras/train_data.h"\n#include "train.h"\nint main(void) { return 0; }\n' > "$D/order.c"
if ! cc -fsyntax-only -I. "$D/order.c" > "$D/order.log" 2>&1 && grep -m1 error "$D/order.log" | grep -q 'include train.h first'; then
    ok "a companion included before train.h: its #error says to include train.h first"
else
    bad "a companion before train.h: $(grep -m2 error "$D/order.log" | tr '\n' ' ')"
fi
printf '#include "train.h"\n#define TRAIN_IMPLEMENTATION\n#include "extras/train_loop.h"\nint main(void) { return 0; }\n' > "$D/impl.c"
if ! cc -fsyntax-only -I. "$D/impl.c" > "$D/impl.log" 2>&1 && grep -m1 error "$D/impl.log" | grep -q "implementation is not in this file"; then
    ok "a companion's implementation without train.h's: its #error says where TRAIN_IMPLEMENTATION goes"
else
    bad "companion implementation without train.h's: $(grep -m2 error "$D/impl.log" | tr '\n' ' ')"
fi

# included too late: one clear line (glibc only: elsewhere POSIX is visible by default)
if printf '#include <stdio.h>\n' | cc -E -dM -x c - 2>/dev/null | grep -q __GLIBC__; then
    { printf '#include <stdio.h>\n'; cat "$D/first.c"; } > "$D/late.c"
    cc -std=c99 -fsyntax-only -I. "$D/late.c" > "$D/late.log" 2>&1
    if grep -m1 'error' "$D/late.log" | grep -q 'train.h: POSIX 2008 is off in this file'; then
        ok "train.h after <stdio.h> under -std=c99: the first error is train.h's, saying what to do"
    else
        bad "train.h after <stdio.h> under -std=c99: $(grep -m3 error "$D/late.log" | tr '\n' ' ')"
    fi
else
    echo "SKIP the late-include check: not glibc"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
