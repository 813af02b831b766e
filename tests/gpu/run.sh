#!/usr/bin/env bash
# tests/gpu/run.sh - the GPU check: everything that needs a real GPU, in
# about 8 minutes, and its data back whatever fails.
#
#   bash tests/gpu/prebuild.sh                  first, HERE (nvcc, no GPU needed):
#                                               every CUDA program for sm_90 into gpu-prebuilt/
#   bash tests/gpu/run.sh [OUTDIR]              on the GPU machine ($OUT, else gpu-report/)
#   bash tests/gpu/run.sh --dry-run [OUTDIR]    anywhere: the plan, the binaries' check and the
#                                               report, every command shown instead of run (CI)
# Options: --prebuilt DIR (gpu-prebuilt), --deadline SECONDS (480).
#
# A lent GPU is rare and brief (15 minutes of machine time, its start
# included; 10 minutes a command; 8 files back), so:
#   - binaries come prebuilt (tests/gpu/prebuild.sh, carried along); one is
#     used when its fingerprint (tests/gpu/programs.sh: the source and the
#     headers) matches this tree and its libraries resolve (ldd); whatever
#     is missing or stale is built here, in parallel, in one part;
#   - one deadline for the whole (--deadline, default 480 s), a time limit
#     per part (timeout), cut to what is left; a part that would start with
#     under 25 s left is skipped and says so;
#   - a trap writes the report, the summary and the logs archive on any
#     exit (a part that fails, hangs or is killed, Ctrl-C, the deadline);
#   - the parts run in order of value:
#       1 probe        the GPU, driver, nvcc, torch, ncu, compute-sanitizer;
#                      the two ceilings measured (device copy, bf16 8192^3
#                      GEMM, through torch)
#       2 build        the programs not prebuilt (or stale), for this GPU
#       3 correctness  every tests/*_gpu.cu program (the GPU twins of the
#                      kernel tests, bf16 GEMM/ops/attention ...)
#       4 bench bf16   bench/gpt2_cuda --precision bf16 --profile-csv: the
#                      step's time and the time ledger MEASURED per launch
#                      site (sites.csv; bench/gpt2_plan is its prediction)
#       5 old vs new   the same step with each option of bench/gpt2_cuda
#                      --help that selects an old path (a line starting
#                      "  --old-"), with --attention materialized, and with
#                      --dq-atomic (FA2's atomic dQ)
#       6 torch bf16   tests/gpu/torch_gpt2.py (SDPA flash, fused AdamW),
#                      and torch.profiler's top kernels (torch_profile.txt)
#       7 ncu          Nsight Compute (--clock-control none) on a window of
#                      the bf16 steps' kernels (NCU_SKIP, NCU_COUNT: about one
#                      step's ~330 launches, inside the 2nd and 3rd of 4
#                      steps); the 10 costliest by device time (ncu.csv)
#       8 sanitizers   compute-sanitizer memcheck and racecheck on the bf16
#                      step at a small shape (the bf16 attention kernels)
#       9 fp32/tf32    bench/gpt2_cuda --tf32 1 and --tf32 0: regressions
#      10 the rest     torch.compile, --recompute, linear_memory_cuda and
#                      Lightning, only while time is left
#   - at most 8 files in OUTDIR: report.md, summary.json (one object per
#     part: name, status, seconds), sites.csv, ncu.csv, torch_profile.txt,
#     logs.tar.gz (every part's full log).
# Knobs: BENCH_STEPS (10), NCU_SKIP (700), NCU_COUNT (340), NVCC, ARCH.
# tests/test_gpu_scripts.sh runs --dry-run in CI.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/programs.sh

dry=0 pre=gpu-prebuilt deadline=480 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --prebuilt) pre=${2:?--prebuilt needs a folder}; shift ;;
        --deadline) deadline=${2:?--deadline needs seconds}; shift ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//; /^set -u/d'; exit 0 ;;
        -*) echo "tests/gpu/run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) out=$1 ;;
    esac
    shift
