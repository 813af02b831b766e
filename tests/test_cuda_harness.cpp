// build: -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
/* tests/test_cuda_harness.cpp - tests of the CUDA-on-CPU harness itself
   (tests/cuda_on_cpu.h): that it runs correct kernels correctly, and that it
   CATCHES broken ones - a missing __syncthreads gives a wrong sum under the
   randomized thread order, a barrier inside a branch is reported, a shuffle
   over a partial warp is reported, bad launches and bad cuBLAS arguments
   fail as on a GPU.

   Built with AddressSanitizer (see the build line above), so a kernel that
   reads or writes outside its cudaMalloc block aborts with a report.
   tests/test_cuda_sanitizers.sh runs this program with --oob-demo and
   --oob-shared-demo to show exactly that.
*/
#include "tests/check.h"
#include "tests/cuda_on_cpu.h"

#define LAUNCH(k, g, b, sh, ...) cuemu::launch(#k, __FILE__, __LINE__, g, b, sh, nullptr, k, __VA_ARGS__)

/* ---- kernels under test ---------------------------------------------------- */

/* tree reduction in shared memory; `barriers` picks which barriers exist:
   3 = both (correct), 1 = only after the store, 0 = none */
__global__ void block_sum(float *out, const float *x, int n, int barriers) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) acc += x[i];
    buf[t] = acc;
    if (barriers & 1) __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        if (barriers & 2) __syncthreads();
    }
    if (t == 0) atomicAdd(out, buf[0]);
}

/* per-warp sums with xor (butterfly) and down shuffles */
__global__ void warp_sums(float *xor_out, float *down_out, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float a = v, b = v;
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    for (int o = 16; o > 0; o >>= 1) b += __shfl_down_sync(0xffffffffu, b, o);
    int warp = i / 32;
    if (threadIdx.x % 32 == 0) down_out[warp] = b;
    xor_out[i] = a; /* every lane holds the sum after a butterfly */
}

/* inclusive prefix sum in a warp with __shfl_up_sync, broadcast with __shfl_sync */
__global__ void warp_scan(int *scan, int *bcast, unsigned *ballot, const int *x) {
    int t = threadIdx.x;
    int v = x[t];
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, v, o);
        if (t % 32 >= o) v += u;
    }
    scan[t] = v;
    bcast[t] = __shfl_sync(0xffffffffu, x[t], 5);
    unsigned b = __ballot_sync(0xffffffffu, x[t] % 2);
    if (t % 32 == 0) ballot[t / 32] = b;
}

/* reverse each block's slice through dynamic shared memory */
__global__ void reverse_block(float *out, const float *x, int n) {
    TRN_CUDA_DYNAMIC_SHARED(float, s);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : -1.0f;
    __syncthreads();
    int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - threadIdx.x);
    if (j < n) out[j] = s[threadIdx.x];
}

/* broken on purpose: a barrier only some threads reach */
__global__ void barrier_in_branch(float *x) {
    if (threadIdx.x < 16) __syncthreads();
    x[threadIdx.x] = 1.0f;
}
/* broken on purpose: an early return, then a barrier */
__global__ void return_then_barrier(float *x, int n) {
    int i = threadIdx.x;
    if (i >= n) return;
    x[i] = 2.0f;
    __syncthreads();
}
/* broken on purpose: threads wait at two different barriers */
__global__ void two_barriers(float *x) {
    if (threadIdx.x % 2) { x[threadIdx.x] = 1.0f; __syncthreads(); }
    else { x[threadIdx.x] = 2.0f; __syncthreads(); }
}
/* broken on purpose: a full-mask shuffle in a 48-thread block */
__global__ void partial_warp_shuffle(float *x) {
    float v = x[threadIdx.x];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    x[threadIdx.x] = v;
}
__global__ void atomics(int *sum, int *mx, const int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicAdd(sum, x[i]); atomicMax(mx, x[i]); }
}
__global__ void oob_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1.0f; /* the bug: <= */
}
__global__ void oob_shared_kernel(float *out) {
    __shared__ float buf[64];
    buf[threadIdx.x] = (float)threadIdx.x; /* launched with 65 threads */
    __syncthreads();
    out[threadIdx.x] = buf[63 - threadIdx.x % 64];
}

