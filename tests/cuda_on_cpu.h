/* tests/cuda_on_cpu.h - run CUDA kernels on the CPU, for tests (not part of
   the kit's API). It lets train_cuda.h compile as plain C++ with g++ and run
   every kernel, every cuBLAS call and every runtime call on the host, so CI
   without a GPU still executes the GPU code path.

   Do this, in one C++ test file:
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "tests/cuda_on_cpu.h"      // defines TRN_CUDA_ON_CPU
      #define TRAIN_CUDA_IMPLEMENTATION
      #include "train_cuda.h"
   and build it with g++ -std=c++17 (add -fsanitize=address,undefined: the
   harness annotates its stack switches for AddressSanitizer).

   How a launch runs. Blocks run one after another, in a shuffled order. The
   threads of a block are fibers (one small stack each; a 20-instruction
   stack switch on x86-64, ucontext elsewhere or with -DCUEMU_UCONTEXT) on one OS
   thread; a fiber runs until it reaches a synchronization point and then the
   scheduler picks the NEXT fiber AT RANDOM (seeded: CUEMU_SEED=n, or
   cuemu::seed; cuemu::config().order picks a fixed order instead). Synchronization points are __syncthreads (all threads of the
   block), the warp collectives (__shfl*_sync, __ballot_sync, __syncwarp:
   the lanes named in the mask) and, as extra preemption points, atomics.
   So the code between two barriers runs in a random thread order, and a
   kernel that forgot a barrier reads values that are not there yet.

   Mapping of CUDA to C++:
      __global__ __device__ __host__   nothing (kernels are plain functions)
      __forceinline__                  inline
      __shared__                       static: blocks run one at a time on
                                       one OS thread, so a static IS the
                                       block's shared memory (and ASan puts
                                       redzones around it)
      dynamic shared memory            TRN_CUDA_DYNAMIC_SHARED(T, name) in
                                       kernels; here a malloc of exactly the
                                       launch's bytes, filled with 0xff (NaN)
      threadIdx blockIdx blockDim      globals, switched with each fiber
      gridDim warpSize
      device memory                    host memory (posix_memalign), so ASan
                                       sees out-of-bounds kernel accesses
      cuBLAS                           a reference column-major GEMM; TF32
                                       math rounds the inputs to TF32; bf16
                                       inputs are read exactly, summed in
                                       fp32, a bf16 result rounded once
      cuBLASLt                         the same GEMM behind descriptors,
                                       layouts and a heuristic, with the
                                       bias epilogue (see its section)
      streams, events                  synchronous host operations (the
                                       calls that would make the host wait
                                       are counted: cuemu::host_syncs())
   A kernel is launched by TRN_CUDA_LAUNCH(kernel, grid, block, shmem,
   stream, args...) (defined by train_cuda.h: <<<>>> under nvcc, a call to
   cuemu::launch here).

   What it reports (cuemu::errors() counts them; each is printed with the
   kernel, launch site, block and thread): a deadlock (threads wait at a
   barrier that others never reach, e.g. a __syncthreads after an early
   return), threads of one block waiting at DIFFERENT __syncthreads, a warp
   collective whose mask names lanes that do not exist or lanes that do not
   take part, a shuffle that reads a lane outside the mask, a launch from
   inside a kernel. Invalid launch configurations (0 blocks, > 1024
   threads, > 48 KiB dynamic shared memory) return cudaErrorInvalidConfiguration
   from cudaGetLastError as on a GPU; bad cuBLAS arguments (lda too small)
   return CUBLAS_STATUS_INVALID_VALUE; cudaMemcpy checks that the device side
   of a copy is inside one cudaMalloc block.

   Two sanitizer modes (the harness adapts to how the test is compiled):
      -fsanitize=address  device memory is malloc'd with its exact size and
                          static __shared__ arrays are globals, so a kernel
                          that reads or writes out of bounds is reported
                          with the kernel's line (fiber stacks annotated)
      -fsanitize=thread   a race detector for kernels: fibers switch without
                          creating happens-before; only __syncthreads, warp
                          collectives and atomics order threads, as on a
                          GPU. Two accesses to one address (one a write) of
                          one block not ordered by them are reported, even
                          when this run's thread order gave the right answer
                          (a missing barrier, a += that should be atomicAdd)

   What it cannot catch: races between BLOCKS (blocks run whole, one after
   another, and TSan mode orders them too); without TSan, a race inside a
   stretch of code between two sync points (a fiber is never interrupted
   there, so a non-atomic read-modify-write of one address by two threads
   gives the right sum); reads of uninitialized static __shared__ memory
   (it keeps the previous block's values; dynamic shared memory starts as
   NaN); a kernel dereferencing a host pointer (one address space);
   differences of fast-math intrinsics (__expf is expf here); the GPU memory
   model's weaker orderings (no caches, no reordering: a missing
   __threadfence between blocks is invisible); anything about speed.
*/
#ifndef CUDA_ON_CPU_H
#define CUDA_ON_CPU_H
#ifndef __cplusplus
#error "cuda_on_cpu.h is C++: compile the test with g++ -std=c++17"
#endif
#define TRN_CUDA_ON_CPU 1

#include <ucontext.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <chrono>
#include <map>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/asan_interface.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define CUEMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUEMU_TSAN 1
#endif
#endif
#ifdef CUEMU_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
#endif
/* The harness's own bookkeeping is not part of the program under test:
   under ThreadSanitizer, a CUEMU_HARNESS_CODE scope ignores the memory
   accesses of the fiber that runs it (sync operations still count). */
#ifdef CUEMU_TSAN
namespace cuemu {
struct HarnessCode {
    HarnessCode() { __tsan_ignore_thread_begin(); }
    ~HarnessCode() { __tsan_ignore_thread_end(); }
};
} /* namespace cuemu */
#define CUEMU_HARNESS_CODE cuemu::HarnessCode cuemu_harness_scope_
#else
#define CUEMU_HARNESS_CODE ((void)0)
#endif

/* ---- the CUDA language: qualifiers and built-in variables ---------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __constant__
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct uint3 { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 u) : x(u.x), y(u.y), z(u.z) {}
};
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float2 make_float2(float x, float y) { float2 r = {x, y}; return r; }
static inline float4 make_float4(float x, float y, float z, float w) { float4 r = {x, y, z, w}; return r; }

/* bfloat16 (cuda_bf16.h): the top 16 bits of an fp32, stored as its bits.
   The conversions are bit-exact with the GPU's: float -> bf16 rounds to
   nearest, ties to even (__float2bfloat16 is _rn); a NaN stays a NaN
   (quiet); bf16 -> float is exact. Kernels use only these functions, never
   the type's C++ operators, so the same source means the same on both. */
struct __nv_bfloat16 { unsigned short x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { r.x = (unsigned short)((u >> 16) | 0x40u); return r; } /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                      /* round to nearest even */
    r.x = (unsigned short)(u >> 16);
    return r;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 r; r.x = u; return r; }
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- the CUDA runtime API, as far as train_cuda.h uses it ---------------- */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorUnsupportedPtxVersion = 222,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorLaunchFailure = 719
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
} cudaMemcpyKind;
struct CUstream_st { int id; };
typedef CUstream_st *cudaStream_t;
struct CUevent_st { std::chrono::steady_clock::time_point t; };
typedef CUevent_st *cudaEvent_t;
#define cudaStreamNonBlocking 0x01
#define cudaStreamDefault 0x00
#define CUDART_VERSION 12040
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock;
    int major, minor, multiProcessorCount, maxThreadsPerBlock, warpSize;
    int maxThreadsPerMultiProcessor;
};

