#!/usr/bin/env bash
# tests/test_doc_snippets.sh - every C snippet in README.md and docs/*.md
# compiles (gcc -std=c99 -Wall -Werror, against the kit's declarations).
#
# A ```c block that starts with #define TRAIN_IMPLEMENTATION is a whole
# program: it is compiled as written. Any other ```c block is a fragment
# of a function body: all fragments go into one file, each in a function
# of its own, after a prelude that declares the names they share (model,
# m, opt, loss, lr, step, ... and the user's model function my_forward /
# gpt2_forward); a fragment that defines functions itself is marked with
# the line <!-- snippet: file scope --> above its fence and goes at file
# scope. #line directives make an error point at the .md file and line.
# Fragments use train_nccl.h's declarations too (CPU-only communicator).
set -u
cd "$(dirname "$0")/.."
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
CC=${CC:-cc}
D=$(mktemp -d /tmp/test_doc_snippets.XXXXXX)
trap 'rm -rf "$D"' EXIT
FLAGS="-std=c99 -Wall -Wextra -Werror -Wno-unused-variable -Wno-unused-but-set-variable -Wno-unused-function
 -Wno-unused-parameter -Wno-uninitialized -Wno-maybe-uninitialized -Wno-unknown-warning-option -O0 -I. -c"
# the extras the core's companions live in, where they exist (extras/train_*.h)
EXTRAS=""
for h in extras/train_*.h; do [ -e "$h" ] && EXTRAS="$EXTRAS#include \"$h\"
"; done

# --- extract: whole programs to $D/prog_N.c, fragments into $D/frag.c
cat > "$D/frag.c" <<EOF
#include "train.h"
#define TRAIN_NCCL_CPU_ONLY
#include "train_nccl.h"
$EXTRAS
/* the names the fragments share */
static trn_model model, m;
static trn_adamw opt;
static trn_rng rng;
static trn_meta meta;
static trn_ddp ddp;
static float lr, norm, val_loss, tok_per_s;
static long long step, steps, total;
static const float *x, *y, *x_val, *y_val; /* the batch, as the model function takes it */
static int B, T, K, resume;
static const char *line;
static trn_tensor *loss;
static trn_tensor *my_forward(trn_model *mm, ...) { (void)mm; return NULL; } /* your model */
static trn_tensor *gpt2_forward(trn_model *mm, ...) { (void)mm; return NULL; }
EOF
python3 - "$D" README.md docs/*.md <<'EOF' || { echo "FAIL - extracting the snippets"; echo "0 passed, 1 failed"; exit 1; }
import sys, re
d = sys.argv[1]
n_prog = n_frag = 0
frag = open(d + "/frag.c", "a")
listing = open(d + "/list", "w")
for path in sys.argv[2:]:
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```c":
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            body = lines[start:j]
            scope = "file" if i > 0 and "<!-- snippet: file scope -->" in lines[i - 1] else "body"
            where = "%s:%d" % (path, start)
            if any(l.startswith("#define TRAIN_IMPLEMENTATION") for l in body):
                n_prog += 1
                name = "%s/prog_%d.c" % (d, n_prog)
                # compiled against the declarations only: the implementation is the kit's
                src = ['#line %d "%s"' % (start + 1, path)]
                src += ["" if l.startswith("#define TRAIN_IMPLEMENTATION") else l for l in body]
                open(name, "w").write("\n".join(src) + "\n")
                listing.write("prog %s %s\n" % (name, where))
            else:
                n_frag += 1
                frag.write('\n#line %d "%s"\n' % (start + 1, path))
                if scope == "file":
                    frag.write("\n".join(body) + "\n")
                else:
                    frag.write("void snippet_%d(void) {\n" % n_frag)
                    frag.write('#line %d "%s"\n' % (start + 1, path))
                    frag.write("\n".join(body) + "\n}\n")
                listing.write("frag %s\n" % where)
            i = j
        i += 1
frag.close()
print("%d whole programs, %d fragments" % (n_prog, n_frag))
EOF

n_frag=$(grep -c '^frag ' "$D/list")
while read -r kind file where; do
    [ "$kind" = prog ] || continue
    if $CC $FLAGS -o "$D/prog.o" "$file" > "$D/log" 2>&1; then ok "$where: a whole program compiles"
    else bad "$where: $(grep -m3 -E 'error' "$D/log" | tr '\n' ' ')"; fi
done < "$D/list"
if [ "$n_frag" -gt 0 ]; then
    if $CC $FLAGS -pthread -o "$D/frag.o" "$D/frag.c" > "$D/log" 2>&1; then ok "$n_frag fragments compile ($(grep '^frag ' "$D/list" | cut -d' ' -f2 | tr '\n' ' '))"
    else bad "fragments: $(grep -m5 -E 'error' "$D/log" | tr '\n' ' ')"; fi
fi
# the README's first screen keeps its contract
if sed -n 1,40p README.md | grep -qF './build.sh && ./examples/gpt2' && sed -n 1,40p README.md | grep -qF './build.sh test'; then
    ok "README.md: the two commands are in its first 40 lines"
else bad "README.md: the two commands are not in its first 40 lines"; fi
if sed -n 1,40p README.md | grep -q 'trn_backward'; then ok "README.md: the step is in its first 40 lines"
else bad "README.md: the step is not in its first 40 lines"; fi
size=$(wc -c < README.md)
if [ "$size" -le 25600 ]; then ok "README.md is $size bytes (<= 25 KiB)"; else bad "README.md is $size bytes (> 25 KiB)"; fi
# every docs/ link in the README and the docs points at a file that exists
for f in README.md docs/*.md; do
    for link in $(grep -o '](\(docs/\)\?[A-Za-z0-9_./-]*\.md' "$f" | sed 's/^](//'); do
        case "$f" in docs/*) target="docs/$link"; [ -e "$target" ] || target="$link" ;; *) target=$link ;; esac
        [ "${link#../}" != "$link" ] && target="${link#../}"
        if [ ! -e "$target" ]; then bad "$f links to $link, which does not exist"; fi
    done
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
