#!/usr/bin/env bash
# tests/gpu/run.sh - everything that needs a real GPU, in one command.
#
#   bash tests/gpu/run.sh [REPORT.md]
#
# Run it first whenever a GPU is at hand (CI never has one). It builds the
# CUDA programs for this GPU's architecture, then runs, each under a time
# limit so the whole stays within ~10 minutes on one H100:
#   1. tests/bin/test_cuda_kernels_gpu      every kernel against the CPU backend,
#      and the other *_gpu tests: decoder ops, ops3, training API, the
#      sync-free step (async copies on a real, truly asynchronous GPU)
#   2. compute-sanitizer memcheck / racecheck / synccheck over the kernel test
#   3. bench/gpt2_cuda                 GPT-2 124M, B=16, T=1024, each precision
#   4. examples/linear_memory_cuda     the 20000x20000 experiment on the GPU,
#      and beside it the seed's Lightning run itself (tests/gpu/lightning_linear.py)
#      where `import torch, lightning` works
#   5. PyTorch's GPT-2 step, where `import torch` works (the yardstick:
#      tests/gpu/torch_gpt2.py, bf16 autocast eager and with torch.compile)
# and writes one markdown report (default: gpu_report.md, or $OUT/ when set),
# which ends with a table of the kit's and PyTorch's tokens/s, MFU and memory.
#
# Knobs: PRECISIONS (kit, "fp32 tf32 bf16"), BENCH_STEPS (10),
# TORCH_PRECISIONS (bf16), TORCH_COMPILE (1; 0 skips the compiled run).
set -u
cd "$(dirname "$0")/../.."
report=${1:-${OUT:+$OUT/}gpu_report.md}
log_dir=$(dirname "$report")
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null || { echo "tests/gpu/run.sh: nvcc not found"; exit 2; }
nvidia-smi -L >/dev/null 2>&1 || { echo "tests/gpu/run.sh: no GPU (nvidia-smi -L failed)"; exit 2; }

# This GPU's compute capability, e.g. 9.0 -> sm_90.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
arch="-gencode arch=compute_${cc},code=sm_${cc}"
# NCCL: a system library, or the one inside Python's nvidia-nccl-cu* wheel.
nccl_flags="-lnccl"
if ! echo 'int main(){return 0;}' | "$NVCC" -x cu - -o /tmp/nccl_probe -lnccl >/dev/null 2>&1; then
    d=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
    [ -z "$d" ] && d=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "nccl"))' 2>/dev/null || true)
    if [ -n "$d" ] && [ -d "$d/lib" ]; then
        lib=$(ls "$d"/lib/libnccl.so* | head -1)
        nccl_flags="-I$d/include -Xlinker $lib -Xlinker -rpath=$d/lib"
    fi
fi

passed=0; failed=0
summary_args=() # --kit|--torch LABEL LOG for each run in the summary table (only runs
                # of this invocation: a log left from an earlier one is never read)
section() { printf '\n## %s\n\n' "$1" >>"$report"; }
log_of() { echo "$log_dir/$(echo "$1" | tr -c 'a-zA-Z0-9_\n-' _).log"; } # a step's log
run_step() { # run_step NAME LIMIT_S COMMAND... : runs, logs, notes pass/fail
    local name=$1 limit=$2; shift 2
    local log="$(log_of "$name")" t0=$(date +%s) rc
    echo "== $name"
    timeout "$limit" "$@" >"$log" 2>&1; rc=$?
    printf '### %s (exit %d, %ds)\n\n```\n' "$name" "$rc" $(( $(date +%s) - t0 )) >>"$report"
    tail -40 "$log" >>"$report"; printf '```\n\n' >>"$report"
    tail -25 "$log"
    if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "   FAILED (exit $rc)"; fi
}

{ echo "# train.h on a GPU"; echo; echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"; echo;
  echo '```'; nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv; "$NVCC" --version | tail -2; echo '```'; } >"$report"

