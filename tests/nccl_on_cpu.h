/* tests/nccl_on_cpu.h - NCCL's API on a CPU machine, for tests (not part of
   the kit's API). With tests/cuda_on_cpu.h it lets train_nccl.h's NCCL
   communicator run, unchanged, in real processes that talk over loopback:

      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #include "tests/cuda_on_cpu.h"
      #define TRAIN_CUDA_IMPLEMENTATION
      #include "train_cuda.h"
      #include "tests/nccl_on_cpu.h"   // includes train_nccl.h's implementation

   The "network" under it is train_nccl.h's own TCP ring. What follows the
   NCCL documentation and is checked, so that a misuse fails here as it
   would on GPUs:
     - counts per rank: ncclReduceScatter gives rank r block r of W equal
       blocks of recvcount; ncclAllGather takes block r from rank r;
     - in place only (the way train_nccl.h calls them): reduce-scatter
       needs recvbuff == sendbuff + rank*recvcount, all-gather sendbuff ==
       recvbuff + rank*sendcount, all-reduce and broadcast sendbuff ==
       recvbuff; anything else is ncclInvalidArgument;
     - after a reduce-scatter the blocks a rank does not own hold NaN
       (NCCL leaves them undefined): code that reads them shows it;
     - a non-blocking communicator (config.blocking = 0) answers
       ncclInProgress to ncclCommInitRankConfig and settles later;
     - a collective that fails (a peer died) returns ncclSuccess, as the
       enqueue on a GPU would, and the failure shows in
       ncclCommGetAsyncError: the path train_nccl.h must handle.
   Collectives are ASYNCHRONOUS, as on a GPU: each is queued on the TCP
   ring's worker thread and the call returns at once; an event recorded
   on the communication stream is not ready (cudaEventQuery answers
   cudaErrorNotReady) until the ring has finished everything queued. What
   must wait for them waits as it would on a GPU:
     - cudaMemcpyAsync device -> host into memory from cudaMallocHost
       (pinned) is deferred: it happens when the queued collectives end;
     - the same copy into ordinary (pageable) memory BLOCKS the host until
       they end, with no timeout of its own (the ring gives up after 120
       s): what a real pageable copy does, the hang that pinned memory
       and event polling avoid;
     - a reduce-scatter poisons the blocks a rank does not own when it ends.
   cudaDeviceGetStreamPriorityRange answers (0, -5), an H100's range, and
   nccl_on_cpu_stream_priority holds the priority of the last stream made
   by cudaStreamCreateWithPriority.
   Faults for tests: NCCL_ON_CPU_DIE_AT=r:k makes rank r SIGKILL itself
   right after queuing its k-th collective (k from 1): it dies in the
   middle of a collective its peers are in. Types: ncclFloat and
   ncclFloat64 reduce; ncclInt8 only broadcasts.

   The unique id carries the loopback port of the ring's rendezvous, picked
   by rank 0's ncclGetUniqueId. */
#ifndef NCCL_ON_CPU_H
#define NCCL_ON_CPU_H
#ifndef TRN_CUDA_ON_CPU
#error "nccl_on_cpu.h goes with tests/cuda_on_cpu.h"
#endif
#include <signal.h>

typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclInt8 = 0, ncclFloat = 7, ncclFloat64 = 8 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclAvg = 4 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { int blocking; } ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {1}
struct ncclComm;
typedef struct ncclComm *ncclComm_t;

/* what train_nccl.h needs of the runtime beyond what cuda_on_cpu.h has.
   Names that cuda_on_cpu.h may one day define too are macros onto our
   own functions, so both can coexist. */
#define cudaErrorNotReady ((cudaError_t)600)
#ifndef cudaEventDisableTiming
#define cudaEventDisableTiming 0x02
#endif
static int nccl_on_cpu__pending(void);                 /* collectives queued and not done */
static void nccl_on_cpu__defer_copy(void *dst, const void *src, size_t n);
static void nccl_on_cpu__block(void);                  /* wait for the ring, no timeout of ours */
static int nccl_on_cpu_stream_priority = 1;            /* 1: none created */