namespace cuemu {

/* knobs for tests of the error paths (defaults: one healthy emulated GPU) */
struct Config {
    int device_count = 1;
    int driver_version = 12040;        /* what cudaDriverGetVersion reports   */
    size_t total_mem = (size_t)16 << 30;
    size_t context_bytes = (size_t)300 << 20; /* "used" before any cudaMalloc */
    size_t cublas_bytes = (size_t)4 << 20;    /* what cublasCreate "takes"    */
    int preempt_atomics = 1;           /* atomics are preemption points       */
    int dry_run = 0; /* 1: kernel launches and GEMMs are checked and counted
                        but not run: the memory plan of a model too big to
                        compute here (every allocation happens, the ledger
                        is exact; the values are garbage) */
    int order = 0;   /* 0: random; 1: lowest thread first; 2: highest first
                        (fixed orders, for debugging and for showing that
                        a race can hide under one order)                   */
};

enum { F_RUN, F_BAR, F_WARP, F_DONE };
struct Fiber {
    ucontext_t ctx;            /* the ucontext switch              */
    void *sp;                  /* the x86-64 switch: saved stack pointer */
    void *fake_stack;
    int state;
    unsigned warp_gen, bar_gen;
    uint3 tid;
};
struct WarpState {
    unsigned exist;        /* lanes that exist in this warp            */
    int arrived[2];        /* double-buffered by each lane's gen & 1   */
    unsigned mask[2];
    const char *file[2];       /* the collective's name */
    int line[2];
    int mixed[2];              /* lanes met at different wmma calls */
    uint64_t val[2][32];
};
struct Launch {
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    void (*body)(void *);
    void *arg;
};
struct State {
    Config cfg;
    /* fibers of the block running now */
    std::vector<Fiber> fib;
    char *stacks = nullptr;
    size_t stack_size = 0, stack_threads = 0;
    ucontext_t main_ctx;
    void *main_sp = nullptr;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    void *main_fake = nullptr;
    std::vector<int> runq;
    int cur = -1, nthreads = 0;
    int bar_arrived = 0;
    const char *bar_file = nullptr;
    int bar_line = 0, bar_diverged = 0;
    std::vector<WarpState> warps;
    const Launch *L = nullptr;
    unsigned char *dyn = nullptr;
    int in_kernel = 0;
    uint64_t rng = 0;
    int seeded = 0;
    /* bookkeeping */
    long errors = 0, printed = 0, launches = 0, blocks = 0, launch_printed = 0, launch_errors0 = 0;
    cudaError_t last_error = cudaSuccess;
    std::map<uintptr_t, size_t> allocs;   /* device allocations: base -> bytes */
    size_t alloc_bytes = 0, cublas_live = 0;
    int context_up = 0;
    /* ThreadSanitizer mode: one TSan fiber per stack slot, and the sync
       objects (any address will do) that barriers release and acquire */
    void *tsan_main = nullptr;
    std::vector<void *> tsan_fib;
    std::vector<char> tsan_sync; /* [0] block start, [1] block end, [2..3] barrier, then 2 per warp */
    /* cp.async: per thread of the block, the copies not yet in a group and
       the committed groups not yet waited for (see "PTX" below) */
    struct CpCopy { void *dst; const void *src; int bytes; };
    struct CpThread { std::vector<CpCopy> open; std::vector<std::vector<CpCopy> > groups; };
    std::vector<CpThread> cp;
};
inline State &S() { static State s; return s; }
inline Config &config() { return S().cfg; }

inline void seed(uint64_t x) { S().rng = x * 0x9E3779B97F4A7C15ull + 1; S().seeded = 1; }
inline uint64_t rnd() {
    State &s = S();
    if (!s.seeded) {
        const char *e = getenv("CUEMU_SEED");
        seed(e ? strtoull(e, nullptr, 10) : 12345);
    }
    uint64_t x = s.rng; /* xorshift64* */
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    s.rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

inline long errors() { return S().errors; }
/* a diagnostic: counted, printed (the first 20) with where it happened */
inline void error(const char *fmt, ...) {
    CUEMU_HARNESS_CODE;
    State &s = S();
    s.errors++;
    /* at most 3 lines per launch (the rest are counted), 200 in all */
    if (s.in_kernel && s.launch_printed++ >= 3) return;
    if (s.printed++ >= 200) return;
    fprintf(stderr, "cuda_on_cpu: ");
    if (s.in_kernel && s.L) {
        fprintf(stderr, "kernel %s (launched at %s:%d) block (%u,%u,%u)", s.L->name, s.L->file,
                s.L->line, blockIdx.x, blockIdx.y, blockIdx.z);
        if (s.cur >= 0)
            fprintf(stderr, " thread (%u,%u,%u)", s.fib[s.cur].tid.x, s.fib[s.cur].tid.y,
                    s.fib[s.cur].tid.z);
        fprintf(stderr, ": ");
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
/* a 16-byte vector load or store (ld/st.global.v4: float4, int4, 8 bf16)
   needs an address that is a multiple of 16; a GPU raises a misaligned
   address fault, the harness an error. train_cuda.h's trn__ld16/trn__st16
   call it on every access. */
inline void check_align16(const void *p, const char *what) {
    if ((uintptr_t)p % 16) error("%s at %p: the address is not 16-byte aligned (a GPU faults)", what, p);
}

/* ---- fibers: switching stacks (annotated for AddressSanitizer) ----------- */
inline void asan_start(void **fake, const void *bottom, size_t size) {
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake; (void)bottom; (void)size;
#endif
}
inline void asan_finish(void *fake, const void **bottom_old, size_t *size_old) {
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom_old, size_old);
#else
    (void)fake; (void)bottom_old; (void)size_old;
#endif
}
inline char *stack_of(int i) { return S().stacks + (size_t)i * S().stack_size; }

/* ThreadSanitizer mode (-fsanitize=thread): fibers switch WITHOUT creating
   happens-before, so TSan sees the threads of a block as concurrent; only
   __syncthreads (all threads), warp collectives (their lanes) and atomics
   order them, as on a GPU. Any two accesses to one address, one a write,
   not ordered by those is reported as a data race: a missing barrier is
   caught even when this run's thread order happened to give the right
   answer. Blocks are ordered one after another (static __shared__ arrays
   are reused by the next block), so races between blocks are not seen. */
inline void tsan_release(size_t k) {
#ifdef CUEMU_TSAN
    __tsan_release(&S().tsan_sync[k]);
#else
    (void)k;
#endif
}
inline void tsan_acquire(size_t k) {
#ifdef CUEMU_TSAN
    __tsan_acquire(&S().tsan_sync[k]);
#else
    (void)k;
#endif
}
#ifdef CUEMU_TSAN
/* not instrumented: between telling TSan "now fiber X" and the actual
   switch, no instrumented function may enter or leave */
#define CUEMU_NO_TSAN_INSTR __attribute__((no_sanitize_thread, noinline))
#else
#define CUEMU_NO_TSAN_INSTR
#endif

/* Switching stacks. swapcontext costs a system call (it saves the signal
   mask), which made it most of the run time; on x86-64 a switch only has
   to save the callee-saved registers, MXCSR and the x87 control word. */
#if defined(__x86_64__) && !defined(CUEMU_UCONTEXT)
#define CUEMU_FAST_SWITCH 1
extern "C" void cuemu_switch_x86_64(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".weak cuemu_switch_x86_64\n"
        ".type cuemu_switch_x86_64,@function\n"
        "cuemu_switch_x86_64:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size cuemu_switch_x86_64, .-cuemu_switch_x86_64\n");
#endif

/* save the running context in (save_sp | save_ctx), resume (to_sp |
   to_ctx); save_ctx NULL: the running fiber is finished. tsan_to is the
   TSan fiber that runs next (NULL without TSan). */
CUEMU_NO_TSAN_INSTR inline void switch_stacks(void **save_sp, void *to_sp, ucontext_t *save_ctx,
                                              ucontext_t *to_ctx, void *tsan_to) {
#ifdef CUEMU_TSAN
    __tsan_switch_to_fiber(tsan_to, __tsan_switch_to_fiber_no_sync);
#else
    (void)tsan_to;
#endif
#ifdef CUEMU_FAST_SWITCH
    (void)save_ctx; (void)to_ctx;
    cuemu_switch_x86_64(save_sp, to_sp);
#else
    (void)save_sp; (void)to_sp;
    if (save_ctx) swapcontext(save_ctx, to_ctx);
    else setcontext(to_ctx);
#endif
}

/* the running fiber gives control back to the scheduler */
inline void yield() {
    State &s = S();
    Fiber &f = s.fib[s.cur];
    asan_start(&f.fake_stack, s.main_bottom, s.main_size);
    switch_stacks(&f.sp, s.main_sp, &f.ctx, &s.main_ctx, s.tsan_main);
    asan_finish(f.fake_stack, &s.main_bottom, &s.main_size);
}

/* (not instrumented by TSan: it never returns, so its entry would pile up
   on the TSan fiber's shadow stack, block after block) */
CUEMU_NO_TSAN_INSTR inline void fiber_entry() {
    State &s = S();
    asan_finish(nullptr, &s.main_bottom, &s.main_size);
    tsan_acquire(0); /* what the host did before the block */
    {
        void (*body)(void *) = nullptr;
        void *arg = nullptr;
        {
            CUEMU_HARNESS_CODE;
            body = s.L->body;
            arg = s.L->arg;
        }
        body(arg); /* the kernel: the only code here that TSan watches */
    }
    {
        CUEMU_HARNESS_CODE; /* (a scope: this fiber never returns) */
        s.fib[s.cur].state = F_DONE;
    }
    tsan_release(1); /* what this thread did, for the host after the block */
    asan_start(nullptr, s.main_bottom, s.main_size); /* this fiber is finished */
    void *dead;
    switch_stacks(&dead, s.main_sp, nullptr, &s.main_ctx, s.tsan_main);
    abort(); /* not reached */
}

/* a fresh fiber on stack i: its first switch "returns" into fiber_entry */
inline void fiber_init(Fiber &f, int i) {
    State &s = S();
#ifdef CUEMU_FAST_SWITCH
    uintptr_t top = ((uintptr_t)stack_of(i) + s.stack_size) & ~(uintptr_t)15;
#ifdef CUEMU_ASAN
    /* a finished fiber never returns from fiber_entry, so that frame's
       redzones stay poisoned in the shadow: clear the top of the stack (a
       deadlock clears whole stacks, see run_block) */
    __asan_unpoison_memory_region((void *)(top - 2048), 2048);
#endif
    uint64_t *sp = (uint64_t *)top;
    uint32_t csr[2];
    __asm__ volatile("stmxcsr %0\n fnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    *--sp = 0;                            /* fiber_entry's return address: none */
    *--sp = (uint64_t)(uintptr_t)&fiber_entry;
    for (int r = 0; r < 6; r++) *--sp = 0; /* rbp rbx r12-r15 */
    *--sp = (uint64_t)csr[0] | ((uint64_t)(csr[1] & 0xffffu) << 32);
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack_of(i);
    f.ctx.uc_stack.ss_size = s.stack_size;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, (void (*)())fiber_entry, 0);
#endif
}

inline unsigned linear_tid(uint3 t) {
    return t.x + t.y * blockDim.x + t.z * blockDim.x * blockDim.y;
}

/* ---- __syncthreads: every thread of the block, at the same barrier ------- */
inline void syncthreads(const char *file, int line) {
    CUEMU_HARNESS_CODE;
    State &s = S();
    if (!s.in_kernel) return;
    Fiber &f = s.fib[s.cur];
    if (s.bar_arrived == 0) {
        s.bar_file = file;
        s.bar_line = line;
    } else if ((line != s.bar_line || strcmp(file, s.bar_file) != 0) && !s.bar_diverged) {
        s.bar_diverged = 1; /* once per barrier */
        error("divergent __syncthreads: this thread waits at %s:%d, others at %s:%d", file,
              line, s.bar_file, s.bar_line);
    }
    if (++s.bar_arrived == s.nthreads) { /* the last one in opens the barrier */
        s.bar_arrived = 0;
        s.bar_diverged = 0;
        for (int i = 0; i < s.nthreads; i++)
            if (s.fib[i].state == F_BAR) { s.fib[i].state = F_RUN; s.runq.push_back(i); }
        s.runq.push_back(s.cur);
    } else {
        f.state = F_BAR;
    }
    tsan_release(2 + (f.bar_gen & 1u));
    yield();
    tsan_acquire(2 + (f.bar_gen & 1u));
    f.bar_gen++;
}

/* an extra preemption point (after atomics): another thread may run now */
inline void preempt() {
    CUEMU_HARNESS_CODE;
    State &s = S();
    if (!s.in_kernel || !s.cfg.preempt_atomics) return;
    s.runq.push_back(s.cur);
    yield();
}

/* ---- warp collectives: the lanes in mask meet, deposit, then read -------- */
inline const uint64_t *warp_meet(unsigned mask, uint64_t v, const char *op, int *lane_out,
                                 unsigned *exist_out, int *mixed_out = nullptr) {
    CUEMU_HARNESS_CODE;
    State &s = S();
    Fiber &f = s.fib[s.cur];
    unsigned lin = linear_tid(f.tid);
    int lane = (int)(lin % 32);
    WarpState &W = s.warps[lin / 32];
    *lane_out = lane;
    *exist_out = W.exist;
    if (mask & ~W.exist)
        error("%s: mask 0x%08x names lanes that do not exist (this warp has 0x%08x: the "
              "block size is not a multiple of 32)", op, mask, W.exist);
    if (!((mask >> lane) & 1u)) error("%s: calling lane %d is not in mask 0x%08x", op, lane, mask);
    int g = (int)(f.warp_gen & 1u);
    if (W.arrived[g] == 0) {
        W.mask[g] = mask;
        W.file[g] = op;
        W.mixed[g] = 0;
    } else if (W.mask[g] != mask) {
        error("%s: lanes of one warp disagree on the mask (0x%08x vs 0x%08x)", op, mask, W.mask[g]);
    } else if (strcmp(W.file[g], op) != 0 && (!strncmp(op, "wmma::", 6) || !strncmp(W.file[g], "wmma::", 6) ||
                                              !strncmp(op, "ptx ", 4) || !strncmp(W.file[g], "ptx ", 4))) {
        if (!W.mixed[g])
            error("%s: other lanes of this warp are at %s (a wmma call or a .aligned PTX instruction is for the "
                  "whole warp)", op, W.file[g]);
        W.mixed[g] = 1;
    }
    W.val[g][lane] = v;
    int need = __builtin_popcount((W.mask[g] & W.exist) | (1u << lane));
    if (++W.arrived[g] >= need) {
        W.arrived[g] = 0;
        unsigned base = lin / 32 * 32;
        for (int l = 0; l < 32; l++) {
            int i = (int)(base + (unsigned)l);
            if (i < s.nthreads && s.fib[i].state == F_WARP) { s.fib[i].state = F_RUN; s.runq.push_back(i); }
        }
        s.runq.push_back(s.cur);
    } else {
        f.state = F_WARP;
    }
    tsan_release(4 + 2 * (lin / 32) + (size_t)g);
    yield();
    tsan_acquire(4 + 2 * (lin / 32) + (size_t)g);
    f.warp_gen++;
    if (mixed_out) *mixed_out = W.mixed[g];
    return W.val[g];
}

template <class T> inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffle of a type larger than 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <class T> inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}
/* read lane src of a met warp; src outside the mask is an error (undefined on a GPU) */
template <class T>
inline T shfl_read(const uint64_t *vals, unsigned mask, unsigned exist, int lane, int src,
                   const char *op) {
    CUEMU_HARNESS_CODE;
    if (src != lane && (!((mask >> src) & 1u) || !((exist >> src) & 1u))) {
        error("%s: lane %d reads lane %d, which is not in mask 0x%08x or does not exist", op,
              lane, src, mask);
        return from_bits<T>(vals[lane]);
    }
    return from_bits<T>(vals[src]);
}

/* ---- launching: every block, every thread a fiber ------------------------ */
inline void ensure_stacks(int n) {
    State &s = S();
#ifdef CUEMU_ASAN
    const size_t want = 256 << 10;
#else
    const size_t want = 64 << 10;
#endif
    if (s.stacks && (size_t)n <= s.stack_threads) return;
    if (s.stacks) munmap(s.stacks, s.stack_size * s.stack_threads);
    s.stack_size = want;
    s.stack_threads = (size_t)n;
    void *p = mmap(nullptr, s.stack_size * s.stack_threads, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) { fprintf(stderr, "cuda_on_cpu: cannot map fiber stacks\n"); abort(); }
    s.stacks = (char *)p;
    s.fib.resize((size_t)n);
#ifdef CUEMU_TSAN
    if (!s.tsan_main) s.tsan_main = __tsan_get_current_fiber();
    while (s.tsan_fib.size() < (size_t)n) s.tsan_fib.push_back(__tsan_create_fiber(0));
#endif
}

inline void run_block(const Launch &L, uint3 b) {
    CUEMU_HARNESS_CODE;
    State &s = S();
    blockIdx = b;
    int n = s.nthreads;
    for (int i = 0; i < n; i++) {
        Fiber &f = s.fib[i];
        fiber_init(f, i);
        f.state = F_RUN;
        f.warp_gen = 0;
        f.bar_gen = 0;
        f.fake_stack = nullptr;
        f.tid.x = (unsigned)i % L.block.x;
        f.tid.y = (unsigned)i / L.block.x % L.block.y;
        f.tid.z = (unsigned)i / (L.block.x * L.block.y);
    }
    s.warps.assign((size_t)(n + 31) / 32, WarpState());
    for (size_t w = 0; w < s.warps.size(); w++) {
        int lanes = n - (int)w * 32 < 32 ? n - (int)w * 32 : 32;
        s.warps[w].exist = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
    }
    s.bar_arrived = 0;
    s.bar_diverged = 0;
    s.cp.assign((size_t)n, State::CpThread());
    if (L.shmem) {
        /* 128-byte aligned, as a GPU's dynamic shared memory (wmma needs 32) */
        if (posix_memalign((void **)&s.dyn, 128, L.shmem)) { fprintf(stderr, "cuda_on_cpu: out of memory\n"); abort(); }
        memset(s.dyn, 0xff, L.shmem); /* uninitialized shared memory reads as NaN */
    }
    s.runq.clear();
    for (int i = 0; i < n; i++) s.runq.push_back(n - 1 - i);
    tsan_release(0); /* the host's work so far happens before the block */
    while (!s.runq.empty()) {
        size_t k = 0;
        if (s.cfg.order == 0) k = (size_t)(rnd() % s.runq.size());
        else
            for (size_t j = 1; j < s.runq.size(); j++)
                if ((s.cfg.order == 1) == (s.runq[j] < s.runq[k])) k = j;
        int i = s.runq[k];
        s.runq[k] = s.runq.back();
        s.runq.pop_back();
        s.cur = i;
        threadIdx = s.fib[i].tid;
        asan_start(&s.main_fake, stack_of(i), s.stack_size);
        switch_stacks(&s.main_sp, s.fib[i].sp, &s.main_ctx, &s.fib[i].ctx,
                      s.tsan_fib.empty() ? nullptr : s.tsan_fib[(size_t)i]);
        asan_finish(s.main_fake, nullptr, nullptr);
    }
    tsan_acquire(1); /* the block's work happens before what the host does next */
    int done = 0, at_bar = 0, at_warp = 0;
    for (int i = 0; i < n; i++) {
        done += s.fib[i].state == F_DONE;
        at_bar += s.fib[i].state == F_BAR;
        at_warp += s.fib[i].state == F_WARP;
    }
    if (done != n) {
#ifdef CUEMU_ASAN
        __asan_unpoison_memory_region(s.stacks, s.stack_size * s.stack_threads); /* abandoned frames */
#endif
        s.cur = -1;
        error("deadlock: %d of %d threads finished, %d wait at __syncthreads (%s:%d), %d at a "
              "warp collective - a barrier inside a branch or after an early return?",
              done, n, at_bar, s.bar_file ? s.bar_file : "-", at_bar ? s.bar_line : 0, at_warp);
    }
    s.cur = -1;
    for (int i = 0; i < n; i++)
        if (!s.cp[(size_t)i].groups.empty() || !s.cp[(size_t)i].open.empty()) {
            error("cp.async: thread %d ends with %zu copies never waited for (a missing cp.async.wait_group)", i,
                  s.cp[(size_t)i].open.size() + s.cp[(size_t)i].groups.size());
            break;
        }
    s.cp.clear();
    free(s.dyn);
    s.dyn = nullptr;
}

inline cudaError_t launch_fail(cudaError_t e, const char *name, const char *file, int line,
                               const char *why) {
    fprintf(stderr, "cuda_on_cpu: launch of %s at %s:%d: %s\n", name, file, line, why);
    S().last_error = e;
    return e;
}

inline cudaError_t launch_impl(const Launch &L) {
    CUEMU_HARNESS_CODE;
    State &s = S();
    if (s.in_kernel) {
        error("launch of %s from inside a kernel (dynamic parallelism is not emulated)", L.name);
        return cudaErrorLaunchFailure;
    }
    unsigned long long nt = (unsigned long long)L.block.x * L.block.y * L.block.z;
    if (L.grid.x == 0 || L.grid.y == 0 || L.grid.z == 0 || L.grid.y > 65535 || L.grid.z > 65535 ||
        L.grid.x > 2147483647u)
        return launch_fail(cudaErrorInvalidConfiguration, L.name, L.file, L.line, "bad grid size");
    if (nt == 0 || nt > 1024 || L.block.z > 64)
        return launch_fail(cudaErrorInvalidConfiguration, L.name, L.file, L.line,
                           "bad block size (1..1024 threads)");
    if (L.shmem > 48 * 1024)
        return launch_fail(cudaErrorInvalidConfiguration, L.name, L.file, L.line,
                           "more than 48 KiB of dynamic shared memory");
    if (s.cfg.dry_run) { s.launches++; return cudaSuccess; }
    ensure_stacks((int)nt);
    s.tsan_sync.assign(4 + 2 * ((size_t)nt + 31) / 32, 0);
    s.nthreads = (int)nt;
    s.L = &L;
    s.launches++;
    blockDim = L.block;
    gridDim = L.grid;
    /* blocks in a shuffled order */
    size_t nb = (size_t)L.grid.x * L.grid.y * L.grid.z;
    std::vector<size_t> order(nb);
    for (size_t i = 0; i < nb; i++) order[i] = i;
    if (s.cfg.order == 0)
        for (size_t i = nb; i > 1; i--) std::swap(order[i - 1], order[(size_t)(rnd() % i)]);
    s.in_kernel = 1;
    s.launch_printed = 0;
    s.launch_errors0 = s.errors;
    for (size_t i = 0; i < nb; i++) {
        size_t b = order[i];
        uint3 bi = {(unsigned)(b % L.grid.x), (unsigned)(b / L.grid.x % L.grid.y),
                    (unsigned)(b / ((size_t)L.grid.x * L.grid.y))};
        run_block(L, bi);
        s.blocks++;
    }
    s.in_kernel = 0;
    if (s.errors - s.launch_errors0 > 3)
        fprintf(stderr, "cuda_on_cpu: kernel %s (launched at %s:%d): %ld errors in all\n", L.name,
                L.file, L.line, s.errors - s.launch_errors0);
    s.L = nullptr;
    return cudaSuccess;
}

/* the arguments are converted to the kernel's parameter types once, as nvcc does */
template <class... P> struct Bound {
    void (*k)(P...);
    std::tuple<typename std::decay<P>::type...> args;
    static void call(void *self) {
        Bound *b = (Bound *)self;
        std::apply(b->k, b->args);
    }
};
template <class... P, class... A>
inline cudaError_t launch(const char *name, const char *file, int line, dim3 grid, dim3 block,
                          size_t shmem, cudaStream_t stream, void (*k)(P...), A &&...a) {
    (void)stream;
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    Bound<P...> b{k, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)};
    Launch L;
    L.name = name; L.file = file; L.line = line;
    L.grid = grid; L.block = block; L.shmem = shmem;
    L.body = &Bound<P...>::call;
    L.arg = &b;
    return launch_impl(L);
}

inline void *dynamic_shared() {
    CUEMU_HARNESS_CODE;
    State &s = S();
    if (!s.in_kernel) { error("dynamic shared memory used outside a kernel"); return nullptr; }
    if (!s.dyn) error("dynamic shared memory used, but the launch asked for 0 bytes");
    return s.dyn;
}

/* is [p, p+n) inside one device allocation? */
inline bool is_device(const void *p, size_t n) {
    State &s = S();
    uintptr_t a = (uintptr_t)p;
    auto it = s.allocs.upper_bound(a);
    if (it == s.allocs.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}
inline bool touches_device(const void *p) { return is_device(p, 1); }

/* ---- host synchronizations: counted --------------------------------------
   Every runtime call that makes the host wait for the device is counted,
   by kind, so a test can hold a training step to its minimum number of
   waits (tests/test_cuda_sync.cpp). Here streams run synchronously, so
   nothing ever waits for real: the count is what a GPU would see. Counted:
      cudaMemcpy (any direction)           synchronous by definition
      cudaMemcpyAsync with pageable host   the runtime may wait (it stages
        memory on the host side            the copy through its own buffer;
                                           device -> pageable host waits)
      cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize
      cudaFree, cudaFreeHost               they synchronize the device
   Not counted: kernel launches, cudaMemsetAsync, cudaMemcpyAsync between
   the device and pinned host memory (cudaMallocHost) or device to device,
   cudaEventRecord, cudaStreamWaitEvent, cudaMalloc and cudaMallocHost. */
enum SyncKind { SYNC_MEMCPY, SYNC_MEMCPY_PAGEABLE, SYNC_STREAM, SYNC_DEVICE, SYNC_EVENT, SYNC_FREE, SYNC_KINDS };
struct SyncCount {
    long total = 0;
    long by_kind[SYNC_KINDS] = {0, 0, 0, 0, 0, 0};
    std::map<uintptr_t, size_t> pinned; /* cudaMallocHost blocks: base -> bytes */
};
inline SyncCount &sync_count() { static SyncCount c; return c; }
inline long host_syncs() { return sync_count().total; }
inline const char *sync_kind_name(int k) {
    static const char *n[SYNC_KINDS] = {"cudaMemcpy", "cudaMemcpyAsync (pageable host memory)", "cudaStreamSynchronize",
                                        "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaFree/cudaFreeHost"};
    return k >= 0 && k < SYNC_KINDS ? n[k] : "?";
}
inline void host_sync(SyncKind k) { sync_count().total++; sync_count().by_kind[k]++; }
/* is [p, p+n) inside one cudaMallocHost block? */
inline bool is_pinned(const void *p, size_t n) {
    auto &m = sync_count().pinned;
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

} /* namespace cuemu */

#define __syncthreads() cuemu::syncthreads(__FILE__, __LINE__)
/* a memory fence between blocks: nothing to do here (blocks run whole, one
   after another, with no caches; see "What it cannot catch" above) */
static inline void __threadfence(void) {}
#define TRN_CUDA_DYNAMIC_SHARED(T, name) T *name = (T *)cuemu::dynamic_shared()

/* ---- warp intrinsics ------------------------------------------------------ */
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    int lane; unsigned ex;
    cuemu::warp_meet(mask, 0, "__syncwarp", &lane, &ex);
}
template <class T> static inline T __shfl_sync(unsigned mask, T var, int src, int width = 32) {
    int lane; unsigned ex;
    const uint64_t *v = cuemu::warp_meet(mask, cuemu::to_bits(var), "__shfl_sync", &lane, &ex);
    int s = lane / width * width + (src % width + width) % width;
    return cuemu::shfl_read<T>(v, mask, ex, lane, s, "__shfl_sync");
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    int lane; unsigned ex;
    const uint64_t *v = cuemu::warp_meet(mask, cuemu::to_bits(var), "__shfl_xor_sync", &lane, &ex);
    int s = lane ^ lane_mask;
    if (s >= (lane / width + 1) * width) s = lane; /* later groups: own value */
    return cuemu::shfl_read<T>(v, mask, ex, lane, s, "__shfl_xor_sync");
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    int lane; unsigned ex;
    const uint64_t *v = cuemu::warp_meet(mask, cuemu::to_bits(var), "__shfl_down_sync", &lane, &ex);
    int s = (lane % width) + (int)delta >= width ? lane : lane + (int)delta;
    return cuemu::shfl_read<T>(v, mask, ex, lane, s, "__shfl_down_sync");
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    int lane; unsigned ex;
    const uint64_t *v = cuemu::warp_meet(mask, cuemu::to_bits(var), "__shfl_up_sync", &lane, &ex);
    int s = (lane % width) - (int)delta < 0 ? lane : lane - (int)delta;
    return cuemu::shfl_read<T>(v, mask, ex, lane, s, "__shfl_up_sync");
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    CUEMU_HARNESS_CODE;
    int lane; unsigned ex;
    const uint64_t *v = cuemu::warp_meet(mask, pred ? 1 : 0, "__ballot_sync", &lane, &ex);
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if (((mask & ex) >> l & 1u) && v[l]) r |= 1u << l;
    return r;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) {
    CUEMU_HARNESS_CODE;
    unsigned ex = cuemu::S().warps[cuemu::linear_tid(threadIdx) / 32].exist;
    return __ballot_sync(mask, pred) == (mask & ex);
}

/* ---- nvcuda::wmma (mma.h): the subset train_cuda.h uses ------------------
   Tensor-core tiles m16n16k16: matrix_a and matrix_b fragments of bf16
   (row_major or col_major), accumulator fragments of float. As on a GPU
   a fragment is spread over the 32 lanes of a warp, 8 elements per lane,
   in a layout that code must not rely on (here element e of lane L is
   element L*8+e of the tile in row-major order; the GPU's is different):
   num_elements and x[] exist, so a kernel may apply the SAME operation to
   every element (scale an accumulator), nothing that needs positions.
   load_matrix_sync, mma_sync and store_matrix_sync are warp-collective:
   all 32 lanes call them together, with the same pointer, ldm and layout
   (checked: a missing lane shows up as a deadlock, a differing one as an
   error), and each waits for the others before it touches memory, so
   values a lane wrote before the call are visible to the whole warp.
   The CUDA C++ Programming Guide ("Warp matrix functions") asks for a
   256-bit (32-byte) aligned pointer and ldm a multiple of 16 bytes (8
   elements of a 16-bit type, 4 of float); violations are reported.
   mma_sync computes d = a b + c with exact products of bf16 values summed
   in fp32 (the order of the sum is the emulation's; a GPU's differs in
   the last bits). fill_fragment is per lane, as on a GPU. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "cuda_on_cpu: only m16n16k16 wmma fragments are emulated");
    static_assert(std::is_same<Use, accumulator>::value ? std::is_same<T, float>::value && std::is_same<Layout, void>::value
                                                        : std::is_same<T, __nv_bfloat16>::value &&
                                                              (std::is_same<Layout, row_major>::value ||
                                                               std::is_same<Layout, col_major>::value),
                  "cuda_on_cpu: emulated wmma fragments: matrix_a/matrix_b of __nv_bfloat16 with row_major or "
                  "col_major, accumulator of float");
    enum { num_elements = 8 };
    T x[8];
};
} /* namespace wmma */
} /* namespace nvcuda */