section "Build (nvcc, sm_$cc)"
mkdir -p tests/bin
build() { # build OUT SRC EXTRA...
    local out=$1 src=$2; shift 2
    "$NVCC" -O3 -I. -std=c++17 $arch -Xcompiler -fopenmp -o "$out" "$src" "$@" -lm >"$out.buildlog" 2>&1 \
        && echo "built $out" || { echo "FAILED to build $out"; cat "$out.buildlog"; }
}
build tests/bin/test_cuda_kernels_gpu tests/test_cuda_kernels_gpu.cu -lcublas -lcublasLt &
gpu_tests="test_cuda_ops_decoder_gpu test_cuda_ops_shape_loss_gpu test_cuda_train_gpu test_cuda_sync_gpu"
for f in tests/*_gpu.cu; do # new tests/*_gpu.cu files join by themselves
    t=$(basename "$f" .cu)
    [ -f "$f" ] && [ "$t" != test_cuda_kernels_gpu ] || continue # that one is built and run above
    case " $gpu_tests " in *" $t "*) ;; *) gpu_tests="$gpu_tests $t" ;; esac
done
for t in $gpu_tests; do build tests/bin/$t tests/$t.cu -lcublas -lcublasLt & done
build bench/gpt2_cuda bench/gpt2_cuda.cu -lcublas -lcublasLt &
build examples/linear_memory_cuda examples/linear_memory_cuda.cu -lcublas -lcublasLt $nccl_flags &
wait
ls -la tests/bin/test_cuda_kernels_gpu bench/gpt2_cuda examples/linear_memory_cuda >>"$report" 2>&1

section "Kernels against the CPU backend"
run_step "test_cuda_kernels_gpu" 300 tests/bin/test_cuda_kernels_gpu
for t in $gpu_tests; do run_step "$t" 120 tests/bin/$t; done
if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck synccheck; do
        run_step "compute-sanitizer --tool $tool" 300 compute-sanitizer --tool $tool --error-exitcode 1 tests/bin/test_cuda_kernels_gpu
    done
fi

section "bench/gpt2_cuda (GPT-2 124M, B=16, T=1024)"
for p in ${PRECISIONS:-fp32 tf32 bf16}; do
    case $p in
        fp32) args="--tf32 0" ;; tf32) args="--tf32 1" ;; *) args="--precision $p" ;;
    esac
    if [ "$p" = bf16 ] && ! bench/gpt2_cuda --help 2>&1 | grep -q -- --precision; then continue; fi
    run_step "bench/gpt2_cuda $args" 300 bench/gpt2_cuda $args --steps ${BENCH_STEPS:-10}
    summary_args+=(--kit "kit $p" "$(log_of "bench/gpt2_cuda $args")")
    [ "$p" = bf16 ] && summary_args+=(--targets "$(log_of "bench/gpt2_cuda $args")")
done
run_step "bench/gpt2_cuda --tf32 1 --recompute" 300 bench/gpt2_cuda --tf32 1 --recompute --steps ${BENCH_STEPS:-10}

section "examples/linear_memory_cuda --width 20000 (seed's Lightning figure: 18.79 GiB)"
run_step "linear_memory_cuda" 300 examples/linear_memory_cuda --width 20000 --steps 3 --out /tmp/lm_cuda
summary_args+=(--linear-kit "$(log_of linear_memory_cuda)")
# the seed's experiment itself, on the same GPU, in its own process (nothing of it stays allocated)
if python3 -c 'import torch; assert torch.cuda.is_available()
try: import lightning
except ImportError: import pytorch_lightning' 2>/dev/null; then
    run_step "lightning_linear --width 20000" 300 python3 tests/gpu/lightning_linear.py --width 20000 --steps 3
    summary_args+=(--linear-lightning "$(log_of "lightning_linear --width 20000")")
else
    printf 'Lightning run skipped: `import torch, lightning` with CUDA does not work here (pip install lightning).\n\n' >>"$report"
fi

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && [ -f tests/gpu/torch_gpt2.py ]; then
    section "PyTorch yardstick (same GPU)"
    for p in ${TORCH_PRECISIONS:-bf16}; do
        run_step "torch GPT-2 124M $p" 300 python3 tests/gpu/torch_gpt2.py --precision $p --steps ${BENCH_STEPS:-10}
        summary_args+=(--torch "torch $p" "$(log_of "torch GPT-2 124M $p")")
    done
    if [ "${TORCH_COMPILE:-1}" != 0 ]; then
        run_step "torch GPT-2 124M bf16 --compile" 420 python3 tests/gpu/torch_gpt2.py --compile --steps ${BENCH_STEPS:-10}
        summary_args+=(--torch "torch bf16, torch.compile" "$(log_of "torch GPT-2 124M bf16 --compile")")
    fi
else
    section "PyTorch yardstick (same GPU)"
    printf 'Skipped: `import torch` with CUDA does not work here (pip install torch).\n\n' >>"$report"
fi

# --- the summary: the kit's rows and PyTorch's, parsed from their logs ------
section "Summary: GPT-2 124M, B=16, T=1024; the 20000x20000 experiment"
bash tests/gpu/summary.sh ${summary_args[@]+"${summary_args[@]}"} | tee -a "$report"

printf '\n%d passed, %d failed\n' "$passed" "$failed" | tee -a "$report"
[ "$failed" = 0 ]