static struct { void *p; size_t n; } nccl_on_cpu__pinned[16];
static int nccl_on_cpu__is_pinned(const void *p, size_t n) {
    for (int i = 0; i < 16; i++) {
        const char *b = (const char *)nccl_on_cpu__pinned[i].p;
        if (b && (const char *)p >= b && (const char *)p + n <= b + nccl_on_cpu__pinned[i].n) return 1;
    }
    return 0;
}
static cudaError_t nccl_on_cpu__malloc_host(void **p, size_t n) {
    for (int i = 0; i < 16; i++)
        if (!nccl_on_cpu__pinned[i].p) {
            *p = calloc(1, n ? n : 1);
            if (!*p) return cudaErrorMemoryAllocation;
            nccl_on_cpu__pinned[i].p = *p;
            nccl_on_cpu__pinned[i].n = n;
            return cudaSuccess;
        }
    return cudaErrorMemoryAllocation;
}
static cudaError_t nccl_on_cpu__free_host(void *p) {
    for (int i = 0; i < 16; i++)
        if (p && nccl_on_cpu__pinned[i].p == p) { nccl_on_cpu__pinned[i].p = NULL; free(p); return cudaSuccess; }
    return cudaErrorInvalidValue;
}
static cudaError_t nccl_on_cpu__priority_range(int *least, int *greatest) { *least = 0; *greatest = -5; return cudaSuccess; }
static cudaError_t nccl_on_cpu__stream_priority(cudaStream_t *s, unsigned flags, int prio) {
    nccl_on_cpu_stream_priority = prio;
    return cudaStreamCreateWithFlags(s, flags);
}
static cudaError_t nccl_on_cpu__event_query(cudaEvent_t e) { (void)e; return nccl_on_cpu__pending() ? cudaErrorNotReady : cudaSuccess; }
/* a copy on a stream behind queued collectives (see the top) */
static cudaError_t nccl_on_cpu__memcpy_async(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
    if (k == cudaMemcpyDeviceToHost && nccl_on_cpu__pending()) {
        if (nccl_on_cpu__is_pinned(dst, n)) { nccl_on_cpu__defer_copy(dst, src, n); return cudaSuccess; }
        nccl_on_cpu__block();
    }
    return cudaMemcpyAsync(dst, src, n, k, s);
}
#define cudaMallocHost nccl_on_cpu__malloc_host
#define cudaFreeHost nccl_on_cpu__free_host
#define cudaDeviceGetStreamPriorityRange nccl_on_cpu__priority_range
#define cudaStreamCreateWithPriority nccl_on_cpu__stream_priority
#define cudaEventQuery nccl_on_cpu__event_query
#define cudaMemcpyAsync nccl_on_cpu__memcpy_async

static ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
static ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg);
static ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
static ncclResult_t ncclCommAbort(ncclComm_t comm);
static ncclResult_t ncclCommDestroy(ncclComm_t comm);
static const char *ncclGetErrorString(ncclResult_t r);
static const char *ncclGetLastError(ncclComm_t comm);
static ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                  cudaStream_t st);
static ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t st);
static ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st);
static ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                                  cudaStream_t st);
static ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                               cudaStream_t st);
static ncclResult_t ncclGroupStart(void) { return ncclSuccess; } /* collectives run in call order anyway */
static ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"

struct ncclComm {
    trn_comm ring;          /* the "network"                               */
    int rank, world;
    ncclResult_t async;     /* what ncclCommGetAsyncError reports          */
    char last[512];
    int aborted;
    int calls, die_at;      /* collectives queued; NCCL_ON_CPU_DIE_AT      */
    /* work that runs when the queued collectives end: deferred copies
       (dst, src, n) and reduce-scatter poison (x, total, keep_lo, keep_hi) */
    struct { void *dst; const void *src; size_t n; float *x; size_t total, keep_lo, keep_hi; } after[64];
    int n_after;
};
static ncclComm_t nccl_on_cpu__live; /* this process's communicator */

static ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    int port = 0, fd = trn__net_listen(0, &port); /* a free loopback port */
    if (fd < 0) return ncclSystemError;
    close(fd);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "nccl_on_cpu %d", port);
    return ncclSuccess;
}

static ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
    trn_dist_env env;
    ncclComm_t c = (ncclComm_t)calloc(1, sizeof(struct ncclComm));
    int port = 0;
    const char *die = getenv("NCCL_ON_CPU_DIE_AT");
    if (!c || sscanf(id.internal, "nccl_on_cpu %d", &port) != 1) { free(c); return ncclInvalidArgument; }
    memset(&env, 0, sizeof env);
    env.rank = rank; env.world_size = nranks; env.master_port = port; env.launcher = "nccl_on_cpu";
    strcpy(env.master_addr, "127.0.0.1");
    c->rank = rank; c->world = nranks;
    int who = -1;
    if (die && (sscanf(die, "%d:%d", &who, &c->die_at) != 2 || who != rank)) c->die_at = 0; /* another rank's */
    *comm = c;
    if (trn_comm_init(&c->ring, &env, TRN_COMM_TCP, 120.0) != TRN_OK) {
        snprintf(c->last, sizeof c->last, "%.500s", trn_error_reason());
        c->async = ncclSystemError;
    }
    nccl_on_cpu__live = c;
    if (cfg && cfg->blocking == 0) return ncclInProgress; /* settles at once: async holds the outcome */
    return c->async;
}

/* look at the ring: a failure becomes the async error; when nothing is
   queued any more, run the work that waited for it. 1: still busy */
static int nccl_on_cpu__poll(ncclComm_t c) {
    trn__ring *g = (trn__ring *)c->ring.impl;
    int busy = 0, i;
    trn_result err = TRN_OK;
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    busy = g->q_len > 0;
    err = g->err;
    if (err && c->async == ncclSuccess) snprintf(c->last, sizeof c->last, "%s", g->err_msg);
    pthread_mutex_unlock(&g->mu);
    if (err && c->async == ncclSuccess) c->async = ncclRemoteError;
    if (busy) return 1;
    for (i = 0; i < c->n_after; i++) {
        if (c->after[i].dst) memcpy(c->after[i].dst, c->after[i].src, c->after[i].n);
        for (size_t k = 0; c->after[i].x && k < c->after[i].total; k++)
            if (k < c->after[i].keep_lo || k >= c->after[i].keep_hi) c->after[i].x[k] = NAN;
    }
    c->n_after = 0;
    return 0;
}
static int nccl_on_cpu__pending(void) { return nccl_on_cpu__live && nccl_on_cpu__poll(nccl_on_cpu__live); }
static void nccl_on_cpu__block(void) {
    ncclComm_t c = nccl_on_cpu__live;
    if (c && c->ring.impl) c->ring.wait(&c->ring);
    if (c) nccl_on_cpu__poll(c);
}
static void nccl_on_cpu__after(ncclComm_t c, void *dst, const void *src, size_t n, float *x, size_t total, size_t lo,
                               size_t hi) {
    if (c->n_after == 64) nccl_on_cpu__block(); /* full: let it drain */
    c->after[c->n_after].dst = dst; c->after[c->n_after].src = src; c->after[c->n_after].n = n;
    c->after[c->n_after].x = x; c->after[c->n_after].total = total;
    c->after[c->n_after].keep_lo = lo; c->after[c->n_after].keep_hi = hi;
    c->n_after++;
}
static void nccl_on_cpu__defer_copy(void *dst, const void *src, size_t n) {
    nccl_on_cpu__after(nccl_on_cpu__live, dst, src, n, NULL, 0, 0, 0);
}

static ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
    nccl_on_cpu__poll(comm);
    *err = comm->async;
    return ncclSuccess;
}
static ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm->aborted && comm->ring.abort) comm->ring.abort(&comm->ring);
    comm->aborted = 1;
    trn_comm_free(&comm->ring);
    if (nccl_on_cpu__live == comm) nccl_on_cpu__live = NULL;
    free(comm);
    return ncclSuccess;
}
static ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    trn_comm_free(&comm->ring);
    if (nccl_on_cpu__live == comm) nccl_on_cpu__live = NULL;
    free(comm);
    return ncclSuccess;
}
static const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unhandled error";
    }
}
static const char *ncclGetLastError(ncclComm_t comm) { return comm ? comm->last : ""; }

/* a collective was queued (or could not be): the enqueue "succeeded", a
   failure shows later in ncclCommGetAsyncError */