done
case "$deadline" in ''|*[!0-9]*) echo "tests/gpu/run.sh: --deadline: whole seconds, not '$deadline'" >&2; exit 2 ;; esac
out=${out:-${OUT:-gpu-report}}
NVCC=${NVCC:-nvcc}
if [ "$dry" = 0 ]; then
    nvidia-smi -L >/dev/null 2>&1 || { echo "tests/gpu/run.sh: no GPU (nvidia-smi -L failed); --dry-run checks the script"; exit 2; }
fi
mkdir -p "$out" || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-run.XXXXXX") || exit 2
logs=$work/logs bin=$work/bin
mkdir -p "$logs" "$bin"
t_start=$(date +%s)
report=$out/report.md
parts_json=()  # one JSON object per part
n_pass=0 n_fail=0 n_skip=0

left() { echo $((deadline - ($(date +%s) - t_start))); }
slug() { echo "$1" | tr -c 'a-zA-Z0-9_\n-' _; }
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n')"; }

# the files that come back, written on any exit
cur_pid=""     # the part running now (killed if the script is)
reserve=${GPU_RUN_RESERVE:-20} min_part=${GPU_RUN_MIN_PART:-25} # seconds kept for the report; the least a part gets
finish() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$cur_pid" ] && kill -TERM "$cur_pid" 2>/dev/null
    {
        printf '\n## Summary\n\n%d passed, %d failed, %d skipped; %ds of a %ds deadline%s\n' "$n_pass" "$n_fail" \
            "$n_skip" $(($(date +%s) - t_start)) "$deadline" "$([ "$dry" = 1 ] && echo ' (dry run: nothing ran)')"
        [ -s "$work/table.md" ] && { printf '\n'; cat "$work/table.md"; }
    } >>"$report"
    {
        printf '{"dry_run": %d, "deadline_s": %d, "elapsed_s": %d, "passed": %d, "failed": %d, "skipped": %d, "parts": [' \
            "$dry" "$deadline" $(($(date +%s) - t_start)) "$n_pass" "$n_fail" "$n_skip"
        local i
        for ((i = 0; i < ${#parts_json[@]}; i++)); do
            [ "$i" -gt 0 ] && printf ', '
            printf '%s' "${parts_json[$i]}"
        done
        printf ']}\n'
    } >"$out/summary.json"
    tar -czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null
    rm -rf "$work"
    echo "tests/gpu/run.sh: $n_pass passed, $n_fail failed, $n_skip skipped; report in $report"
    [ "$rc" = 0 ] && [ "$n_fail" != 0 ] && rc=1
    exit "$rc"
}
trap finish EXIT
trap 'echo "tests/gpu/run.sh: interrupted"; exit 130' INT TERM

record() { # record NAME STATUS SECONDS LIMIT
    parts_json+=("{\"name\": $(json_str "$1"), \"status\": \"$2\", \"seconds\": $3, \"limit_s\": $4}")
    case "$2" in pass) n_pass=$((n_pass + 1)) ;; skipped) n_skip=$((n_skip + 1)) ;; *) n_fail=$((n_fail + 1)) ;; esac
}
# part NAME LIMIT COMMAND...: runs the command under the smaller of LIMIT
# and what the deadline leaves (less $reserve s for the report), logs it, adds its
# tail to the report. In a dry run the command is shown, not run.
# GPU_RUN_FAKE="NAME=CMD" (tests only) runs CMD instead, to check the report
# when a part fails or hangs.
part() {
    local name=$1 limit=$2 l t0 rc status log
    shift 2
    l=$(($(left) - reserve))
    log=$logs/$(slug "$name").log
    if [ "$l" -lt "$min_part" ]; then
        record "$name" skipped 0 "$limit"
        printf '### %s: skipped (%ds left before the deadline)\n\n' "$name" "$((l + reserve))" >>"$report"
        echo "== $name: skipped, the deadline is near"
        return 1
    fi
    [ "$limit" -gt "$l" ] && limit=$l
    echo "== $name (limit ${limit}s)"
    t0=$(date +%s)
    local fake=${GPU_RUN_FAKE:-}
    # in the background and waited for: a signal to the script is handled at once
    if [ -n "$fake" ] && [ "${fake%%=*}" = "$name" ]; then
        timeout -k 5 "$limit" bash -c "${fake#*=}" >"$log" 2>&1 &
    elif [ "$dry" = 1 ]; then
        printf 'dry run: %s\n' "$*" >"$log" &
    else # through bash, so that a part may be one of this script's functions (exported below)
        timeout -k 5 "$limit" bash -c '"$@"' part "$@" >"$log" 2>&1 &
    fi
    cur_pid=$!
    wait "$cur_pid"; rc=$?
    cur_pid=""
    case $rc in 0) status=pass ;; 124|137) status=timeout ;; *) status=fail ;; esac
    record "$name" "$status" $(($(date +%s) - t0)) "$limit"
    printf '### %s: %s (exit %d, %ds of %ds)\n\n```\n' "$name" "$status" "$rc" $(($(date +%s) - t0)) "$limit" >>"$report"
    tail -30 "$log" >>"$report"
    printf '```\n\n' >>"$report"
    [ "$status" = pass ] || echo "   $status (exit $rc): $(tail -1 "$log")"
    [ "$status" = pass ]
}
section() { printf '\n## %s\n\n' "$1" >>"$report"; }
have() { [ "$dry" = 0 ] && command -v "$1" >/dev/null 2>&1; }
torch_cuda() { [ "$dry" = 0 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; }

{ echo "# train.h on a GPU"; echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$([ "$dry" = 1 ] && echo ', DRY RUN')"
  echo; } >"$report"

# --- 1: the machine, and its two ceilings ------------------------------------
section "1. Probe"
cat >"$work/ceilings.py" <<'EOF'
import torch, time
d = torch.device("cuda")
def timed(f, n):
    f(); torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n): f()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / n / 1e3