namespace cuemu {
/* the collective part of a wmma call: all 32 lanes meet; each deposits
   (pointer, ldm, layout) and is told if another lane passed different ones */
inline int wmma_meet(const void *p, unsigned ldm, int layout, size_t esize, const char *op, int *lane) {
    CUEMU_HARNESS_CODE;
    unsigned ex;
    uint64_t v = ((uint64_t)(uintptr_t)p & 0x0000ffffffffffffull) ^ ((uint64_t)(ldm & 0x7fffu) << 48) ^
                 ((uint64_t)(layout & 1) << 63);
    if ((uintptr_t)p % 32)
        error("%s: pointer %p is not 256-bit (32-byte) aligned", op, p);
    if (ldm * esize % 16) error("%s: ldm %u is not a multiple of %zu elements (16 bytes)", op, ldm, 16 / esize);
    int mixed;
    const uint64_t *vals = warp_meet(0xffffffffu, v, op, lane, &ex, &mixed);
    if (mixed) return 0;
    for (int l = 0; l < 32; l++)
        if (vals[l] != v) {
            error("%s: lane %d and lane %d pass a different pointer, ldm or layout (they must be the same in the "
                  "whole warp)", op, *lane, l);
            return 0;
        }
    return 1;
}
/* element (r, c) of a 16x16 tile at p: row major p[r*ldm+c], else p[c*ldm+r] */
template <class T> inline T &wmma_at(T *p, unsigned ldm, int col, int r, int c) {
    return col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
} /* namespace cuemu */

namespace nvcuda {
namespace wmma {
template <class Use, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> &f, const __nv_bfloat16 *p,
                             unsigned ldm) {
    int lane, col = std::is_same<Layout, col_major>::value;
    if (!cuemu::wmma_meet(p, ldm, col, 2, "wmma::load_matrix_sync", &lane)) return;
    for (int e = 0; e < 8; e++) f.x[e] = cuemu::wmma_at(p, ldm, col, lane / 2, lane % 2 * 8 + e);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                             layout_t layout) {
    int lane, col = layout == mem_col_major;
    if (!cuemu::wmma_meet(p, ldm, col, 4, "wmma::load_matrix_sync", &lane)) return;
    for (int e = 0; e < 8; e++) f.x[e] = cuemu::wmma_at(p, ldm, col, lane / 2, lane % 2 * 8 + e);
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t layout) {
    int lane, col = layout == mem_col_major;
    if (!cuemu::wmma_meet(p, ldm, col, 4, "wmma::store_matrix_sync", &lane)) return;
    for (int e = 0; e < 8; e++) cuemu::wmma_at(p, ldm, col, lane / 2, lane % 2 * 8 + e) = f.x[e];
}
template <class Use, class T, class Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, const T &v) {
    for (int e = 0; e < 8; e++) f.x[e] = v;
}
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    CUEMU_HARNESS_CODE;
    /* meet 1: every lane publishes where its parts of a, b, c are; each
       computes its 8 elements of d from all lanes' parts; meet 2: nobody
       writes d (which may be c) before every lane has read */
    struct Parts { const void *a, *b, *c; } mine = {&a, &b, &c};
    typedef fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> FA;
    typedef fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> FB;
    typedef fragment<accumulator, 16, 16, 16, float> FC;
    int lane, mixed;
    unsigned ex;
    const uint64_t *v = cuemu::warp_meet(0xffffffffu, (uint64_t)(uintptr_t)&mine, "wmma::mma_sync", &lane, &ex, &mixed);
    if (mixed) return; /* reported; other lanes' values are not fragments */
    const Parts *parts[32];
    for (int l = 0; l < 32; l++) parts[l] = (const Parts *)(uintptr_t)v[l];
    float out[8];
    int r = lane / 2;
    for (int e = 0; e < 8; e++) {
        int cc = lane % 2 * 8 + e, t = r * 16 + cc;
        float s = ((const FC *)parts[t / 8]->c)->x[t % 8];
        for (int k = 0; k < 16; k++) {
            int ia = r * 16 + k, ib = k * 16 + cc;
            s += __bfloat162float(((const FA *)parts[ia / 8]->a)->x[ia % 8]) *
                 __bfloat162float(((const FB *)parts[ib / 8]->b)->x[ib % 8]);
        }
        out[e] = s;
    }
    cuemu::warp_meet(0xffffffffu, 0, "wmma::mma_sync", &lane, &ex);
    for (int e = 0; e < 8; e++) d.x[e] = out[e];
}
} /* namespace wmma */
} /* namespace nvcuda */