static ncclResult_t nccl_on_cpu__run(ncclComm_t c, trn_result rc) {
    if (rc != TRN_OK && c->async == ncclSuccess) {
        snprintf(c->last, sizeof c->last, "%s", trn_error_reason());
        c->async = ncclRemoteError;
    }
    if (++c->calls == c->die_at) raise(SIGKILL); /* in the middle of it */
    return ncclSuccess;
}
static ncclResult_t nccl_on_cpu__bad(ncclComm_t c, const char *what) {
    snprintf(c->last, sizeof c->last, "%s", what);
    return ncclInvalidArgument;
}

static ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                  cudaStream_t st) {
    (void)st;
    if (c->async != ncclSuccess) return c->async;
    if (s != r) return nccl_on_cpu__bad(c, "ncclAllReduce: only in place here");
    if (t == ncclFloat64) {
        if (n > 8) return nccl_on_cpu__bad(c, "ncclAllReduce: at most 8 doubles here");
        return nccl_on_cpu__run(c, trn__ring_push(&c->ring, TRN__OP_ALLREDUCE, r, n, 8, op == ncclAvg, 0)); /* queued */
    }
    if (t != ncclFloat) return nccl_on_cpu__bad(c, "ncclAllReduce: float or double only here");
    return nccl_on_cpu__run(c, c->ring.all_reduce(&c->ring, (float *)r, n, op == ncclAvg));
}

static ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t st) {
    float *x = (float *)s;
    size_t total = n * (size_t)c->world;
    ncclResult_t res;
    (void)st;
    if (c->async != ncclSuccess) return c->async;
    if (t != ncclFloat) return nccl_on_cpu__bad(c, "ncclReduceScatter: float only here");
    if ((float *)r != x + n * (size_t)c->rank)
        return nccl_on_cpu__bad(c, "ncclReduceScatter: in place needs recvbuff == sendbuff + rank*recvcount");
    /* equal blocks: all-reduce everything, keep my block, poison the rest
       when it is done */
    res = nccl_on_cpu__run(c, c->ring.all_reduce(&c->ring, x, total, op == ncclAvg));
    nccl_on_cpu__after(c, NULL, NULL, 0, x, total, n * (size_t)c->rank, n * (size_t)(c->rank + 1));
    return res;
}

static ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
    float *x = (float *)r;
    int k;
    (void)st;
    if (c->async != ncclSuccess) return c->async;
    if (t != ncclFloat) return nccl_on_cpu__bad(c, "ncclAllGather: float only here");
    if ((const float *)s != x + n * (size_t)c->rank)
        return nccl_on_cpu__bad(c, "ncclAllGather: in place needs sendbuff == recvbuff + rank*sendcount");
    for (k = 0; k < c->world; k++) /* block k from rank k, bit for bit */
        if (c->ring.broadcast(&c->ring, x + n * (size_t)k, n * sizeof(float), k) != TRN_OK) break;
    return nccl_on_cpu__run(c, TRN_OK);
}

static ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                                  cudaStream_t st) {
    size_t es = t == ncclFloat ? 4 : t == ncclFloat64 ? 8 : 1;
    (void)st;
    if (c->async != ncclSuccess) return c->async;
    if (s != r) return nccl_on_cpu__bad(c, "ncclBroadcast: only in place here");
    if (root < 0 || root >= c->world) return nccl_on_cpu__bad(c, "ncclBroadcast: root out of range");
    return nccl_on_cpu__run(c, c->ring.broadcast(&c->ring, r, n * es, root));
}
/* the result on root only: an all-reduce, then the other ranks' buffers
   are poisoned (NCCL leaves them as they were; code must not read them) */
static ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                               cudaStream_t st) {
    ncclResult_t res;
    (void)st;
    if (c->async != ncclSuccess) return c->async;
    if (s != r) return nccl_on_cpu__bad(c, "ncclReduce: only in place here");
    if (t != ncclFloat) return nccl_on_cpu__bad(c, "ncclReduce: float only here");
    if (root < 0 || root >= c->world) return nccl_on_cpu__bad(c, "ncclReduce: root out of range");
    res = nccl_on_cpu__run(c, c->ring.all_reduce(&c->ring, (float *)r, n, op == ncclAvg));
    if (c->rank != root) nccl_on_cpu__after(c, NULL, NULL, 0, (float *)r, n, 0, 0);
    return res;
}
#endif
