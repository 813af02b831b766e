#!/usr/bin/env python3
"""tests/cuda_mutations.py - tests the tests: breaks train_cuda.h on purpose
(one mutation at a time, in a copy under a temporary directory), rebuilds
tests/test_cuda_kernels.cpp against the broken copy with the CUDA-on-CPU
harness, and checks that the test FAILS. Each mutation is a bug a CUDA
kernel can really have: a missing __syncthreads, a wrong shuffle, a
missing bounds guard, an off-by-one mask, a GEMM that overwrites instead
of accumulating.

    python3 tests/cuda_mutations.py        (about a minute per mutation)
    python3 tests/cuda_mutations.py adamw  (only those whose name has "adamw")

Prints one line per mutation and "N passed, M failed", where a mutation
"passes" when the test suite caught it. Not run by tests/run.sh (it
compiles the kernel test once per mutation); run it after changing the
kernels or the harness."""
import os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTATIONS = [  # (name, original text, broken text, sanitizer: "" | "address" | "thread"[, test source])
    ("no barrier in colsum_part", "    acc[threadIdx.y][threadIdx.x] = s;\n    __syncthreads();",
     "    acc[threadIdx.y][threadIdx.x] = s;", ""),
    ("no barrier in xent_fwd", "    if (lane == 0) { wm[warp] = m; wsum[warp] = s; }\n    __syncthreads();",
     "    if (lane == 0) { wm[warp] = m; wsum[warp] = s; }", ""),
    ("shfl_down instead of shfl_xor in trn__warp_sum",
     "v += __shfl_xor_sync(0xffffffffu, v, o);\n    return v;\n}\nstatic __device__ __forceinline__ double",
     "v += __shfl_down_sync(0xffffffffu, v, o);\n    return v;\n}\nstatic __device__ __forceinline__ double", ""),
    ("no row guard in layernorm forward", "    if (row >= N) return; /* the whole warp leaves together */", "", "address"),
    ("early return before a barrier in sumsq", "    if (lane == 0) ws[warp] = s;\n    __syncthreads();",
     "    if (lane == 0) ws[warp] = s;\n    if (blockIdx.x * blockDim.x + threadIdx.x >= n) return;\n    __syncthreads();",
     ""),
    ("column sums read one row too many", "r1 = min(N, r0 + rows);\n    float s = 0.0f;",
     "r1 = min(N + 1, r0 + rows + 1);\n    float s = 0.0f;", "address"),
    ("causal mask off by one", "int last = causal ? row % T : T - 1;",
     "int last = causal ? min(row % T + 1, T - 1) : T - 1;", ""),
    ("attention dV overwritten instead of accumulated", "x.o, x.P, 1.0f, (A *)d.v.p,", "x.o, x.P, 0.0f, (A *)d.v.p,", ""),
    ("cublasSetStream after cublasSetWorkspace (the workspace is dropped)",
     "    TRN_CUBLAS_CHECK(cublasSetStream(trn__cu.cublas, trn__cu.stream));\n"
     "    TRN_CUBLAS_CHECK(cublasSetWorkspace(trn__cu.cublas, trn__cu.workspace, trn__cu.workspace_bytes));",
     "    TRN_CUBLAS_CHECK(cublasSetWorkspace(trn__cu.cublas, trn__cu.workspace, trn__cu.workspace_bytes));\n"
     "    TRN_CUBLAS_CHECK(cublasSetStream(trn__cu.cublas, trn__cu.stream));", ""),
    ("embedding backward without atomics", "atomicAdd(&dtable[(size_t)ids[r] * C + c], f[k]);",
     "dtable[(size_t)ids[r] * C + c] += f[k];", "thread"),
    ("embedding backward packs: a pack that crosses a row's end adds the rest into the same table row",
     "            if (c == (size_t)C) { c = 0; r++; } /* the pack goes on in the next row */\n", "", "address"),
    ("embedding backward: the scalar tail skipped", "TRN__GRID_STRIDE(t, n - 8 * nv) { /* the scalar tail: the last n % 8 */",
     "TRN__GRID_STRIDE(t, 0 * (n - 8 * nv)) { /* the scalar tail: the last n % 8 */", ""),
    # bf16 activations (tests/test_cuda_bf16_ops.cpp checks them against fp32)
    ("bf16 store truncates instead of rounding to nearest even",
     "trn__to<trn__bf16>(float v) { return __float2bfloat16(v); }",
     "trn__to<trn__bf16>(float v) { trn__bf16 r; r.x = (unsigned short)(__float_as_uint(v) >> 16); return r; }", "",
     "tests/test_cuda_bf16_ops.cpp"),
    ("layernorm sums its mean in bf16", "for (int i = lane; i < C; i += 32) s += trn__ld(x[i]);",
     "for (int i = lane; i < C; i += 32) s = trn__ld(trn__to<A>(s + trn__ld(x[i])));", "", "tests/test_cuda_bf16_ops.cpp"),
    ("mul's broadcast db overwritten instead of accumulated", "db[c] = trn__to<A>(trn__ld(db[c]) + s);",
     "db[c] = trn__to<A>(s);", "", "tests/test_cuda_bf16_ops.cpp"),
    # the sync-free step's kernels (tests/test_cuda_sync.cpp checks them)
    ("no barrier in the loss mean", "    if (lane == 0) ws[warp] = s;\n    __syncthreads();\n    if (warp == 0) {\n"
     "        s = lane < nw ? ws[lane] : 0.0;\n        s = trn__warp_sum_d(s);\n        if (lane == 0) out[0]",
     "    if (lane == 0) ws[warp] = s;\n    if (warp == 0) {\n"
     "        s = lane < nw ? ws[lane] : 0.0;\n        s = trn__warp_sum_d(s);\n        if (lane == 0) out[0]", "",
     "tests/test_cuda_sync.cpp"),
    ("adamw_flat does not store the clipped gradient back", "if (s != 1.0f) { gi *= s; g[i] = gi; }",
     "if (s != 1.0f) gi *= s;", "", "tests/test_cuda_sync.cpp"),
    ("adamw_flat finds the run of element i off by one", "while (seg[r].end <= i) r++;", "while (seg[r].end < i) r++;",
     "", "tests/test_cuda_sync.cpp"),
    ("clip factor without the 1e-6 of trn_clip_grad_norm", "? max_norm / (norm + 1e-6f) : 1.0f;",
     "? max_norm / norm : 1.0f;", "", "tests/test_cuda_sync.cpp"),
    ("a readback handed over before the wait", "    TRN_CUDA_CHECK(cudaMemcpyAsync(trn__cu.rb + trn__cu.rb_used, src, bytes, "
     "cudaMemcpyDeviceToHost, trn__cu.stream));",
     "    TRN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, trn__cu.stream));", "",
     "tests/test_cuda_sync.cpp"),
    # the bf16 GEMMs (tests/test_cuda_bf16_gemm.cpp checks them)
    ("bf16 dw overwritten instead of accumulated (beta 0)",
     "bw = write_dw ? 0.0f : 1.0f;", "bw = 0.0f;", "", "tests/test_cuda_bf16_gemm.cpp"),
    ("bf16 dinp overwritten instead of accumulated (beta 0)",
     "bx = write_dinp ? 0.0f : 1.0f,", "bx = 0.0f,", "", "tests/test_cuda_bf16_gemm.cpp"),
    ("fp32 dw overwritten instead of accumulated (beta 0)", "bw = write_dw ? 0.0f : 1.0f;", "bw = 0.0f;", ""),
    ("a fresh dinp accumulated into its old contents (write flag ignored)", "bx = write_dinp ? 0.0f : 1.0f,",
     "bx = 1.0f,", ""),
    ("16-byte column sums: the rows of the last warp left out",
     "        for (int j = 1; j < 8; j++)\n            for (int k = 0; k < 8; k++) s[k] += acc8",
     "        for (int j = 1; j < 7; j++)\n            for (int k = 0; k < 8; k++) s[k] += acc8", ""),
    ("16-byte layernorm forward: the variance from the first pack only",
     "            for (int k = 0; k < 8; k++) v += (f[k] - m) * (f[k] - m);\n",
     "            for (int k = 0; k < 8; k++) v += (f[k] - m) * (f[k] - m);\n            break;\n", ""),
    ("elementwise map: the scalar tail skipped", "    TRN__GRID_STRIDE(t, n - 8 * nv) { /* the tail */",
     "    TRN__GRID_STRIDE(t, 0 * (n - 8 * nv)) { /* the tail */", ""),
    ("elementwise map: the packs give the ops the index of their first element (a bias row, dropout's mask)",
     "x[k] = op(x[k], y[k], z[k], 8 * i + k);", "x[k] = op(x[k], y[k], z[k], 8 * i);", ""),
    ("relu backward: the gradient let through where out <= 0", "return y > 0.0f ? d + g : d;", "return d + g;", ""),
    ("dropout backward: the gradient let through where the mask dropped it",
     "return trn__cuda_dropout_u(key, i) >= p ? d + g * scale : d;", "return d + g * scale;", "",
     "tests/test_cuda_ops_shape_loss.cpp"),
    ("mul backward: da from the broadcast row's first element only", "return d + g * trn__ld(row[i % C]);",
     "return d + g * trn__ld(row[0]);", "", "tests/test_cuda_ops_decoder.cpp"),
    ("unfused bias + GELU: the packs read the bias from column 0", "trn__ld8(b, bias + (8 * p) % (size_t)OC);",
     "trn__ld8(b, bias);", "", "tests/test_cuda_bf16_gemm.cpp"),
    ("unfused bias + GELU: the packs leave pre without the bias", "            trn__st8(pre + 8 * p, v); /* (gelu",
     "            /* trn__st8(pre + 8 * p, v); */ /* (gelu", "", "tests/test_cuda_bf16_gemm.cpp"),
    ("convert: the packs ignore the scale", "            if (s != 1.0f) v[k] = __fmul_rn(v[k], s);", "", "",
     "tests/test_cuda_bf16_ops.cpp"),
    # >>classifier: the fused cross-entropy (16-byte packs, the gradient over the logits)
    ("fused cross-entropy: the scalar tail stops one short",
     "    for (int v = body + threadIdx.x; v < Vp; v += blockDim.x)\n        l[v] = trn__to<A>(",
     "    for (int v = body + threadIdx.x; v < Vp - 1; v += blockDim.x)\n        l[v] = trn__to<A>(", ""),
    ("fused cross-entropy: the packs without the dloss scale",
     "p.e[k] = trn__to<A>(v < V ? dloss * (expf(", "p.e[k] = trn__to<A>(v < V ? (expf(", ""),
    ("fused cross-entropy: padding in a pack left as it was",
     "p.e[k] = trn__to<A>(v < V ? dloss * (expf(trn__ld(p.e[k]) - z) - (v == t ? 1.0f : 0.0f)) : 0.0f);",
     "if (v < V) p.e[k] = trn__to<A>(dloss * (expf(trn__ld(p.e[k]) - z) - (v == t ? 1.0f : 0.0f)));", ""),
    ("fused cross-entropy: no scalar head (16-byte packs at unaligned rows)",
     "int h = (int)(((16 - ((uintptr_t)p & 15)) & 15) / sizeof(A));", "int h = 0;", ""),
    ("fused cross-entropy: the max and sum skip the head's last element",
     "    for (int v = threadIdx.x; v < head; v += blockDim.x)\n        if (v < V) trn__ms_add(",
     "    for (int v = threadIdx.x; v < head - 1; v += blockDim.x)\n        if (v < V) trn__ms_add(", ""),
    # the one-read kernel (trn__k_xent_fused_reg: packs in registers and shared memory)
    ("fused cross-entropy, one read: x[target] read from the logits after the barrier (another thread may have "
     "written it)", "if (i == 0) losses[n] = z - xs[2 * K];", "if (i == 0) losses[n] = z - trn__ld(l[t]);", ""),
    ("fused cross-entropy, one read: the last pack slot never stored",
     "    for (int j = 0; j < P + S; j++)\n        if (j * NT < nj) {\n            trn__pack<A> x = j < P ? r[j] : sp[(j - P) * NT + i];\n"
     "            TRN__UNROLL\n            for (int k = 0; k < K; k++) {",
     "    for (int j = 0; j < P + S; j++)\n        if (j * NT < nj && j < P + S - 1) {\n            trn__pack<A> x = j < P ? r[j] : sp[(j - P) * NT + i];\n"
     "            TRN__UNROLL\n            for (int k = 0; k < K; k++) {", ""),
    ("fused cross-entropy, one read: the sum without the shared-memory packs",
     "                if (j * NT * K + k < lim) s += expf(", "                if (j < P && j * NT * K + k < lim) s += expf(", ""),
    ("fused cross-entropy, one read: padding in a pack left as it was",
     "x.e[k] = trn__to<A>(u < lim ? dloss * (expf(trn__ld(x.e[k]) - z) - (u == tt ? 1.0f : 0.0f)) : 0.0f);",
     "if (u < lim) x.e[k] = trn__to<A>(dloss * (expf(trn__ld(x.e[k]) - z) - (u == tt ? 1.0f : 0.0f)));", ""),
    ("fused cross-entropy, one read: the head left out of the max",
     "    if (i < head && i < V) m = fmaxf(m, xs[i]);\n", "", ""),
    # the 16-byte row walks of the cross-entropy kernels (trn__row_read16, trn__row_update16: head, packs, tail)
    ("16-byte row read: the scalar tail starts one element late",
     "    for (int v = body + threadIdx.x; v < n; v += blockDim.x) f(v, trn__ld(p[v]));",
     "    for (int v = body + 1 + threadIdx.x; v < n; v += blockDim.x) f(v, trn__ld(p[v]));", ""),
    ("16-byte row read: the head's last element left out",
     "    for (int v = threadIdx.x; v < head; v += blockDim.x) f(v, trn__ld(p[v]));",
     "    for (int v = threadIdx.x; v < head - 1; v += blockDim.x) f(v, trn__ld(p[v]));", ""),
    ("16-byte row read: the packs counted from the row's start, not its head",
     "trn__pack<A> q = trn__ld16(p + head + i * K);", "trn__pack<A> q = trn__ld16(p + i * K);", "",
     "tests/test_cuda_bf16_ops.cpp"),
    ("16-byte row update: every element of a pack given the pack's first column (the target missed)",
     "q.e[k] = trn__to<A>(f(v + k, trn__ld(q.e[k]), trn__ld(x.e[k])));",
     "q.e[k] = trn__to<A>(f(v, trn__ld(q.e[k]), trn__ld(x.e[k])));", ""),
    ("16-byte row update: the scalar tail stops one short (label-smoothed cross-entropy)",
     "    for (int v = body + threadIdx.x; v < n; v += blockDim.x) d[v] = trn__to<A>(",
     "    for (int v = body + threadIdx.x; v < n - 1; v += blockDim.x) d[v] = trn__to<A>(", "",
     "tests/test_cuda_ops_shape_loss.cpp"),
    ("bf16 matmul without the bias epilogue",
     ": bias                 ? CUBLASLT_EPILOGUE_BIAS", ": bias                 ? CUBLASLT_EPILOGUE_DEFAULT", "",
     "tests/test_cuda_bf16_gemm.cpp"),
    ("bf16 matmul with an fp32 bias type for a bf16 D",
     "bias_type = dtype; /* the bias has D's type */", "bias_type = CUDA_R_32F;", "", "tests/test_cuda_bf16_gemm.cpp"),
    # >>mlp: matmul + GELU (cuBLASLt's GELU_AUX_BIAS and DGELU epilogues, the unfused kernels)
    ("bf16 matmul + GELU: the epilogue without the bias",
     "? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)", "? CUBLASLT_EPILOGUE_GELU_AUX", "",
     "tests/test_cuda_bf16_gemm.cpp"),
    ("gelu' without the x d(tanh)/dx term", "return 0.5f * (1.0f + t) + 0.5f * x * dt;",
     "return 0.5f * (1.0f + t) + 0.5f * dt;", "", "tests/test_cuda_bf16_gemm.cpp"),
    ("GELU epilogue taken for an aux ld that is not a multiple of 8",
     "return ld % 8 == 0 && (uintptr_t)aux % 16 == 0;", "return (uintptr_t)aux % 16 == 0;", "",
     "tests/test_cuda_bf16_gemm.cpp"),
    ("unfused matmul + GELU: pre keeps the sum without the bias", "        pre[i] = trn__to<A>(v);\n", "", "",
     "tests/test_cuda_bf16_gemm.cpp"),
    ("fp32 dgelu accumulates into dpre (beta 1)", "OC, 0, 0.0f,\n                       TRN__A(dpre), C, 0, 1);",
     "OC, 0, 1.0f,\n                       TRN__A(dpre), C, 0, 1);", "", "tests/test_cuda_bf16_gemm.cpp"),
    ("bf16 softmax backward with the row sum of dP alone (P dropped)",
     "for (int s = lane; s < T; s += 32) dot += trn__ld(p[s]) * trn__ld(d[s]);",
     "for (int s = lane; s < T; s += 32) dot += trn__ld(d[s]);", "", "tests/test_cuda_bf16_gemm.cpp"),
    # the bf16 fused attention on tensor cores (tests/test_cuda_flash_bf16.cpp checks it)
    ("bf16 flash forward: causal mask off by one", "sv[c] = j < kend && (!causal || j <= i) ? scale",
     "sv[c] = j < kend && (!causal || j <= i + 1) ? scale", "", "tests/test_cuda_flash_bf16.cpp"),
    ("bf16 flash forward: no barrier between the K, V tile loads and the products",
     "        __syncthreads(); /* the K, V tile is complete */\n        /* S = Q K^T: 16 rows x N keys",
     "        /* S = Q K^T: 16 rows x N keys", "", "tests/test_cuda_flash_bf16.cpp"),
    ("bf16 flash dK/dV: P^T written over S^T before every lane has read it",
     "            __syncwarp(); /* every lane has read its S and dP: overwrite them */", "", "",
     "tests/test_cuda_flash_bf16.cpp"),
    ("bf16 flash dQ overwritten instead of accumulated", "*p = __float2bfloat16(trn__ld(*p) + scale * Sw[e]);",
     "*p = __float2bfloat16(scale * Sw[e]);", "", "tests/test_cuda_flash_bf16.cpp"),
    # FlashAttention-2 (>>cuda-fa2; tests/test_cuda_fa2_bf16.cpp checks it)
    ("fa2 forward: wrong fragment index in the output store (c[r], c[r+1] for c[2r], c[2r+1])",
     "trn__pack_bf16(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv)",
     "trn__pack_bf16(o[mt][n][r] * inv, o[mt][n][r + 1] * inv)",
     "", "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 forward: the output accumulator not rescaled when the row max grows",
     "o[mt][n][0] *= corr[0]; o[mt][n][1] *= corr[0]; o[mt][n][2] *= corr[1]; o[mt][n][3] *= corr[1];", "", "",
     "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 forward: causal mask skipped (only T masked)",
     "mask = j0 + BC > T || (causal && j0 + BC > r0);", "mask = j0 + BC > T;", "",
     "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 backward: causal mask skipped in P^T", "j < T && i < T && (!causal || j <= i) ? exp2f", "j < T && i < T ? exp2f",
     "", "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 key tiles (forward, dQ pass): no cp.async.wait_group before the tile is read",
     "        trn__cp_async_wait<1>(); /* all but the newest group: tile kb */\n", "", "",
     "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 backward, fresh dqkv: dK and dV added to its old (garbage) contents",
     "            if (write) {\n                pk[n * 4] = trn__pack_bf16(scale * dk",
     "            if (0) {\n                pk[n * 4] = trn__pack_bf16(scale * dk", "",
     "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 dQ pass: causal mask skipped (only T masked)",
     "mask && (j >= T || i >= T || (causal && j > i))", "mask && (j >= T || i >= T)",
     "", "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 dQ pass: dS = P dP (D = rowsum(dO O) not subtracted)",
     "s[mt][n][e] = p * (dp[mt][n][e] - dd[mt][e / 2]);", "s[mt][n][e] = p * dp[mt][n][e];", "",
     "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 forward: a warp skips the key tile that holds its diagonal (off by one row tile)",
     "if (!causal || j0 < w0 + 16 * MW) {\n            /* S = Q K^T", "if (!causal || j0 < w0 + 16 * MW - 16) {\n            /* S = Q K^T",
     "", "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 dK/dV: K and V read into registers before their cp.async copies have landed",
     "    if (KR) {\n        trn__cp_async_wait<0>();\n", "    if (KR) {\n", "", "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 dK/dV: the registers' K fragment used for V too",
     "va[e] = vr[KR ? k : 0][e];", "va[e] = kr[KR ? k : 0][e];", "", "tests/test_cuda_fa2_bf16.cpp"),
    ("fa2 dQ pass: the second row tile of a warp reads the first one's lse and D",
     "exp2f(s[mt][n][e] * scale * log2e - l2[mt][e / 2]);", "exp2f(s[mt][n][e] * scale * log2e - l2[0][e / 2]);", "",
     "tests/test_cuda_fa2_bf16.cpp"),
    # column sums in one launch (trn__last_block)
    ("column sums: the last block leaves its counter set (the next launch's sums never finish)",
     "        if (*flag) count[blockIdx.x] = 0;\n", "", ""),
    ("column sums: the last block sums before the others' partials are counted (>= for ==)",
     "*flag = atomicAdd(count + blockIdx.x, 1u) == gridDim.y - 1;", "*flag = atomicAdd(count + blockIdx.x, 1u) + 2 >= gridDim.y;",
     ""),
    # the layernorm backward in one launch (trn__k_ln_bwd: dx, and dw, db from the blocks' partial rows)
    ("layernorm bwd one launch: the block's sum of its warps drops warp 7",
     "    for (int j = 0; j < 8; j++) {\n        if (warp == j)", "    for (int j = 0; j < 7; j++) {\n        if (warp == j)",
     ""),
    ("layernorm bwd one launch: a last block's sum skips the last row of its range",
     "for (int j = r0 + warp; j < r1; j += 8)", "for (int j = r0 + warp; j < r1 - 1; j += 8)", ""),
    ("layernorm bwd one launch: a group's last block counts on the groups' counter",
     "if (!trn__last_of(count + 1 + g, (unsigned)gs, &last)) return;", "if (!trn__last_of(count, (unsigned)gs, &last)) return;",
     ""),
    ("layernorm bwd one launch: dw's partials from dout * x (mean not subtracted)",
     "sw[p][k] += fg[k] * ((fx[k] - m) * r);", "sw[p][k] += fg[k] * (fx[k] * r);", ""),
]