/* ---- PTX: mma.sync m16n8k16, ldmatrix, cp.async --------------------------
   train_cuda.h wraps each PTX instruction its FlashAttention-2 kernels use
   in a small device function (trn__mma_bf16, trn__ldmatrix_x4, trn__cp_async16
   ...): inline asm under nvcc, a call of these emulations here, so a kernel
   reads the same on both. The layouts are the PTX ISA's ("Matrix fragments
   for mma.m16n8k16 with floating point type", "ldmatrix"), with the lane's
   groupID g = lane / 4 and threadID_in_group t = lane % 4:
   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32  d = a b + c
      A (16x16, row): a[0] (g, 2t..2t+1)    a[1] (g+8, 2t..2t+1)
                      a[2] (g, 2t+8..2t+9)  a[3] (g+8, 2t+8..2t+9)
      B (16x8, k x n, "col"): b[0] (2t..2t+1, g)  b[1] (2t+8..2t+9, g)
      C, D (16x8 fp32): c[0], c[1] (g, 2t), (g, 2t+1); c[2], c[3] the same in row g+8
      a .b32 register holds two bf16, the one of lower index in its low half.
      Products of bf16 are exact in fp32; the 16 of an element are summed in
      fp32 onto c (the order is the emulation's: a GPU differs in the last bits).
   ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16  r[0..n-1]
      8x8 matrices of 16-bit elements; the 8 row addresses of matrix i come
      from lanes 8i..8i+7 (x1 uses lanes 0-7, x2 lanes 0-15: the others'
      are ignored); each must be 16-byte aligned (checked) and, here, in the
      launch's dynamic shared memory (checked). Lane L receives in r[i]
      elements (L/4, 2(L%4)) and (L/4, 2(L%4)+1) of matrix i; with .trans,
      (2(L%4), L/4) and (2(L%4)+1, L/4).
   Both are warp collectives like wmma's (.aligned: all 32 lanes at the
   same instruction, checked; a lane's registers are read by the others
   between two meets, so no lane changes them early).
   cp.async.cg.shared.global [dst], [src], 16, src_size  (per thread)
      copies src_size bytes (0 or 16) and fills the rest of the 16 with
      zeros; dst and src 16-byte aligned, dst in dynamic shared memory (all
      checked). cp.async.commit_group closes the thread's open copies into a
      group; cp.async.wait_group N waits until at most N of ITS groups are
      pending. Here a copy happens only when a wait_group retires its group
      (the latest moment a GPU may do it), so a kernel that reads a tile
      before its wait, or before the __syncthreads that makes the other
      threads' copies visible, reads what was there (NaN, in fresh dynamic
      shared memory). Stricter than a GPU: a thread that ends with copies
      never waited for is reported. */
