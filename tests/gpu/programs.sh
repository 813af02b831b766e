# tests/gpu/programs.sh - what tests/gpu/prebuild.sh builds and
# tests/gpu/run.sh runs: the CUDA programs of the GPU check, how each is
# built, and the fingerprint that tells a prebuilt binary from a stale one.
# Sourced (bash), not run.

# the programs, by name: every tests/*_gpu.cu (new ones join by themselves),
# the bench, and linear_memory_cuda (run last, if time is left);
# GPU_PROGRAMS="a b" names a subset (prebuild.sh: build only those)
gpu_programs() {
    local f
    if [ -n "${GPU_PROGRAMS:-}" ]; then echo "$GPU_PROGRAMS" | tr ' ' '\n'; return; fi
    for f in tests/*_gpu.cu; do [ -e "$f" ] && basename "$f" .cu; done
    echo gpt2_cuda
    echo linear_memory_cuda
}
gpu_source() { # gpu_source NAME: its source file
    case "$1" in
        gpt2_cuda) echo bench/gpt2_cuda.cu ;;
        linear_memory_cuda) echo examples/linear_memory_cuda.cu ;;
        *) echo "tests/$1.cu" ;;
    esac
}
GPU_ARCH=${ARCH:-sm_90}
gpu_flags() { echo "-O3 -I. -std=c++17 -gencode arch=compute_${GPU_ARCH#sm_},code=$GPU_ARCH -Xcompiler -fopenmp"; }
# NCCL: -lnccl where it links, else the one inside Python's nvidia-nccl
# wheel (the GPU machine's PyTorch brings it)
gpu_nccl_flags() {
    local d lib
    if echo 'int main(){return 0;}' | "$1" -x cu - -o /tmp/gpu_nccl_probe.$$ -lnccl >/dev/null 2>&1; then
        rm -f /tmp/gpu_nccl_probe.$$; echo "-lnccl"; return
    fi
    d=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "nccl"))' 2>/dev/null || true)
    lib=$(ls "$d"/lib/libnccl.so* 2>/dev/null | head -1)
    if [ -n "$lib" ]; then echo "-I$d/include -Xlinker $lib -Xlinker -rpath=$d/lib"; else echo "-lnccl"; fi
}
gpu_build() { # gpu_build NVCC SOURCE OUT: the source's own // build: flags after it
    local nvcc=$1 src=$2 out=$3 extra
    extra=$(sed -n '1,60s|^// build: ||p' "$src" | head -1)
    case " $extra " in *" -lnccl "*) extra=${extra/-lnccl/$(gpu_nccl_flags "$nvcc")} ;; esac
    # shellcheck disable=SC2046,SC2086
    "$nvcc" $(gpu_flags) -o "$out" "$src" $extra -lm
}
# what a program is built from: its source, the headers every CUDA program
# of the kit may include, this file (the flags), the target; one sha256
GPU_HEADERS="train.h train_cuda.h train_nccl.h $(ls extras/*.h 2>/dev/null | tr "\n" " ")tests/check.h examples/gpt2.c examples/common.h bench/gpt2_sites.h tests/gpu/programs.sh"
# (and the files the source itself #includes "..." from the repository root)
src_hash() {
    local inc
    inc=$(sed -n 's|^#include "\([^"]*\)".*|\1|p' "$1" | while read -r f; do [ -f "$f" ] && echo "$f"; done)
    # shellcheck disable=SC2086
    { echo "$GPU_ARCH"; cat "$1" $GPU_HEADERS $inc 2>/dev/null; } | sha256sum | cut -c1-16
}
