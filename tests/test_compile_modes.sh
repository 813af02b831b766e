#!/usr/bin/env bash
# tests/test_compile_modes.sh - a new user's first program compiles with no
# warning however it is compiled: gcc and clang, -std=c99 and -std=c11,
# -Wall -Wextra -pedantic -Werror, with and without -fopenmp, TRAIN_STATIC, and as C++
# (g++, clang++: -std=c++11 and c++17). No feature-test macros on the
# command line: train.h turns POSIX on itself. Each build is also run.
# Then: a file that includes <stdio.h> before train.h under -std=c99 gets,
# as its first error, train.h's #error saying what to do (glibc), rather
# than a pile of implicit declarations. A missing compiler is a SKIP line, not a pass.
set -u
cd "$(dirname "$0")/.."
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
D=$(mktemp -d /tmp/test_compile_modes.XXXXXX)
trap 'rm -rf "$D"' EXIT

# the README's "your own program", in C89-compatible style so that -std=c99
# -pedantic sees only train.h's constructs
cat > "$D/first.c" <<'EOF'
#define TRAIN_IMPLEMENTATION
#include "train.h"

int main(int argc, char **argv) {
    trn_model m;
    trn_adamw opt;
    trn_rng rng;
    trn_tensor *w, *b, *x, *loss;
    float xs[4 * 3], ys[4 * 2];
    int i, step, shape[2];
    (void)argc;
    trn_omp_wait_passive(argv);
    for (i = 0; i < 12; i++) xs[i] = (float)i / 12.0f;
    for (i = 0; i < 8; i++) ys[i] = (float)(i % 3);
    trn_model_init(&m, NULL);
    w = trn_param2(&m, "fc.weight", 2, 3);
    b = trn_param1(&m, "fc.bias", 2);
    if (trn_model_alloc(&m) != TRN_OK) return 1;
    trn_rng_seed(&rng, 1);
    trn_init_normal(&m, w, 0.0f, 0.5f, &rng);
    trn_adamw_init(&opt, NULL);
    shape[0] = 4; shape[1] = 3;
    for (step = 0; step < 3; step++) {
        trn_zero_grad(&m);
        trn_reset(&m);
        x = trn_input(&m, "x", 2, shape, xs);
        loss = trn_mse(&m, trn_linear(&m, x, w, b), ys);
        trn_backward(&m, loss);
        trn_clip_grad_norm(&m, 1.0f);
        if (trn_adamw_step(&opt, &m, 0.01f) != TRN_OK) return 1;
    }
    printf("loss %.4f\n", trn_item(&m, loss));
    trn_adamw_free(&opt);
    trn_model_free(&m);
    return 0;
}
EOF
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
    if "$D/prog" > "$D/out" 2>&1 && grep -q '^loss ' "$D/out"; then ok "$what: no warning, runs"; else bad "$what: runs: $(head -3 "$D/out")"; fi
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