namespace cuemu {
inline bool in_dyn_shared(const void *p, size_t bytes) {
    State &s = S();
    const unsigned char *c = (const unsigned char *)p;
    return s.dyn && s.L && c >= s.dyn && c + bytes <= s.dyn + s.L->shmem;
}
inline float bf16_half(unsigned w, int hi) {
    __nv_bfloat16 h;
    h.x = (unsigned short)(hi ? w >> 16 : w & 0xffffu);
    return __bfloat162float(h);
}
struct MmaParts { const unsigned *a, *b; const float *c; };
inline void mma_m16n8k16_bf16(float *d, const unsigned *a, const unsigned *b, const float *c) {
    CUEMU_HARNESS_CODE;
    static const char *op = "ptx mma.sync.m16n8k16";
    MmaParts mine = {a, b, c};
    int lane, mixed;
    unsigned ex;
    const uint64_t *v = warp_meet(0xffffffffu, (uint64_t)(uintptr_t)&mine, op, &lane, &ex, &mixed);
    if (mixed) return;
    const MmaParts *p[32];
    for (int l = 0; l < 32; l++) p[l] = (const MmaParts *)(uintptr_t)v[l];
    float out[4];
    int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; e++) {
        int r = g + (e / 2) * 8, n = 2 * t + e % 2;
        float s = c[e];
        for (int k = 0; k < 16; k++) {
            /* A(r, k): lane (r%8)*4 + (k%8)/2, register (r/8) + 2 (k/8), half k%2 */
            float x = bf16_half(p[(r % 8) * 4 + (k % 8) / 2]->a[(r / 8) + 2 * (k / 8)], k % 2);
            /* B(k, n): lane n*4 + (k%8)/2, register k/8, half k%2 */
            float y = bf16_half(p[n * 4 + (k % 8) / 2]->b[k / 8], k % 2);
            s += x * y;
        }
        out[e] = s;
    }
    warp_meet(0xffffffffu, 0, op, &lane, &ex);
    for (int e = 0; e < 4; e++) d[e] = out[e];
}
inline void ldmatrix(unsigned *r, int n, int trans, const void *addr) {
    CUEMU_HARNESS_CODE;
    static const char *ops[2][3] = {{"ptx ldmatrix.x1", "ptx ldmatrix.x2", "ptx ldmatrix.x4"},
                                    {"ptx ldmatrix.x1.trans", "ptx ldmatrix.x2.trans", "ptx ldmatrix.x4.trans"}};
    const char *op = ops[trans][n == 1 ? 0 : n == 2 ? 1 : 2];
    int lane = (int)(linear_tid(threadIdx) % 32), mixed;
    unsigned ex;
    if (lane < 8 * n) {
        if ((uintptr_t)addr % 16) error("%s: lane %d's row address %p is not 16-byte aligned", op, lane, addr);
        else if (!in_dyn_shared(addr, 16))
            error("%s: lane %d's row address %p is not in the launch's dynamic shared memory", op, lane, addr);
    }
    const uint64_t *v = warp_meet(0xffffffffu, (uint64_t)(uintptr_t)addr, op, &lane, &ex, &mixed);
    if (mixed) return;
    unsigned out[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i++) {
        const unsigned short *row0, *row1;
        int c0, c1;
        if (!trans) {
            row0 = row1 = (const unsigned short *)(uintptr_t)v[8 * i + lane / 4];
            c0 = 2 * (lane % 4);
            c1 = c0 + 1;
        } else {
            row0 = (const unsigned short *)(uintptr_t)v[8 * i + 2 * (lane % 4)];
            row1 = (const unsigned short *)(uintptr_t)v[8 * i + 2 * (lane % 4) + 1];
            c0 = c1 = lane / 4;
        }
        bool ok = (uintptr_t)row0 % 16 == 0 && (uintptr_t)row1 % 16 == 0 && in_dyn_shared(row0, 16) &&
                  in_dyn_shared(row1, 16);
        out[i] = ok ? (unsigned)row0[c0] | (unsigned)row1[c1] << 16 : 0xffffffffu; /* reported above: NaN */
    }
    warp_meet(0xffffffffu, 0, op, &lane, &ex);
    for (int i = 0; i < n; i++) r[i] = out[i];
}
inline void cp_async16(void *dst, const void *src, int src_bytes) {
    CUEMU_HARNESS_CODE;
    State &s = S();
    if (!s.in_kernel || s.cur < 0) { error("cp.async outside a kernel"); return; }
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16) {
        error("cp.async 16: shared %p or global %p is not 16-byte aligned", dst, src);
        return;
    }
    if (!in_dyn_shared(dst, 16)) { error("cp.async: destination %p is not in the launch's dynamic shared memory", dst); return; }
    if (src_bytes != 0 && src_bytes != 16) { error("cp.async 16: src_size %d is not 0 or 16", src_bytes); return; }
    State::CpCopy c = {dst, src, src_bytes};
    s.cp[(size_t)s.cur].open.push_back(c);
}
inline void cp_async_commit() {
    State &s = S();
    if (!s.in_kernel || s.cur < 0) { error("cp.async.commit_group outside a kernel"); return; }
    State::CpThread &t = s.cp[(size_t)s.cur];
    t.groups.push_back(t.open);
    t.open.clear();
}
inline void cp_async_wait(int n) {
    State &s = S();
    if (!s.in_kernel || s.cur < 0) { error("cp.async.wait_group outside a kernel"); return; }
    State::CpThread &t = s.cp[(size_t)s.cur];
    while ((int)t.groups.size() > n) {
        for (const State::CpCopy &c : t.groups.front()) {
            if (c.bytes) memcpy(c.dst, c.src, (size_t)c.bytes);
            memset((char *)c.dst + c.bytes, 0, (size_t)(16 - c.bytes));
        }
        t.groups.erase(t.groups.begin());
    }
}
} /* namespace cuemu */

/* ---- atomics (each is also a preemption point) ---------------------------
   Fibers are never interrupted inside one, so a plain read-modify-write is
   atomic here; under ThreadSanitizer they are real (relaxed) atomics, so
   TSan knows them from racing plain accesses. */
