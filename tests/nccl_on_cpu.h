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
   Streams are synchronous here (cuda_on_cpu.h), so every collective is
   complete when it returns. Types: ncclFloat and ncclFloat64 reduce;
   ncclInt8 only broadcasts.

   The unique id carries the loopback port of the ring's rendezvous, picked
   by rank 0's ncclGetUniqueId. */
#ifndef NCCL_ON_CPU_H
#define NCCL_ON_CPU_H
#ifndef TRN_CUDA_ON_CPU
#error "nccl_on_cpu.h goes with tests/cuda_on_cpu.h"
#endif

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

/* what train_nccl.h needs of the runtime beyond what cuda_on_cpu.h has:
   streams run synchronously there, so an event is always complete */
static inline cudaError_t cudaEventQuery(cudaEvent_t e) { (void)e; return cudaSuccess; }
#define cudaErrorNotReady ((cudaError_t)600)
#ifndef cudaEventDisableTiming
#define cudaEventDisableTiming 0x02
#endif

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

#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"

struct ncclComm {
    trn_comm ring;          /* the "network"                               */
    int rank, world;
    ncclResult_t async;     /* what ncclCommGetAsyncError reports          */
    char last[512];
    int aborted;
};

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
    if (!c || sscanf(id.internal, "nccl_on_cpu %d", &port) != 1) { free(c); return ncclInvalidArgument; }
    memset(&env, 0, sizeof env);
    env.rank = rank; env.world_size = nranks; env.master_port = port; env.launcher = "nccl_on_cpu";
    strcpy(env.master_addr, "127.0.0.1");
    c->rank = rank; c->world = nranks;
    *comm = c;
    if (trn_comm_init(&c->ring, &env, TRN_COMM_TCP, 60.0) != TRN_OK) {
        snprintf(c->last, sizeof c->last, "%.500s", trn_error_reason());
        c->async = ncclSystemError;
    }
    if (cfg && cfg->blocking == 0) return ncclInProgress; /* settles at once: async holds the outcome */
    return c->async;
}

static ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) { *err = comm->async; return ncclSuccess; }
static ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm->aborted && comm->ring.abort) comm->ring.abort(&comm->ring);
    comm->aborted = 1;
    trn_comm_free(&comm->ring);
    free(comm);
    return ncclSuccess;
}
static ncclResult_t ncclCommDestroy(ncclComm_t comm) { trn_comm_free(&comm->ring); free(comm); return ncclSuccess; }
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

/* a failed transfer: the enqueue "succeeded", the failure is asynchronous */
static ncclResult_t nccl_on_cpu__run(ncclComm_t c, trn_result rc) {
    if (rc == TRN_OK) rc = c->ring.wait(&c->ring);
    if (rc != TRN_OK && c->async == ncclSuccess) {
        snprintf(c->last, sizeof c->last, "%s", trn_error_reason());
        c->async = ncclRemoteError;
    }
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
        return nccl_on_cpu__run(c, c->ring.all_reduce_host(&c->ring, (double *)r, (int)n, op == ncclAvg));
    }
    if (t != ncclFloat) return nccl_on_cpu__bad(c, "ncclAllReduce: float or double only here");
    return nccl_on_cpu__run(c, c->ring.all_reduce(&c->ring, (float *)r, n, op == ncclAvg));
}

static ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t st) {
    float *x = (float *)s;
    size_t i, total = n * (size_t)c->world;
    ncclResult_t res;
    (void)st;
    if (c->async != ncclSuccess) return c->async;
    if (t != ncclFloat) return nccl_on_cpu__bad(c, "ncclReduceScatter: float only here");
    if ((float *)r != x + n * (size_t)c->rank)
        return nccl_on_cpu__bad(c, "ncclReduceScatter: in place needs recvbuff == sendbuff + rank*recvcount");
    /* equal blocks: all-reduce everything, keep my block, poison the rest */
    res = nccl_on_cpu__run(c, c->ring.all_reduce(&c->ring, x, total, op == ncclAvg));
    for (i = 0; i < total; i++)
        if (i / n != (size_t)c->rank) x[i] = NAN;
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
#endif