a = torch.empty(1 << 30, dtype=torch.uint8, device=d).random_(); b = torch.empty_like(a)
s = timed(lambda: b.copy_(a), 20)
print("device copy: %.2f TB/s (1 GiB, read + write counted)" % (2 * a.numel() / s / 1e12))
x = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16); y = torch.randn_like(x)
s = timed(lambda: x @ y, 20)
print("bf16 GEMM 8192^3: %.0f TFLOP/s (random data)" % (2 * 8192**3 / s / 1e12))
torch.backends.cuda.matmul.allow_tf32 = True
x = x.float(); y = y.float()
s = timed(lambda: x @ y, 10)
print("tf32 GEMM 8192^3: %.0f TFLOP/s (random data)" % (2 * 8192**3 / s / 1e12))
torch.backends.cuda.matmul.allow_tf32 = False
s = timed(lambda: x @ y, 3)
print("fp32 GEMM 8192^3: %.1f TFLOP/s (random data)" % (2 * 8192**3 / s / 1e12))
EOF
probe() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,clocks.sm,clocks.max.sm --format=csv
    "$NVCC" --version | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
    for t in ncu compute-sanitizer; do printf '%s: ' "$t"; command -v "$t" >/dev/null && "$t" --version | tail -1 || echo none; done
    if torch_cuda; then python3 "$work/ceilings.py"; fi
}
export NVCC work logs bin out dry GPU_ARCH
export -f probe torch_cuda
part "probe" 60 probe

# --- 2: binaries: prebuilt where current, built here where not ---------------
section "2. Binaries"
missing=()
for p in $(gpu_programs); do
    src=$(gpu_source "$p")
    want=$(src_hash "$src")
    got=$(awk -v n="$p" '$1 == n { print $3 }' "$pre/MANIFEST" 2>/dev/null)
    why=""
    if [ ! -x "$pre/$p" ]; then why="not prebuilt"
    elif [ "$got" != "$want" ]; then why="stale (prebuilt from ${got:-?}, the tree is $want)"
    elif ldd "$pre/$p" 2>&1 | grep -q 'not found'; then why="its libraries do not resolve here: $(ldd "$pre/$p" 2>&1 | grep 'not found' | head -1 | tr -s ' \t' ' ')"
    fi
    if [ -z "$why" ]; then
        ln -s "$(cd "$pre" && pwd)/$p" "$bin/$p"
        echo "- $p: prebuilt ($want)" >>"$report"
    else
        missing+=("$p")
        echo "- $p: build here: $why" >>"$report"
    fi