namespace cuemu {
template <class T, class F> inline T atomic_rmw(T *a, F op) {
#ifdef CUEMU_TSAN
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4- or 8-byte types");
    typedef typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type U;
    U *ua = (U *)a, old = __atomic_load_n(ua, __ATOMIC_RELAXED), nu;
    T o, n;
    for (;;) {
        memcpy(&o, &old, sizeof o);
        n = op(o);
        memcpy(&nu, &n, sizeof nu);
        if (__atomic_compare_exchange_n(ua, &old, nu, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;
    }
#else
    T o = *a;
    *a = op(o);
#endif
    preempt();
    return o;
}
} /* namespace cuemu */
template <class T> static inline T atomicAdd(T *a, T v) { return cuemu::atomic_rmw(a, [v](T o) { return o + v; }); }
template <class T> static inline T atomicSub(T *a, T v) { return cuemu::atomic_rmw(a, [v](T o) { return o - v; }); }
template <class T> static inline T atomicMax(T *a, T v) { return cuemu::atomic_rmw(a, [v](T o) { return o > v ? o : v; }); }
template <class T> static inline T atomicMin(T *a, T v) { return cuemu::atomic_rmw(a, [v](T o) { return o < v ? o : v; }); }
template <class T> static inline T atomicExch(T *a, T v) { return cuemu::atomic_rmw(a, [v](T o) { (void)o; return v; }); }
template <class T> static inline T atomicCAS(T *a, T cmp, T v) {
    return cuemu::atomic_rmw(a, [cmp, v](T o) { return o == cmp ? v : o; });
}

/* ---- math intrinsics: the fast versions are the accurate ones here -------- */
#ifndef __GLIBC__ /* glibc declares these itself (its internal names of expf ...) */
static inline float __expf(float x) { return expf(x); }
static inline float __logf(float x) { return logf(x); }
static inline float __sinf(float x) { return sinf(x); }
static inline float __cosf(float x) { return cosf(x); }
static inline float __tanhf(float x) { return tanhf(x); }
static inline float __powf(float x, float y) { return powf(x, y); }
#endif
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fmul_rn(float a, float b) { return a * b; } /* a product nvcc never contracts into an FMA */
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
static inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t max(size_t a, size_t b) { return a > b ? a : b; }

/* ---- runtime: device memory is host memory -------------------------------- */
static inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorUnsupportedPtxVersion: return "the provided PTX was compiled with an unsupported toolchain.";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}
static inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    default: return "cudaError";
    }
}
static inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = cuemu::S().last_error;
    cuemu::S().last_error = cudaSuccess;
    return e;
}
static inline cudaError_t cudaPeekAtLastError(void) { return cuemu::S().last_error; }
static inline cudaError_t cuemu_ret(cudaError_t e) {
    if (e != cudaSuccess) cuemu::S().last_error = e;
    return e;
}
static inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = cuemu::S().cfg.device_count;
    if (cuemu::S().cfg.driver_version < CUDART_VERSION) { *n = 0; return cuemu_ret(cudaErrorInsufficientDriver); }
    return *n > 0 ? cudaSuccess : cuemu_ret(cudaErrorNoDevice);
}
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = cuemu::S().cfg.driver_version; return cudaSuccess; }
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) {
    int n;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return e;
    if (d < 0 || d >= n) return cuemu_ret(cudaErrorInvalidDevice);
    cuemu::S().context_up = 1;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    int n;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return e;
    if (d < 0 || d >= n) return cuemu_ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda_on_cpu (emulated sm_90)");
    p->totalGlobalMem = cuemu::S().cfg.total_mem;
    p->sharedMemPerBlock = 48 * 1024;
    p->major = 9; p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    p->maxThreadsPerMultiProcessor = 2048;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize(void) { cuemu::host_sync(cuemu::SYNC_DEVICE); return cudaSuccess; }
/* frees every device allocation, as destroying the context does */
static inline cudaError_t cudaDeviceReset(void) {
    cuemu::State &s = cuemu::S();
    for (auto &a : s.allocs) free((void *)a.first);
    s.allocs.clear();
    s.alloc_bytes = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    cuemu::State &s = cuemu::S();
    *p = nullptr;
    size_t used = s.cfg.context_bytes + s.cublas_live + s.alloc_bytes;
    if (n > s.cfg.total_mem || used + n > s.cfg.total_mem) return cuemu_ret(cudaErrorMemoryAllocation);
    void *q = nullptr;
    if (posix_memalign(&q, 256, n ? n : 1) != 0) return cuemu_ret(cudaErrorMemoryAllocation);
    s.allocs[(uintptr_t)q] = n;
    s.alloc_bytes += n;
    *p = q;
    return cudaSuccess;
}
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static inline cudaError_t cudaFree(void *p) {
    cuemu::State &s = cuemu::S();
    if (!p) { s.context_up = 1; return cudaSuccess; } /* cudaFree(0): create the context */
    cuemu::host_sync(cuemu::SYNC_FREE);
    auto it = s.allocs.find((uintptr_t)p);
    if (it == s.allocs.end()) {
        cuemu::error("cudaFree of %p, which cudaMalloc did not return", p);
        return cuemu_ret(cudaErrorInvalidValue);
    }
    s.alloc_bytes -= it->second;
    s.allocs.erase(it);
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    cuemu::State &s = cuemu::S();
    size_t used = s.cfg.context_bytes + s.cublas_live + s.alloc_bytes;
    *total = s.cfg.total_mem;
    *free_b = used < s.cfg.total_mem ? s.cfg.total_mem - used : 0;
    return cudaSuccess;
}
namespace cuemu {
inline cudaError_t memcpy_checked(void *dst, const void *src, size_t n, cudaMemcpyKind k);
}
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    if (n) cuemu::host_sync(cuemu::SYNC_MEMCPY);
    return cuemu::memcpy_checked(dst, src, n, k);
}
inline cudaError_t cuemu::memcpy_checked(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    if (n == 0) return cudaSuccess;
    bool dd = cuemu::is_device(dst, n), sd = cuemu::is_device(src, n);
    bool ok = true;
    switch (k) {
    case cudaMemcpyHostToDevice: ok = dd && !cuemu::touches_device(src); break;
    case cudaMemcpyDeviceToHost: ok = sd && !cuemu::touches_device(dst); break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    default: break;
    }
    if (!ok) {
        cuemu::error("cudaMemcpy(kind %d) of %zu bytes: a pointer is not on the side the kind says "
                     "(or the range leaves its cudaMalloc block)", (int)k, n);
        return cuemu_ret(cudaErrorInvalidValue);
    }
    memmove(dst, src, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                                          cudaStream_t s = nullptr) {
    (void)s;
    /* a host side that is not pinned: the runtime may wait */
    if (n && ((k == cudaMemcpyHostToDevice && !cuemu::is_pinned(src, n)) ||
              (k == cudaMemcpyDeviceToHost && !cuemu::is_pinned(dst, n)) || k == cudaMemcpyHostToHost ||
              (k == cudaMemcpyDefault && !(cuemu::is_device(dst, n) && cuemu::is_device(src, n)))))
        cuemu::host_sync(cuemu::SYNC_MEMCPY_PAGEABLE);
    return cuemu::memcpy_checked(dst, src, n, k);
}
/* pinned (page-locked) host memory: asynchronous copies to and from it
   need no wait; cudaFreeHost synchronizes, as on a GPU */
static inline cudaError_t cudaMallocHost(void **p, size_t n) {
    void *q = nullptr;
    *p = nullptr;
    if (posix_memalign(&q, 256, n ? n : 1) != 0) return cuemu_ret(cudaErrorMemoryAllocation);
    cuemu::sync_count().pinned[(uintptr_t)q] = n ? n : 1;
    *p = q;
    return cudaSuccess;
}
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMallocHost((void **)p, n); }
static inline cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    auto &m = cuemu::sync_count().pinned;
    auto it = m.find((uintptr_t)p);
    if (it == m.end()) {
        cuemu::error("cudaFreeHost of %p, which cudaMallocHost did not return", p);
        return cuemu_ret(cudaErrorInvalidValue);
    }
    cuemu::host_sync(cuemu::SYNC_FREE);
    m.erase(it);
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (n == 0) return cudaSuccess;
    if (!cuemu::is_device(p, n)) {
        cuemu::error("cudaMemset of %zu bytes outside any cudaMalloc block", n);
        return cuemu_ret(cudaErrorInvalidValue);
    }
    memset(p, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s = nullptr) {
    (void)s;
    return cudaMemset(p, v, n);
}
static inline cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = new CUstream_st{1}; return cudaSuccess; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { (void)f; return cudaStreamCreate(s); }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; cuemu::host_sync(cuemu::SYNC_STREAM); return cudaSuccess; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f = 0) {
    (void)s; (void)e; (void)f; return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new CUevent_st(); return cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { (void)f; return cudaEventCreate(e); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    (void)s; e->t = std::chrono::steady_clock::now(); return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; cuemu::host_sync(cuemu::SYNC_EVENT); return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
    return cudaSuccess;
}

/* ---- cuBLAS: a reference column-major GEMM -------------------------------- */
typedef enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum cublasMath_t {
    CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef cudaDataType cudaDataType_t;
typedef enum cublasComputeType_t {
    CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77, CUBLAS_COMPUTE_32F_PEDANTIC = 69
} cublasComputeType_t;
typedef enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;
struct cublasContext { cublasMath_t math; cudaStream_t stream; void *workspace; size_t ws_bytes; };
typedef cublasContext *cublasHandle_t;

namespace cuemu {
inline float tf32(float x) { /* round to nearest, 10 explicit mantissa bits */
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) { u += 0xfffu + ((u >> 13) & 1u); u &= 0xffffe000u; }
    memcpy(&x, &u, 4);
    return x;
}
inline long long gemms = 0;
/* elements as the GEMMs read and write them: bf16 is read exactly, and a
   bf16 result is rounded once, to nearest even */
inline float ld(float x) { return x; }
inline float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
inline void st(float *d, float v) { *d = v; }
inline void st(__nv_bfloat16 *d, float v) { *d = __float2bfloat16(v); }
/* D(m,n) = alpha op(A)(m,k) op(B)(k,n) + beta C (+ bias[i], cuBLASLt's bias
   epilogue), all column-major; C and D may be the same matrix. A and B are
   TI (float or bf16), C and D are TC (float or bf16). The sum is fp32 in
   a fixed order (below), and alpha, beta and the bias are applied in fp32 before
   the one conversion to TC: what a GPU's fp32-accumulating tensor cores give,
   up to summation order (a product of two bf16 is exact in fp32). tf: fp32
   inputs rounded to TF32 first. */
template <typename TI, typename TC>
inline cublasStatus_t gemm(const void *h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, float alpha, const TI *A, int lda, const TI *B, int ldb, float beta,
                           const TC *C, int ldc, TC *D, int ldd, int tf, const char *who,
                           const TC *bias = nullptr) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int arow = ta == CUBLAS_OP_N ? m : k, brow = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arow > 1 ? arow : 1) || ldb < (brow > 1 ? brow : 1) ||
        ldc < (m > 1 ? m : 1) || ldd < (m > 1 ? m : 1)) {
        error("%s: invalid value (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d)", who, m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    gemms++;
    if (m == 0 || n == 0 || S().cfg.dry_run) return CUBLAS_STATUS_SUCCESS;
    /* op(A)'s rows, converted (and TF32-rounded) once, each contiguous: the
       same products summed in the same order, without a strided walk */
    std::vector<float> col((size_t)k), rows((size_t)m * k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++) {
            float a = ld(ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda]);
            rows[(size_t)i * k + l] = tf ? tf32(a) : a;
        }
    /* columns on OpenMP's threads when there are some (each column is one
       thread's, summed in the same order: the same bits) */
#if defined(_OPENMP) && !defined(CUEMU_TSAN)
#pragma omp parallel for firstprivate(col) schedule(static) if ((double)m * n * k > 1e6)
#endif
    for (int j = 0; j < n; j++) {
        for (int l = 0; l < k; l++) {
            float b = ld(tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb]);
            col[(size_t)l] = tf ? tf32(b) : b;
        }
        for (int i = 0; i < m; i++) {
            const float *ar = &rows[(size_t)i * k];
            /* 16 partial sums, lane u summing l = u, u+16, ..., then the
               tail and the lanes added pairwise: a fixed order (the same
               bits every run, however the compiler vectorizes it), as
               unspecified as cuBLAS's own, and 16 independent additions
               that -O2 turns into vector instructions (a single running
               sum is a serial chain: about 5x slower) */
            float part[16] = {0};
            int l = 0;
            for (; l + 16 <= k; l += 16)
                for (int u = 0; u < 16; u++) part[u] += ar[l + u] * col[(size_t)(l + u)];
            for (int u = 0; l < k; l++, u++) part[u] += ar[l] * col[(size_t)l];
            for (int w = 8; w > 0; w /= 2)
                for (int u = 0; u < w; u++) part[u] += part[u + w];
            float acc = part[0];
            /* beta == 0: C is not read (it may hold NaN), as cuBLAS documents */
            float v = beta == 0.0f ? alpha * acc : alpha * acc + beta * ld(C[i + (size_t)j * ldc]);
            if (bias) v += ld(bias[i]);
            st(&D[i + (size_t)j * ldd], v);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
/* the (A and B, C) types the GEMMs here run, with compute type 32F (or
   PEDANTIC, or FAST_TF32 for fp32 only), as in cuBLAS's table for
   cublasGemmEx; everything else (fp16, ...) is not emulated */
enum gemm_kind { GEMM_UNSUPPORTED, GEMM_F32, GEMM_BF16_BF16, GEMM_BF16_F32 };
inline gemm_kind gemm_types(cudaDataType ab, cudaDataType b2, cudaDataType c, int compute) {
    int c32 = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC;
    if (ab != b2) return GEMM_UNSUPPORTED;
    if (ab == CUDA_R_32F && c == CUDA_R_32F && (c32 || compute == CUBLAS_COMPUTE_32F_FAST_TF32)) return GEMM_F32;
    if (ab == CUDA_R_16BF && c == CUDA_R_16BF && c32) return GEMM_BF16_BF16;
    if (ab == CUDA_R_16BF && c == CUDA_R_32F && c32) return GEMM_BF16_F32;
    return GEMM_UNSUPPORTED;
}
/* `batch` products at element strides sa, sb, sc, for one kind */
template <typename TI, typename TC>
inline cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                   int n, int k, float alpha, const void *A, int lda, long long sa,
                                   const void *B, int ldb, long long sb, float beta, void *C, int ldc,
                                   long long sc, int batch, int tf, const char *who) {
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batch; i++) {
        TC *c = (TC *)C + i * sc;
        cublasStatus_t st = gemm<TI, TC>(h, ta, tb, m, n, k, alpha, (const TI *)A + i * sa, lda,
                                         (const TI *)B + i * sb, ldb, beta, c, ldc, c, ldc, tf, who);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}
inline int want_tf32(cublasHandle_t h, int compute) {
    return compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
           (h && h->math == CUBLAS_TF32_TENSOR_OP_MATH && compute != CUBLAS_COMPUTE_32F_PEDANTIC);
}
} /* namespace cuemu */

static inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!cuemu::S().context_up && cuemu::S().cfg.device_count <= 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new cublasContext{CUBLAS_DEFAULT_MATH, nullptr, nullptr, 0};
    cuemu::S().cublas_live += cuemu::S().cfg.cublas_bytes;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    cuemu::S().cublas_live -= cuemu::S().cfg.cublas_bytes;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
