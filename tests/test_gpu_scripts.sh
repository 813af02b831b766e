#!/usr/bin/env bash
# tests/gpu/ keeps working without a GPU: CI never runs tests/gpu/run.sh, so
# this checks what can be checked on a CPU:
#   - run.sh, prebuild.sh and summary.sh parse (bash -n), the two PyTorch
#     scripts compile (python3 -m py_compile); run.sh without a GPU stops at
#     once with exit 2
#   - run.sh --dry-run: its parts in order of value, at most 8 files back
#     (report.md, summary.json that parses, logs.tar.gz), the prebuilt
#     binaries' check (current / stale / missing, from MANIFEST's
#     fingerprints), and the report written whatever happens: a part that
#     fails, one that hangs past the deadline, a SIGTERM mid-part
#   - the summary's patterns match the lines the programs print: the format
#     strings are still in their sources, and a log in those formats (and a
#     missing one) gives the table it should
#   - where `import torch` works: torch_gpt2.py's CPU mode trains the tiny
#     preset (loss starts at ln V and falls) and its output feeds the summary;
#     where `import lightning` works too: lightning_linear.py's CPU mode runs
#     the seed's experiment at width 1000. Otherwise those parts are skipped,
#     with a note.
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { if eval "$1"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $2"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PYTHONPYCACHEPREFIX="$tmp/pycache" # py_compile writes nothing into the tree

# --- syntax ------------------------------------------------------------------
for f in tests/gpu/run.sh tests/gpu/summary.sh tests/gpu/prebuild.sh tests/gpu/programs.sh; do
    ok 'bash -n "$f"' "bash -n $f"
done
for f in tests/gpu/torch_gpt2.py tests/gpu/lightning_linear.py; do
    ok 'python3 -m py_compile "$f"' "python3 -m py_compile $f"
done
if ! nvidia-smi -L >/dev/null 2>&1; then
    out=$(bash tests/gpu/run.sh "$tmp/r" 2>&1); rc=$?
    ok '[ $rc = 2 ] && echo "$out" | grep -q "no GPU" && [ ! -e "$tmp/r" ]' \
        "run.sh without a GPU: exit 2, one line, no report (exit $rc: $out)"
fi

# --- run.sh --dry-run ----------------------------------------------------------
. tests/gpu/programs.sh
pre="$tmp/pre"; mkdir -p "$pre"
progs=$(gpu_programs)
stale=gpt2_cuda missing=test_cuda_kernels_gpu
for p in $progs; do # fake binaries: current fingerprints, but one stale and one missing
    [ "$p" = "$missing" ] && continue
    cp "$(type -P true)" "$pre/$p"
    h=$(src_hash "$(gpu_source "$p")"); [ "$p" = "$stale" ] && h=0000000000000000
    echo "$p $(gpu_source "$p") $h" >>"$pre/MANIFEST"
done
out=$(bash tests/gpu/run.sh --dry-run --prebuilt "$pre" "$tmp/d" 2>&1); rc=$?
ok '[ $rc = 0 ]' "run.sh --dry-run exits 0 (exit $rc: $(echo "$out" | tail -2))"
files=$(ls "$tmp/d" | tr '\n' ' ')
ok '[ "$files" = "logs.tar.gz report.md summary.json " ]' "--dry-run writes report.md, summary.json, logs.tar.gz (got: $files)"
ok '[ "$(ls "$tmp/d" | wc -l)" -le 8 ]' "at most 8 files back"
ok 'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d[\"dry_run\"] == 1 and d[\"failed\"] == 0" "$tmp/d/summary.json"' \
    "summary.json parses: $(head -c 200 "$tmp/d/summary.json")"
names=$(python3 -c 'import json,sys; print("\n".join(p["name"] for p in json.load(open(sys.argv[1]))["parts"]))' "$tmp/d/summary.json" 2>/dev/null)
order_ok=1 last=0
for want in "probe" "build 2 programs" "test_cuda_kernels_gpu" "gpt2_cuda bf16" "gpt2_cuda bf16 --attention materialized" \
            "torch bf16" "ncu top 10" "compute-sanitizer memcheck" "compute-sanitizer racecheck" "gpt2_cuda --tf32 1" \
            "gpt2_cuda --tf32 0" "torch bf16 --compile"; do
    n=$(echo "$names" | grep -n -m1 "^$want" | cut -d: -f1)
    if [ -z "$n" ] || [ "$n" -le "$last" ]; then order_ok=0; echo "part '$want' missing or out of order (line ${n:-none} after $last)"; fi
    last=${n:-$last}
done
ok '[ $order_ok = 1 ]' "the parts run in order of value"
n_gpu=$(ls tests/*_gpu.cu | wc -l); n_ran=$(echo "$names" | grep -c '_gpu$')
ok '[ "$n_gpu" = "$n_ran" ]' "every tests/*_gpu.cu is a part ($n_ran of $n_gpu)"
ok 'grep -q "^- $stale: build here: stale" "$tmp/d/report.md" && grep -q "^- $missing: build here: not prebuilt" "$tmp/d/report.md"' \
    "a stale and a missing binary are built on the GPU: $(grep "^- \($stale\|$missing\):" "$tmp/d/report.md" | tr '\n' ' ')"
ok '[ "$(grep -c ": prebuilt (" "$tmp/d/report.md")" = "$(($(echo "$progs" | wc -w) - 2))" ]' \
    "the others are used as prebuilt: $(grep -c ": prebuilt (" "$tmp/d/report.md")"
ok 'grep -q "dry run: build_missing $missing $stale\$" "$tmp/d/report.md" || grep -q "dry run: build_missing $stale $missing\$" "$tmp/d/report.md"' \
    "the build part builds exactly those two"
ok 'tar -tzf "$tmp/d/logs.tar.gz" | grep -q "logs/probe.log"' "logs.tar.gz holds each part's log"
# a part that fails: the rest still run, the report and summary say so, exit 1
out=$(GPU_RUN_FAKE="gpt2_cuda bf16=echo boom; exit 3" bash tests/gpu/run.sh --dry-run --prebuilt "$pre" "$tmp/f" 2>&1); rc=$?
ok '[ $rc = 1 ] && grep -q "### gpt2_cuda bf16: fail (exit 3" "$tmp/f/report.md" && grep -q "^boom" "$tmp/f/report.md" && grep -q "### torch bf16: pass" "$tmp/f/report.md"' \
    "a failing part: exit 1, the later parts still run, its tail in the report (exit $rc)"
ok 'grep -q "\"failed\": 1" "$tmp/f/summary.json"' "summary.json counts the failure"
# a part that hangs past the deadline: killed at its limit, the rest skipped, the report written
t0=$(date +%s)
out=$(GPU_RUN_RESERVE=1 GPU_RUN_MIN_PART=2 GPU_RUN_FAKE="probe=sleep 60" bash tests/gpu/run.sh --dry-run --deadline 5 --prebuilt "$pre" "$tmp/h" 2>&1); rc=$?
dt=$(($(date +%s) - t0))
ok '[ $rc = 1 ] && [ $dt -lt 45 ] && grep -q "### probe: timeout" "$tmp/h/report.md" && grep -q "skipped (" "$tmp/h/report.md"' \
    "a hung part is stopped by the deadline (${dt}s), the rest skipped, the report written (exit $rc)"
ok 'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d[\"skipped\"] > 5" "$tmp/h/summary.json"' "summary.json counts the skipped parts"
# SIGTERM mid-part (the lease ends): the trap still writes everything
GPU_RUN_FAKE="probe=sleep 60" bash tests/gpu/run.sh --dry-run --prebuilt "$pre" "$tmp/k" >/dev/null 2>&1 &
pid=$!; sleep 2; kill -TERM $pid; wait $pid; rc=$?
ok '[ $rc = 130 ] && [ -s "$tmp/k/report.md" ] && [ -s "$tmp/k/summary.json" ] && [ -s "$tmp/k/logs.tar.gz" ]' \
    "SIGTERM mid-part: exit 130, report, summary and logs still written (exit $rc)"

# --- the summary's patterns against the programs' own format strings ---------
has() { grep -qF -- "$2" "$1"; }
ok 'has bench/gpt2_cuda.cu "\"\\nstep %.1f ms median"' "bench/gpt2_cuda prints 'step X ms median'"
ok 'has bench/gpt2_cuda.cu "\"%.0f tokens/s "' "bench/gpt2_cuda prints 'N tokens/s'"
ok 'has bench/gpt2_cuda.cu "\"MFU %.1f%% of"' "bench/gpt2_cuda prints 'MFU X% of'"
ok 'has bench/gpt2_cuda.cu "the ledger'"'"'s peak %.3f GB (%.2f GiB)"' "bench/gpt2_cuda prints the ledger's peak in GB and GiB"
ok 'has bench/gpt2_cuda.cu "\"bench/gpt2_cuda: %s, %.1f GB"' "bench/gpt2_cuda's first line names the device"
ok 'has bench/gpt2_cuda.cu "cudaMemGetInfo %.3f GB \"" && has bench/gpt2_cuda.cu "\"(total - free"' \
    "bench/gpt2_cuda prints cudaMemGetInfo X GB (total - free"
ok 'has examples/linear_memory.c "\"kit total\""' "examples/linear_memory prints its 'kit total' peak"
ok 'has tests/gpu/torch_gpt2.py "\"step %.1f ms median"' "torch_gpt2.py prints 'step X ms median'"
ok 'has tests/gpu/torch_gpt2.py "\"%.0f tokens/s "' "torch_gpt2.py prints 'N tokens/s'"
ok 'has tests/gpu/torch_gpt2.py "\"MFU %.1f%% of"' "torch_gpt2.py prints 'MFU X% of'"
ok 'has tests/gpu/torch_gpt2.py "max_memory_allocated %.3f GB" && has tests/gpu/torch_gpt2.py "max_memory_reserved %.3f GB"' \
    "torch_gpt2.py prints max_memory_allocated and max_memory_reserved in GB"
ok 'has tests/gpu/torch_gpt2.py "cudaMemGetInfo %.3f GB (total - free"' "torch_gpt2.py prints cudaMemGetInfo X GB (total - free"
ok 'has tests/gpu/lightning_linear.py "max_memory_allocated %.4f GiB"' "lightning_linear.py prints max_memory_allocated in GiB"

# logs in those formats (the numbers made up), and one run that left no log
cat >"$tmp/kit.log" <<'EOF'
bench/gpt2_cuda: NVIDIA H100 80GB HBM3, 85.0 GB, precision bf16; median of 10 steps after a warm-up step
warm-up step: 812 ms, loss 11.010 (ln V = 10.825)

step 41.2 ms median, 41.9 ms mean  (on the GPU: forward+loss 12.0, backward 25.0, clip+AdamW 3.1; one host wait per step)
397672 tokens/s   311.1 TFLOP/s achieved (FLOPs as bench/gpt2: 6 x matmul params x tokens + attention)
MFU 31.4% of 989.4 TFLOP/s (bf16 tensor-core peak, dense, NVIDIA datasheet)
loss 11.010 -> 9.870 over 11 steps (last gradient norm 1.234)

device memory for weights (+bf16 copy)+grads+AdamW+activations+act grads: estimated 7.512 GB, the ledger's peak 7.498 GB (6.98 GiB)
device memory in use now: the ledger 7.600 GB (runtime included), cudaMemGetInfo 8.321 GB (total - free; 0.520 GB before the model)
EOF
cat >"$tmp/torch.log" <<'EOF'
step 55.0 ms median, 56.1 ms mean  (one host wait per step)
297891 tokens/s   233.0 TFLOP/s achieved (FLOPs as bench/gpt2: 6 x matmul params x tokens + attention)
MFU 23.5% of 989.4 TFLOP/s (bf16 tensor-core peak, dense, NVIDIA datasheet)

device memory: torch.cuda.max_memory_allocated 21.345 GB (19.88 GiB), max_memory_reserved 24.000 GB (22.35 GiB)
device memory in use now: cudaMemGetInfo 25.001 GB (total - free; the CUDA context and every library's workspace included)
EOF
cat >"$tmp/lm.log" <<'EOF'
== Peaks ==
  weights            2.9804 GiB     3.2002 GB
  kit total         11.9250 GiB    12.8043 GB   (4 P expected: 4.001x parameter bytes)
EOF
cat >"$tmp/light.log" <<'EOF'
peak GPU memory: torch.cuda.max_memory_allocated 17.8811 GiB (19.200 GB) = 6.00 x P; the seed's Lightning run: 18.79 GiB
EOF
sum=$(bash tests/gpu/summary.sh --kit "kit bf16" "$tmp/kit.log" --torch "torch bf16" "$tmp/torch.log" \
      --kit "kit fp32" "$tmp/none.log" --linear-kit "$tmp/lm.log" --linear-lightning "$tmp/light.log" 2>&1); rc=$?
ok '[ $rc = 0 ]' "summary.sh exits 0 (exit $rc: $sum)"
ok 'echo "$sum" | grep -qxF "| kit bf16 | 41.2 | 397672 | 31.4% | 7.498 | - | 8.321 |"' "kit row: $(echo "$sum" | grep 'kit bf16')"
ok 'echo "$sum" | grep -qxF "| torch bf16 | 55.0 | 297891 | 23.5% | 21.345 | 24.000 | 25.001 |"' \
    "torch row: $(echo "$sum" | grep 'torch bf16')"
ok 'echo "$sum" | grep -qxF "| kit fp32 | - | - | - | - | - | - |"' "a run without a log: a row of '-'"
ok 'echo "$sum" | grep -q "^| kit: examples/linear_memory_cuda.* | 11.9250 |$"' "linear experiment: the kit's peak"
ok 'echo "$sum" | grep -q "^| Lightning on this GPU.* | 17.8811 |$"' "linear experiment: Lightning's peak"
ok 'echo "$sum" | grep -q "^| seed: .* | 18.79 |$"' "linear experiment: the seed's figure"
sum=$(bash tests/gpu/summary.sh --targets "$tmp/kit.log")
ok 'echo "$sum" | grep -q "this GPU: NVIDIA H100 80GB HBM3"' "targets: the device named"
ok 'echo "$sum" | grep -qF "tokens/s 397672 >= 400000: FAIL; MFU 31.4% >= 40%: FAIL; the ledger'"'"'s peak 6.98 GiB <= 8 GiB: PASS"' \
    "targets judged: $(echo "$sum" | tail -1)"
sum=$(bash tests/gpu/summary.sh --targets "$tmp/none.log")
ok 'echo "$sum" | tail -1 | grep -q "tokens/s - >= 400000: no figure"' "targets without a log: no figure"
bash tests/gpu/summary.sh --kit "only a label" >/dev/null 2>&1; rc=$?
ok '[ $rc = 2 ]' "summary.sh: --kit without a log exits 2 (got $rc)"

# --- the CPU modes, where PyTorch (and Lightning) are installed --------------
if python3 -c 'import torch' 2>/dev/null; then
    t="python3 tests/gpu/torch_gpt2.py --device cpu --model tiny --batch 2 --seq 64 --steps 3 --threads 2"
    $t >"$tmp/t.log" 2>&1; rc=$?
    ok '[ $rc = 0 ]' "torch_gpt2.py CPU mode exits 0 (exit $rc: $(tail -3 "$tmp/t.log"))"
    first=$(sed -n 's/^loss \([0-9.]*\) -> \([0-9.]*\) over.*/\1/p' "$tmp/t.log")
    last=$(sed -n 's/^loss \([0-9.]*\) -> \([0-9.]*\) over.*/\2/p' "$tmp/t.log")
    # random tokens at init: the loss is ln 256 = 5.545 (give or take the init's spread)
    ok 'awk -v f="$first" "BEGIN{exit !(f != \"\" && f > 5.4 && f < 5.7)}"' "first loss $first is about ln 256"
    ok 'awk -v f="$first" -v l="$last" "BEGIN{exit !(l != \"\" && l < f)}"' "the loss falls: $first -> $last"
    ok 'grep -q "^host memory: peak RSS" "$tmp/t.log"' "CPU mode reports host memory"
    sum=$(bash tests/gpu/summary.sh --torch "torch cpu" "$tmp/t.log")
    ok 'echo "$sum" | grep -q "^| torch cpu | [0-9.]* | [0-9]* | - | - | - | - |$"' \
        "the summary reads the real output: $(echo "$sum" | grep 'torch cpu')"
    $t --precision fp32 >"$tmp/t32.log" 2>&1; rc=$?
    ok '[ $rc = 0 ] && grep -q "precision fp32" "$tmp/t32.log"' "torch_gpt2.py --precision fp32 on the CPU (exit $rc)"
    python3 tests/gpu/torch_gpt2.py --device cpu --model tiny --batch 0 >"$tmp/bad.log" 2>&1; rc=$?
    ok '[ $rc != 0 ] && [ "$(wc -l <"$tmp/bad.log")" = 1 ]' "--batch 0: one line, non-zero exit (exit $rc)"
    python3 tests/gpu/torch_gpt2.py --device cpu --model tiny --seq 65 >"$tmp/bad.log" 2>&1; rc=$?
    ok '[ $rc != 0 ] && grep -q "longer than the model" "$tmp/bad.log"' "--seq past the context is refused (exit $rc)"

    if python3 -c 'import lightning' 2>/dev/null || python3 -c 'import pytorch_lightning' 2>/dev/null; then
        python3 tests/gpu/lightning_linear.py --device cpu --width 1000 >"$tmp/l.log" 2>&1; rc=$?
        ok '[ $rc = 0 ]' "lightning_linear.py CPU mode exits 0 (exit $rc: $(tail -3 "$tmp/l.log"))"
        # 2 steps: on the device, DDP set up, then forward + loss, backward, optimizer step per step
        n=$(grep -cE '^  (on the device|DDP set up|forward \+ loss|backward|optimizer step) ' "$tmp/l.log")
        ok '[ "$n" = 8 ]' "one memory row per line of the step: $n of 8"
        ok 'grep -q "^  optimizer step  *1  *18.79 " "$tmp/l.log"' "the seed's 18.79 GiB beside the first optimizer step"
        ok 'grep -q "^loss after 2 steps [0-9]" "$tmp/l.log" && grep -q "^peak host memory: RSS" "$tmp/l.log"' \
            "a finite loss and the peak"
    else
        echo "note: 'import lightning' does not work here: lightning_linear.py's CPU run skipped (pip install lightning)"
    fi
else
    echo "note: 'import torch' does not work here: the CPU runs of torch_gpt2.py and lightning_linear.py skipped"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