/* ---- helpers ---------------------------------------------------------------- */
static float *dev_upload(const float *h, size_t n) {
    float *d = nullptr;
    cudaMalloc(&d, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    return d;
}
template <class T> static T *dev_alloc(size_t n) {
    T *d = nullptr;
    cudaMalloc(&d, n * sizeof(T));
    cudaMemset(d, 0, n * sizeof(T));
    return d;
}
static float run_block_sum(int barriers, uint64_t seed, const float *dx, int n, float *dout) {
    cuemu::seed(seed);
    cudaMemset(dout, 0, sizeof(float));
    LAUNCH(block_sum, dim3(3), dim3(256), 0, dout, dx, n, barriers);
    float r;
    cudaMemcpy(&r, dout, sizeof r, cudaMemcpyDeviceToHost);
    return r;
}

/* column-major reference for the cuBLAS checks */
static void ref_gemm(int ta, int tb, int m, int n, int k, float al, const float *A, int lda,
                     const float *B, int ldb, float be, float *C, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int l = 0; l < k; l++)
                acc += (double)(ta ? A[l + i * lda] : A[i + l * lda]) * (tb ? B[j + l * ldb] : B[l + j * ldb]);
            C[i + j * ldc] = (float)(al * acc + be * C[i + j * ldc]);
        }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--help")) {
        printf("usage: %s [--oob-demo | --oob-shared-demo]\n"
               "  runs the self-tests of tests/cuda_on_cpu.h; the demos make a kernel write out\n"
               "  of bounds (of a cudaMalloc block / of a __shared__ array) so that\n"
               "  AddressSanitizer aborts with a report\n", argv[0]);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--oob-demo")) {
        float *d = dev_alloc<float>(100);
        LAUNCH(oob_kernel, dim3(1), dim3(128), 0, d, 100);
        printf("oob-demo: no report (not built with AddressSanitizer?)\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--oob-shared-demo")) {
        float *d = dev_alloc<float>(65);
        LAUNCH(oob_shared_kernel, dim3(1), dim3(65), 0, d);
        printf("oob-shared-demo: no report (not built with AddressSanitizer?)\n");
        return 0;
    }
    if (argc > 1) { fprintf(stderr, "test_cuda_harness: unknown flag %s (try --help)\n", argv[1]); return 2; }

    /* 1. a shared-memory reduction: right with its barriers, wrong without */
    const int n = 1000;
    std::vector<float> hx(n);
    double want = 0;
    for (int i = 0; i < n; i++) { hx[i] = (float)(i % 7); want += hx[i]; }
    float *dx = dev_upload(hx.data(), n), *dout = dev_alloc<float>(1);
    for (uint64_t s = 1; s <= 4; s++) {
        float got = run_block_sum(3, s, dx, n, dout);
        CHECK(got == (float)want, "block_sum with barriers, seed %d: %g want %g\n", (int)s, got, want);
    }
    long e0 = cuemu::errors();
    int wrong_loop = 0, wrong_none = 0;
    for (uint64_t s = 1; s <= 4; s++) {
        wrong_loop += run_block_sum(1, s, dx, n, dout) != (float)want;
        wrong_none += run_block_sum(0, s, dx, n, dout) != (float)want;
    }
    printf("missing barrier in the loop: wrong sum in %d of 4 seeds; no barriers: %d of 4\n",
           wrong_loop, wrong_none);
    CHECK(wrong_loop >= 3, "missing loop barrier detected in only %d of 4 seeds\n", wrong_loop);
    CHECK(wrong_none >= 3, "missing barriers detected in only %d of 4 seeds\n", wrong_none);
    CHECK(cuemu::errors() == e0, "no harness errors for a race (it shows as a wrong result)\n");

    /* 2. warp shuffles: 3 blocks of 96 threads, 260 values (odd tail) */
    {
        const int m = 260, nt = 3 * 96;
        std::vector<float> h(m);
        for (int i = 0; i < m; i++) h[i] = (float)((i * 37) % 11) - 5.0f;
        float *d = dev_upload(h.data(), m);
        float *dxor = dev_alloc<float>(nt), *ddown = dev_alloc<float>(nt / 32);
        LAUNCH(warp_sums, dim3(3), dim3(96), 0, dxor, ddown, (const float *)d, m);
        std::vector<float> gx(nt), gd(nt / 32);
        cudaMemcpy(gx.data(), dxor, nt * sizeof(float), cudaMemcpyDeviceToHost);
        cudaMemcpy(gd.data(), ddown, nt / 32 * sizeof(float), cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int w = 0; w < nt / 32; w++) {
            float s = 0;
            for (int l = 0; l < 32; l++) s += w * 32 + l < m ? h[(size_t)(w * 32 + l)] : 0.0f;
            bad += gd[(size_t)w] != s;
            for (int l = 0; l < 32; l++) bad += gx[(size_t)(w * 32 + l)] != s;
        }
        CHECK(bad == 0, "warp sums: %d wrong\n", bad);
    }
    {
        const int nt = 64;
        std::vector<int> h(nt);
        for (int i = 0; i < nt; i++) h[i] = (i * 5 + 3) % 9;
        int *d = dev_alloc<int>(nt), *ds = dev_alloc<int>(nt), *db = dev_alloc<int>(nt);
        unsigned *dbal = dev_alloc<unsigned>(2);
        cudaMemcpy(d, h.data(), nt * sizeof(int), cudaMemcpyHostToDevice);
        LAUNCH(warp_scan, dim3(1), dim3(nt), 0, ds, db, dbal, (const int *)d);
        std::vector<int> gs(nt), gb(nt);
        unsigned gbal[2];
        cudaMemcpy(gs.data(), ds, nt * sizeof(int), cudaMemcpyDeviceToHost);
        cudaMemcpy(gb.data(), db, nt * sizeof(int), cudaMemcpyDeviceToHost);
        cudaMemcpy(gbal, dbal, sizeof gbal, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int w = 0; w < 2; w++) {
            int run = 0;
            unsigned bal = 0;
            for (int l = 0; l < 32; l++) {
                int i = w * 32 + l;
                run += h[(size_t)i];
                bad += gs[(size_t)i] != run;
                bad += gb[(size_t)i] != h[(size_t)(w * 32 + 5)];
                if (h[(size_t)i] % 2) bal |= 1u << l;
            }
            bad += gbal[w] != bal;
        }
        CHECK(bad == 0, "scan/broadcast/ballot: %d wrong\n", bad);
    }

    /* 3. dynamic shared memory, a block size that is not a multiple of 32 */
    {
        const int m = 250, bs = 100;
        std::vector<float> h(m), g(m);
        for (int i = 0; i < m; i++) h[i] = (float)i;
        float *d = dev_upload(h.data(), m), *o = dev_alloc<float>(m);
        LAUNCH(reverse_block, dim3(3), dim3(bs), bs * sizeof(float), o, (const float *)d, m);
        cudaMemcpy(g.data(), o, m * sizeof(float), cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int i = 0; i < m; i++) {
            int b = i / bs, j = b * bs + (bs - 1 - i % bs);
            float w = j < m ? (float)j : -1.0f;
            bad += g[(size_t)i] != w;
        }
        CHECK(bad == 0, "dynamic shared reverse: %d wrong\n", bad);
    }

    /* 4. broken kernels are reported (and the program goes on) */
    {
        float *d = dev_alloc<float>(64);
        long e = cuemu::errors();
        fprintf(stderr, "(the next harness errors are expected)\n");
        LAUNCH(barrier_in_branch, dim3(1), dim3(64), 0, d);
        CHECK(cuemu::errors() > e, "barrier in a branch not reported\n");
        e = cuemu::errors();
        LAUNCH(return_then_barrier, dim3(1), dim3(64), 0, d, 50);
        CHECK(cuemu::errors() > e, "early return + barrier not reported\n");
        e = cuemu::errors();
        LAUNCH(two_barriers, dim3(1), dim3(64), 0, d);
        CHECK(cuemu::errors() > e, "two different barriers not reported\n");
        e = cuemu::errors();
        LAUNCH(partial_warp_shuffle, dim3(1), dim3(48), 0, d);
        CHECK(cuemu::errors() > e, "full-mask shuffle in a partial warp not reported\n");
        e = cuemu::errors();
        /* and a good kernel right after still works */
        float got = run_block_sum(3, 9, dx, n, dout);
        CHECK(got == (float)want && cuemu::errors() == e, "block_sum after broken kernels\n");
    }

    /* 5. launch configurations a GPU rejects are rejected */
    {
        float *d = dev_alloc<float>(4);
        cudaGetLastError();
        CHECK(LAUNCH(barrier_in_branch, dim3(1), dim3(1025), 0, d) == cudaErrorInvalidConfiguration &&
              cudaGetLastError() == cudaErrorInvalidConfiguration, "1025 threads accepted\n");
        CHECK(LAUNCH(barrier_in_branch, dim3(0), dim3(32), 0, d) == cudaErrorInvalidConfiguration &&
              cudaGetLastError() == cudaErrorInvalidConfiguration, "0 blocks accepted\n");
        CHECK(LAUNCH(reverse_block, dim3(1), dim3(32), 64 * 1024, d, (const float *)d, 4) ==
              cudaErrorInvalidConfiguration, "64 KiB dynamic shared accepted\n");
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaSuccess,
              "cudaGetLastError is not sticky-then-cleared\n");
    }

    /* 6. atomics across blocks in shuffled order */
    {
        const int m = 777;
        std::vector<int> h(m);
        long long s = 0;
        int mx = 0;
        for (int i = 0; i < m; i++) { h[i] = (i * 7919) % 1000; s += h[i]; mx = h[i] > mx ? h[i] : mx; }
        int *d = dev_alloc<int>(m), *ds = dev_alloc<int>(1), *dm = dev_alloc<int>(1);
        cudaMemcpy(d, h.data(), m * sizeof(int), cudaMemcpyHostToDevice);
        LAUNCH(atomics, dim3((m + 127) / 128), dim3(128), 0, ds, dm, (const int *)d, m);
        int gs, gm;
        cudaMemcpy(&gs, ds, sizeof gs, cudaMemcpyDeviceToHost);
        cudaMemcpy(&gm, dm, sizeof gm, cudaMemcpyDeviceToHost);
        CHECK(gs == s && gm == mx, "atomics: sum %d want %lld, max %d want %d\n", gs, s, gm, mx);
    }

    /* 7. cuBLAS: column-major, every transpose, odd shapes, padded leading dims */
    {
        cublasHandle_t h;
        CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate\n");
        const int m = 7, nn = 5, k = 3, ld = 9;
        std::vector<float> A(ld * 9), B(ld * 9), C0(ld * nn), C(ld * nn), R(ld * nn);
        for (size_t i = 0; i < A.size(); i++) { A[i] = (float)((i * 13) % 17) / 8 - 1; B[i] = (float)((i * 7) % 11) / 4 - 1; }
        for (size_t i = 0; i < C0.size(); i++) C0[i] = (float)(i % 5);
        float *dA = dev_upload(A.data(), A.size()), *dB = dev_upload(B.data(), B.size());
        float *dC = dev_alloc<float>(C0.size());
        float al = 0.5f, be = 2.0f;
        double maxd = 0;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                cudaMemcpy(dC, C0.data(), C0.size() * sizeof(float), cudaMemcpyHostToDevice);
                cublasStatus_t st = cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                m, nn, k, &al, dA, ld, dB, ld, &be, dC, ld);
                CHECK(st == CUBLAS_STATUS_SUCCESS, "sgemm status %d\n", (int)st);
                cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost);
                R = C0;
                ref_gemm(ta, tb, m, nn, k, al, A.data(), ld, B.data(), ld, be, R.data(), ld);
                for (size_t i = 0; i < C.size(); i++) maxd = fmax(maxd, fabs(C[i] - R[i]));
            }
        CHECK(maxd < 1e-5, "sgemm vs reference: max diff %g\n", maxd);
        /* strided batched through GemmEx: 3 batches */
        std::vector<float> Cb(3 * m * nn), Rb(3 * m * nn, 0.0f);
        float *dCb = dev_alloc<float>(Cb.size());
        float one = 1.0f, zero = 0.0f;
        CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, nn, k, &one, dA, CUDA_R_32F, m, m * k,
                                         dB, CUDA_R_32F, k, k * nn, &zero, dCb, CUDA_R_32F, m, m * nn, 3,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
              "strided batched status\n");
        cudaMemcpy(Cb.data(), dCb, Cb.size() * sizeof(float), cudaMemcpyDeviceToHost);
        maxd = 0;
        for (int b = 0; b < 3; b++) {
            ref_gemm(0, 0, m, nn, k, 1, A.data() + b * m * k, m, B.data() + b * k * nn, k, 0, Rb.data() + b * m * nn, m);
        }
        for (size_t i = 0; i < Cb.size(); i++) maxd = fmax(maxd, fabs(Cb[i] - Rb[i]));
        CHECK(maxd < 1e-5, "strided batched vs reference: %g\n", maxd);
        /* beta = 0 never reads C: NaN there must not leak */
        std::vector<float> nanC(C0.size(), NAN);
        cudaMemcpy(dC, nanC.data(), nanC.size() * sizeof(float), cudaMemcpyHostToDevice);
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, nn, k, &one, dA, ld, dB, ld, &zero, dC, ld);
        cudaMemcpy(C.data(), dC, C.size() * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(!isnan(C[0]) && !isnan(C[(size_t)((nn - 1) * ld + m - 1)]), "beta=0 read C\n");
        /* a leading dimension that is too small is rejected */
        long e = cuemu::errors();
        CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, nn, k, &one, dA, m - 1, dB, ld, &zero, dC, ld) ==
              CUBLAS_STATUS_INVALID_VALUE, "lda < m accepted\n");
        CHECK(cuemu::errors() == e + 1, "bad lda not counted as a harness error\n");
        cuemu::S().errors = e; /* expected */
        /* TF32: inputs rounded to 10 mantissa bits */
        float a1 = 1.0f + 1.0f / 4096, b1 = 1.0f; /* a1 is not a TF32 number */
        float *da = dev_upload(&a1, 1), *db = dev_upload(&b1, 1), *dc = dev_alloc<float>(1);
        float c32, ctf;
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 1, &zero,
                     dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(&c32, dc, 4, cudaMemcpyDeviceToHost);
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 1, &zero,
                     dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(&ctf, dc, 4, cudaMemcpyDeviceToHost);
        CHECK(c32 == a1 && ctf == 1.0f, "tf32 emulation: fp32 %.9g tf32 %.9g\n", c32, ctf);
        cublasDestroy(h);
    }

    /* 8. the runtime's bookkeeping: wrong-direction copies, memory limits */
    {
        float host[4] = {1, 2, 3, 4};
        float *d = dev_alloc<float>(4);
        long e = cuemu::errors();
        CHECK(cudaMemcpy(host, d, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
              "HostToDevice into host memory accepted\n");
        CHECK(cudaMemcpy(d, host, 32, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
              "copy past the end of a cudaMalloc block accepted\n");
        CHECK(cuemu::errors() == e + 2, "bad copies not counted\n");
        cuemu::S().errors = e; /* expected */
        cudaGetLastError();
        size_t fr0, tot, fr1;
        cudaMemGetInfo(&fr0, &tot);
        float *big;
        CHECK(cudaMalloc(&big, 1 << 20) == cudaSuccess, "1 MiB\n");
        cudaMemGetInfo(&fr1, &tot);
        CHECK(fr0 - fr1 == (1 << 20), "cudaMemGetInfo does not see a 1 MiB allocation\n");
        cudaFree(big);
        size_t keep = cuemu::config().total_mem;
        cuemu::config().total_mem = (size_t)1 << 30;
        CHECK(cudaMalloc(&big, (size_t)2 << 30) == cudaErrorMemoryAllocation, "2 GiB of 1 accepted\n");
        CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "OOM not in cudaGetLastError\n");
        cuemu::config().total_mem = keep;
    }
    printf("harness: %ld launches, %ld blocks, %lld gemms\n", cuemu::S().launches, cuemu::S().blocks,
           cuemu::gemms);
    cudaDeviceReset();
    return check_summary();
}