/* as documented: setting the stream drops a user workspace (cuBLAS goes
   back to its own pool, which the ledger would not see) */
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    h->workspace = nullptr;
    h->ws_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *w, size_t n) {
    if (n && !cuemu::is_device(w, n)) return CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = w; h->ws_bytes = n; return CUBLAS_STATUS_SUCCESS;
}
static inline const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "an error occurred";
    }
}
static inline const char *cublasGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_ERROR";
}
static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const float *alpha, const float *A,
                                         int lda, const float *B, int ldb, const float *beta,
                                         float *C, int ldc) {
    return cuemu::gemm(h, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc, C, ldc,
                       cuemu::want_tf32(h, CUBLAS_COMPUTE_32F), "cublasSgemm");
}
static inline cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float *alpha, const float *A, int lda, long long sa, const float *B, int ldb,
    long long sb, const float *beta, float *C, int ldc, long long sc, int batch) {
    return cuemu::gemm_batched<float, float>(h, ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C,
                                             ldc, sc, batch, cuemu::want_tf32(h, CUBLAS_COMPUTE_32F),
                                             "cublasSgemmStridedBatched");
}
namespace cuemu {
/* cublasGemmEx and its strided-batched form: the types pick the kind */
inline cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, const void *alpha, const void *A, cudaDataType at, int lda,
                              long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                              const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
                              cublasComputeType_t compute, const char *who) {
    float al = *(const float *)alpha, be = *(const float *)beta; /* compute type 32F: float scalars */
    switch (gemm_types(at, bt, ct, compute)) {
    case GEMM_F32:
        return gemm_batched<float, float>(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C, ldc, sc,
                                          batch, want_tf32(h, compute), who);
    case GEMM_BF16_BF16:
        return gemm_batched<__nv_bfloat16, __nv_bfloat16>(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb,
                                                          be, C, ldc, sc, batch, 0, who);
    case GEMM_BF16_F32:
        return gemm_batched<__nv_bfloat16, float>(h, ta, tb, m, n, k, al, A, lda, sa, B, ldb, sb, be, C,
                                                  ldc, sc, batch, 0, who);
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* as cuBLAS: a status, the caller decides */
    }
}
} /* namespace cuemu */
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                          int m, int n, int k, const void *alpha, const void *A,
                                          cudaDataType at, int lda, const void *B, cudaDataType bt,
                                          int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    return cuemu::gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                          compute, "cublasGemmEx");
}
static inline cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    return cuemu::gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc,
                          batch, compute, "cublasGemmStridedBatchedEx");
}

/* ---- cuBLASLt: the subset train_cuda.h uses --------------------------------
   v = alpha op(A) op(B) + beta C in fp32 (element (i,j)), then the
   epilogue, then D's one rounding:
     DEFAULT        D = v
     BIAS           D = v + bias[i]
     GELU_AUX       aux = v, D = gelu(v)
     GELU_AUX_BIAS  w = v + bias[i], aux = w, D = gelu(w)
     DGELU          D = v * gelu'(aux)          (beta 0 only, see below)
     BGRADA         D = v, and bias[i] = sum over k of op(A)[i][k]  (m values)
     BGRADB         D = v, and bias[j] = sum over k of op(B)[k][j]  (n values)
   The two bias gradients (cublasLt.h: "Bias gradient based on the input
   matrix A [B]. The bias size corresponds to the number of rows [columns]
   of the matrix D. The reduction happens over the GEMM's "k" dimension.")
   are WRITTEN through the bias pointer in the bias type (D's), summed in
   fp32 from the operand's stored values; neither alpha nor beta enters
   them, and since the header does not say whether alpha scales them, the
   harness runs them with alpha 1 only (NOT_SUPPORTED otherwise), as the
   kit calls them. The bias pointer must point at device memory for m (n)
   values.
   aux and D are each rounded once to their type, from the same fp32 value:
   aux is bit-equal to what BIAS would have stored in D. gelu is the tanh
   form in fp32 (cuemu::gelu_tanh, the kit's formula; what the library
   computes is checked on a GPU by tests/test_cuda_bf16_gemm_gpu.cu). A
   matmul descriptor holds the compute and scale types and the attributes
   set on it; a layout holds (type, rows, cols, ld) of a matrix as stored.
   The checks are the library's: attribute sizes, types (the gemm_types
   table; the bias and aux have D's type), layouts that fit m, n, k and the
   transposes, a bias pointer for BIAS, for the GELU epilogues an aux
   pointer in device memory with an aux ld that is a multiple of 8 and at
   least D's rows (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), an
   algorithm that a heuristic returned for this problem, and a workspace at
   least as large as that algorithm asked for. Bad arguments give
   CUBLAS_STATUS_INVALID_VALUE (and a harness error, as for cuBLAS),
   combinations the library would not run CUBLAS_STATUS_NOT_SUPPORTED.
   Other epilogues (RELU*, GELU and GELU_BIAS without aux, DRELU_BGRAD,
   DGELU_BGRAD), BGRADA/BGRADB with alpha != 1,
   DGELU with beta != 0 (whether gelu' scales beta C too is not
   documented), batched layouts, matrix orders other than column-major and
   C != D layouts are not emulated (NOT_SUPPORTED). */
struct cublasLtContext { int unused; };
typedef cublasLtContext *cublasLtHandle_t;
typedef enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
} cublasLtMatmulDescAttributes_t;
typedef enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU = 32, CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, CUBLASLT_EPILOGUE_DGELU = 192, CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
    CUBLASLT_EPILOGUE_BGRADA = 256, CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;
typedef enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;
struct cublasLtMatmulDescOpaque_t {
    cublasComputeType_t compute; cudaDataType scale;
    int32_t ta, tb; uint32_t epilogue; const void *bias; int32_t bias_type; /* -1: D's type */
    const void *aux; int64_t aux_ld; int32_t aux_type;                      /* -1: D's type */
};
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque_t { cudaDataType type; uint64_t rows, cols; int64_t ld; };
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
/* align: the least alignment (bytes) of A, B, C, D that the chosen
   algorithm may assume; the library's default is 256 */
