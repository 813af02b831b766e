#!/usr/bin/env bash
# tests/gpu/summary.sh - the table at the end of tests/gpu/run.sh's report.
#
#   bash tests/gpu/summary.sh [--kit LABEL LOG] [--torch LABEL LOG] ...
#                             [--linear-kit LOG] [--linear-lightning LOG] [--targets LOG]
#
# Reads the logs of the runs and prints two markdown tables:
#   GPT-2 124M: ms/step, tokens/s, MFU and memory, one row per run, from
#     --kit    bench/gpt2_cuda's output (memory: the ledger's peak)
#     --torch  tests/gpu/torch_gpt2.py's output (memory: max_memory_allocated,
#              and max_memory_reserved)
#     and both: the driver's view at the end (cudaMemGetInfo, total - free)
#   the 20000x20000 experiment: the seed's 18.79 GiB, the kit's ledger peak
#     (examples/linear_memory_cuda's "kit total"), Lightning's
#     max_memory_allocated on this GPU (tests/gpu/lightning_linear.py)
#   --targets LOG: issue 14's targets for the kit's bf16 run (one H100:
#     >= 400k tokens/s, >= 40% MFU, <= 8 GiB of device memory, here the
#     ledger's peak), each PASS or FAIL; informational, the exit code is 0
# A value a log does not have (missing run, failed run) is "-".
# tests/test_gpu_scripts.sh checks these patterns against the programs' lines.
set -u

grab() { # grab LOG SED_SCRIPT: the first value it prints, or "-"
    local v
    v=$(sed -n "$2" "$1" 2>/dev/null | head -1)
    echo "${v:--}"
}

rows=() lin_kit="" lin_light="" targets=""
while [ $# -gt 0 ]; do
    case $1 in
        --kit | --torch)
            [ $# -ge 3 ] || { echo "tests/gpu/summary.sh: $1 wants LABEL LOG" >&2; exit 2; }
            rows+=("$1" "$2" "$3"); shift 3 ;;
        --linear-kit | --linear-lightning | --targets)
            [ $# -ge 2 ] || { echo "tests/gpu/summary.sh: $1 wants LOG" >&2; exit 2; }
            case $1 in --linear-kit) lin_kit=$2 ;; --linear-lightning) lin_light=$2 ;; *) targets=$2 ;; esac
            shift 2 ;;
        *) echo "tests/gpu/summary.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

echo "| run | ms/step (median) | tokens/s | MFU | peak tensors, GB | reserved, GB | driver in use at the end, GB |"
echo "|---|---|---|---|---|---|---|"
i=0
while [ $i -lt ${#rows[@]} ]; do
    kind=${rows[$i]} label=${rows[$((i + 1))]} log=${rows[$((i + 2))]}
    i=$((i + 3))
    if [ "$kind" = --kit ]; then
        mem=$(grab "$log" "s/.*the ledger's peak \([0-9.]*\) GB.*/\1/p")
        res="-"
    else
        mem=$(grab "$log" 's/.*max_memory_allocated \([0-9.]*\) GB.*/\1/p')
        res=$(grab "$log" 's/.*max_memory_reserved \([0-9.]*\) GB.*/\1/p')
    fi
    ms=$(grab "$log" 's/^step \([0-9.]*\) ms median.*/\1/p')
    tok=$(grab "$log" 's/^\([0-9]*\) tokens\/s .*/\1/p')
    mfu=$(grab "$log" 's/^MFU \([0-9.]*%\) .*/\1/p')
    drv=$(grab "$log" 's/.*cudaMemGetInfo \([0-9.]*\) GB (total - free.*/\1/p')
    echo "| $label | $ms | $tok | $mfu | $mem | $res | $drv |"
done
echo
echo "Peak tensors: the kit's ledger peak (weights, their bf16 copy, grads, AdamW m and v, activations and"
echo "their gradients), PyTorch's torch.cuda.max_memory_allocated (every tensor, its scratch included)."
echo "Reserved: what PyTorch's caching allocator took from the driver. Driver: cudaMemGetInfo, total - free,"
echo "the CUDA context and the libraries' workspaces included."
if [ -n "$lin_kit$lin_light" ]; then
    echo
    echo "| the 20000x20000 experiment | peak, GiB |"
    echo "|---|---|"
    echo "| seed: Lightning, Trainer(devices=1, strategy=\"ddp\"), Aug 2025 | 18.79 |"
    echo "| kit: examples/linear_memory_cuda, the ledger's peak (kit total) | $(grab "$lin_kit" 's/^  kit total *\([0-9.]*\) GiB.*/\1/p') |"
    echo "| Lightning on this GPU: torch.cuda.max_memory_allocated | $(grab "$lin_light" 's/.*max_memory_allocated \([0-9.]*\) GiB.*/\1/p') |"
fi
if [ -n "$targets" ]; then
    tok=$(grab "$targets" 's/^\([0-9]*\) tokens\/s .*/\1/p')
    mfu=$(grab "$targets" 's/^MFU \([0-9.]*\)% .*/\1/p')
    gib=$(grab "$targets" "s/.*the ledger's peak [0-9.]* GB (\([0-9.]*\) GiB).*/\1/p")
    dev=$(grab "$targets" 's/^bench\/gpt2_cuda: \([^,]*\),.*/\1/p')
    verdict() { # verdict VALUE OP LIMIT
        [ "$1" = - ] && { echo "no figure"; return; }
        awk -v v="$1" -v l="$3" "BEGIN { exit !(v $2 l) }" && echo PASS || echo FAIL
    }
    echo
    echo "Issue 14's targets for the kit in bf16 (on one H100; this GPU: $dev):"
    pct=$mfu; [ "$mfu" = - ] || pct="$mfu%"
    echo "tokens/s $tok >= 400000: $(verdict "$tok" ">=" 400000); MFU $pct >= 40%: $(verdict "$mfu" ">=" 40);" \
         "the ledger's peak $gib GiB <= 8 GiB: $(verdict "$gib" "<=" 8)"
fi