done
echo >>"$report"
build_missing() {
    local p pids=() rc=0
    for p in "$@"; do
        gpu_build "$NVCC" "$(gpu_source "$p")" "$bin/$p" >"$logs/build_$p.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    for p in "$@"; do [ -x "$bin/$p" ] && echo "built $p" || { echo "FAILED $p:"; tail -5 "$logs/build_$p.log"; }; done
    return $rc
}
export -f build_missing gpu_build gpu_source gpu_flags gpu_nccl_flags
if [ ${#missing[@]} -gt 0 ]; then part "build ${#missing[@]} programs (sm_$(echo "${ARCH:-sm_90}" | tr -dc 0-9))" 240 build_missing "${missing[@]}"; fi
runnable() { [ "$dry" = 1 ] || [ -x "$bin/$1" ]; }

# --- 3: correctness on the GPU ------------------------------------------------
section "3. Correctness (every tests/*_gpu.cu)"
for p in $(gpu_programs); do
    case $p in *_gpu) runnable "$p" && part "$p" 120 "$bin/$p" ;; esac
done

# --- 4: the bf16 step, and its time ledger measured ----------------------------
section "4. bench/gpt2_cuda bf16 (GPT-2 124M, B=16, T=1024) with the measured time ledger"
steps=${BENCH_STEPS:-10}
kit_logs=()
if runnable gpt2_cuda; then
    part "gpt2_cuda bf16" 150 "$bin/gpt2_cuda" --precision bf16 --steps "$steps" --profile-csv "$out/sites.csv"
    kit_logs+=(--kit "kit bf16" "$logs/$(slug "gpt2_cuda bf16").log" --targets "$logs/$(slug "gpt2_cuda bf16").log")
    # --- 5: old paths beside the new (options "--old-*" of --help), the materialized attention
    section "5. Old vs new (bf16)"
    olds=$([ "$dry" = 1 ] && sed -n 's/.*"  \(--old-[a-z0-9-]*\).*/\1/p' bench/gpt2_cuda.cu || "$bin/gpt2_cuda" --help 2>&1 | sed -n 's/^  \(--old-[a-z0-9-]*\).*/\1/p')
    for o in $olds "--attention materialized" "--dq-atomic"; do
        # shellcheck disable=SC2086
        part "gpt2_cuda bf16 $o" 90 "$bin/gpt2_cuda" --precision bf16 --steps 5 $o
        kit_logs+=(--kit "kit bf16 $o" "$logs/$(slug "gpt2_cuda bf16 $o").log")
    done
fi

# --- 6: PyTorch's step, and where its time goes ---------------------------------
section "6. PyTorch bf16 (SDPA flash, fused AdamW), torch.profiler's top kernels"
torch_logs=()
if [ "$dry" = 1 ] || torch_cuda; then
    part "torch bf16" 150 python3 tests/gpu/torch_gpt2.py --precision bf16 --steps "$steps" --profile "$out/torch_profile.txt"
    torch_logs+=(--torch "torch bf16" "$logs/$(slug "torch bf16").log")
else
    printf 'skipped: `import torch` with CUDA does not work here\n\n' >>"$report"
fi

# --- 7: Nsight Compute on the costliest kernels ----------------------------------
section "7. ncu (--clock-control none): the 10 costliest kernels of a window of the bf16 step"
cat >"$work/ncu_top.py" <<'EOF'
import csv, sys
rows = {}  # kernel -> [launches, ns, dram %, sm %]
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    k, m = r.get("Kernel Name", "?"), r.get("Metric Name", "")
    try: v = float(r.get("Metric Value", "0").replace(",", ""))
    except ValueError: continue
    e = rows.setdefault(k, [set(), 0.0, 0.0, 0.0])
    e[0].add(r.get("ID"))
    if m == "gpu__time_duration.sum": e[1] += v
    elif m.startswith("dram__throughput"): e[2] += v
    elif m.startswith("sm__throughput"): e[3] += v
top = sorted(rows.items(), key=lambda kv: -kv[1][1])[:10]
with open(sys.argv[2], "w") as f:
    f.write("kernel,launches,total_us,mean_us,dram_pct_of_peak,sm_pct_of_peak\n")
    for k, (ids, ns, dram, sm) in top:
        n = max(len(ids), 1)
        f.write('"%s",%d,%.1f,%.2f,%.1f,%.1f\n' % (k[:120].replace('"', "'"), n, ns / 1e3, ns / 1e3 / n, dram / n, sm / n))
print(open(sys.argv[2]).read())
EOF
ncu_top() {
    ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed \
        --launch-skip "${NCU_SKIP:-700}" --launch-count "${NCU_COUNT:-340}" "$bin/gpt2_cuda" --precision bf16 --steps 3 >"$logs/ncu_raw.csv" &&
        python3 "$work/ncu_top.py" "$logs/ncu_raw.csv" "$out/ncu.csv"
}
export -f ncu_top
if [ "$dry" = 1 ] || { have ncu && runnable gpt2_cuda; }; then part "ncu top 10" 150 ncu_top
else printf 'skipped: no ncu, or no bench binary\n\n' >>"$report"; fi

# --- 8: the sanitizers on the bf16 kernels at a small shape ----------------------
section "8. compute-sanitizer on the bf16 step (tiny GPT-2, B=2, T=64: the bf16 attention among the rest)"
if [ "$dry" = 1 ] || { have compute-sanitizer && runnable gpt2_cuda; }; then
    for tool in memcheck racecheck; do
        part "compute-sanitizer $tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 1 \
            "$bin/gpt2_cuda" --model tiny --precision bf16 --batch 2 --seq 64 --steps 1
    done
else printf 'skipped: no compute-sanitizer\n\n' >>"$report"; fi

# --- 9: fp32 / TF32 regression ----------------------------------------------------
section "9. fp32 and TF32 (regression against docs/gpu_h100_2026-11-25.md)"
if runnable gpt2_cuda; then
    for a in "--tf32 1" "--tf32 0"; do
        # shellcheck disable=SC2086
        part "gpt2_cuda $a" 120 "$bin/gpt2_cuda" $a --steps 5
        kit_logs+=(--kit "kit $a" "$logs/$(slug "gpt2_cuda $a").log")
    done
fi

# --- 10: the rest, while time is left ------------------------------------------------
section "10. While time is left"
if [ "$dry" = 1 ] || torch_cuda; then
    part "torch bf16 --compile" 240 python3 tests/gpu/torch_gpt2.py --compile --steps "$steps" &&
        torch_logs+=(--torch "torch bf16, torch.compile" "$logs/$(slug "torch bf16 --compile").log")
fi
runnable gpt2_cuda && part "gpt2_cuda bf16 --recompute" 90 "$bin/gpt2_cuda" --precision bf16 --recompute --steps 5
runnable linear_memory_cuda && part "linear_memory_cuda" 120 "$bin/linear_memory_cuda" --width 20000 --steps 3 --out "$work/lm"
if [ "$dry" = 1 ] || { torch_cuda && python3 -c 'import lightning' 2>/dev/null; }; then
    part "lightning_linear" 120 python3 tests/gpu/lightning_linear.py --width 20000 --steps 3
fi

# the table of the kit's and PyTorch's runs (tests/gpu/summary.sh)
bash tests/gpu/summary.sh ${kit_logs[@]+"${kit_logs[@]}"} ${torch_logs[@]+"${torch_logs[@]}"} >"$work/table.md" 2>&1 || true