struct cublasLtMatmulPreferenceOpaque_t { uint64_t max_workspace; uint32_t align[4]; };
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4];
} cublasLtMatmulHeuristicResult_t;

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!cuemu::S().context_up && cuemu::S().cfg.device_count <= 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new cublasLtContext{0};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
namespace cuemu {
/* what the kit asks of cuBLASLt, counted (a plan cache makes each once per
   problem): descriptors, layouts and preferences created, heuristic queries */
inline long long lt_descs = 0, lt_layouts = 0, lt_prefs = 0, lt_heuristics = 0;
inline int lt_no_algo = 0; /* 1: every heuristic query returns no algorithm (the fallback's test) */
} /* namespace cuemu */
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                      cudaDataType_t scale) {
    cuemu::lt_descs++;
    *d = new cublasLtMatmulDescOpaque_t{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
                                        nullptr, -1, nullptr, 0, -1};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                            const void *buf, size_t bytes) {
    void *field = nullptr;
    size_t want = 0;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: field = &d->ta; want = sizeof d->ta; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: field = &d->tb; want = sizeof d->tb; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: field = &d->epilogue; want = sizeof d->epilogue; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: field = &d->bias; want = sizeof d->bias; break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: field = &d->bias_type; want = sizeof d->bias_type; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: field = &d->aux; want = sizeof d->aux; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: field = &d->aux_ld; want = sizeof d->aux_ld; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: field = &d->aux_type; want = sizeof d->aux_type; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* an attribute this harness does not emulate */
    }
    if (!buf || bytes != want) {
        cuemu::error("cublasLtMatmulDescSetAttribute(%d): %zu bytes, the attribute has %zu", (int)a, bytes, want);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(field, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                        uint64_t cols, int64_t ld) {
    cuemu::lt_layouts++;
    *l = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    cuemu::lt_prefs++;
    *p = new cublasLtMatmulPreferenceOpaque_t{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t a,
                                                                  const void *buf, size_t bytes) {
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        uint32_t v;
        if (!buf || bytes != sizeof v) {
            cuemu::error("cublasLtMatmulPreferenceSetAttribute(%d): %zu bytes, the attribute has 4", (int)a, bytes);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        memcpy(&v, buf, sizeof v);
        p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (a != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!buf || bytes != sizeof p->max_workspace) {
        cuemu::error("cublasLtMatmulPreferenceSetAttribute: %zu bytes, the attribute has 8", bytes);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(&p->max_workspace, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}

namespace cuemu {
/* the workspace an emulated algorithm asks for: all the preference allows,
   up to 4 MiB, so a matmul given less than it promised is caught */
constexpr uint64_t LT_WORKSPACE = (uint64_t)4 << 20;
constexpr uint64_t LT_ALGO_TAG = 0x4c74416c676f0001ull; /* "LtAlgo", version 1 */
inline size_t dt_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
/* the epilogues emulated, by what they do after the sum */
enum lt_epilogue { LT_UNSUPPORTED, LT_PLAIN, LT_GELU, LT_DGELU };
inline lt_epilogue lt_epilogue_kind(uint32_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_BIAS: return LT_PLAIN;
    case CUBLASLT_EPILOGUE_BGRADA: case CUBLASLT_EPILOGUE_BGRADB: return LT_PLAIN; /* + the bias gradient */
    case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return LT_GELU;
    case CUBLASLT_EPILOGUE_DGELU: return LT_DGELU;
    default: return LT_UNSUPPORTED;
    }
}
inline int lt_has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
/* BGRADA / BGRADB: the bias gradient, written (see the comment above):
   out[i] (i < m) = sum_k op(A)[i][k], or out[j] (j < n) = sum_k op(B)[k][j],
   where op(X) = X (col-major, ld) or its transpose. In fp32, k in order. */
template <typename TI, typename TO>
inline void lt_bias_grad(int from_b, cublasOperation_t t, int len, int k, const TI *X, int ldx, TO *out) {
    for (int i = 0; i < len; i++) {
        float s = 0.0f;
        for (int kk = 0; kk < k; kk++) {
            /* op(A)[i][kk]: A(i,kk) or A(kk,i); op(B)[kk][i]: B(kk,i) or B(i,kk) */
            size_t at = from_b ? (t == CUBLAS_OP_N ? (size_t)kk + (size_t)i * ldx : (size_t)i + (size_t)kk * ldx)
                               : (t == CUBLAS_OP_N ? (size_t)i + (size_t)kk * ldx : (size_t)kk + (size_t)i * ldx);
            s += ld(X[at]);
        }
        st(&out[i], s);
    }
}
/* GELU, tanh form, and its derivative: the formula train.h and
   train_cuda.h use, in fp32 */
inline float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
inline float gelu_tanh_grad(float x) {
    float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    float dt = (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * dt;
}
/* the GELU epilogues: the fp32 sum (alpha op(A) op(B), one column-major
   (m,n) matrix from gemm<TI, float>, so the GEMM itself stays one
   function), then beta C, the bias, aux and D element by element, as the
   comment on cublasLtMatmul says */
template <typename TC>
inline void lt_gelu_epilogue(lt_epilogue kind, int m, int n, const float *sum, float beta, const TC *C, int ldc,
                             TC *D, int ldd, const TC *bias, TC *aux, int64_t aux_ld) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float v = sum[i + (size_t)j * m];
            if (beta != 0.0f) v += beta * ld(C[i + (size_t)j * ldc]);
            if (bias) v += ld(bias[i]);
            TC *a = &aux[i + (size_t)j * (size_t)aux_ld];
            if (kind == LT_GELU) {
                st(a, v);
                st(&D[i + (size_t)j * ldd], gelu_tanh(v));
            } else
                st(&D[i + (size_t)j * ldd], v * gelu_tanh_grad(ld(*a)));
        }
}
inline long long lt_matmuls = 0; /* cublasLtMatmul calls that ran */
/* the problem a descriptor and four layouts describe: its kind, m, n, k */
struct lt_problem { cublasStatus_t status; gemm_kind kind; int m, n, k; };
inline lt_problem lt_check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                           cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, const char *who) {
    lt_problem p = {CUBLAS_STATUS_SUCCESS, GEMM_UNSUPPORTED, 0, 0, 0};
    if (!d || !a || !b || !c || !dd) { p.status = CUBLAS_STATUS_INVALID_VALUE; return p; }
    uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    int bad_layout = 0;
    for (cublasLtMatrixLayout_t l : {a, b, c, dd}) bad_layout |= l->ld < (int64_t)(l->rows > 1 ? l->rows : 1);
    if (bad_layout || ak != bk || am != dd->rows || bn != dd->cols || c->rows != dd->rows || c->cols != dd->cols ||
        (d->ta != CUBLAS_OP_N && d->ta != CUBLAS_OP_T) || (d->tb != CUBLAS_OP_N && d->tb != CUBLAS_OP_T)) {
        error("%s: layouts do not fit: A %llux%llu, B %llux%llu, D %llux%llu (ops %d, %d)", who,
              (unsigned long long)a->rows, (unsigned long long)a->cols, (unsigned long long)b->rows,
              (unsigned long long)b->cols, (unsigned long long)dd->rows, (unsigned long long)dd->cols, d->ta, d->tb);
        p.status = CUBLAS_STATUS_INVALID_VALUE;
        return p;
    }
    p.m = (int)am, p.n = (int)bn, p.k = (int)ak;
    p.kind = d->scale == CUDA_R_32F && c->type == dd->type && c->ld == dd->ld
                 ? gemm_types(a->type, b->type, dd->type, d->compute) : GEMM_UNSUPPORTED;
    int bias_ok = d->bias_type == -1 || d->bias_type == (int32_t)dd->type; /* the bias has D's type */
    int aux_ok = d->aux_type == -1 || d->aux_type == (int32_t)dd->type;   /* GELU's input too */
    if (p.kind == GEMM_UNSUPPORTED || !bias_ok || !aux_ok || lt_epilogue_kind(d->epilogue) == LT_UNSUPPORTED) {
        p.status = CUBLAS_STATUS_NOT_SUPPORTED;
        return p;
    }
    if (lt_epilogue_kind(d->epilogue) != LT_PLAIN && (d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)dd->rows)) {
        error("%s: the epilogue's aux ld is %lld: it must be a multiple of 8 and at least D's %llu rows", who,
              (long long)d->aux_ld, (unsigned long long)dd->rows);
        p.status = CUBLAS_STATUS_INVALID_VALUE;
    }
    return p;
}
} /* namespace cuemu */

static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t pref, int requested,
    cublasLtMatmulHeuristicResult_t *results, int *returned) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !pref || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
    cuemu::lt_heuristics++;
    cuemu::lt_problem p = cuemu::lt_check(d, a, b, c, dd, "cublasLtMatmulAlgoGetHeuristic");
    *returned = 0;
    if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
    if (cuemu::lt_no_algo) return CUBLAS_STATUS_NOT_SUPPORTED; /* what the library answers when nothing fits */
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    r.workspaceSize = pref->max_workspace < cuemu::LT_WORKSPACE ? pref->max_workspace : cuemu::LT_WORKSPACE;
    /* the algorithm remembers the alignments it was chosen for (16 bits each) */
    uint64_t aligns = 0;
    for (int i = 0; i < 4; i++) aligns |= (uint64_t)(pref->align[i] & 0xffffu) << (16 * i);
    uint64_t algo[8] = {cuemu::LT_ALGO_TAG, (uint64_t)p.kind, (uint64_t)p.m, (uint64_t)p.n, (uint64_t)p.k,
                        r.workspaceSize, d->epilogue, aligns};
    memcpy(r.algo.data, algo, sizeof algo);
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    results[0] = r;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}
/* algo NULL: the library runs its own heuristic (no workspace) */
static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t a, const void *B,
                                            cublasLtMatrixLayout_t b, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dd,
                                            const cublasLtMatmulAlgo_t *algo, void *workspace,
                                            size_t workspace_bytes, cudaStream_t stream) {
    const char *who = "cublasLtMatmul";
    (void)stream;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    cuemu::lt_problem p = cuemu::lt_check(d, a, b, c, dd, who);
    if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
    uint64_t need = 0;
    if (algo) {
        const uint64_t *x = algo->data;
        if (x[0] != cuemu::LT_ALGO_TAG || x[1] != (uint64_t)p.kind || x[2] != (uint64_t)p.m ||
            x[3] != (uint64_t)p.n || x[4] != (uint64_t)p.k || x[6] != d->epilogue) {
            cuemu::error("%s: the algorithm was not returned by a heuristic for this problem", who);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        need = x[5];
        /* a pointer less aligned than the algorithm was chosen for: the
           kernel's wide loads would fault (or read wrong) on a GPU */
        const void *ptrs[4] = {A, B, *(const float *)beta != 0.0f ? C : nullptr, D};
        for (int i = 0; i < 4; i++) {
            uint64_t want = (x[7] >> (16 * i)) & 0xffffu;
            if (ptrs[i] && want && (uintptr_t)ptrs[i] % want != 0) {
                cuemu::error("%s: %c at %p is not aligned to the %llu bytes its algorithm was chosen for "
                             "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", who, "ABCD"[i], ptrs[i],
                             (unsigned long long)want, "ABCD"[i]);
                return CUBLAS_STATUS_INVALID_VALUE;
            }
        }
    }
    if (workspace_bytes < need || (workspace_bytes && !cuemu::is_device(workspace, workspace_bytes))) {
        cuemu::error("%s: the algorithm needs %llu bytes of device workspace, given %zu at %p", who,
                     (unsigned long long)need, workspace_bytes, workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* every matrix, and the bias, inside one device allocation */
    auto inside = [&](const void *ptr, cublasLtMatrixLayout_t l) {
        size_t n = l->rows && l->cols ? (size_t)((l->cols - 1) * (uint64_t)l->ld + l->rows) : 0;
        return n == 0 || cuemu::is_device(ptr, n * cuemu::dt_bytes(l->type));
    };
    int with_bias = cuemu::lt_has_bias(d->epilogue);
    int bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADA ? 1 : d->epilogue == CUBLASLT_EPILOGUE_BGRADB ? 2 : 0;
    cuemu::lt_epilogue kind = cuemu::lt_epilogue_kind(d->epilogue);
    if (bgrad && *(const float *)alpha != 1.0f) return CUBLAS_STATUS_NOT_SUPPORTED; /* (see above) */
    if (bgrad && !cuemu::is_device(d->bias, (size_t)(bgrad == 1 ? p.m : p.n) * cuemu::dt_bytes(dd->type))) {
        cuemu::error("%s: the %s epilogue's bias gradient (%d values) is not (all) in device memory", who,
                     bgrad == 1 ? "BGRADA" : "BGRADB", bgrad == 1 ? p.m : p.n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    size_t aux_n = dd->rows && dd->cols ? (size_t)((dd->cols - 1) * (uint64_t)d->aux_ld + dd->rows) : 0;
    if (!inside(A, a) || !inside(B, b) || !inside(D, dd) || (*(const float *)beta != 0.0f && !inside(C, c)) ||
        (with_bias && !cuemu::is_device(d->bias, (size_t)p.m * cuemu::dt_bytes(dd->type))) ||
        (kind != cuemu::LT_PLAIN && aux_n && !cuemu::is_device(d->aux, aux_n * cuemu::dt_bytes(dd->type)))) {
        cuemu::error("%s: a matrix%s is not (all) in device memory", who,
                     kind != cuemu::LT_PLAIN ? ", the bias or the epilogue's aux" : with_bias ? " or the bias" : "");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    float al = *(const float *)alpha, be = *(const float *)beta;
    if (kind == cuemu::LT_DGELU && be != 0.0f) return CUBLAS_STATUS_NOT_SUPPORTED;
    int lda = (int)a->ld, ldb = (int)b->ld, ldc = (int)c->ld, ldd = (int)dd->ld;
    cublasOperation_t ta = (cublasOperation_t)d->ta, tb = (cublasOperation_t)d->tb;
    typedef __nv_bfloat16 bf;
    cuemu::lt_matmuls++;
    if (kind != cuemu::LT_PLAIN) { /* GELU_AUX[_BIAS], DGELU: the fp32 sum, then the epilogue */
        int dry = cuemu::S().cfg.dry_run; /* checked and counted, nothing computed */
        std::vector<float> sum(dry ? 0 : (size_t)p.m * p.n);
        cublasStatus_t st;
        if (p.kind == cuemu::GEMM_F32)
            st = cuemu::gemm(h, ta, tb, p.m, p.n, p.k, al, (const float *)A, lda, (const float *)B, ldb, 0.0f,
                             (const float *)nullptr, p.m, sum.data(), p.m, d->compute == CUBLAS_COMPUTE_32F_FAST_TF32,
                             who);
        else
            st = cuemu::gemm(h, ta, tb, p.m, p.n, p.k, al, (const bf *)A, lda, (const bf *)B, ldb, 0.0f,
                             (const float *)nullptr, p.m, sum.data(), p.m, 0, who);
        if (st != CUBLAS_STATUS_SUCCESS || dry) return st;
        if (dd->type == CUDA_R_16BF)
            cuemu::lt_gelu_epilogue(kind, p.m, p.n, sum.data(), be, (const bf *)C, ldc, (bf *)D, ldd,
                                    with_bias ? (const bf *)d->bias : nullptr, (bf *)d->aux, d->aux_ld);
        else
            cuemu::lt_gelu_epilogue(kind, p.m, p.n, sum.data(), be, (const float *)C, ldc, (float *)D, ldd,
                                    with_bias ? (const float *)d->bias : nullptr, (float *)d->aux, d->aux_ld);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (bgrad && !cuemu::S().cfg.dry_run) { /* the bias gradient, from the operand as stored (D comes below) */
        int from_b = bgrad == 2, len = from_b ? p.n : p.m;
        const void *X = from_b ? B : A;
        int ldx = from_b ? ldb : lda;
        cublasOperation_t t = from_b ? tb : ta;
        if (p.kind == cuemu::GEMM_F32)
            cuemu::lt_bias_grad(from_b, t, len, p.k, (const float *)X, ldx, (float *)d->bias);
        else if (dd->type == CUDA_R_32F)
            cuemu::lt_bias_grad(from_b, t, len, p.k, (const bf *)X, ldx, (float *)d->bias);
        else
            cuemu::lt_bias_grad(from_b, t, len, p.k, (const bf *)X, ldx, (bf *)d->bias);
    }
    switch (p.kind) {
    case cuemu::GEMM_F32:
        return cuemu::gemm(h, ta, tb, p.m, p.n, p.k, al, (const float *)A, lda, (const float *)B, ldb, be,
                           (const float *)C, ldc, (float *)D, ldd, d->compute == CUBLAS_COMPUTE_32F_FAST_TF32,
                           who, with_bias ? (const float *)d->bias : nullptr);
    case cuemu::GEMM_BF16_BF16:
        return cuemu::gemm(h, ta, tb, p.m, p.n, p.k, al, (const bf *)A, lda, (const bf *)B, ldb, be,
                           (const bf *)C, ldc, (bf *)D, ldd, 0, who, with_bias ? (const bf *)d->bias : nullptr);
    case cuemu::GEMM_BF16_F32:
        return cuemu::gemm(h, ta, tb, p.m, p.n, p.k, al, (const bf *)A, lda, (const bf *)B, ldb, be,
                           (const float *)C, ldc, (float *)D, ldd, 0, who,
                           with_bias ? (const float *)d->bias : nullptr);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

#endif /* CUDA_ON_CPU_H */