def main():
    src = open(os.path.join(ROOT, "train_cuda.h")).read()
    caught = missed = 0
    tmp = tempfile.mkdtemp(prefix="cuda_mutations.")
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    for i, (name, old, new, san, *test) in enumerate(MUTATIONS, 1):
        if only not in name:
            continue
        test = test[0] if test else "tests/test_cuda_kernels.cpp"
        if old not in src:
            print(f"MISSED {name}: the original text is no longer in train_cuda.h (update this script)")
            missed += 1
            continue
        d = os.path.join(tmp, f"m{i}")
        os.makedirs(d)
        open(os.path.join(d, "train_cuda.h"), "w").write(src.replace(old, new, 1))
        flags = ["-O1", "-fopenmp", "-std=c++17", f"-I{d}", f"-I{ROOT}"]
        if san:
            flags += ["-g", "-fsanitize=" + san]
        exe = os.path.join(d, "t")
        b = subprocess.run(["g++"] + flags + ["-o", exe, os.path.join(ROOT, test), "-lm"],
                           capture_output=True, text=True)
        if b.returncode:
            print(f"caught {name}: does not even compile")
            caught += 1
            continue
        r = subprocess.run([exe], capture_output=True, text=True, cwd=ROOT,
                           env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        out = r.stdout + r.stderr
        why = (re.findall(r"(?:Address|Thread)Sanitizer: [a-z-]+(?: race)?", out) + re.findall(r"deadlock|divergent", out)
               + re.findall(r"FAIL [^:]*:\d+: ([^:\n]*)", out))
        if r.returncode != 0:
            caught += 1
            print(f"caught {name}: exit {r.returncode}; {', '.join(dict.fromkeys(why[:3]))}")
        else:
            missed += 1
            print(f"MISSED {name}: the kernel test still passes")
    print(f"{caught} passed, {missed} failed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
