/* train_nccl.h - v0.2 - data-parallel training for train.h: DDP, ZeRO-1,
   ZeRO-2 and FSDP, over NCCL between GPUs, or over TCP between CPU
   processes.

   Do this, in ONE .cu file of a GPU program (compile with nvcc, link -lnccl):
      #define TRAIN_IMPLEMENTATION
      #include "train.h"
      #define TRAIN_CUDA_IMPLEMENTATION
      #include "train_cuda.h"
      #define TRAIN_NCCL_IMPLEMENTATION
      #include "train_nccl.h"
   A CPU program (and every test) uses the TCP communicator only, with any
   C99 or C++ compiler on a POSIX system (compile with -D_POSIX_C_SOURCE=
   200809L -D_DEFAULT_SOURCE, or gnu99, and -pthread):
      #define TRAIN_NCCL_CPU_ONLY
      #define TRAIN_NCCL_IMPLEMENTATION
      #include "train_nccl.h"

   The data-parallel training step. Every rank (process) runs the same
   program on its own slice of the data; after backward the gradients are
   averaged over the ranks, so every rank takes the same AdamW step and the
   weights stay identical everywhere:

      trn_ddp ddp;
      trn_ddp_desc dd = {0};                      // zero = defaults
      CHECK(trn_ddp_init(&ddp, &dd));             // who am I? rendezvous; GPU = local rank
      ... build the model and its optimizer ...
      CHECK(trn_ddp_attach(&ddp, &model));        // rank 0's weights to all; buckets
      for (step = 0; step < steps; step++) {
          load batch trn_ddp_batch_index(&ddp, step) // rank r: batches r, r+W, ...
          trn_zero_grad(&model); trn_reset(&model);
          loss = forward(&model, x, y);
          trn_backward(&model, loss);             // each finished bucket starts
                                                  //   its all-reduce right away
          CHECK(trn_ddp_allreduce_grads(&ddp, &model)); // wait for the rest
          CHECK(trn_ddp_clip_grad_norm(&ddp, &model, 1.0f, &norm));
          CHECK(trn_ddp_adamw_step(&ddp, &opt, &model, lr));
          if (trn_ddp_is_main(&ddp)) printf(...); // log and save on rank 0
      }
      trn_ddp_barrier(&ddp);                      // nobody leaves early
      trn_ddp_free(&ddp);

   Launch the same binary with the launcher you already use. Each one sets
   environment variables that trn_ddp_init reads (torchrun's first, then
   Open MPI's, MPICH's, Slurm's):
      torchrun --nproc_per_node=8 --no-python ./prog      one node, 8 GPUs
      torchrun --nnodes=2 --node_rank=0 --master_addr=h0 --nproc_per_node=8 --no-python ./prog
      mpirun -np 16 -H h0:8,h1:8 -x MASTER_ADDR=h0 ./prog
      srun -N 2 --ntasks-per-node=8 --gpus-per-node=8 ./prog
   (torchrun needs --no-python to start a program that is not Python.)
   Rank 0 listens at MASTER_ADDR:MASTER_PORT (defaults: the first node of
   the Slurm job or 127.0.0.1; 29500, under Slurm 20000 + job id % 20000)
   and hands every rank the NCCL unique id there: no MPI library needed.
   trn_ddp_init picks the GPU (trn_cuda_init(local rank), or device 0 when
   the rank sees exactly one GPU, as under Slurm's --gpus-per-task=1 or
   CUDA_VISIBLE_DEVICES set per rank): do not call trn_cuda_init yourself.

   What the memory ledger shows. Gradients are all-reduced IN PLACE, in
   buckets that are views of the one flat gradient buffer, so the COMM line
   holds only a fixed 256 KiB (TCP) or 64 bytes (NCCL) whatever the model
   size (PyTorch's DDP copies gradients into separate buckets: one more
   gradient-sized buffer). With ZeRO-1 (desc.shard = TRN_SHARD_ZERO1) each rank keeps
   AdamW's m and v for 1/W of the parameters: OPTIM shrinks W times.
   ZeRO-2 (desc.shard = TRN_SHARD_ZERO2) keeps only this rank's shard of
   the gradients too: GRADS = 1/W of them plus at most two buckets being
   reduced (each bucket lives in a staging buffer from its first write in
   backward until its reduce-scatter is done). FSDP (TRN_SHARD_FSDP) shards
   the weights as well: the model calls trn_unit(m, a parameter of the
   block) where each block starts in its forward, and each block's weights
   are gathered just before its forward and its backward, the next one
   prefetched, and freed after (>>fsdp). trn_ddp_print_memory prints every
   rank's weights (shard, gathered), gradients, optimizer and comm bytes.

   Faults. No collective waits forever: if a rank dies, its neighbours see
   the connection close (TCP) or NCCL reports it, and every rank returns
   TRN_ERR_COMM; if a rank hangs, the others return TRN_ERR_TIMEOUT after
   desc.timeout_s (default 600 s, or the environment's TRN_DDP_TIMEOUT).
   The failing rank closes its connections (aborts its communicator) at
   once, so the failure spreads in milliseconds, not after the timeout.

   Configuration macros:
      TRAIN_NCCL_CPU_ONLY   only the TCP communicator (no CUDA, no NCCL)
      TRN_NCCL_COMPUTE_STREAM  the cudaStream_t the model's kernels run on
                            (default: train_cuda.h's stream)

   What it does NOT do: no tensor, pipeline or sequence parallelism; no
   elastic membership (a dead rank ends the job: resume from the last checkpoint
   with the same world size); IPv4 only; the TCP communicator is for CPU
   training and tests, not a fast interconnect; ZeRO-1's reduce-scatter
   runs after backward (no overlap).

   Contents (grep for the anchors):
      >>env         launcher environment: rank, world size, local rank
      >>comm        the communicator table; shards; init/free
      >>ddp         DDP, ZeRO-1, ZeRO-2 on top of a communicator
      >>fsdp        FSDP: units, gather/free per block, prefetch
      >>sharded     sharded checkpoints, resharding on load, consolidation
      >>sockets     TCP helpers with deadlines
      >>rendezvous  rank 0 hands out the unique id and the peer table
      >>ring        the TCP communicator: ring collectives on a worker thread
      >>nccl        the NCCL communicator (nvcc only)

   License: MIT, as train.h.
*/
#ifndef TRAIN_H_INCLUDED
#error "train_nccl.h: include train.h before train_nccl.h"
#endif
#if !defined(TRAIN_NCCL_CPU_ONLY)
#if !defined(__CUDACC__) && !defined(TRN_CUDA_ON_CPU) /* (tests: cuda_on_cpu.h + nccl_on_cpu.h) */
#error "train_nccl.h: the NCCL communicator must be compiled by nvcc (or define TRAIN_NCCL_CPU_ONLY for the TCP communicator between CPU processes)"
#endif
#if !defined(TRAIN_CUDA_H_INCLUDED)
#error "train_nccl.h: include train_cuda.h before train_nccl.h (or define TRAIN_NCCL_CPU_ONLY)"
#endif
#endif

#ifndef TRAIN_NCCL_H_INCLUDED
#define TRAIN_NCCL_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
   >>env
   Who am I? Launchers tell each process its place in environment
   variables. trn_dist_env_read looks for them in this order (the first
   launcher whose rank variable is set wins, so torchrun inside a Slurm
   allocation is torchrun):
      torchrun   RANK, WORLD_SIZE, LOCAL_RANK
      Open MPI   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK
      MPICH      PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
      Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
   and MASTER_ADDR, MASTER_PORT for all of them. None set: one process.
   Under torchrun, whose agent itself listens at MASTER_PORT (it sets
   TORCHELASTIC_USE_AGENT_STORE=True), rank 0 listens at MASTER_PORT+1.
   ------------------------------------------------------------------------ */
typedef struct trn_dist_env {
    int rank;               /* 0 .. world_size-1                           */
    int world_size;         /* processes in the job (1: not distributed)   */
    int local_rank;         /* index among the ranks of this node (GPU)    */
    char master_addr[256];  /* host where rank 0 runs the rendezvous       */
    int master_port;
    const char *launcher;   /* "torchrun", "mpirun", "slurm" or "none"    */
} trn_dist_env;

/* TRN_ERR_INVALID names the variable when one is malformed or they
   disagree (RANK >= WORLD_SIZE, RANK without WORLD_SIZE, ...) */
TRNDEF trn_result trn_dist_env_read(trn_dist_env *env);

/* ------------------------------------------------------------------------
   >>comm
   A communicator: collectives over the ranks on float ranges in the
   backend's memory. Like trn_backend, a table of functions; two tables
   exist: NCCL (GPU memory, nvcc builds) and a ring over TCP sockets (host
   memory, any build). Every collective is QUEUED in call order and returns
   at once (NCCL: on the communication stream; TCP: on a worker thread);
   wait() blocks until all queued ones are done and returns the first
   error. Every rank must call the same collectives in the same order.
   Collectives work in place. "average" divides the sum by world.
   Sharded collectives use trn_comm_shard's split of [0, n).
   ------------------------------------------------------------------------ */
typedef enum trn_comm_kind {
    TRN_COMM_AUTO = 0,  /* NCCL in an NCCL build, TCP otherwise            */
    TRN_COMM_TCP,       /* ring over TCP, host memory (CPU backends)       */
    TRN_COMM_NCCL,      /* NCCL, device memory                             */
    TRN_COMM_SELF       /* world size 1: every collective is a no-op       */
} trn_comm_kind;

typedef struct trn_comm {
    trn_comm_kind kind;
    const char *name;   /* "self", "tcp-ring", "nccl"                      */
    int rank, world;
    double timeout_s;   /* how long a rank waits for another               */
    trn_result (*all_reduce)(struct trn_comm *c, float *x, size_t n, int average);
    /* rank r ends with shard r of the sum (or average); the rest of x is
       left with meaningless partial values */
    trn_result (*reduce_scatter)(struct trn_comm *c, float *x, size_t n, int average);
    /* x holds elements [lo,hi) of an n-element buffer that trn_comm_shard
       splits over the ranks; rank r ends with the sum (or average) of the
       part of its shard inside [lo,hi), in place (x[j - lo] for j in it);
       the rest of x is left meaningless. ZeRO-2 sends each gradient bucket
       to its owners this way: a bucket can span several shards or lie in
       one. */
    trn_result (*reduce_scatter_range)(struct trn_comm *c, float *x, size_t lo, size_t hi, size_t n, int average);
    /* every rank contributes its shard r of x; all end with all of x */
    trn_result (*all_gather)(struct trn_comm *c, float *x, size_t n);
    /* the same for a window: x holds [lo,hi) of the sharded n-element
       buffer; each rank contributes the part of its shard inside it (FSDP
       gathers one unit's weights this way) */
    trn_result (*all_gather_range)(struct trn_comm *c, float *x, size_t lo, size_t hi, size_t n);
    trn_result (*broadcast)(struct trn_comm *c, void *x, size_t bytes, int root);
    trn_result (*wait)(struct trn_comm *c);
    /* a few doubles in host memory (loss, norms, flags); waits */
    trn_result (*all_reduce_host)(struct trn_comm *c, double *x, int n, int average);
    /* give up: close connections / ncclCommAbort, so peers fail fast */
    void (*abort)(struct trn_comm *c);
    void (*destroy)(struct trn_comm *c);
    void *impl;
} trn_comm;

/* rendezvous (when world > 1) and connect; timeout_s <= 0: 600 s */
TRNDEF trn_result trn_comm_init(trn_comm *c, const trn_dist_env *env, trn_comm_kind kind,
                                double timeout_s);
TRNDEF void trn_comm_free(trn_comm *c);
/* rank's shard [lo,hi) of n elements: equal shards (a multiple of 16
   floats, so starts are 64-byte aligned, once n/world >= 64), the last
   rank also takes the rest */
TRNDEF void trn_comm_shard(size_t n, int world, int rank, size_t *lo, size_t *hi);

/* ------------------------------------------------------------------------
   >>ddp
   Data parallelism on top of a communicator, for one trn_model.
   DDP: after backward every rank holds the average gradient. The flat
   gradient buffer is cut into buckets (whole parameters, at most
   bucket_bytes each), from the LAST parameter to the first, because
   backward produces gradients in roughly that order; a parameter larger
   than bucket_bytes is cut into pieces of bucket_bytes, each a bucket of
   its own. trn_backward calls a hook after every tape entry; when the
   last entry that uses a parameter has run, that parameter's gradient is
   final; when all of a bucket's are, its all-reduce starts AT ONCE, while
   backward goes on with the earlier layers. Buckets leave in the order
   they become final, not in declaration order: a big tensor declared
   first but used last in forward (an untied LM head is parameter 0 in
   many models) leaves first, and its pieces stream out one after the
   other. That order comes from the tape, which is the same on every rank,
   so every rank queues the same collectives in the same order, as NCCL
   needs. (GPT-2's tied wte is final only after the embedding's backward,
   the very last entry: no schedule can send it earlier; its pieces at
   least pipeline with each other.)
   ZeRO-1: rank r owns shard r of the flat buffers (trn_comm_shard). The
   gradients are reduce-scattered (r gets the average of its shard), AdamW
   updates only that shard (trn_adamw's [lo,hi): m and v are 1/W the size),
   and an all-gather brings every rank all the new weights.
   ZeRO-2 and FSDP: see the notes at their code (>>fsdp for FSDP). Both
   use whole parameters per bucket (FSDP: one bucket per unit), reduce in
   every backward (trn_ddp_set_sync and no_overlap do not apply:
   accumulation adds into the shard), and leave the model with only its
   slice of the gradients (trn_model.shard.grad_lo/hi; FSDP: of the weights too,
   param_lo/hi): the kit's whole-model calls (trn_checkpoint_save, ...)
   refuse such a model; use the trn_ddp_ ones.
   ------------------------------------------------------------------------ */
/* what each rank keeps of the four flat buffers (weights, grads, m, v) */
typedef enum trn_shard_mode {
    TRN_SHARD_NONE = 0,   /* DDP: all four, whole, on every rank           */
    TRN_SHARD_ZERO1,      /* m and v: one shard per rank                   */
    TRN_SHARD_ZERO2,      /* and the gradients: each bucket is reduce-
                             scattered during backward, straight from a
                             staging buffer, into the owners' shards        */
    TRN_SHARD_FSDP        /* and the weights (see >>fsdp)                  */
} trn_shard_mode;
/* "none", "zero1", "zero2", "fsdp" <-> the mode; parse: TRN_ERR_INVALID */
TRNDEF const char *trn_shard_name(trn_shard_mode s);
TRNDEF trn_result trn_shard_parse(const char *name, trn_shard_mode *out);

typedef struct trn_ddp_desc {
    int zero1;            /* deprecated spelling of shard = TRN_SHARD_ZERO1;
                             after trn_ddp_init: 1 when m and v are sharded
                             (every mode from ZeRO-1 on)                   */
    trn_shard_mode shard; /* default NONE (or ZERO1 when zero1 is set)     */
    size_t bucket_bytes;  /* default 25 MiB (PyTorch's bucket_cap_mb)      */
    int no_overlap;       /* 1: all-reduce only in trn_ddp_allreduce_grads */
    double timeout_s;     /* default: $TRN_DDP_TIMEOUT, else 600 s         */
    trn_comm_kind comm;   /* default TRN_COMM_AUTO                         */
} trn_ddp_desc;

typedef struct trn_ddp_bucket {
    size_t lo, hi;        /* [lo,hi) of the flat gradient buffer (floats)  */
    int p_first, p_last;  /* the parameters in it (table indices); a
                             parameter larger than bucket_bytes is cut into
                             pieces, each a bucket with p_first == p_last  */
    int pending;          /* this step: parameters not yet final           */
    int launched;         /* this step: its collective has been queued     */
    float *stage;         /* ZeRO-2: its gradients while they exist whole
                             (GRADS), from the first entry that writes one
                             until its reduce-scatter is done              */
} trn_ddp_bucket;

/* FSDP: a unit is a run of parameters gathered together (see >>fsdp) */
typedef struct trn_ddp_unit {
    size_t lo, hi;        /* [lo,hi) of the flat buffers (floats)          */
    int p_first, p_last;  /* its parameters (table indices)                */
    int root;             /* 1: outside every block: kept gathered         */
    float *full;          /* its whole weights while gathered (WEIGHTS)    */
    int state;            /* 0 released, 1 gather queued, 2 gathered       */
    char key[64];         /* "h.3", "0"; roots: the first parameter's name */
} trn_ddp_unit;

typedef struct trn_ddp {
    trn_ddp_desc desc;    /* effective values                              */
    trn_dist_env env;
    int rank, world, local_rank;
    trn_comm comm;
    trn_model *model;     /* set by trn_ddp_attach                         */
    trn_ddp_bucket *buckets;
    int n_buckets;
    int *bucket_of;       /* parameter index -> its first bucket           */
    int *bucket_cnt;      /* parameter index -> how many buckets (pieces)  */
    int *last_use;        /* this step: lowest tape index using it         */
    int *first_use;       /* ZeRO-2, this step: highest tape index using it */
    float *grad_shard;    /* ZeRO-2: this rank's shard of the gradients    */
    int n_live;           /* ZeRO-2: staging buffers allocated             */
    trn_ddp_unit *units;  /* FSDP: the units, in declaration order         */
    int n_units;
    int *unit_of;         /* FSDP: parameter index -> unit                 */
    float *weight_shard;  /* FSDP: this rank's shard of the weights        */
    int *order;           /* FSDP: block units in this step's forward order */
    int n_order, bwd_pos; /* (bwd_pos: the next block backward enters)     */
    size_t gathered_bytes, gathered_peak; /* FSDP: whole weights held now / at most */
    int n_launched;       /* buckets queued this step                      */
    int armed;            /* a backward has started buckets this step      */
    int sync;             /* 0: backward does not start buckets (accumulating) */
    size_t shard_lo, shard_hi; /* ZeRO-1: this rank's slice                */
    trn_result error;     /* sticky: the first failure                     */
    char error_reason[512];
} trn_ddp;

TRNDEF trn_ddp_desc trn_ddp_defaults(const trn_ddp_desc *desc);
/* read the launcher's environment, pick the GPU (NCCL builds:
   trn_cuda_init(local rank)), rendezvous, create the communicator. Call
   it before building the model: the model's memory must be on this
   rank's GPU. */
TRNDEF trn_result trn_ddp_init(trn_ddp *ddp, const trn_ddp_desc *desc);
/* the model's weights (trn_model_alloc done) become rank 0's; plan the
   buckets; install the backward hook */
TRNDEF trn_result trn_ddp_attach(trn_ddp *ddp, trn_model *m);
/* gradient accumulation: set 0 before the backward passes that only
   accumulate, 1 before the last one (as PyTorch's no_sync()) */
TRNDEF void trn_ddp_set_sync(trn_ddp *ddp, int sync);
/* after trn_backward: DDP: start the buckets backward did not start and
   wait for all; ZeRO-1: reduce-scatter. Then the gradients are averaged
   (ZeRO-1: this rank's shard of them). */
TRNDEF trn_result trn_ddp_allreduce_grads(trn_ddp *ddp, trn_model *m);
/* the global gradient norm (ZeRO-1: over all shards), clipped as
   trn_clip_grad_norm does; norm_out may be NULL */
TRNDEF trn_result trn_ddp_clip_grad_norm(trn_ddp *ddp, trn_model *m, float max_norm,
                                         float *norm_out);
/* DDP: trn_adamw_step. ZeRO-1: the step on this rank's shard (sets
   opt->lo/hi on the first call), then all-gather the weights. The math:
   trn_adamw_update (train.h's >>adamw, its plain loop trn_adamw_update_ref
   directly above it). */
TRNDEF trn_result trn_ddp_adamw_step(trn_ddp *ddp, trn_adamw *opt, trn_model *m, float lr);
/* FSDP: every rank gets the whole weights back (the model is a plain
   model again, training goes on as ZeRO-2): for the end of a run (saving
   the model, sampling) or anything that reads every parameter. Other
   modes: nothing to do. */
TRNDEF trn_result trn_ddp_unshard(trn_ddp *ddp, trn_model *m);
/* the memory of every rank, one line each, printed by rank 0 (every rank
   must call it): weights held as a shard, weights gathered whole (now,
   and the most at once: FSDP's blocks and roots), gradients (now, peak:
   ZeRO-2/FSDP staging included), optimizer state, communication buffers,
   and the OS's peak RSS (or, on a GPU, the driver's memory in use) */
TRNDEF trn_result trn_ddp_print_memory(trn_ddp *ddp, const char *title);
/* sum (or average) a few host doubles over the ranks: losses, counts */
TRNDEF trn_result trn_ddp_allreduce_host(trn_ddp *ddp, double *x, int n, int average);
/* every rank passes its own result; all get TRN_OK only if all were OK
   (then one failing rank cannot leave the others waiting) */
TRNDEF trn_result trn_ddp_agree(trn_ddp *ddp, trn_result mine);
TRNDEF trn_result trn_ddp_barrier(trn_ddp *ddp);
TRNDEF int trn_ddp_is_main(const trn_ddp *ddp);   /* rank 0 */
/* printf on rank 0 only (stdout, flushed) */
TRNDEF void trn_ddp_log(const trn_ddp *ddp, const char *fmt, ...);
/* rank-sharded data: this rank's k-th batch is global batch k*W + rank */
TRNDEF long long trn_ddp_batch_index(const trn_ddp *ddp, long long k);
/* on a fatal error: abort the communicator so the other ranks stop now */
TRNDEF void trn_ddp_abort(trn_ddp *ddp);
TRNDEF void trn_ddp_free(trn_ddp *ddp);

/* Checkpoints. The world size (and ZeRO-1) go into the metadata as
   "ddp.world_size" and "ddp.zero1"; a run resumes only with the same ones,
   because the data position (batches r, r+W, ...) and ZeRO-1's optimizer
   shards depend on them. DDP: rank 0 writes `path` (every rank holds the
   same state). ZeRO-1: rank 0 writes `path` (weights + its shard), rank r
   writes trn_ddp_rank_path(path) (weights + shard r). Load: every rank
   reads the metadata of `path` first (all refuse a mismatch with the same
   message), then its own file. Both return on every rank only after all
   ranks are done, with an error on all if one failed. Files must be on a
   file system every rank sees. */
TRNDEF void trn_ddp_meta_set(const trn_ddp *ddp, trn_meta *meta);
TRNDEF trn_result trn_ddp_meta_check(const trn_ddp *ddp, const trn_meta *meta, const char *path);
/* "dir/ckpt.safetensors" -> "dir/ckpt.rank3.safetensors" (rank 0: path) */
TRNDEF const char *trn_ddp_rank_path(const trn_ddp *ddp, const char *path, char *buf, size_t cap);
TRNDEF trn_result trn_ddp_checkpoint_save(trn_ddp *ddp, const char *path, trn_model *m,
                                          const trn_adamw *opt, const trn_meta *meta);
TRNDEF trn_result trn_ddp_checkpoint_load(trn_ddp *ddp, const char *path, trn_model *m,
                                          trn_adamw *opt, trn_meta *meta_out);

/* Sharded checkpoints (any mode, any world size on load), as torchtitan's
   distributed checkpoints: a DIRECTORY
      DIR/rank-00003-of-00004.safetensors   rank 3's slice [lo,hi) (its
            trn_comm_shard) of the flat weights ("shard.weights") and of
            AdamW's m and v, with the caller's metadata; written by
            trn_checkpoint_save: atomic, CRC-32C
      DIR/manifest.json   written by rank 0 after every rank's file is on
            disk (atomic): world size, parameter count, each file's [lo,hi)
            and the parameter table (name, offset, shape). A directory
            without it is an unfinished save: load refuses it.
   One save, one identity: rank 0 draws a random 64-bit save id for each
   save and every rank writes it into its file's metadata
   ("shard.save_id", beside its rank, world size and slice); the manifest
   holds it too. Load, trn_checkpoint_verify_sharded and consolidate
   refuse a rank file whose id, rank, world size or slice is not the
   manifest's (a file of another run or another step dropped in), with
   one line naming the file.
   Every rank writes the same amount whatever the mode (DDP's ranks write
   their slice of the state they all hold). Load reads, on every rank, the
   slices of the old files that meet what this rank keeps (FSDP: its shard
   of the weights; other modes: all of them; ZeRO: its shard of m and v),
   from as many files as the old world size had: resharding on load, so a
   4-rank run resumes with 2. The CRC of each file read is checked. Both
   return on every rank after all are done, with an error on all if one
   failed. Files must be on a file system every rank sees.
   trn_checkpoint_consolidate (one process, no ranks) merges DIR into one
   safetensors file of the whole weights under their names, with the
   checkpoint's metadata (tools/consolidate.c). */
TRNDEF trn_result trn_ddp_checkpoint_save_sharded(trn_ddp *ddp, const char *dir, trn_model *m,
                                                  const trn_adamw *opt, const trn_meta *meta);
TRNDEF trn_result trn_ddp_checkpoint_load_sharded(trn_ddp *ddp, const char *dir, trn_model *m,
                                                  trn_adamw *opt, trn_meta *meta_out);
TRNDEF trn_result trn_checkpoint_consolidate(const char *dir, const char *out_path);
/* DIR is a whole sharded checkpoint: its manifest reads, and every rank
   file is there, checksummed, of the manifest's save, rank and slice
   (reads every file; one process, no ranks). --resume DIR uses it to
   fall back past a broken one. */
TRNDEF trn_result trn_checkpoint_verify_sharded(const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_NCCL_H_INCLUDED */

/* ======================================================================== */
/*                              IMPLEMENTATION                              */
/* ======================================================================== */
#ifdef TRAIN_NCCL_IMPLEMENTATION
#ifndef TRAIN_NCCL_IMPLEMENTATION_DONE
#define TRAIN_NCCL_IMPLEMENTATION_DONE

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <sched.h>
#if !defined(TRAIN_NCCL_CPU_ONLY) && !defined(TRN_CUDA_ON_CPU)
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* macOS: a dead peer raises SIGPIPE; ignore it there */
#endif

#define TRN__DIST_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TRN__DIST_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TRN__DEFAULT_TIMEOUT 600.0
#define TRN__BLOB_MAX 128     /* ncclUniqueId is 128 bytes               */
#define TRN__STAGE_BYTES (256u << 10) /* TCP receive staging (COMM)     */

#ifdef __cplusplus
extern "C" {
#endif
static size_t trn__dist_shard_size(size_t n, int world);
static double trn__dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void trn__dist_sleep_ms(int ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000; ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* ========================================================================
   >>env
   ======================================================================== */
/* an integer variable in [lo,hi]; *present = 0 when unset or empty */
static trn_result trn__dist_env_int(const char *name, long lo, long hi, int *out, int *present) {
    const char *s = getenv(name);
    char *end;
    long v;
    *present = 0;
    if (!s || !*s) return TRN_OK;
    errno = 0;
    v = strtol(s, &end, 10);
    while (*end == ' ' || *end == '\n') end++;
    if (errno || end == s || *end || v < lo || v > hi)
        return trn_fail(TRN_ERR_INVALID, "environment: %s='%s' is not a number in [%ld, %ld]", name, s, lo, hi);
    *out = (int)v;
    *present = 1;
    return TRN_OK;
}

/* Slurm node lists: "gpu[07-09,12],cpu1" -> "gpu07"; "a,b" -> "a" */
static void trn__dist_first_host(const char *list, char *out, size_t cap) {
    size_t n = 0;
    const char *p = list;
    while (*p && *p != ',' && *p != '[' && n + 1 < cap) out[n++] = *p++;
    if (*p == '[') {
        p++;
        while (*p >= '0' && *p <= '9' && n + 1 < cap) out[n++] = *p++;
        while (*p && *p != ']') p++;
        if (*p == ']') p++;
        while (*p && *p != ',' && *p != '[' && n + 1 < cap) out[n++] = *p++;
    }
    out[n] = 0;
}

TRNDEF trn_result trn_dist_env_read(trn_dist_env *env) {
    static const char *const L[4][4] = {
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
        {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    };
    int i, have, v;
    trn_result r;
    const char *s;
    if (!env) return trn_fail(TRN_ERR_INVALID, "trn_dist_env_read: env is NULL");
    memset(env, 0, sizeof *env);
    env->world_size = 1;
    env->launcher = "none";
    for (i = 0; i < 4; i++) {
        if ((r = trn__dist_env_int(L[i][1], 0, 1 << 24, &v, &have)) != TRN_OK) return r;
        if (!have) continue;
        env->rank = v;
        env->launcher = L[i][0];
        if ((r = trn__dist_env_int(L[i][2], 1, 1 << 24, &env->world_size, &have)) != TRN_OK) return r;
        if (!have) return trn_fail(TRN_ERR_INVALID, "environment: %s is set but %s is not", L[i][1], L[i][2]);
        if (env->rank >= env->world_size)
            return trn_fail(TRN_ERR_INVALID, "environment: %s=%d but %s=%d (ranks are 0..%d)", L[i][1], env->rank,
                            L[i][2], env->world_size, env->world_size - 1);
        if ((r = trn__dist_env_int(L[i][3], 0, 1 << 24, &env->local_rank, &have)) != TRN_OK) return r;
        break;
    }
    s = getenv("MASTER_ADDR");
    if (s && *s) {
        if (strlen(s) >= sizeof env->master_addr) return trn_fail(TRN_ERR_INVALID, "environment: MASTER_ADDR is too long");
        strcpy(env->master_addr, s);
    } else if (strcmp(env->launcher, "slurm") == 0 &&
               (((s = getenv("SLURM_JOB_NODELIST")) && *s) || ((s = getenv("SLURM_NODELIST")) && *s))) {
        trn__dist_first_host(s, env->master_addr, sizeof env->master_addr); /* rank 0 runs on the first node */
    } else {
        strcpy(env->master_addr, "127.0.0.1");
    }
    if ((r = trn__dist_env_int("MASTER_PORT", 1, 65535, &env->master_port, &have)) != TRN_OK) return r;
    s = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (have && s && strcmp(s, "True") == 0 && strcmp(env->launcher, "torchrun") == 0)
        env->master_port = env->master_port % 65535 + 1; /* torchrun's agent listens at MASTER_PORT itself */
    if (!have) {
        int job = 0, hj = 0;
        env->master_port = 29500; /* torchrun's default */
        if (strcmp(env->launcher, "slurm") == 0) {
            /* two jobs sharing a node must not both take 29500 */
            if ((r = trn__dist_env_int("SLURM_JOB_ID", 0, 2147483647L, &job, &hj)) != TRN_OK) return r;
            if (hj) env->master_port = 20000 + job % 20000;
        }
    }
    return TRN_OK;
}

/* ========================================================================
   >>sockets
   Every socket is non-blocking; every wait goes through poll() with a
   deadline, so nothing can block forever.
   ======================================================================== */
typedef struct trn__peer { struct in_addr addr; int port; } trn__peer;

static void trn__net_put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}
static uint32_t trn__net_get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static int trn__net_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int trn__net_resolve(const char *host, struct in_addr *out) {
    struct addrinfo hints, *res = NULL;
    int e;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    e = getaddrinfo(host, NULL, &hints, &res);
    if (e != 0 || !res) return e ? e : EAI_NONAME;
    *out = ((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return 0;
}

/* 1: ready, 0: deadline passed, -1: error */
static int trn__net_wait(int fd, short events, double deadline) {
    for (;;) {
        struct pollfd p;
        double left = deadline - trn__dist_now();
        int k;
        if (left <= 0) return 0;
        p.fd = fd; p.events = events; p.revents = 0;
        k = poll(&p, 1, (int)(left * 1000.0) + 1);
        if (k > 0) return 1;
        if (k < 0 && errno != EINTR) return -1;
    }
}

/* send or receive exactly n bytes before the deadline.
   0: done, -1: closed or failed (errno), -2: deadline passed */
static int trn__net_xfer(int fd, void *buf, size_t n, int sending, double deadline) {
    char *p = (char *)buf;
    size_t done = 0;
    while (done < n) {
        ssize_t k;
        int w = trn__net_wait(fd, sending ? POLLOUT : POLLIN, deadline);
        if (w == 0) return -2;
        if (w < 0) return -1;
        k = sending ? send(fd, p + done, n - done, MSG_NOSIGNAL) : recv(fd, p + done, n - done, 0);
        if (k > 0) done += (size_t)k;
        else if (k == 0) { errno = ECONNRESET; return -1; }
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
    return 0;
}

static int trn__net_listen(int port, int *port_out) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1, e;
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 128) != 0 || trn__net_nonblock(fd) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        e = errno; close(fd); errno = e;
        return -1;
    }
    if (port_out) *port_out = ntohs(sa.sin_port);
    return fd;
}

/* 1 if fd is connected to itself. TCP allows a "simultaneous open": when
   nobody listens yet on a local port P, and the OS happens to pick P itself
   as the connecting socket's own (ephemeral) port, the socket connects to
   itself. connect() succeeds, our hello comes back to us as the answer, and
   rank 0 can no longer listen on P. A port chosen in the ephemeral range
   (32768-60999 on Linux) by a launcher or a script hits this now and then:
   once in CI, a rank hung for its whole timeout with nothing in its log. */
static int trn__net_is_self(int fd) {
    struct sockaddr_in a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    return getsockname(fd, (struct sockaddr *)&a, &la) == 0 && getpeername(fd, (struct sockaddr *)&b, &lb) == 0 &&
           a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
}

/* connect, retrying while nobody listens yet (the peer may start later) */
static int trn__net_connect(struct in_addr addr, int port, double deadline) {
    for (;;) {
        struct sockaddr_in sa;
        int fd = socket(AF_INET, SOCK_STREAM, 0), e, one = 1;
        if (fd < 0) return -1;
        trn__net_nonblock(fd);
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr = addr;
        sa.sin_port = htons((uint16_t)port);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) e = 0;
        else if (errno != EINPROGRESS) e = errno;
        else {
            double d = TRN__DIST_MIN(deadline, trn__dist_now() + 2.0);
            int w = trn__net_wait(fd, POLLOUT, d);
            socklen_t len = sizeof e;
            e = ETIMEDOUT;
            if (w > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
        }
        if (e == 0 && trn__net_is_self(fd)) { /* as if refused; reset, not closed, so P is free at once */
            struct linger now = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
            e = ECONNREFUSED;
        }
        if (e == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        close(fd);
        errno = e;
        if (trn__dist_now() >= deadline) return -1;
        if (e != ECONNREFUSED && e != ETIMEDOUT && e != ENETUNREACH && e != EHOSTUNREACH && e != ECONNRESET &&
            e != ECONNABORTED && e != EAGAIN)
            return -1;
        trn__dist_sleep_ms(50);
    }
}

/* ========================================================================
   >>rendezvous
   Rank 0 listens at MASTER_ADDR:MASTER_PORT. Every other rank connects
   (retrying until rank 0 is up) and says who it is:
      hello  "trnrdv01" rank world ring_port          (20 bytes)
   When all W-1 have come, rank 0 answers each:
      reply  "trnrdv01" status message[256] blob[128] (addr port) x W
   status 0 = go; 1 = the job is broken and message says why (a missing
   rank, two ranks with one RANK, a different WORLD_SIZE). The blob is
   rank 0's ncclUniqueId (NCCL) or a random job token (TCP); the table is
   where every rank's ring listener is, as rank 0 saw it.
   ======================================================================== */
#define TRN__RDV_MAGIC "trnrdv01"
#define TRN__REPLY_FIXED (8 + 4 + 256 + TRN__BLOB_MAX)

static trn_result trn__rdv_master(const trn_dist_env *env, double timeout, int ring_port,
                                  const unsigned char *blob, trn__peer *peers) {
    int W = env->world_size, lfd, i, joined = 1, timed_out = 0;
    int *fds;
    char err[256] = "";
    double deadline = trn__dist_now() + timeout;
    size_t reply_len = TRN__REPLY_FIXED + 8 * (size_t)W;
    unsigned char *reply;
    trn_result rc = TRN_OK;

    if (trn__net_resolve(env->master_addr, &peers[0].addr) != 0)
        return trn_fail(TRN_ERR_COMM, "rank 0: cannot resolve MASTER_ADDR '%s'", env->master_addr);
    peers[0].port = ring_port;
    lfd = trn__net_listen(env->master_port, NULL);
    if (lfd < 0)
        return trn_fail(TRN_ERR_COMM, "rank 0: cannot listen on port %d: %s (another job there? set MASTER_PORT)",
                        env->master_port, strerror(errno));
    fds = (int *)calloc((size_t)W, sizeof(int));
    reply = (unsigned char *)calloc(1, reply_len);
    if (!fds || !reply) { free(fds); free(reply); close(lfd); return trn_fail(TRN_ERR_NOMEM, "rendezvous: out of memory"); }
    for (i = 0; i < W; i++) fds[i] = -1;

    while (joined < W && !err[0]) {
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        unsigned char hello[20];
        int cfd, r, w, port;
        int k = trn__net_wait(lfd, POLLIN, deadline);
        if (k == 0) {
            size_t n = (size_t)snprintf(err, sizeof err, "rank(s)");
            for (i = 1; i < W && n < sizeof err - 16; i++)
                if (fds[i] < 0) n += (size_t)snprintf(err + n, sizeof err - n, " %d", i);
            snprintf(err + n, sizeof err - n, " did not join within %.0f s%s", timeout,
                     strcmp(env->launcher, "slurm") == 0 ? " (under Slurm, start the ranks with srun)" : "");
            timed_out = 1;
            break;
        }
        cfd = accept(lfd, (struct sockaddr *)&sa, &len);
        if (cfd < 0) continue;
        trn__net_nonblock(cfd);
        /* a stray connection (port scanner, old job) must not stall us */
        if (trn__net_xfer(cfd, hello, sizeof hello, 0, TRN__DIST_MIN(deadline, trn__dist_now() + 5.0)) != 0 ||
            memcmp(hello, TRN__RDV_MAGIC, 8) != 0) {
            close(cfd);
            continue;
        }
        r = (int)trn__net_get32(hello + 8); w = (int)trn__net_get32(hello + 12); port = (int)trn__net_get32(hello + 16);
        if (w != W) snprintf(err, sizeof err, "rank %d was started with WORLD_SIZE=%d, rank 0 with %d", r, w, W);
        else if (r <= 0 || r >= W) snprintf(err, sizeof err, "a process with rank %d joined a job of %d ranks", r, W);
        else if (fds[r] >= 0) snprintf(err, sizeof err, "two processes have rank %d", r);
        if (err[0]) { /* tell the newcomer too, then everyone below */
            memcpy(reply, TRN__RDV_MAGIC, 8);
            trn__net_put32(reply + 8, 1);
            memcpy(reply + 12, err, sizeof err); /* NUL-terminated inside */
            trn__net_xfer(cfd, reply, reply_len, 1, trn__dist_now() + 2.0);
            close(cfd);
            break;
        }
        fds[r] = cfd;
        peers[r].addr = sa.sin_addr; /* where rank r is, as seen from here */
        peers[r].port = port;
        joined++;
    }
    memset(reply, 0, reply_len);
    memcpy(reply, TRN__RDV_MAGIC, 8);
    trn__net_put32(reply + 8, err[0] ? 1u : 0u);
    memcpy(reply + 12, err, sizeof err); /* NUL-terminated inside */
    memcpy(reply + 12 + 256, blob, TRN__BLOB_MAX);
    for (i = 0; i < W; i++) {
        memcpy(reply + TRN__REPLY_FIXED + 8 * (size_t)i, &peers[i].addr, 4);
        trn__net_put32(reply + TRN__REPLY_FIXED + 8 * (size_t)i + 4, (uint32_t)peers[i].port);
    }
    for (i = 1; i < W; i++) {
        if (fds[i] < 0) continue;
        if (!err[0] && trn__net_xfer(fds[i], reply, reply_len, 1, trn__dist_now() + timeout) != 0 && !err[0])
            snprintf(err, sizeof err, "could not send the peer table to rank %d: %s", i, strerror(errno));
        else if (err[0]) trn__net_xfer(fds[i], reply, reply_len, 1, trn__dist_now() + 2.0);
        close(fds[i]);
    }
    close(lfd);
    free(fds);
    free(reply);
    if (err[0]) rc = trn_fail(timed_out ? TRN_ERR_TIMEOUT : TRN_ERR_COMM, "rank 0: rendezvous at port %d: %s",
                              env->master_port, err);
    return rc;
}

static trn_result trn__rdv_join(const trn_dist_env *env, double timeout, int ring_port, unsigned char *blob,
                                trn__peer *peers) {
    int W = env->world_size, fd, i, x;
    struct in_addr addr;
    unsigned char hello[20];
    size_t reply_len = TRN__REPLY_FIXED + 8 * (size_t)W;
    unsigned char *reply;
    double t0 = trn__dist_now();
    const char *hint = strncmp(env->master_addr, "127.", 4) == 0 || strcmp(env->master_addr, "localhost") == 0
                           ? "; across nodes set MASTER_ADDR to rank 0's host" : "";

    if (trn__net_resolve(env->master_addr, &addr) != 0)
        return trn_fail(TRN_ERR_COMM, "rank %d: cannot resolve MASTER_ADDR '%s'", env->rank, env->master_addr);
    fd = trn__net_connect(addr, env->master_port, t0 + timeout);
    if (fd < 0)
        return trn_fail(TRN_ERR_TIMEOUT, "rank %d: could not reach rank 0 at %s:%d within %.0f s (%s)%s",
                        env->rank, env->master_addr, env->master_port, timeout, strerror(errno), hint);
    memcpy(hello, TRN__RDV_MAGIC, 8);
    trn__net_put32(hello + 8, (uint32_t)env->rank);
    trn__net_put32(hello + 12, (uint32_t)W);
    trn__net_put32(hello + 16, (uint32_t)ring_port);
    reply = (unsigned char *)malloc(reply_len);
    if (!reply) { close(fd); return trn_fail(TRN_ERR_NOMEM, "rendezvous: out of memory"); }
    if (trn__net_xfer(fd, hello, sizeof hello, 1, t0 + timeout) != 0) {
        free(reply); close(fd);
        return trn_fail(TRN_ERR_COMM, "rank %d: rendezvous with rank 0 at %s:%d failed: %s", env->rank,
                        env->master_addr, env->master_port, strerror(errno));
    }
    /* rank 0 answers when everyone is there, or with the reason it gave up
       (it waits `timeout` from its own start: allow it time to say why) */
    x = trn__net_xfer(fd, reply, TRN__REPLY_FIXED, 0, t0 + 1.5 * timeout + 2.0);
    if (x == 0 && trn__net_get32(reply + 8) == 0) x = trn__net_xfer(fd, reply + TRN__REPLY_FIXED, reply_len - TRN__REPLY_FIXED, 0,
                                                           trn__dist_now() + timeout);
    close(fd);
    if (x != 0) {
        free(reply);
        return trn_fail(x == -2 ? TRN_ERR_TIMEOUT : TRN_ERR_COMM,
                        "rank %d: rank 0 at %s:%d %s", env->rank, env->master_addr, env->master_port,
                        x == -2 ? "did not answer in time (are all ranks started?)" : "closed the rendezvous connection");
    }
    if (memcmp(reply, TRN__RDV_MAGIC, 8) != 0) {
        free(reply);
        return trn_fail(TRN_ERR_COMM, "rank %d: %s:%d does not speak the train_nccl rendezvous", env->rank,
                        env->master_addr, env->master_port);
    }
    if (trn__net_get32(reply + 8) != 0) {
        char msg[257];
        memcpy(msg, reply + 12, 256); msg[256] = 0;
        free(reply);
        return trn_fail(TRN_ERR_COMM, "rank %d: rank 0 stopped the job: %s", env->rank, msg);
    }
    memcpy(blob, reply + 12 + 256, TRN__BLOB_MAX);
    for (i = 0; i < W; i++) {
        memcpy(&peers[i].addr, reply + TRN__REPLY_FIXED + 8 * (size_t)i, 4);
        peers[i].port = (int)trn__net_get32(reply + TRN__REPLY_FIXED + 8 * (size_t)i + 4);
    }
    free(reply);
    return TRN_OK;
}

static trn_result trn__rendezvous(const trn_dist_env *env, double timeout, int ring_port, unsigned char *blob,
                                  trn__peer *peers) {
    return env->rank == 0 ? trn__rdv_master(env, timeout, ring_port, blob, peers)
                          : trn__rdv_join(env, timeout, ring_port, blob, peers);
}

/* ========================================================================
   >>ring
   The TCP communicator. Ranks form a ring: each sends to the next rank
   and receives from the previous one (two connections per rank). An
   all-reduce of n floats cut into W chunks takes 2(W-1) steps (the
   algorithm NCCL's ring uses too):
     reduce-scatter: in step s, rank r sends chunk r-s-1 and receives
       chunk r-s-2, adding it into its own; after W-1 steps rank r holds
       the complete sum of chunk r (it divides by W for an average);
     all-gather: in step s, rank r sends chunk r-s and receives chunk
       r-s-1 (a copy); after W-1 steps everyone has every chunk.
   Each rank sends and receives 2(W-1)/W of the data, whatever W is, and
   every rank ends with the same bits (each chunk is summed once, by its
   owner, then copied). A worker thread runs the queued collectives, so
   backward keeps computing while buckets travel (the CPU's "stream").
   ======================================================================== */
enum { TRN__OP_ALLREDUCE, TRN__OP_REDSCAT, TRN__OP_ALLGATHER, TRN__OP_BCAST };
enum { TRN__RECV_ADD, TRN__RECV_COPY, TRN__RECV_FORWARD };

typedef struct trn__ring_op {
    int kind;
    char *buf;
    size_t n;      /* elements (bytes for broadcast)                        */
    size_t lo, hi; /* reduce-scatter: buf holds [lo,hi) of n                */
    int esize;     /* 4: float, 8: double                                   */
    int average;
    int root;
} trn__ring_op;

#define TRN__QCAP 128
typedef struct trn__ring {
    trn_comm *c;
    int fd_next, fd_prev, next, prev;
    char *stage;
    pthread_t thread;
    int thread_up;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    trn__ring_op q[TRN__QCAP];
    int q_head, q_len, stop;
    volatile int aborted;
    const char *what;        /* the collective running (for messages)     */
    trn_result err;          /* first failure (sticky)                    */
    char err_msg[512];
} trn__ring;

static void trn__ring_close_fds(trn__ring *g) {
    /* shutdown, not close: the worker may sit in poll() on them */
    if (g->fd_next >= 0) shutdown(g->fd_next, SHUT_RDWR);
    if (g->fd_prev >= 0) shutdown(g->fd_prev, SHUT_RDWR);
}

static int trn__ring_fail(trn__ring *g, trn_result rc, const char *fmt, ...) {
    va_list ap;
    int n;
    if (g->err) return -1;
    n = snprintf(g->err_msg, sizeof g->err_msg, "rank %d: %s: ", g->c->rank, g->what);
    va_start(ap, fmt);
    vsnprintf(g->err_msg + n, sizeof g->err_msg - (size_t)n, fmt, ap);
    va_end(ap);
    g->err = rc;
    trn__ring_close_fds(g); /* the neighbours see it now, not after their timeout */
    return -1;
}

/* a neighbour's connection broke: it died, or failed and closed it */
static int trn__ring_gone(trn__ring *g, int peer, const char *which, const char *detail) {
    return trn__ring_fail(g, TRN_ERR_COMM, "rank %d (%s in the ring) is gone (%s): it died, exited, or gave up after an "
                          "error elsewhere", peer, which, detail);
}

static void trn__ring_add(char *dst, const char *src, size_t bytes, int esize) {
    size_t i;
    if (esize == 8) {
        double *d = (double *)(void *)dst; const double *s = (const double *)(const void *)src;
        for (i = 0; i < bytes / 8; i++) d[i] += s[i];
    } else {
        float *d = (float *)(void *)dst; const float *s = (const float *)(const void *)src;
        for (i = 0; i < bytes / 4; i++) d[i] += s[i];
    }
}

/* One ring step: send sbytes at sbuf to the next rank while receiving
   rbytes from the previous one into rbuf, which is added (ADD: through the
   staging buffer), copied (COPY) or copied and passed on (FORWARD: sbuf
   is rbuf and only what has arrived may leave). Both directions move at
   once (poll), so neither side can fill its socket buffer and stall the
   ring. Returns 0 or -1 (g->err set). */
static int trn__ring_step(trn__ring *g, const char *sbuf, size_t sbytes, char *rbuf, size_t rbytes, int mode,
                          int esize) {
    size_t sent = 0, got = 0, staged = 0;
    double last = trn__dist_now(), timeout = g->c->timeout_s;
    while (sent < sbytes || got < rbytes) {
        struct pollfd p[2];
        size_t can_send = mode == TRN__RECV_FORWARD ? got : sbytes;
        int k;
        /* fd_next: writable when we have data for it; readable means the
           next rank closed (it never sends to us). fd_prev only while we
           expect data: it may already be sending the next collective. */
        p[0].fd = sent < sbytes ? g->fd_next : -1;
        p[0].events = (short)(POLLIN | (sent < can_send ? POLLOUT : 0));
        p[1].fd = got < rbytes ? g->fd_prev : -1;
        p[1].events = POLLIN;
        p[0].revents = p[1].revents = 0;
        k = poll(p, 2, 100);
        if (g->aborted) return trn__ring_fail(g, TRN_ERR_COMM, "aborted by this rank");
        if (k < 0) {
            if (errno == EINTR) continue;
            return trn__ring_fail(g, TRN_ERR_COMM, "poll: %s", strerror(errno));
        }
        if (k == 0) {
            if (trn__dist_now() - last > timeout)
                return trn__ring_fail(g, TRN_ERR_TIMEOUT,
                                      "no progress for %.1f s waiting for rank %d: a rank hangs or is much slower "
                                      "(timeout: trn_ddp_desc.timeout_s or TRN_DDP_TIMEOUT)",
                                      timeout, got < rbytes ? g->prev : g->next);
            continue;
        }
        if (p[0].revents & POLLOUT) {
            ssize_t n = send(g->fd_next, sbuf + sent, TRN__DIST_MIN(can_send - sent, (size_t)1 << 20), MSG_NOSIGNAL);
            if (n > 0) { sent += (size_t)n; last = trn__dist_now(); }
            else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return trn__ring_gone(g, g->next, "next", strerror(errno));
        } else if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            return trn__ring_gone(g, g->next, "next", "connection closed");
        }
        if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            char *dst = mode == TRN__RECV_ADD ? g->stage + staged : rbuf + got;
            size_t room = mode == TRN__RECV_ADD ? TRN__DIST_MIN(TRN__STAGE_BYTES - staged, rbytes - got - staged) : rbytes - got;
            ssize_t n = recv(g->fd_prev, dst, room, 0);
            if (n == 0) return trn__ring_gone(g, g->prev, "previous", "connection closed");
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
                return trn__ring_gone(g, g->prev, "previous", strerror(errno));
            }
            last = trn__dist_now();
            if (mode != TRN__RECV_ADD) got += (size_t)n;
            else {
                staged += (size_t)n;
                /* add whole stage loads; sizes are multiples of esize */
                if (staged == TRN__STAGE_BYTES || got + staged == rbytes) {
                    trn__ring_add(rbuf + got, g->stage, staged, esize);
                    got += staged;
                    staged = 0;
                }
            }
        }
    }
    return 0;
}

static size_t trn__ring_mod(long long a, int w) { return (size_t)(((a % w) + w) % w); }

/* chunk c: shard c of n elements cut to the window [lo,hi) that the
   buffer holds, in bytes from the buffer start (element lo); may be empty */
static void trn__ring_chunk(size_t n, int W, int ch, int esize, size_t lo, size_t hi, size_t *off, size_t *bytes) {
    size_t a, b;
    trn_comm_shard(n, W, ch, &a, &b);
    a = a < lo ? lo : a > hi ? hi : a;
    b = b < a ? a : b > hi ? hi : b;
    *off = (a - lo) * (size_t)esize;
    *bytes = (b - a) * (size_t)esize;
}

/* the same ring with any chunk sizes: a window [lo,hi) of the sharded
   buffer only changes where the chunks start and end (some are empty) */
static int trn__ring_reduce_scatter(trn__ring *g, char *x, size_t n, size_t lo, size_t hi, int esize, int average) {
    int W = g->c->world, r = g->c->rank, s;
    size_t so, sb, ro, rb, i;
    for (s = 0; s < W - 1; s++) {
        trn__ring_chunk(n, W, (int)trn__ring_mod((long long)r - s - 1, W), esize, lo, hi, &so, &sb);
        trn__ring_chunk(n, W, (int)trn__ring_mod((long long)r - s - 2, W), esize, lo, hi, &ro, &rb);
        if (trn__ring_step(g, x + so, sb, x + ro, rb, TRN__RECV_ADD, esize) != 0) return -1;
    }
    if (average) { /* the owner of the complete chunk divides it */
        trn__ring_chunk(n, W, r, esize, lo, hi, &ro, &rb);
        if (esize == 8) for (i = 0; i < rb / 8; i++) ((double *)(void *)(x + ro))[i] /= (double)W;
        else for (i = 0; i < rb / 4; i++) ((float *)(void *)(x + ro))[i] /= (float)W;
    }
    return 0;
}

static int trn__ring_all_gather(trn__ring *g, char *x, size_t n, size_t lo, size_t hi, int esize) {
    int W = g->c->world, r = g->c->rank, s;
    size_t so, sb, ro, rb;
    for (s = 0; s < W - 1; s++) {
        trn__ring_chunk(n, W, (int)trn__ring_mod((long long)r - s, W), esize, lo, hi, &so, &sb);
        trn__ring_chunk(n, W, (int)trn__ring_mod((long long)r - s - 1, W), esize, lo, hi, &ro, &rb);
        if (trn__ring_step(g, x + so, sb, x + ro, rb, TRN__RECV_COPY, esize) != 0) return -1;
    }
    return 0;
}

/* a chain root -> root+1 -> ... -> root-1, pipelined: each rank passes on
   what has arrived while the rest still comes */
static int trn__ring_bcast(trn__ring *g, char *x, size_t bytes, int root) {
    int W = g->c->world, pos = (int)trn__ring_mod((long long)g->c->rank - root, W);
    if (pos == 0) return trn__ring_step(g, x, bytes, NULL, 0, TRN__RECV_COPY, 1);
    if (pos == W - 1) return trn__ring_step(g, NULL, 0, x, bytes, TRN__RECV_COPY, 1);
    return trn__ring_step(g, x, bytes, x, bytes, TRN__RECV_FORWARD, 1);
}

static void trn__ring_run(trn__ring *g, const trn__ring_op *op) {
    static const char *const names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
    g->what = names[op->kind];
    switch (op->kind) {
    case TRN__OP_ALLREDUCE:
        if (trn__ring_reduce_scatter(g, op->buf, op->n, 0, op->n, op->esize, op->average) == 0)
            trn__ring_all_gather(g, op->buf, op->n, 0, op->n, op->esize);
        break;
    case TRN__OP_REDSCAT: trn__ring_reduce_scatter(g, op->buf, op->n, op->lo, op->hi, op->esize, op->average); break;
    case TRN__OP_ALLGATHER: trn__ring_all_gather(g, op->buf, op->n, op->lo, op->hi, op->esize); break;
    default: trn__ring_bcast(g, op->buf, op->n, op->root); break;
    }
}

static void *trn__ring_worker(void *arg) {
    trn__ring *g = (trn__ring *)arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        trn__ring_op op;
        while (g->q_len == 0 && !g->stop) pthread_cond_wait(&g->cv_work, &g->mu);
        if (g->q_len == 0) break; /* stop, and nothing left */
        op = g->q[g->q_head];
        pthread_mutex_unlock(&g->mu);
        if (!g->err) trn__ring_run(g, &op); /* after a failure: drain only */
        pthread_mutex_lock(&g->mu);
        g->q_head = (g->q_head + 1) % TRN__QCAP;
        g->q_len--;
        pthread_cond_broadcast(&g->cv_done);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static trn_result trn__ring_error(trn__ring *g) { return trn_fail(g->err, "%s", g->err_msg); }

static trn_result trn__ring_push_range(trn_comm *c, int kind, void *buf, size_t n, int esize, int average, int root,
                                       size_t lo, size_t hi) {
    trn__ring *g = (trn__ring *)c->impl;
    trn__ring_op *op;
    pthread_mutex_lock(&g->mu);
    while (g->q_len == TRN__QCAP && !g->err) pthread_cond_wait(&g->cv_done, &g->mu);
    if (g->err) { pthread_mutex_unlock(&g->mu); return trn__ring_error(g); }
    op = &g->q[(g->q_head + g->q_len) % TRN__QCAP];
    op->kind = kind; op->buf = (char *)buf; op->n = n; op->esize = esize; op->average = average; op->root = root;
    op->lo = lo; op->hi = hi;
    g->q_len++;
    pthread_cond_signal(&g->cv_work);
    pthread_mutex_unlock(&g->mu);
    return TRN_OK;
}
static trn_result trn__ring_push(trn_comm *c, int kind, void *buf, size_t n, int esize, int average, int root) {
    return trn__ring_push_range(c, kind, buf, n, esize, average, root, 0, n);
}

static trn_result trn__ring_all_reduce(trn_comm *c, float *x, size_t n, int average) {
    return trn__ring_push(c, TRN__OP_ALLREDUCE, x, n, 4, average, 0);
}
static trn_result trn__ring_redscat(trn_comm *c, float *x, size_t n, int average) {
    return trn__ring_push(c, TRN__OP_REDSCAT, x, n, 4, average, 0);
}
static trn_result trn__ring_redscat_range(trn_comm *c, float *x, size_t lo, size_t hi, size_t n, int average) {
    if (lo > hi || hi > n) return trn_fail(TRN_ERR_INVALID, "reduce_scatter_range: [%zu,%zu) of %zu", lo, hi, n);
    return trn__ring_push_range(c, TRN__OP_REDSCAT, x, n, 4, average, 0, lo, hi);
}
static trn_result trn__ring_allgather_range(trn_comm *c, float *x, size_t lo, size_t hi, size_t n) {
    if (lo > hi || hi > n) return trn_fail(TRN_ERR_INVALID, "all_gather_range: [%zu,%zu) of %zu", lo, hi, n);
    return trn__ring_push_range(c, TRN__OP_ALLGATHER, x, n, 4, 0, 0, lo, hi);
}
static trn_result trn__ring_allgather(trn_comm *c, float *x, size_t n) {
    return trn__ring_push(c, TRN__OP_ALLGATHER, x, n, 4, 0, 0);
}
static trn_result trn__ring_broadcast(trn_comm *c, void *x, size_t bytes, int root) {
    return trn__ring_push(c, TRN__OP_BCAST, x, bytes, 1, 0, root);
}
static trn_result trn__ring_wait(trn_comm *c) {
    trn__ring *g = (trn__ring *)c->impl;
    trn_result rc;
    pthread_mutex_lock(&g->mu);
    while (g->q_len > 0) pthread_cond_wait(&g->cv_done, &g->mu);
    rc = g->err;
    pthread_mutex_unlock(&g->mu);
    return rc ? trn__ring_error(g) : TRN_OK;
}
static trn_result trn__ring_all_reduce_host(trn_comm *c, double *x, int n, int average) {
    trn_result rc = trn__ring_push(c, TRN__OP_ALLREDUCE, x, (size_t)n, 8, average, 0);
    return rc ? rc : trn__ring_wait(c);
}
static void trn__ring_abort(trn_comm *c) {
    trn__ring *g = (trn__ring *)c->impl;
    if (!g) return;
    g->aborted = 1;
    trn__ring_close_fds(g);
}
static void trn__ring_destroy(trn_comm *c) {
    trn__ring *g = (trn__ring *)c->impl;
    if (!g) return;
    if (g->thread_up) {
        /* collectives still queued have nobody to wait for them: stop them
           (after a barrier the queue is empty and the worker is idle) */
        if (g->q_len > 0) trn__ring_abort(c);
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_signal(&g->cv_work);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv_work);
        pthread_cond_destroy(&g->cv_done);
    }
    if (g->fd_next >= 0) close(g->fd_next);
    if (g->fd_prev >= 0) close(g->fd_prev);
    trn_free(g->stage);
    free(g);
    c->impl = NULL;
}

/* connect to the next rank, accept the previous one; both say hello with
   the job token so a process of another job cannot slip into the ring */
#define TRN__RING_MAGIC "trnring1"
static trn_result trn__ring_connect(trn__ring *g, int lfd, const trn__peer *peers, const unsigned char *token,
                                    double timeout) {
    int r = g->c->rank, one = 1;
    double deadline = trn__dist_now() + timeout;
    unsigned char hello[20];
    memcpy(hello, TRN__RING_MAGIC, 8);
    memcpy(hello + 8, token, 8);
    trn__net_put32(hello + 16, (uint32_t)r);
    g->fd_next = trn__net_connect(peers[g->next].addr, peers[g->next].port, deadline);
    if (g->fd_next < 0)
        return trn_fail(TRN_ERR_TIMEOUT, "rank %d: could not connect to rank %d at %s:%d: %s", r, g->next,
                        inet_ntoa(peers[g->next].addr), peers[g->next].port, strerror(errno));
    if (trn__net_xfer(g->fd_next, hello, sizeof hello, 1, deadline) != 0)
        return trn_fail(TRN_ERR_COMM, "rank %d: could not greet rank %d: %s", r, g->next, strerror(errno));
    while (g->fd_prev < 0) {
        unsigned char h[20];
        int fd, k = trn__net_wait(lfd, POLLIN, deadline);
        if (k == 0) return trn_fail(TRN_ERR_TIMEOUT, "rank %d: rank %d did not connect within %.0f s", r, g->prev, timeout);
        fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        trn__net_nonblock(fd);
        if (trn__net_xfer(fd, h, sizeof h, 0, deadline) == 0 && memcmp(h, TRN__RING_MAGIC, 8) == 0 &&
            memcmp(h + 8, token, 8) == 0 && (int)trn__net_get32(h + 16) == g->prev) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            g->fd_prev = fd;
        } else {
            close(fd);
        }
    }
    return TRN_OK;
}

static trn_result trn__ring_init(trn_comm *c, const trn_dist_env *env) {
    trn__ring *g = (trn__ring *)calloc(1, sizeof(trn__ring));
    unsigned char blob[TRN__BLOB_MAX];
    trn__peer *peers;
    int lfd, port = 0;
    trn_result rc;
    if (!g) return trn_fail(TRN_ERR_NOMEM, "tcp communicator: out of memory");
    g->c = c;
    g->fd_next = g->fd_prev = -1;
    g->next = (c->rank + 1) % c->world;
    g->prev = (c->rank + c->world - 1) % c->world;
    c->impl = g;
    g->stage = (char *)trn_alloc(TRN__STAGE_BYTES, TRN_KIND_COMM);
    peers = (trn__peer *)calloc((size_t)c->world, sizeof(trn__peer));
    if (!g->stage || !peers) { free(peers); return trn_fail(TRN_ERR_NOMEM, "tcp communicator: out of memory"); }
    lfd = trn__net_listen(0, &port); /* our ring listener, on a port the OS picks */
    if (lfd >= 0 && port == env->master_port) { /* MASTER_PORT itself (rank 0 is not listening yet): another */
        int taken = lfd;
        lfd = trn__net_listen(0, &port);
        close(taken);
    }
    if (lfd < 0) { free(peers); return trn_fail(TRN_ERR_COMM, "rank %d: listen: %s", c->rank, strerror(errno)); }
    memset(blob, 0, sizeof blob);
    if (c->rank == 0) { /* a job token: time, pid and an address, mixed */
        uint64_t t = (uint64_t)(trn__dist_now() * 1e9) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)g;
        trn_rng rng;
        trn_rng_seed(&rng, t);
        t = trn_rng_next(&rng);
        memcpy(blob, &t, 8);
    }
    rc = trn__rendezvous(env, c->timeout_s, port, blob, peers);
    if (rc == TRN_OK) rc = trn__ring_connect(g, lfd, peers, blob, c->timeout_s);
    close(lfd);
    free(peers);
    if (rc != TRN_OK) return rc;
    trn__net_nonblock(g->fd_next);
    trn__net_nonblock(g->fd_prev);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv_work, NULL);
    pthread_cond_init(&g->cv_done, NULL);
    if (pthread_create(&g->thread, NULL, trn__ring_worker, g) != 0)
        return trn_fail(TRN_ERR_COMM, "tcp communicator: cannot start its thread");
    g->thread_up = 1;
    c->name = "tcp-ring";
    c->all_reduce = trn__ring_all_reduce;
    c->reduce_scatter = trn__ring_redscat;
    c->reduce_scatter_range = trn__ring_redscat_range;
    c->all_gather = trn__ring_allgather;
    c->all_gather_range = trn__ring_allgather_range;
    c->broadcast = trn__ring_broadcast;
    c->wait = trn__ring_wait;
    c->all_reduce_host = trn__ring_all_reduce_host;
    c->abort = trn__ring_abort;
    c->destroy = trn__ring_destroy;
    return TRN_OK;
}

/* ---- world size 1: nothing to talk to ----------------------------------- */
static trn_result trn__self_all_reduce(trn_comm *c, float *x, size_t n, int a) { (void)c; (void)x; (void)n; (void)a; return TRN_OK; }
static trn_result trn__self_allgather(trn_comm *c, float *x, size_t n) { (void)c; (void)x; (void)n; return TRN_OK; }
static trn_result trn__self_redscat_range(trn_comm *c, float *x, size_t lo, size_t hi, size_t n, int a) {
    (void)c; (void)x; (void)lo; (void)hi; (void)n; (void)a; return TRN_OK;
}
static trn_result trn__self_allgather_range(trn_comm *c, float *x, size_t lo, size_t hi, size_t n) {
    (void)c; (void)x; (void)lo; (void)hi; (void)n; return TRN_OK;
}
static trn_result trn__self_bcast(trn_comm *c, void *x, size_t n, int r) { (void)c; (void)x; (void)n; (void)r; return TRN_OK; }
static trn_result trn__self_wait(trn_comm *c) { (void)c; return TRN_OK; }
static trn_result trn__self_host(trn_comm *c, double *x, int n, int a) { (void)c; (void)x; (void)n; (void)a; return TRN_OK; }
static void trn__self_abort(trn_comm *c) { (void)c; }

/* ========================================================================
   >>nccl
   The same table over NCCL. Collectives go to a communication stream of
   our own; before each, the stream waits on an event recorded on the
   compute stream, so a bucket leaves only after the kernels that wrote it.
   wait() records an event on the communication stream and polls it,
   checking ncclCommGetAsyncError, until it completes or timeout_s passes:
   then ncclCommAbort (a dead peer on another node makes NCCL fail; on one
   node it may just hang: the timeout catches both). The communicator is
   created non-blocking (NCCL >= 2.14), so even its creation can time out.
   ======================================================================== */
#if !defined(TRAIN_NCCL_CPU_ONLY)
#ifndef TRN_NCCL_COMPUTE_STREAM
#define TRN_NCCL_COMPUTE_STREAM ((cudaStream_t)trn_cuda_stream()) /* train_cuda.h's one stream */
#endif

typedef struct trn__nccl {
    ncclComm_t comm;
    cudaStream_t stream;     /* the communication stream               */
    cudaEvent_t ready, done;
    double *scratch;         /* 8 doubles on the device (COMM)          */
    double *pinned;          /* 8 doubles of page-locked host memory: a
                                copy into pageable memory would block the
                                host until the collective ends, with no
                                timeout (COMM, on the host)             */
    size_t runtime_bytes;    /* NCCL's own buffers, measured at init    */
    int aborted;
    trn_result err;
    char err_msg[512];
} trn__nccl;

static trn_result trn__nccl_fail(trn_comm *c, trn_result rc, const char *fmt, ...) {
    trn__nccl *g = (trn__nccl *)c->impl;
    va_list ap;
    int n;
    if (!g->err) {
        n = snprintf(g->err_msg, sizeof g->err_msg, "rank %d: nccl: ", c->rank);
        va_start(ap, fmt);
        vsnprintf(g->err_msg + n, sizeof g->err_msg - (size_t)n, fmt, ap);
        va_end(ap);
        g->err = rc;
        if (!g->aborted) { ncclCommAbort(g->comm); g->aborted = 1; } /* peers fail fast */
    }
    return trn_fail(g->err, "%s", g->err_msg);
}

/* a non-blocking communicator may answer ncclInProgress: poll until done */
static trn_result trn__nccl_settle(trn_comm *c, ncclResult_t r, const char *what) {
    trn__nccl *g = (trn__nccl *)c->impl;
    double deadline = trn__dist_now() + c->timeout_s;
    while (r == ncclInProgress) {
        if (trn__dist_now() > deadline)
            return trn__nccl_fail(c, TRN_ERR_TIMEOUT, "%s did not finish within %.0f s (a rank hangs or died?)", what,
                                  c->timeout_s);
        trn__dist_sleep_ms(1);
        if (ncclCommGetAsyncError(g->comm, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess)
        return trn__nccl_fail(c, TRN_ERR_COMM, "%s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(g->comm));
    return TRN_OK;
}

static trn_result trn__nccl_enter(trn_comm *c) { /* comm stream waits for compute */
    trn__nccl *g = (trn__nccl *)c->impl;
    if (g->err) return trn_fail(g->err, "%s", g->err_msg);
    if (cudaEventRecord(g->ready, TRN_NCCL_COMPUTE_STREAM) != cudaSuccess ||
        cudaStreamWaitEvent(g->stream, g->ready, 0) != cudaSuccess)
        return trn__nccl_fail(c, TRN_ERR_BACKEND, "cuda event: %s", cudaGetErrorString(cudaGetLastError()));
    return TRN_OK;
}

static trn_result trn__nccl_all_reduce(trn_comm *c, float *x, size_t n, int average) {
    trn__nccl *g = (trn__nccl *)c->impl;
    trn_result rc = trn__nccl_enter(c);
    if (rc) return rc;
    return trn__nccl_settle(c, ncclAllReduce(x, x, n, ncclFloat, average ? ncclAvg : ncclSum, g->comm, g->stream),
                            "ncclAllReduce");
}

/* NCCL's reduce-scatter needs W equal parts: the first W*S elements go
   through it, the tail (the last rank's extra) through an all-reduce */
static trn_result trn__nccl_redscat(trn_comm *c, float *x, size_t n, int average) {
    trn__nccl *g = (trn__nccl *)c->impl;
    size_t S = trn__dist_shard_size(n, c->world), tail = n - S * (size_t)c->world;
    ncclRedOp_t op = average ? ncclAvg : ncclSum;
    trn_result rc = trn__nccl_enter(c);
    if (rc) return rc;
    if (S && (rc = trn__nccl_settle(c, ncclReduceScatter(x, x + S * (size_t)c->rank, S, ncclFloat, op, g->comm, g->stream),
                                    "ncclReduceScatter")))
        return rc;
    if (tail) return trn__nccl_settle(c, ncclAllReduce(x + S * (size_t)c->world, x + S * (size_t)c->world, tail, ncclFloat,
                                                       op, g->comm, g->stream), "ncclAllReduce (tail)");
    return TRN_OK;
}

/* the owners of a window of the sharded buffer: one ncclReduce to each
   rank whose shard meets [lo,hi), fused into one launch by a group */
static trn_result trn__nccl_redscat_range(trn_comm *c, float *x, size_t lo, size_t hi, size_t n, int average) {
    trn__nccl *g = (trn__nccl *)c->impl;
    ncclRedOp_t op = average ? ncclAvg : ncclSum;
    trn_result rc = trn__nccl_enter(c);
    int k;
    if (rc) return rc;
    if ((rc = trn__nccl_settle(c, ncclGroupStart(), "ncclGroupStart"))) return rc;
    for (k = 0; k < c->world; k++) {
        size_t a, b;
        trn_comm_shard(n, c->world, k, &a, &b);
        a = a < lo ? lo : a;
        b = b > hi ? hi : b;
        if (a >= b) continue;
        if ((rc = trn__nccl_settle(c, ncclReduce(x + (a - lo), x + (a - lo), b - a, ncclFloat, op, k, g->comm, g->stream),
                                   "ncclReduce")))
            return rc;
    }
    return trn__nccl_settle(c, ncclGroupEnd(), "ncclGroupEnd");
}

/* each owner broadcasts its part of the window, fused by a group */
static trn_result trn__nccl_allgather_range(trn_comm *c, float *x, size_t lo, size_t hi, size_t n) {
    trn__nccl *g = (trn__nccl *)c->impl;
    trn_result rc = trn__nccl_enter(c);
    int k;
    if (rc) return rc;
    if ((rc = trn__nccl_settle(c, ncclGroupStart(), "ncclGroupStart"))) return rc;
    for (k = 0; k < c->world; k++) {
        size_t a, b;
        trn_comm_shard(n, c->world, k, &a, &b);
        a = a < lo ? lo : a;
        b = b > hi ? hi : b;
        if (a >= b) continue;
        if ((rc = trn__nccl_settle(c, ncclBroadcast(x + (a - lo), x + (a - lo), b - a, ncclFloat, k, g->comm, g->stream),
                                   "ncclBroadcast")))
            return rc;
    }
    return trn__nccl_settle(c, ncclGroupEnd(), "ncclGroupEnd");
}

static trn_result trn__nccl_allgather(trn_comm *c, float *x, size_t n) {
    trn__nccl *g = (trn__nccl *)c->impl;
    size_t S = trn__dist_shard_size(n, c->world), tail = n - S * (size_t)c->world;
    trn_result rc = trn__nccl_enter(c);
    if (rc) return rc;
    if (S && (rc = trn__nccl_settle(c, ncclAllGather(x + S * (size_t)c->rank, x, S, ncclFloat, g->comm, g->stream),
                                    "ncclAllGather")))
        return rc;
    if (tail) return trn__nccl_settle(c, ncclBroadcast(x + S * (size_t)c->world, x + S * (size_t)c->world, tail, ncclFloat,
                                                       c->world - 1, g->comm, g->stream), "ncclBroadcast (tail)");
    return TRN_OK;
}

static trn_result trn__nccl_broadcast(trn_comm *c, void *x, size_t bytes, int root) {
    trn__nccl *g = (trn__nccl *)c->impl;
    trn_result rc = trn__nccl_enter(c);
    if (rc) return rc;
    return trn__nccl_settle(c, ncclBroadcast(x, x, bytes, ncclInt8, root, g->comm, g->stream), "ncclBroadcast");
}

/* Every wait on the communication stream comes here: poll an event, never
   block in the CUDA runtime (cudaStreamSynchronize, a copy into pageable
   memory), so a peer that hangs or died ends the wait after timeout_s
   with ncclCommAbort and a message naming this rank. NCCL's async error
   is read even when the event completed: a collective that failed may
   still let the stream run on. */
static trn_result trn__nccl_wait(trn_comm *c) {
    trn__nccl *g = (trn__nccl *)c->impl;
    double deadline = trn__dist_now() + c->timeout_s;
    ncclResult_t a = ncclSuccess;
    if (g->err) return trn_fail(g->err, "%s", g->err_msg);
    if (cudaEventRecord(g->done, g->stream) != cudaSuccess)
        return trn__nccl_fail(c, TRN_ERR_BACKEND, "cudaEventRecord: %s", cudaGetErrorString(cudaGetLastError()));
    for (;;) {
        cudaError_t q = cudaEventQuery(g->done);
        if (ncclCommGetAsyncError(g->comm, &a) != ncclSuccess || (a != ncclSuccess && a != ncclInProgress))
            return trn__nccl_fail(c, TRN_ERR_COMM, "a collective failed: %s (%s): a rank died or the network broke",
                                  ncclGetErrorString(a), ncclGetLastError(g->comm));
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) return trn__nccl_fail(c, TRN_ERR_BACKEND, "cudaEventQuery: %s", cudaGetErrorString(q));
        if (trn__dist_now() > deadline)
            return trn__nccl_fail(c, TRN_ERR_TIMEOUT,
                                  "collectives not done after %.1f s: a rank hangs or died (timeout: trn_ddp_desc.timeout_s "
                                  "or TRN_DDP_TIMEOUT)", c->timeout_s);
        sched_yield();
    }
    /* later kernels on the compute stream see the reduced values */
    if (cudaStreamWaitEvent(TRN_NCCL_COMPUTE_STREAM, g->done, 0) != cudaSuccess)
        return trn__nccl_fail(c, TRN_ERR_BACKEND, "cudaStreamWaitEvent: %s", cudaGetErrorString(cudaGetLastError()));
    return TRN_OK;
}

/* host values travel through page-locked memory: both copies are truly
   asynchronous, so the only wait is trn__nccl_wait's bounded poll */
static trn_result trn__nccl_all_reduce_host(trn_comm *c, double *x, int n, int average) {
    trn__nccl *g = (trn__nccl *)c->impl;
    size_t bytes = sizeof(double) * (size_t)n;
    trn_result rc;
    if (n > 8) return trn_fail(TRN_ERR_INVALID, "all_reduce_host: at most 8 values");
    memcpy(g->pinned, x, bytes); /* (free: every call ends with a wait) */
    if ((rc = trn__nccl_enter(c))) return rc;
    if (cudaMemcpyAsync(g->scratch, g->pinned, bytes, cudaMemcpyHostToDevice, g->stream) != cudaSuccess)
        return trn__nccl_fail(c, TRN_ERR_BACKEND, "cudaMemcpyAsync: %s", cudaGetErrorString(cudaGetLastError()));
    if ((rc = trn__nccl_settle(c, ncclAllReduce(g->scratch, g->scratch, (size_t)n, ncclFloat64, average ? ncclAvg : ncclSum,
                                                g->comm, g->stream), "ncclAllReduce (host values)")))
        return rc;
    if (cudaMemcpyAsync(g->pinned, g->scratch, bytes, cudaMemcpyDeviceToHost, g->stream) != cudaSuccess)
        return trn__nccl_fail(c, TRN_ERR_BACKEND, "cudaMemcpyAsync: %s", cudaGetErrorString(cudaGetLastError()));
    if ((rc = trn__nccl_wait(c))) return rc;
    memcpy(x, g->pinned, bytes);
    return TRN_OK;
}

static void trn__nccl_abort(trn_comm *c) {
    trn__nccl *g = (trn__nccl *)c->impl;
    if (g && !g->aborted) { ncclCommAbort(g->comm); g->aborted = 1; }
}

static void trn__nccl_destroy(trn_comm *c) {
    trn__nccl *g = (trn__nccl *)c->impl;
    if (!g) return;
    if (!g->aborted && g->comm) ncclCommDestroy(g->comm);
    if (g->scratch) { cudaFree(g->scratch); trn_ledger_add(TRN_DEVICE, TRN_KIND_COMM, -(long long)(8 * sizeof(double))); }
    if (g->pinned) { cudaFreeHost(g->pinned); trn_ledger_add(TRN_HOST, TRN_KIND_COMM, -(long long)(8 * sizeof(double))); }
    if (g->runtime_bytes) trn_ledger_add(TRN_DEVICE, TRN_KIND_RUNTIME, -(long long)g->runtime_bytes);
    if (g->ready) cudaEventDestroy(g->ready);
    if (g->done) cudaEventDestroy(g->done);
    if (g->stream) cudaStreamDestroy(g->stream);
    free(g);
    c->impl = NULL;
}

static trn_result trn__nccl_init(trn_comm *c, const trn_dist_env *env) {
    trn__nccl *g = (trn__nccl *)calloc(1, sizeof(trn__nccl));
    unsigned char blob[TRN__BLOB_MAX];
    ncclUniqueId id;
    trn__peer *peers;
    size_t free0 = 0, free1 = 0, total = 0;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    trn_result rc;
    if (!g) return trn_fail(TRN_ERR_NOMEM, "nccl communicator: out of memory");
    c->impl = g;
    c->name = "nccl";
    c->all_reduce = trn__nccl_all_reduce;
    c->reduce_scatter = trn__nccl_redscat;
    c->reduce_scatter_range = trn__nccl_redscat_range;
    c->all_gather_range = trn__nccl_allgather_range;
    c->all_gather = trn__nccl_allgather;
    c->broadcast = trn__nccl_broadcast;
    c->wait = trn__nccl_wait;
    c->all_reduce_host = trn__nccl_all_reduce_host;
    c->abort = trn__nccl_abort;
    c->destroy = trn__nccl_destroy;
    g->aborted = 1; /* nothing to abort until the communicator exists */
    memset(blob, 0, sizeof blob);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return trn_fail(TRN_ERR_COMM, "rank 0: ncclGetUniqueId: %s", ncclGetErrorString(r));
        memcpy(blob, &id, sizeof id);
    }
    peers = (trn__peer *)calloc((size_t)c->world, sizeof(trn__peer));
    if (!peers) return trn_fail(TRN_ERR_NOMEM, "nccl communicator: out of memory");
    rc = trn__rendezvous(env, c->timeout_s, 0, blob, peers);
    free(peers);
    if (rc != TRN_OK) return rc;
    memcpy(&id, blob, sizeof id);
    /* the communication stream at the highest priority the device has: the
       scheduler then runs reductions ahead of queued compute kernels, so
       they are not starved while backward fills the GPU */
    {
        int least = 0, greatest = 0;
        if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) greatest = 0;
        if (cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, greatest) != cudaSuccess ||
            cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming) != cudaSuccess ||
            cudaMalloc((void **)&g->scratch, 8 * sizeof(double)) != cudaSuccess)
            return trn_fail(TRN_ERR_BACKEND, "rank %d: nccl setup: %s", c->rank, cudaGetErrorString(cudaGetLastError()));
        trn_ledger_add(TRN_DEVICE, TRN_KIND_COMM, (long long)(8 * sizeof(double)));
        if (cudaMallocHost((void **)&g->pinned, 8 * sizeof(double)) != cudaSuccess)
            return trn_fail(TRN_ERR_BACKEND, "rank %d: nccl setup: cudaMallocHost: %s", c->rank,
                            cudaGetErrorString(cudaGetLastError()));
        trn_ledger_add(TRN_HOST, TRN_KIND_COMM, (long long)(8 * sizeof(double)));
    }
    cudaMemGetInfo(&free0, &total);
    config.blocking = 0; /* so that creating it can time out too */
    {
        ncclResult_t r = ncclCommInitRankConfig(&g->comm, c->world, id, c->rank, &config);
        if (r != ncclSuccess && r != ncclInProgress)
            return trn_fail(TRN_ERR_COMM, "rank %d: ncclCommInitRank: %s", c->rank, ncclGetErrorString(r));
        g->aborted = 0;
        if ((rc = trn__nccl_settle(c, r, "ncclCommInitRank")) != TRN_OK) return rc;
    }
    cudaMemGetInfo(&free1, &total);
    if (free0 > free1) { /* NCCL's buffers: fixed, not model-sized */
        g->runtime_bytes = free0 - free1;
        trn_ledger_add(TRN_DEVICE, TRN_KIND_RUNTIME, (long long)g->runtime_bytes);
    }
    return TRN_OK;
}
#endif /* !TRAIN_NCCL_CPU_ONLY */

/* ========================================================================
   >>comm
   ======================================================================== */
static size_t trn__dist_shard_size(size_t n, int world) {
    size_t s = world > 0 ? n / (size_t)world : n;
    if (s >= 64) s -= s % 16; /* 64-byte aligned starts, except for tiny n */
    return s;
}

TRNDEF void trn_comm_shard(size_t n, int world, int rank, size_t *lo, size_t *hi) {
    size_t s = trn__dist_shard_size(n, world);
    *lo = s * (size_t)rank;
    *hi = rank == world - 1 ? n : s * (size_t)(rank + 1);
}

TRNDEF trn_result trn_comm_init(trn_comm *c, const trn_dist_env *env, trn_comm_kind kind, double timeout_s) {
    trn_result rc;
    if (!c || !env) return trn_fail(TRN_ERR_INVALID, "trn_comm_init: NULL argument");
    memset(c, 0, sizeof *c);
    c->rank = env->rank;
    c->world = env->world_size;
    c->timeout_s = timeout_s > 0 ? timeout_s : TRN__DEFAULT_TIMEOUT;
    if (env->world_size < 1 || env->rank < 0 || env->rank >= env->world_size)
        return trn_fail(TRN_ERR_INVALID, "trn_comm_init: rank %d of %d", env->rank, env->world_size);
#if defined(TRAIN_NCCL_CPU_ONLY)
    if (kind == TRN_COMM_NCCL)
        return trn_fail(TRN_ERR_INVALID, "trn_comm_init: this build has no NCCL (TRAIN_NCCL_CPU_ONLY)");
    if (kind == TRN_COMM_AUTO) kind = TRN_COMM_TCP;
#else
    if (kind == TRN_COMM_AUTO) kind = TRN_COMM_NCCL;
#endif
    if (kind == TRN_COMM_SELF && env->world_size > 1)
        return trn_fail(TRN_ERR_INVALID, "trn_comm_init: TRN_COMM_SELF with %d ranks would not communicate", env->world_size);
    if (env->world_size == 1) kind = TRN_COMM_SELF;
    c->kind = kind;
    if (kind == TRN_COMM_SELF) {
        c->name = "self";
        c->all_reduce = trn__self_all_reduce;
        c->reduce_scatter = trn__self_all_reduce;
        c->reduce_scatter_range = trn__self_redscat_range;
        c->all_gather = trn__self_allgather;
        c->all_gather_range = trn__self_allgather_range;
        c->broadcast = trn__self_bcast;
        c->wait = trn__self_wait;
        c->all_reduce_host = trn__self_host;
        c->abort = trn__self_abort;
        return TRN_OK;
    }
#if !defined(TRAIN_NCCL_CPU_ONLY)
    if (kind == TRN_COMM_NCCL) rc = trn__nccl_init(c, env);
    else
#endif
    rc = trn__ring_init(c, env);
    if (rc != TRN_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", trn_error_reason());
        if (c->destroy) c->destroy(c);
        else trn__ring_destroy(c);
        c->impl = NULL;
        c->destroy = NULL;
        return trn_fail(rc, "%s", why);
    }
    return TRN_OK;
}

TRNDEF void trn_comm_free(trn_comm *c) {
    if (!c) return;
    if (c->destroy) c->destroy(c);
    memset(c, 0, sizeof *c);
}

/* ========================================================================
   >>ddp
   ======================================================================== */
TRNDEF const char *trn_shard_name(trn_shard_mode s) {
    switch (s) {
    case TRN_SHARD_NONE: return "none";
    case TRN_SHARD_ZERO1: return "zero1";
    case TRN_SHARD_ZERO2: return "zero2";
    case TRN_SHARD_FSDP: return "fsdp";
    }
    return "?";
}

TRNDEF trn_result trn_shard_parse(const char *name, trn_shard_mode *out) {
    int s;
    for (s = TRN_SHARD_NONE; s <= TRN_SHARD_FSDP; s++)
        if (name && strcmp(name, trn_shard_name((trn_shard_mode)s)) == 0) { *out = (trn_shard_mode)s; return TRN_OK; }
    return trn_fail(TRN_ERR_INVALID, "sharding '%s': expected none, zero1, zero2 or fsdp", name ? name : "(null)");
}

TRNDEF trn_ddp_desc trn_ddp_defaults(const trn_ddp_desc *desc) {
    trn_ddp_desc d;
    memset(&d, 0, sizeof d);
    if (desc) d = *desc;
    if (d.zero1 && d.shard == TRN_SHARD_NONE) d.shard = TRN_SHARD_ZERO1;
    d.zero1 = d.shard >= TRN_SHARD_ZERO1; /* every mode from ZeRO-1 on shards m and v */
    if (d.bucket_bytes == 0) d.bucket_bytes = (size_t)25 << 20;
    if (d.timeout_s <= 0) {
        const char *s = getenv("TRN_DDP_TIMEOUT");
        d.timeout_s = s && atof(s) > 0 ? atof(s) : TRN__DEFAULT_TIMEOUT;
    }
    return d;
}

static trn_result trn__ddp_fail(trn_ddp *d, trn_result rc) { /* remember the first failure */
    if (!d->error) {
        d->error = rc;
        snprintf(d->error_reason, sizeof d->error_reason, "%s", trn_error_reason());
    }
    return rc;
}
static trn_result trn__ddp_sticky(trn_ddp *d) { return trn_fail(d->error, "%s", d->error_reason); }

TRNDEF trn_result trn_ddp_init(trn_ddp *ddp, const trn_ddp_desc *desc) {
    trn_result rc;
    if (!ddp) return trn_fail(TRN_ERR_INVALID, "trn_ddp_init: ddp is NULL");
    memset(ddp, 0, sizeof *ddp);
    ddp->desc = trn_ddp_defaults(desc);
    ddp->sync = 1;
    if ((rc = trn_dist_env_read(&ddp->env)) != TRN_OK) return rc;
    ddp->rank = ddp->env.rank;
    ddp->world = ddp->env.world_size;
    ddp->local_rank = ddp->env.local_rank;
#if !defined(TRAIN_NCCL_CPU_ONLY)
    if (ddp->desc.comm != TRN_COMM_TCP) { /* one GPU per rank: the local rank's */
        int n = 0, dev = ddp->local_rank;
        if (cudaGetDeviceCount(&n) == cudaSuccess && n == 1) dev = 0; /* the launcher gave each rank its own GPU
                                                                        (Slurm --gpus-per-task=1, Kubernetes,
                                                                        CUDA_VISIBLE_DEVICES per rank) */
        else if (n > 0 && ddp->local_rank >= n)
            return trn_fail(TRN_ERR_INVALID, "rank %d: local rank %d but this node has %d GPU(s): start at most %d ranks per node",
                            ddp->rank, ddp->local_rank, n, n);
        cudaGetLastError();
        /* the backend's device, stream and cuBLAS handle, on this GPU */
        if ((rc = trn_cuda_init(dev)) != TRN_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", trn_error_reason());
            return trn_fail(rc, "rank %d: %s", ddp->rank, why);
        }
    }
#endif
    return trn_comm_init(&ddp->comm, &ddp->env, ddp->desc.comm, ddp->desc.timeout_s);
}

/* the parameter whose slice of the flat buffer holds element `off` */
static int trn__ddp_param_at(const trn_model *m, size_t off) {
    int lo = 0, hi = m->n_params - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (m->params[mid]->offset <= off) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* the flat-buffer range a tape input writes gradients into, if any */
static int trn__ddp_grad_range(const trn_model *m, const trn_tensor *t, size_t *off) {
    size_t lo = m->shard.grad_lo, hi = m->shard.grad_hi ? m->shard.grad_hi : m->n_floats; /* (ZeRO-2: only a shard exists) */
    if (!t || !t->requires_grad) return 0;
    if (t->is_param) { *off = t->offset; return 1; }
    if (t->grad && m->grad_data && t->grad >= m->grad_data + lo && t->grad < m->grad_data + hi) { /* a view */
        *off = (size_t)(t->grad - m->grad_data);
        return 1;
    }
    return 0;
}

/* queue bucket b's collective (once per step) */
static void trn__ddp_launch(trn_ddp *d, trn_model *m, int b) {
    trn_ddp_bucket *k = &d->buckets[b];
    trn_result rc;
    if (k->launched || d->error) return;
    k->launched = 1;
    d->n_launched++;
    if (d->desc.shard < TRN_SHARD_ZERO2) rc = d->comm.all_reduce(&d->comm, m->grad_data + k->lo, k->hi - k->lo, 1);
    else if (k->stage) rc = d->comm.reduce_scatter_range(&d->comm, k->stage, k->lo, k->hi, m->n_floats, 1);
    else rc = TRN_OK; /* ZeRO-2: nothing wrote it (unused parameters): its shard stays zero */
    if (rc) trn__ddp_fail(d, rc);
}

/* parameter p's gradient is final: its buckets have one fewer to wait for;
   those that reach zero leave now */
static void trn__ddp_param_final(trn_ddp *d, trn_model *m, int p) {
    int b;
    for (b = d->bucket_of[p]; b < d->bucket_of[p] + d->bucket_cnt[p]; b++)
        if (--d->buckets[b].pending == 0) trn__ddp_launch(d, m, b);
}

/* a new backward: for every parameter, the lowest tape index that writes
   its gradient (entries run from the top down, so after that entry the
   gradient is final); -1: no entry (final already) */
static void trn__ddp_begin(trn_ddp *d, trn_model *m) {
    int i, k, p;
    for (p = 0; p < m->n_params; p++) d->last_use[p] = -1;
    if (d->first_use) for (p = 0; p < m->n_params; p++) d->first_use[p] = -1;
    for (i = 0; i < m->tape_len; i++)
        for (k = 0; k < 3; k++) {
            size_t off, end;
            trn_tensor *t = m->tape[i].in[k];
            if (!trn__ddp_grad_range(m, t, &off)) continue;
            end = off + t->size;
            for (p = trn__ddp_param_at(m, off); p < m->n_params && m->params[p]->offset < end; p++) {
                if (d->last_use[p] < 0 || i < d->last_use[p]) d->last_use[p] = i;
                if (d->first_use && i > d->first_use[p]) d->first_use[p] = i;
            }
        }
    for (i = 0; i < d->n_buckets; i++) { d->buckets[i].pending = 0; d->buckets[i].launched = 0; }
    for (p = 0; p < m->n_params; p++)
        if (d->last_use[p] >= 0)
            for (i = d->bucket_of[p]; i < d->bucket_of[p] + d->bucket_cnt[p]; i++) d->buckets[i].pending++;
    d->n_launched = 0;
    d->armed = 1;
    /* buckets no entry writes (unused parameters) are final already */
    for (i = 0; i < d->n_buckets; i++)
        if (d->buckets[i].pending == 0) trn__ddp_launch(d, m, i);
}

/* trn_backward calls this after tape entry i */
static void trn__ddp_hook(trn_model *m, int i, void *user) {
    trn_ddp *d = (trn_ddp *)user;
    int k, p;
    if ((!d->sync && d->desc.shard < TRN_SHARD_ZERO2) || d->error) return;
    if (i == m->tape_len - 1 && d->desc.shard < TRN_SHARD_ZERO2) { /* (ZeRO-2, FSDP: the pre-hook began) */
        if (d->armed) { /* a second backward would all-reduce partial sums twice */
            trn_fail(TRN_ERR_INVALID, "rank %d: trn_backward ran twice without trn_ddp_allreduce_grads between: "
                                      "to accumulate gradients call trn_ddp_set_sync(&ddp, 0) before all but the last backward",
                     d->rank);
            trn__ddp_fail(d, TRN_ERR_INVALID);
            return;
        }
        trn__ddp_begin(d, m);
    }
    for (k = 0; k < 3; k++) {
        size_t off, end;
        trn_tensor *t = m->tape[i].in[k];
        if (!trn__ddp_grad_range(m, t, &off)) continue;
        end = off + t->size;
        for (p = trn__ddp_param_at(m, off); p < m->n_params && m->params[p]->offset < end; p++)
            if (d->last_use[p] == i) {
                d->last_use[p] = -2; /* counted once even if used twice by this entry */
                trn__ddp_param_final(d, m, p);
            }
    }
}

/* ---- ZeRO-2 ----------------------------------------------------------------
   The gradient buffer holds only this rank's shard. A bucket's gradients
   exist whole only while backward writes them: the pre-hook gives them a
   staging buffer just before the first entry that writes one of them
   (every parameter's grad pointer then points into it), the post-hook
   reduce-scatters the bucket to the owners once its last gradient is
   final, and when that collective is done the owned part is added into
   the shard and the staging buffer freed. At most TRN__ZERO2_LIVE staging
   buffers are alive: the next one first waits for those already sent.
   Every backward reduces (gradient accumulation adds into the shard), so
   trn_ddp_set_sync and desc.no_overlap do not apply. */
#define TRN__ZERO2_LIVE 2

/* wait for every queued collective; then each sent bucket's owned part
   goes into the shard and its staging buffer is freed */
static trn_result trn__zero2_harvest(trn_ddp *d, trn_model *m) {
    trn_result rc = d->comm.wait(&d->comm);
    int b, p;
    if (rc) return trn__ddp_fail(d, rc);
    for (b = 0; b < d->n_buckets; b++) {
        trn_ddp_bucket *k = &d->buckets[b];
        size_t a = TRN__DIST_MAX(k->lo, d->shard_lo), e = TRN__DIST_MIN(k->hi, d->shard_hi);
        if (!k->stage || !k->launched) continue;
        if (a < e) /* fp32 gradients (accumulate is the activations' dtype) */
            m->backend->convert(m->grad_data + a, TRN_F32, k->stage + (a - k->lo), TRN_F32, e - a, 1, 1.0f);
        for (p = k->p_first; p <= k->p_last; p++) m->params[p]->grad = NULL;
        m->backend->free(k->stage);
        k->stage = NULL;
        d->n_live--;
    }
    return TRN_OK;
}

static void trn__fsdp_unit_hook(trn_model *m, trn_tensor *member, int phase, void *user);

/* trn_backward calls this BEFORE tape entry i */
static void trn__zero2_pre_hook(trn_model *m, int i, void *user) {
    trn_ddp *d = (trn_ddp *)user;
    int k, p, q;
    if (d->error) return;
    if (i == m->tape_len - 1) { /* a new backward (accumulating: the last one's buckets are all sent) */
        if (d->armed && trn__zero2_harvest(d, m) != TRN_OK) return;
        trn__ddp_begin(d, m);
        if (d->error) return;
        if (d->units) { /* FSDP: backward starts in the unit where forward ended */
            d->bwd_pos = d->n_order - 1;
            trn__fsdp_unit_hook(m, m->shard.unit_cur, TRN_UNIT_BACKWARD, d);
            if (d->error) return;
        }
    }
    for (k = 0; k < 3; k++) {
        size_t off, end;
        trn_tensor *t = m->tape[i].in[k];
        if (!trn__ddp_grad_range(m, t, &off)) continue;
        end = off + t->size;
        for (p = trn__ddp_param_at(m, off); p < m->n_params && m->params[p]->offset < end; p++) {
            trn_ddp_bucket *b;
            size_t bytes;
            if (d->first_use[p] != i) continue;
            d->first_use[p] = -2;
            b = &d->buckets[d->bucket_of[p]];
            if (b->stage) continue;
            if (d->n_live >= (d->desc.shard == TRN_SHARD_FSDP ? 1 : TRN__ZERO2_LIVE) && trn__zero2_harvest(d, m) != TRN_OK)
                return;
            bytes = (b->hi - b->lo) * sizeof(float);
            b->stage = (float *)m->backend->alloc(bytes, TRN_KIND_GRADS);
            if (!b->stage) {
                trn__ddp_fail(d, trn_fail(TRN_ERR_NOMEM, "rank %d: ZeRO-2 staging for %zu bytes: %s", d->rank, bytes,
                                          trn_error_reason()));
                return;
            }
            m->backend->zero(b->stage, bytes);
            d->n_live++;
            for (q = b->p_first; q <= b->p_last; q++) m->params[q]->grad = b->stage + (m->params[q]->offset - b->lo);
        }
    }
}

/* attach: the gradient buffer becomes this rank's shard */
static trn_result trn__zero2_attach(trn_ddp *d, trn_model *m) {
    size_t n = d->shard_hi - d->shard_lo;
    int p;
    if (n == 0) return trn_fail(TRN_ERR_INVALID, "rank %d: ZeRO-2 needs at least one parameter per rank (%zu for %d ranks)",
                                d->rank, m->n_floats, d->world);
    d->first_use = (int *)trn_alloc(sizeof(int) * (size_t)m->n_params, TRN_KIND_RUNTIME);
    d->grad_shard = (float *)m->backend->alloc(n * sizeof(float), TRN_KIND_GRADS);
    if (!d->first_use || !d->grad_shard) return trn_fail(TRN_ERR_NOMEM, "rank %d: ZeRO-2: %s", d->rank, trn_error_reason());
    m->backend->zero(d->grad_shard, n * sizeof(float));
    if (m->grad_data) m->backend->free(m->grad_data + m->shard.grad_lo); /* a full buffer from an earlier backward */
    m->grad_data = d->grad_shard - d->shard_lo; /* element j of the shard is still grad_data[j] */
    m->shard.grad_lo = d->shard_lo;
    m->shard.grad_hi = d->shard_hi;
    for (p = 0; p < m->n_params; p++) m->params[p]->grad = NULL;
    m->shard.backward_pre_hook = trn__zero2_pre_hook;
    return TRN_OK;
}

/* ---- FSDP (>>fsdp) ------------------------------------------------------
   Weights, gradients, m and v: each rank keeps one shard of each flat
   buffer. A UNIT is a run of parameters whose names share a prefix that
   ends in a number ("h.3.attn.c_attn.weight" -> "h.3"; nn.Sequential's
   "2.weight" -> "2"): a block. Parameters with no number ("wte.weight",
   "ln_f.bias") form root units, which stay gathered for the whole run
   (embeddings and final norms: small next to the blocks, and needed at
   both ends of the step). The model marks where each block starts with
   trn_unit(m, any parameter of the block) in its forward (train.h
   >>units); the hook then
     forward:  gathers the block's weights (all_gather_range into a
               buffer of the unit's size; the parameters point into it),
               frees the block before, and queues the gather of the next
               one (prefetch: it travels while this block computes);
     backward: when the block's backward begins, the same: this one
               gathered (already prefetched), the one whose backward just
               ended freed, the previous one in forward order queued.
   Gradients go as in ZeRO-2 with one bucket per unit: a unit's gradients
   live whole in a staging buffer from their first write to their
   reduce-scatter (one at a time: the next waits for the one before).
   AdamW updates the shards; then the root units are gathered again.
   Per rank: 16 P / W bytes of state, plus two blocks of whole weights,
   one block of whole gradients, and the roots. */
static int trn__fsdp_key(const char *name, char *key, size_t cap) { /* 1: a block */
    const char *p = name;
    while (*p) {
        const char *q = p;
        while (*q >= '0' && *q <= '9') q++;
        if (q > p && (*q == '.' || *q == 0)) { /* a component of digits */
            size_t n = (size_t)(q - name);
            if (n >= cap) n = cap - 1;
            memcpy(key, name, n);
            key[n] = 0;
            return 1;
        }
        while (*p && *p != '.') p++;
        if (*p == '.') p++;
    }
    snprintf(key, cap, "%s", name);
    return 0;
}

static int trn__fsdp_unit(const trn_ddp *d, const trn_tensor *member) {
    return member ? d->unit_of[trn__ddp_param_at(d->model, member->offset)] : -1;
}

static void trn__fsdp_point(trn_ddp *d, int u, float *full) { /* the unit's parameters -> full (or NULL) */
    trn_model *m = d->model;
    int p;
    for (p = d->units[u].p_first; p <= d->units[u].p_last; p++)
        m->params[p]->data = full ? full + (m->params[p]->offset - d->units[u].lo) : NULL;
}

/* queue unit u's gather (no wait) */
static trn_result trn__fsdp_gather(trn_ddp *d, int u) {
    trn_model *m = d->model;
    trn_ddp_unit *k = &d->units[u];
    size_t a = TRN__DIST_MAX(k->lo, d->shard_lo), b = TRN__DIST_MIN(k->hi, d->shard_hi), bytes = (k->hi - k->lo) * sizeof(float);
    trn_result rc;
    if (k->state != 0) return TRN_OK;
    if (!k->full && !(k->full = (float *)m->backend->alloc(bytes, TRN_KIND_WEIGHTS)))
        return trn__ddp_fail(d, trn_fail(TRN_ERR_NOMEM, "rank %d: FSDP: gathering unit '%s' (%zu bytes): %s", d->rank, k->key,
                                         bytes, trn_error_reason()));
    d->gathered_bytes += bytes;
    if (d->gathered_bytes > d->gathered_peak) d->gathered_peak = d->gathered_bytes;
    if (a < b) m->backend->copy(k->full + (a - k->lo), d->weight_shard + (a - d->shard_lo), (b - a) * sizeof(float));
    if ((rc = d->comm.all_gather_range(&d->comm, k->full, k->lo, k->hi, m->n_floats)) != TRN_OK) return trn__ddp_fail(d, rc);
    k->state = 1;
    trn__fsdp_point(d, u, k->full);
    return TRN_OK;
}

/* every queued collective done (bounded by the timeout): gathers arrived */
static trn_result trn__fsdp_wait_all(trn_ddp *d) {
    trn_result rc;
    int v;
    if ((rc = d->comm.wait(&d->comm)) != TRN_OK) return trn__ddp_fail(d, rc);
    for (v = 0; v < d->n_units; v++)
        if (d->units[v].state == 1) d->units[v].state = 2; /* the queue is empty: all arrived */
    return TRN_OK;
}

/* unit u gathered and arrived (waits for everything queued before) */
static trn_result trn__fsdp_ready(trn_ddp *d, int u) {
    trn_result rc;
    if (u < 0) return TRN_OK;
    if ((rc = trn__fsdp_gather(d, u)) != TRN_OK) return rc;
    return d->units[u].state == 2 ? TRN_OK : trn__fsdp_wait_all(d);
}

/* free every block's whole weights but `keep` and `keep2`. On a GPU,
   cudaFree waits for the whole device, the communication stream included:
   a collective stuck on a dead peer would hang it with no timeout, so the
   queued collectives are waited for first, by the bounded poll. */
static trn_result trn__fsdp_release_but(trn_ddp *d, int keep, int keep2) {
    trn_model *m = d->model;
    int v, waited = m->backend->place != TRN_DEVICE;
    for (v = 0; v < d->n_units; v++) {
        trn_ddp_unit *k = &d->units[v];
        if (k->root || k->state == 0 || v == keep || v == keep2) continue;
        if (!waited && trn__fsdp_wait_all(d) != TRN_OK) return d->error;
        waited = 1;
        if (k->state == 1 && trn__fsdp_wait_all(d) != TRN_OK) return d->error; /* a collective still writes it */
        m->backend->free(k->full);
        k->full = NULL;
        k->state = 0;
        d->gathered_bytes -= (k->hi - k->lo) * sizeof(float);
        trn__fsdp_point(d, v, NULL);
    }
    return TRN_OK;
}

/* the next block after u in declaration order (forward prefetch) */
static int trn__fsdp_next_block(const trn_ddp *d, int u) {
    int v;
    for (v = u + 1; v < d->n_units; v++)
        if (!d->units[v].root) return v;
    return -1;
}

/* after a failure (a peer died, a gather failed): the hook cannot stop the
   forward or backward that called it, and unit u's parameters may point
   nowhere (released) or at a gather that never arrived. They get zeros
   of their own, so the pass runs to its end on harmless numbers and the
   next trn_ddp_ call returns the failure; a buffer still being written
   by a collective is not touched (the communicator is closed). */
static void trn__fsdp_park(trn_ddp *d, int u) {
    trn_model *m = d->model;
    trn_ddp_unit *k;
    float *z;
    if (u < 0 || d->units[u].root || d->units[u].state == 2) return;
    k = &d->units[u];
    if (!(z = (float *)m->backend->alloc((k->hi - k->lo) * sizeof(float), TRN_KIND_WEIGHTS)))
        trn_fatal("rank %d: FSDP: no memory to stop cleanly after: %s", d->rank, d->error_reason);
    m->backend->zero(z, (k->hi - k->lo) * sizeof(float));
    if (k->full) { /* counted when its gather began */
        if (k->state == 0) m->backend->free(k->full); /* its gather failed at once: nothing writes it */
        d->gathered_bytes -= (k->hi - k->lo) * sizeof(float); /* (else left to the closed communicator) */
    }
    d->gathered_bytes += (k->hi - k->lo) * sizeof(float);
    k->full = z;
    k->state = 2;
    trn__fsdp_point(d, u, z);
}

/* train.h's unit hook (trn_unit's markers) */
static void trn__fsdp_unit_hook(trn_model *m, trn_tensor *member, int phase, void *user) {
    trn_ddp *d = (trn_ddp *)user;
    int u = trn__fsdp_unit(d, member), next;
    (void)m;
    if (u >= 0 && d->units[u].root) u = -1; /* roots are always there */
    if (d->error) { trn__fsdp_park(d, u); return; }
    if (phase == TRN_UNIT_FORWARD) {
        if (u < 0) return; /* leaving the blocks: the last one stays for backward */
        if (m->grad_enabled && d->n_order < d->n_units) d->order[d->n_order++] = u;
        next = trn__fsdp_next_block(d, u);
        if (trn__fsdp_release_but(d, u, next) == TRN_OK && trn__fsdp_ready(d, u) == TRN_OK && next >= 0)
            trn__fsdp_gather(d, next);
        if (d->error) trn__fsdp_park(d, u);
        return;
    }
    /* backward: the backward of u (or of the roots: -1) begins */
    if (u >= 0) {
        while (d->bwd_pos >= 0 && d->order[d->bwd_pos] != u) d->bwd_pos--; /* (it is the next one) */
        d->bwd_pos--;
    }
    next = d->bwd_pos >= 0 ? d->order[d->bwd_pos] : -1;
    if (trn__fsdp_release_but(d, u, next) == TRN_OK && trn__fsdp_ready(d, u) == TRN_OK && next >= 0)
        trn__fsdp_gather(d, next);
    if (d->error) trn__fsdp_park(d, u);
}

/* attach: units from the names; the weights become this rank's shard;
   the roots are gathered (from the whole weights still here) */
static trn_result trn__fsdp_attach(trn_ddp *d, trn_model *m) {
    size_t n = d->shard_hi - d->shard_lo;
    int p, u, nu = 0;
    char key[64], prev[64] = "";
    int prev_block = -1;
    d->units = (trn_ddp_unit *)trn_calloc(sizeof(trn_ddp_unit) * (size_t)m->n_params, TRN_KIND_RUNTIME);
    d->unit_of = (int *)trn_alloc(sizeof(int) * (size_t)m->n_params, TRN_KIND_RUNTIME);
    d->order = (int *)trn_alloc(sizeof(int) * (size_t)m->n_params, TRN_KIND_RUNTIME);
    if (!d->units || !d->unit_of || !d->order) return trn_fail(TRN_ERR_NOMEM, "rank %d: FSDP: %s", d->rank, trn_error_reason());
    for (p = 0; p < m->n_params; p++) {
        int block = trn__fsdp_key(m->params[p]->name, key, sizeof key);
        if (nu == 0 || block != prev_block || (block && strcmp(key, prev) != 0)) { /* a new unit */
            for (u = 0; block && u < nu; u++)
                if (!d->units[u].root && strcmp(d->units[u].key, key) == 0)
                    return trn_fail(TRN_ERR_INVALID, "FSDP: the parameters of block '%s' are not declared together ('%s')",
                                    key, m->params[p]->name);
            d->units[nu].root = !block;
            d->units[nu].p_first = p;
            d->units[nu].lo = m->params[p]->offset;
            snprintf(d->units[nu].key, sizeof d->units[nu].key, "%s", key);
            nu++;
        }
        d->units[nu - 1].p_last = p;
        d->units[nu - 1].hi = m->params[p]->offset + m->params[p]->size;
        d->unit_of[p] = nu - 1;
        snprintf(prev, sizeof prev, "%s", key);
        prev_block = block;
    }
    d->n_units = nu;
    d->weight_shard = (float *)m->backend->alloc((n ? n : 1) * sizeof(float), TRN_KIND_WEIGHTS);
    if (!d->weight_shard) return trn_fail(TRN_ERR_NOMEM, "rank %d: FSDP: weight shard: %s", d->rank, trn_error_reason());
    m->backend->copy(d->weight_shard, m->param_data + d->shard_lo, n * sizeof(float));
    for (u = 0; u < nu; u++) { /* roots: whole, copied from the weights still here */
        trn_ddp_unit *k = &d->units[u];
        size_t bytes = (k->hi - k->lo) * sizeof(float);
        if (!k->root) continue;
        if (!(k->full = (float *)m->backend->alloc(bytes, TRN_KIND_WEIGHTS)))
            return trn_fail(TRN_ERR_NOMEM, "rank %d: FSDP: unit '%s': %s", d->rank, k->key, trn_error_reason());
        m->backend->copy(k->full, m->param_data + k->lo, bytes);
        k->state = 2;
        d->gathered_bytes += bytes;
    }
    d->gathered_peak = d->gathered_bytes;
    m->backend->free(m->param_data); /* the whole weights go */
    m->param_data = d->weight_shard - d->shard_lo; /* element j of the shard is still param_data[j] */
    m->shard.param_lo = d->shard_lo;
    m->shard.param_hi = d->shard_hi;
    for (u = 0; u < nu; u++) trn__fsdp_point(d, u, d->units[u].full);
    m->shard.unit_hook = trn__fsdp_unit_hook;
    m->shard.unit_hook_user = d;
    return TRN_OK;
}

/* after AdamW updated the shards: the roots' whole weights again */
static trn_result trn__fsdp_regather_roots(trn_ddp *d) {
    int u;
    for (u = 0; u < d->n_units; u++)
        if (d->units[u].root) {
            d->units[u].state = 0;
            d->gathered_bytes -= (d->units[u].hi - d->units[u].lo) * sizeof(float); /* (gather counts it again) */
            if (trn__fsdp_gather(d, u) != TRN_OK) return d->error;
        }
    for (u = 0; u < d->n_units; u++)
        if (d->units[u].root) return trn__fsdp_ready(d, u);
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_attach(trn_ddp *ddp, trn_model *m) {
    trn_result rc;
    int p, nb = 0;
    size_t bytes = 0;
    if (!ddp || !m) return trn_fail(TRN_ERR_INVALID, "trn_ddp_attach: NULL argument");
    if (!m->param_data) return trn_fail(TRN_ERR_INVALID, "trn_ddp_attach: call trn_model_alloc first");
    if (ddp->comm.kind == TRN_COMM_TCP && m->backend->place != TRN_HOST)
        return trn_fail(TRN_ERR_INVALID, "trn_ddp_attach: the TCP communicator needs a host backend (model is on '%s')",
                        m->backend->name);
    if (ddp->comm.kind == TRN_COMM_NCCL && m->backend->place != TRN_DEVICE)
        return trn_fail(TRN_ERR_INVALID, "trn_ddp_attach: NCCL needs a CUDA backend (model is on '%s'); "
                                         "use trn_ddp_desc.comm = TRN_COMM_TCP for CPU training", m->backend->name);
    if (m->mp.param_bf16 && ddp->world > 1 && ddp->desc.shard == TRN_SHARD_FSDP)
        return trn_fail(TRN_ERR_INVALID, "trn_ddp_attach: FSDP with bf16 precision is not supported yet (its gathered "
                                         "blocks would need bf16 copies): use --shard none, zero1 or zero2");
    ddp->model = m;
    /* 1. everyone starts from rank 0's weights */
    if ((rc = ddp->comm.broadcast(&ddp->comm, m->param_data, m->n_floats * sizeof(float), 0)) ||
        (rc = ddp->comm.wait(&ddp->comm)))
        return trn__ddp_fail(ddp, rc);
    trn_params_changed(m); /* bf16: the weights' copy follows rank 0's master */
    trn_comm_shard(m->n_floats, ddp->world, ddp->rank, &ddp->shard_lo, &ddp->shard_hi);
    /* 2. buckets: whole parameters from the last one back, each bucket at
       most bucket_bytes; a larger parameter is cut into pieces of
       bucket_bytes (from its end), each a bucket */
    {
        size_t cap = ddp->desc.bucket_bytes / sizeof(float), most = 0;
        int open = 0;
        if (cap == 0) cap = 1;
        if (ddp->desc.shard >= TRN_SHARD_ZERO2) cap = (size_t)-1; /* whole parameters: a grad pointer needs
                                                                     all of its tensor in one staging buffer */
        for (p = 0; p < m->n_params; p++) most += 1 + m->params[p]->size / cap;
        ddp->buckets = (trn_ddp_bucket *)trn_calloc(sizeof(trn_ddp_bucket) * most, TRN_KIND_RUNTIME);
        ddp->bucket_of = (int *)trn_alloc(sizeof(int) * (size_t)m->n_params, TRN_KIND_RUNTIME);
        ddp->bucket_cnt = (int *)trn_alloc(sizeof(int) * (size_t)m->n_params, TRN_KIND_RUNTIME);
        ddp->last_use = (int *)trn_alloc(sizeof(int) * (size_t)m->n_params, TRN_KIND_RUNTIME);
        if (!ddp->buckets || !ddp->bucket_of || !ddp->bucket_cnt || !ddp->last_use)
            return trn__ddp_fail(ddp, trn_fail(TRN_ERR_NOMEM, "trn_ddp_attach: %s", trn_error_reason()));
        for (p = m->n_params - 1; p >= 0; p--) {
            size_t off = m->params[p]->offset, size = m->params[p]->size, pb = size * sizeof(float);
            if (size > cap) { /* pieces of its own */
                size_t hi = off + size;
                ddp->bucket_of[p] = nb;
                while (hi > off) {
                    trn_ddp_bucket *b = &ddp->buckets[nb++];
                    b->hi = hi;
                    b->lo = hi - TRN__DIST_MIN(cap, hi - off);
                    b->p_first = b->p_last = p;
                    hi = b->lo;
                }
                ddp->bucket_cnt[p] = nb - ddp->bucket_of[p];
                open = 0;
                continue;
            }
            if (!open || bytes + pb > ddp->desc.bucket_bytes) { /* start a new bucket */
                nb++;
                bytes = 0;
                open = 1;
                ddp->buckets[nb - 1].p_last = p;
                ddp->buckets[nb - 1].hi = off + size;
            }
            ddp->buckets[nb - 1].p_first = p;
            ddp->buckets[nb - 1].lo = off;
            ddp->bucket_of[p] = nb - 1;
            ddp->bucket_cnt[p] = 1;
            bytes += pb;
        }
    }
    ddp->n_buckets = nb;
    if (ddp->world > 1 && ddp->desc.shard == TRN_SHARD_FSDP) { /* one bucket per unit */
        if ((rc = trn__fsdp_attach(ddp, m)) != TRN_OK) return trn__ddp_fail(ddp, rc);
        for (nb = 0; nb < ddp->n_units; nb++) {
            trn_ddp_bucket *b = &ddp->buckets[nb];
            memset(b, 0, sizeof *b);
            b->lo = ddp->units[nb].lo; b->hi = ddp->units[nb].hi;
            b->p_first = ddp->units[nb].p_first; b->p_last = ddp->units[nb].p_last;
            for (p = b->p_first; p <= b->p_last; p++) { ddp->bucket_of[p] = nb; ddp->bucket_cnt[p] = 1; }
        }
        ddp->n_buckets = nb;
    }
    /* 3. the hook that starts buckets during backward */
    if (ddp->world > 1 && !ddp->desc.zero1 && !ddp->desc.no_overlap) {
        m->shard.backward_hook = trn__ddp_hook;
        m->shard.backward_hook_user = ddp;
    }
    if (ddp->world > 1 && ddp->desc.shard >= TRN_SHARD_ZERO2) {
        if ((rc = trn__zero2_attach(ddp, m)) != TRN_OK) return trn__ddp_fail(ddp, rc);
        m->shard.backward_hook = trn__ddp_hook;
        m->shard.backward_hook_user = ddp;
    }
    return TRN_OK;
}

TRNDEF void trn_ddp_set_sync(trn_ddp *ddp, int sync) { if (ddp) ddp->sync = sync != 0; }

TRNDEF trn_result trn_ddp_allreduce_grads(trn_ddp *ddp, trn_model *m) {
    trn_result rc;
    int b;
    if (!ddp || !m || m != ddp->model) return trn_fail(TRN_ERR_INVALID, "trn_ddp_allreduce_grads: not the attached model");
    if (ddp->error) return trn__ddp_sticky(ddp);
    if (!m->grad_data) return trn_fail(TRN_ERR_INVALID, "trn_ddp_allreduce_grads: no gradients (call trn_backward first)");
    if (ddp->world == 1) return TRN_OK;
    if (ddp->desc.shard >= TRN_SHARD_ZERO2) { /* the buckets left during backward: wait, add into the shard */
        if (!ddp->armed) return trn_fail(TRN_ERR_INVALID, "rank %d: trn_ddp_allreduce_grads without a trn_backward before it",
                                         ddp->rank);
        for (b = 0; b < ddp->n_buckets; b++) trn__ddp_launch(ddp, m, b); /* (all left already) */
        ddp->armed = 0;
        if (ddp->error || (rc = trn__zero2_harvest(ddp, m)) != TRN_OK) return trn__ddp_sticky(ddp);
        if (ddp->units) { /* FSDP: the step's last block goes too */
            ddp->n_order = 0;
            if (trn__fsdp_release_but(ddp, -1, -1) != TRN_OK) return trn__ddp_sticky(ddp);
        }
        return TRN_OK;
    }
    if (ddp->desc.zero1) {
        rc = ddp->comm.reduce_scatter(&ddp->comm, m->grad_data, m->n_floats, 1);
    } else {
        if (!ddp->armed) { /* no hook ran (no_overlap, or sync was 0): all buckets now */
            ddp->n_launched = 0;
            for (b = 0; b < ddp->n_buckets; b++) ddp->buckets[b].launched = 0;
        }
        for (b = 0; b < ddp->n_buckets; b++) trn__ddp_launch(ddp, m, b); /* (those not gone yet) */
        ddp->armed = 0;
        rc = ddp->error;
    }
    if (rc == TRN_OK) rc = ddp->comm.wait(&ddp->comm);
    return rc ? trn__ddp_fail(ddp, rc) : TRN_OK;
}

TRNDEF trn_result trn_ddp_clip_grad_norm(trn_ddp *ddp, trn_model *m, float max_norm, float *norm_out) {
    double ss;
    float norm;
    trn_result rc;
    if (!ddp || !m || !m->grad_data) return trn_fail(TRN_ERR_INVALID, "trn_ddp_clip_grad_norm: no gradients");
    if (ddp->error) return trn__ddp_sticky(ddp);
    if (!ddp->desc.zero1 || ddp->world == 1) { /* every rank holds the same averaged gradients */
        norm = trn_clip_grad_norm(m, max_norm);
    } else { /* each rank has its shard: add up the squares over all */
        ss = m->backend->sum_squares(m->grad_data + ddp->shard_lo, ddp->shard_hi - ddp->shard_lo);
        if ((rc = ddp->comm.all_reduce_host(&ddp->comm, &ss, 1, 0)) != TRN_OK) return trn__ddp_fail(ddp, rc);
        norm = (float)sqrt(ss);
        if (max_norm > 0.0f && norm > max_norm)
            m->backend->scale(m->grad_data + ddp->shard_lo, max_norm / (norm + 1e-6f), ddp->shard_hi - ddp->shard_lo);
    }
    if (norm_out) *norm_out = norm;
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_adamw_step(trn_ddp *ddp, trn_adamw *opt, trn_model *m, float lr) {
    trn_result rc;
    if (!ddp || !opt || !m) return trn_fail(TRN_ERR_INVALID, "trn_ddp_adamw_step: NULL argument");
    if (ddp->error) return trn__ddp_sticky(ddp);
    if (!ddp->desc.zero1 || ddp->world == 1) return trn_adamw_step(opt, m, lr);
    if (opt->hi == 0 && !opt->m) { opt->lo = ddp->shard_lo; opt->hi = ddp->shard_hi; }
    if (opt->lo != ddp->shard_lo || opt->hi != ddp->shard_hi)
        return trn_fail(TRN_ERR_MISMATCH, "rank %d: the optimizer owns [%zu,%zu) but this rank's ZeRO-1 shard is [%zu,%zu) "
                                          "(loaded from a run with another world size?)",
                        ddp->rank, opt->lo, opt->hi, ddp->shard_lo, ddp->shard_hi);
    /* (a model smaller than the world size leaves some ranks no shard) */
    if (ddp->shard_hi > ddp->shard_lo && (rc = trn_adamw_step(opt, m, lr)) != TRN_OK) return rc;
    if (ddp->units) return trn__fsdp_regather_roots(ddp) ? trn__ddp_sticky(ddp) : TRN_OK; /* blocks: when used */
    if ((rc = ddp->comm.all_gather(&ddp->comm, m->param_data, m->n_floats)) || (rc = ddp->comm.wait(&ddp->comm)))
        return trn__ddp_fail(ddp, rc);
    trn_params_changed(m); /* bf16: refreshed before the next forward reads it */
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_unshard(trn_ddp *ddp, trn_model *m) {
    float *full;
    trn_result rc;
    int u;
    if (!ddp || !m || m != ddp->model) return trn_fail(TRN_ERR_INVALID, "trn_ddp_unshard: not the attached model");
    if (ddp->error) return trn__ddp_sticky(ddp);
    if (!ddp->units) return TRN_OK;
    if ((rc = trn__fsdp_release_but(ddp, -1, -1)) != TRN_OK) return rc;
    full = (float *)m->backend->alloc(m->n_floats * sizeof(float), TRN_KIND_WEIGHTS);
    if (!full) return trn__ddp_fail(ddp, trn_fail(TRN_ERR_NOMEM, "rank %d: trn_ddp_unshard: %s", ddp->rank, trn_error_reason()));
    m->backend->copy(full + ddp->shard_lo, ddp->weight_shard, (ddp->shard_hi - ddp->shard_lo) * sizeof(float));
    if ((rc = ddp->comm.all_gather(&ddp->comm, full, m->n_floats)) != TRN_OK || (rc = ddp->comm.wait(&ddp->comm)) != TRN_OK) {
        m->backend->free(full);
        return trn__ddp_fail(ddp, rc);
    }
    for (u = 0; u < ddp->n_units; u++) {
        if (ddp->units[u].full) m->backend->free(ddp->units[u].full);
        ddp->units[u].full = NULL;
    }
    m->backend->free(ddp->weight_shard);
    ddp->weight_shard = NULL;
    m->param_data = full;
    m->shard.param_lo = m->shard.param_hi = 0;
    for (u = 0; u < m->n_params; u++) m->params[u]->data = full + m->params[u]->offset;
    m->shard.unit_hook = NULL;
    m->shard.unit_hook_user = NULL;
    trn_free(ddp->units);
    ddp->units = NULL;
    ddp->n_units = 0;
    ddp->gathered_bytes = 0;
    ddp->desc.shard = TRN_SHARD_ZERO2;
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_print_memory(trn_ddp *ddp, const char *title) {
    trn_ledger_snapshot s;
    trn_place pl;
    double mine[8], x[8], mib = 1048576.0;
    int r, k;
    trn_result rc;
    if (!ddp || !ddp->model) return trn_fail(TRN_ERR_INVALID, "trn_ddp_print_memory: attach a model first");
    pl = ddp->model->backend->place;
    trn_ledger_read(&s);
    mine[0] = (double)(s.current[pl][TRN_KIND_WEIGHTS] - ddp->gathered_bytes);
    mine[1] = (double)ddp->gathered_bytes;
    mine[2] = (double)ddp->gathered_peak;
    mine[3] = (double)s.current[pl][TRN_KIND_GRADS];
    mine[4] = (double)s.peak[pl][TRN_KIND_GRADS];
    mine[5] = (double)s.current[pl][TRN_KIND_OPTIM];
    mine[6] = (double)s.current[pl][TRN_KIND_COMM];
    mine[7] = (double)(pl == TRN_DEVICE ? s.device_used : s.peak_rss);
    if (trn_ddp_is_main(ddp)) {
        printf("%s\n  (MiB) %-7s %11s %17s %17s %10s %8s %10s\n", title ? title : "memory per rank", "rank",
               "weights", "gathered (peak)", "grads (peak)", "optimizer", "comm", pl == TRN_DEVICE ? "device" : "peak RSS");
    }
    for (r = 0; r < ddp->world; r++) { /* rank r's numbers reach rank 0 as a sum with zeros */
        for (k = 0; k < 8; k++) x[k] = r == ddp->rank ? mine[k] : 0.0;
        if ((rc = trn_ddp_allreduce_host(ddp, x, 8, 0)) != TRN_OK) return rc;
        if (trn_ddp_is_main(ddp))
            printf("        %-7d %11.1f %8.1f (%6.1f) %8.1f (%6.1f) %10.1f %8.2f %10.1f\n", r, x[0] / mib, x[1] / mib, x[2] / mib,
                   x[3] / mib, x[4] / mib, x[5] / mib, x[6] / mib, x[7] / mib);
    }
    if (trn_ddp_is_main(ddp)) fflush(stdout);
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_allreduce_host(trn_ddp *ddp, double *x, int n, int average) {
    trn_result rc;
    if (!ddp || !x || n < 1 || n > 8) return trn_fail(TRN_ERR_INVALID, "trn_ddp_allreduce_host: 1 to 8 values");
    if (ddp->error) return trn__ddp_sticky(ddp);
    rc = ddp->comm.all_reduce_host(&ddp->comm, x, n, average);
    return rc ? trn__ddp_fail(ddp, rc) : TRN_OK;
}

TRNDEF trn_result trn_ddp_agree(trn_ddp *ddp, trn_result mine) {
    double failed = mine != TRN_OK;
    char why[512];
    trn_result rc;
    snprintf(why, sizeof why, "%s", mine ? trn_error_reason() : "");
    if ((rc = trn_ddp_allreduce_host(ddp, &failed, 1, 0)) != TRN_OK) return rc;
    if (mine) return trn_fail(mine, "%s", why);
    if (failed > 0) return trn_fail(TRN_ERR_COMM, "rank %d: %.0f other rank(s) failed (their messages say why)", ddp->rank, failed);
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_barrier(trn_ddp *ddp) {
    double z = 0.0;
    return trn_ddp_allreduce_host(ddp, &z, 1, 0);
}

TRNDEF int trn_ddp_is_main(const trn_ddp *ddp) { return !ddp || ddp->rank == 0; }

TRNDEF void trn_ddp_log(const trn_ddp *ddp, const char *fmt, ...) {
    va_list ap;
    if (!trn_ddp_is_main(ddp)) return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

TRNDEF long long trn_ddp_batch_index(const trn_ddp *ddp, long long k) {
    return ddp ? k * ddp->world + ddp->rank : k;
}

TRNDEF void trn_ddp_abort(trn_ddp *ddp) {
    if (ddp && ddp->comm.abort) ddp->comm.abort(&ddp->comm);
}

TRNDEF void trn_ddp_free(trn_ddp *ddp) {
    if (!ddp) return;
    if (ddp->model && ddp->model->shard.backward_hook_user == ddp) {
        ddp->model->shard.backward_hook = NULL;
        ddp->model->shard.backward_pre_hook = NULL;
        ddp->model->shard.backward_hook_user = NULL;
    }
    /* ZeRO-2: staging still held (a failed step); the model keeps its
       gradient shard, which trn_model_free frees */
    if (ddp->model && ddp->buckets) {
        int b;
        for (b = 0; b < ddp->n_buckets; b++)
            if (ddp->buckets[b].stage) ddp->model->backend->free(ddp->buckets[b].stage);
    }
    trn_free(ddp->first_use);
    if (ddp->model && ddp->units) { /* FSDP: the model keeps its weight shard (trn_model_free frees it) */
        int u;
        if (ddp->model->shard.unit_hook_user == ddp) { ddp->model->shard.unit_hook = NULL; ddp->model->shard.unit_hook_user = NULL; }
        for (u = 0; u < ddp->n_units; u++)
            if (ddp->units[u].full) {
                ddp->model->backend->free(ddp->units[u].full);
                trn__fsdp_point(ddp, u, NULL);
            }
    }
    trn_free(ddp->units);
    trn_free(ddp->unit_of);
    trn_free(ddp->order);
    trn_comm_free(&ddp->comm);
    trn_free(ddp->buckets);
    trn_free(ddp->bucket_of);
    trn_free(ddp->bucket_cnt);
    trn_free(ddp->last_use);
    memset(ddp, 0, sizeof *ddp);
}

/* ---- checkpoints ---------------------------------------------------------- */
TRNDEF void trn_ddp_meta_set(const trn_ddp *ddp, trn_meta *meta) {
    trn_meta_set_u64(meta, "ddp.world_size", (uint64_t)ddp->world);
    trn_meta_set_u64(meta, "ddp.zero1", (uint64_t)(ddp->desc.zero1 != 0));
}

static trn_result trn__ddp_check(const trn_ddp *ddp, const char *ws, const char *z1, const char *path) {
    unsigned long long w = 1, z = 0; /* a checkpoint without them: one process */
    if (ws) w = strtoull(ws, NULL, 10);
    if (z1) z = strtoull(z1, NULL, 10);
    if (w != (unsigned long long)ddp->world)
        return trn_fail(TRN_ERR_MISMATCH,
                        "%s was written by a run of %llu rank(s); this run has %d: resume with the same world size "
                        "(the data order and the optimizer shards depend on it)", path, w, ddp->world);
    if ((z != 0) != (ddp->desc.zero1 != 0))
        return trn_fail(TRN_ERR_MISMATCH, "%s was written %s ZeRO-1; this run is %s ZeRO-1", path, z ? "with" : "without",
                        ddp->desc.zero1 ? "with" : "without");
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_meta_check(const trn_ddp *ddp, const trn_meta *meta, const char *path) {
    return trn__ddp_check(ddp, trn_meta_get(meta, "ddp.world_size"), trn_meta_get(meta, "ddp.zero1"), path ? path : "the checkpoint");
}

TRNDEF const char *trn_ddp_rank_path(const trn_ddp *ddp, const char *path, char *buf, size_t cap) {
    static const char ext[] = ".safetensors";
    size_t n = strlen(path), e = sizeof ext - 1;
    if (ddp->rank == 0) snprintf(buf, cap, "%s", path);
    else if (n > e && strcmp(path + n - e, ext) == 0) snprintf(buf, cap, "%.*s.rank%d%s", (int)(n - e), path, ddp->rank, ext);
    else snprintf(buf, cap, "%s.rank%d", path, ddp->rank);
    return buf;
}

TRNDEF trn_result trn_ddp_checkpoint_save(trn_ddp *ddp, const char *path, trn_model *m, const trn_adamw *opt,
                                          const trn_meta *meta) {
    trn_result rc = TRN_OK;
    trn_meta *mm;
    char mine[1024];
    if (!ddp || !path || !m) return trn_fail(TRN_ERR_INVALID, "trn_ddp_checkpoint_save: NULL argument");
    if (ddp->error) return trn__ddp_sticky(ddp);
    if (ddp->units) return trn_fail(TRN_ERR_INVALID, "trn_ddp_checkpoint_save: an FSDP model holds no whole weights: "
                                                     "use trn_ddp_checkpoint_save_sharded");
    mm = (trn_meta *)trn_alloc(sizeof(trn_meta), TRN_KIND_TEMP);
    if (!mm) rc = TRN_ERR_NOMEM;
    else {
        if (meta) *mm = *meta; else memset(mm, 0, sizeof *mm);
        trn_ddp_meta_set(ddp, mm);
        /* DDP: the state is the same on every rank, rank 0 writes it.
           ZeRO-1: every rank writes its own optimizer shard. */
        if (ddp->rank == 0 || ddp->desc.zero1)
            rc = trn_checkpoint_save(trn_ddp_rank_path(ddp, path, mine, sizeof mine), m, opt, mm);
        trn_free(mm);
    }
    return trn_ddp_agree(ddp, rc); /* returns after every rank has finished writing */
}

TRNDEF trn_result trn_ddp_checkpoint_load(trn_ddp *ddp, const char *path, trn_model *m, trn_adamw *opt,
                                          trn_meta *meta_out) {
    trn_safetensors f;
    trn_result rc;
    char mine[1024];
    if (!ddp || !path || !m) return trn_fail(TRN_ERR_INVALID, "trn_ddp_checkpoint_load: NULL argument");
    if (ddp->error) return trn__ddp_sticky(ddp);
    if (ddp->units) return trn_fail(TRN_ERR_INVALID, "trn_ddp_checkpoint_load: an FSDP model holds no whole weights: "
                                                     "use trn_ddp_checkpoint_load_sharded");
    /* every rank reads rank 0's metadata, so all refuse a mismatch alike */
    rc = trn_safetensors_open(&f, path);
    if (rc == TRN_OK) {
        rc = trn__ddp_check(ddp, trn_safetensors_meta(&f, "ddp.world_size"), trn_safetensors_meta(&f, "ddp.zero1"), path);
        trn_safetensors_close(&f);
    }
    if (rc == TRN_OK) rc = trn_checkpoint_load(ddp->desc.zero1 ? trn_ddp_rank_path(ddp, path, mine, sizeof mine) : path, m,
                                               opt, meta_out);
    if (rc == TRN_OK && opt && ddp->desc.zero1 && (opt->lo != ddp->shard_lo || opt->hi != ddp->shard_hi))
        rc = trn_fail(TRN_ERR_MISMATCH, "%s holds optimizer slice [%zu,%zu), this rank's shard is [%zu,%zu)", mine,
                      opt->lo, opt->hi, ddp->shard_lo, ddp->shard_hi);
    return trn_ddp_agree(ddp, rc);
}

/* ---- sharded checkpoints (>>sharded) --------------------------------------- */
#define TRN__SHARDED_FORMAT "train.h sharded checkpoint 2" /* 2: with a save id */

/* rank 0: a save id, 64 random bits as 16 hex digits (the kernel's
   randomness; else the clock, the pid and a counter, mixed) */
static void trn__save_id_draw(uint64_t *id) {
    static uint64_t counter;
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&x, sizeof x, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        x ^= (uint64_t)getpid() << 40 ^ ++counter * 0x9E3779B97F4A7C15ull;
        x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29;
    }
    if (f) fclose(f);
    *id = x;
}

/* every rank: rank 0's id (two 32-bit halves in doubles, summed exactly) */
static trn_result trn__save_id_share(trn_ddp *ddp, char *out, size_t cap) {
    uint64_t id = 0;
    double h[2] = {0, 0};
    trn_result rc;
    if (ddp->rank == 0) {
        trn__save_id_draw(&id);
        h[0] = (double)(id >> 32);
        h[1] = (double)(id & 0xffffffffull);
    }
    if ((rc = trn_ddp_allreduce_host(ddp, h, 2, 0)) != TRN_OK) return rc;
    id = (uint64_t)h[0] << 32 | (uint64_t)h[1];
    snprintf(out, cap, "%016llx", (unsigned long long)id);
    return TRN_OK;
}

/* what the manifest says (TRN__SHARDED_FORMAT) */
typedef struct trn__manifest {
    int world;
    size_t n_floats;
    char save_id[17];
} trn__manifest;

static void trn__sharded_file(char *buf, size_t cap, const char *dir, int rank, int world) {
    snprintf(buf, cap, "%s/rank-%05d-of-%05d.safetensors", dir, rank, world);
}

/* rank 0: the manifest, atomically (tmp, fsync, rename, fsync the dir) */
static trn_result trn__sharded_manifest(const trn_ddp *ddp, const char *dir, const trn_model *m, const char *save_id) {
    char path[1200], tmp[1300], name[64];
    FILE *f;
    int k, p, i;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (!(f = fopen(tmp, "w"))) return trn_fail(TRN_ERR_IO, "%s: %s", tmp, strerror(errno));
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"save_id\": \"%s\",\n  \"world_size\": %d,\n  \"n_floats\": %zu,\n  \"mode\": \"%s\",\n"
               "  \"files\": [\n", TRN__SHARDED_FORMAT, save_id, ddp->world, m->n_floats, trn_shard_name(ddp->desc.shard));
    for (k = 0; k < ddp->world; k++) {
        size_t lo, hi;
        trn_comm_shard(m->n_floats, ddp->world, k, &lo, &hi);
        trn__sharded_file(name, sizeof name, ".", k, ddp->world);
        fprintf(f, "    {\"file\": \"%s\", \"lo\": %zu, \"hi\": %zu}%s\n", name + 2, lo, hi, k + 1 < ddp->world ? "," : "");
    }
    fprintf(f, "  ],\n  \"params\": [\n");
    for (p = 0; p < m->n_params; p++) {
        const trn_tensor *t = m->params[p];
        fprintf(f, "    {\"name\": \"%s\", \"offset\": %zu, \"shape\": [", t->name, t->offset);
        for (i = 0; i < t->ndim; i++) fprintf(f, "%s%d", i ? ", " : "", t->shape[i]);
        fprintf(f, "]}%s\n", p + 1 < m->n_params ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        fclose(f);
        remove(tmp);
        return trn_fail(TRN_ERR_IO, "%s: %s", tmp, strerror(errno));
    }
    fclose(f);
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return trn_fail(TRN_ERR_IO, "rename %s: %s", path, strerror(errno));
    }
    return trn__fsync_dir(path);
}

TRNDEF trn_result trn_ddp_checkpoint_save_sharded(trn_ddp *ddp, const char *dir, trn_model *m, const trn_adamw *opt,
                                                  const trn_meta *meta) {
    trn_result rc = TRN_OK;
    trn_model t;
    trn_adamw o;
    trn_meta *mm = NULL;
    char path[1200], save_id[17];
    size_t n;
    int p;
    if (!ddp || !dir || !m || m != ddp->model) return trn_fail(TRN_ERR_INVALID, "trn_ddp_checkpoint_save_sharded: not the attached model");
    if (ddp->error) return trn__ddp_sticky(ddp);
    if ((rc = trn__save_id_share(ddp, save_id, sizeof save_id)) != TRN_OK) return rc; /* this save's identity */
    n = ddp->shard_hi - ddp->shard_lo;
    for (p = 0; p < m->n_params; p++)
        if (strchr(m->params[p]->name, '"') || strchr(m->params[p]->name, '\\'))
            rc = trn_fail(TRN_ERR_INVALID, "sharded checkpoint: parameter name %s has a quote or backslash", m->params[p]->name);
    if (rc == TRN_OK && n == 0) rc = trn_fail(TRN_ERR_INVALID, "rank %d: sharded checkpoint: an empty shard (%zu parameters, %d ranks)",
                                              ddp->rank, m->n_floats, ddp->world);
    if (rc == TRN_OK && mkdir(dir, 0777) != 0 && errno != EEXIST) rc = trn_fail(TRN_ERR_IO, "mkdir %s: %s", dir, strerror(errno));
    if (rc == TRN_OK && opt && opt->m && (opt->lo > ddp->shard_lo || opt->hi < ddp->shard_hi))
        rc = trn_fail(TRN_ERR_INVALID, "rank %d: the optimizer holds [%zu,%zu), not this rank's shard [%zu,%zu)", ddp->rank,
                      opt->lo, opt->hi, ddp->shard_lo, ddp->shard_hi);
    if (rc == TRN_OK && !(mm = (trn_meta *)trn_alloc(sizeof(trn_meta), TRN_KIND_TEMP))) rc = TRN_ERR_NOMEM;
    if (rc == TRN_OK) { /* a model of one tensor: this rank's slice of the weights */
        if (meta) *mm = *meta; else memset(mm, 0, sizeof *mm);
        trn_meta_set_u64(mm, "shard.lo", ddp->shard_lo);
        trn_meta_set_u64(mm, "shard.hi", ddp->shard_hi);
        trn_meta_set_u64(mm, "shard.n_floats", m->n_floats);
        trn_meta_set_u64(mm, "shard.world_size", (uint64_t)ddp->world);
        trn_meta_set_u64(mm, "shard.rank", (uint64_t)ddp->rank);
        trn_meta_set(mm, "shard.save_id", save_id);
        trn_model_init(&t, m->backend);
        trn_param1(&t, "shard.weights", (int)n);
        if ((rc = trn_model_alloc(&t)) == TRN_OK) {
            m->backend->copy(t.param_data, m->param_data + ddp->shard_lo, n * sizeof(float));
            if (opt && opt->m) { /* its slice of the moments, as an optimizer of the shard */
                o = *opt;
                o.m = opt->m + (ddp->shard_lo - opt->lo);
                o.v = opt->v + (ddp->shard_lo - opt->lo);
                o.lo = 0;
                o.hi = n;
            } else if (opt) {
                o = *opt;
                o.lo = 0; o.hi = n;
            }
            trn__sharded_file(path, sizeof path, dir, ddp->rank, ddp->world);
            rc = trn_checkpoint_save(path, &t, opt ? &o : NULL, mm);
        }
        trn_model_free(&t);
    }
    trn_free(mm);
    if ((rc = trn_ddp_agree(ddp, rc)) != TRN_OK) return rc; /* every file is on disk */
    rc = ddp->rank == 0 ? trn__sharded_manifest(ddp, dir, m, save_id) : TRN_OK;
    return trn_ddp_agree(ddp, rc);
}

/* the manifest's text: format, save id, world size, parameter count; the
   parameter table must be the model's (names, offsets, shapes) when m is
   given. path names the file in errors. (tests/fuzz_manifest.c) */
static trn_result trn__sharded_parse(const char *text, const char *path, const trn_model *m, trn__manifest *mf) {
    char line[1200];
    const char *q;
    unsigned long long nf;
    int p, i, n_hex = 0;
    memset(mf, 0, sizeof *mf);
    if (strstr(text, "\"train.h sharded checkpoint 1\""))
        return trn_fail(TRN_ERR_FORMAT, "%s: a sharded checkpoint of an older train.h (format 1, no save id): its rank files "
                        "cannot be checked to come from one save", path);
    if (!strstr(text, "\"" TRN__SHARDED_FORMAT "\"") || !(q = strstr(text, "\"world_size\": ")) ||
        sscanf(q + 14, "%d", &mf->world) != 1 || mf->world < 1 || mf->world > 99999 || !(q = strstr(text, "\"n_floats\": ")) ||
        q[12] < '0' || q[12] > '9' || sscanf(q + 12, "%llu", &nf) != 1 || nf < 1 || nf > (unsigned long long)(SIZE_MAX / 8))
        return trn_fail(TRN_ERR_FORMAT, "%s: not a train.h sharded checkpoint manifest", path);
    mf->n_floats = (size_t)nf;
    if ((q = strstr(text, "\"save_id\": \"")) != NULL)
        for (q += 12; n_hex < 16 && isxdigit((unsigned char)q[n_hex]); n_hex++) mf->save_id[n_hex] = q[n_hex];
    if (n_hex != 16 || q[16] != '"') return trn_fail(TRN_ERR_FORMAT, "%s: no save id of 16 hex digits", path);
    mf->save_id[16] = 0;
    for (p = 0; m && p < m->n_params; p++) { /* the table, line by line */
        const trn_tensor *t = m->params[p];
        size_t n = (size_t)snprintf(line, sizeof line, "{\"name\": \"%s\", \"offset\": %zu, \"shape\": [", t->name, t->offset);
        for (i = 0; i < t->ndim; i++) n += (size_t)snprintf(line + n, sizeof line - n, "%s%d", i ? ", " : "", t->shape[i]);
        snprintf(line + n, sizeof line - n, "]}");
        if (!strstr(text, line))
            return trn_fail(TRN_ERR_MISMATCH, "%s: no parameter %s at offset %zu with this shape: another model", path, t->name,
                            t->offset);
    }
    if (m && mf->n_floats != m->n_floats)
        return trn_fail(TRN_ERR_MISMATCH, "%s: %zu parameters, the model has %zu", path, mf->n_floats, m->n_floats);
    return TRN_OK;
}

/* DIR/manifest.json, read and parsed; its text to *text_out if asked */
static trn_result trn__sharded_read_manifest(const char *dir, const trn_model *m, trn__manifest *mf, char **text_out) {
    char path[1200], *text;
    FILE *f;
    long len;
    trn_result rc;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if ((rc = trn_check_regular(path)) != TRN_OK) {
        if (errno == ENOENT)
            return trn_fail(TRN_ERR_IO, "%s: %s (no manifest: not a sharded checkpoint, or its save did not finish)", path,
                            strerror(errno));
        return rc;
    }
    if (!(f = fopen(path, "rb"))) return trn_fail(TRN_ERR_IO, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = len > 0 && len < (1L << 30) ? (char *)malloc((size_t)len + 1) : NULL;
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(text);
        return trn_fail(TRN_ERR_IO, "%s: cannot read", path);
    }
    fclose(f);
    text[len] = 0;
    if (strlen(text) != (size_t)len) rc = trn_fail(TRN_ERR_FORMAT, "%s: a NUL byte in the manifest", path);
    else rc = trn__sharded_parse(text, path, m, mf);
    if (rc != TRN_OK || !text_out) free(text);
    else *text_out = text;
    return rc;
}

/* rank file k of the manifest's save: its identity, rank, world size and
   slice [a,b) are the manifest's (else a file of another save: refused) */
static trn_result trn__sharded_check(const trn_safetensors *f, const char *path, const trn__manifest *mf, int k, size_t a,
                                     size_t b) {
    const char *id = trn_safetensors_meta(f, "shard.save_id"), *lo_s = trn_safetensors_meta(f, "shard.lo"),
               *hi_s = trn_safetensors_meta(f, "shard.hi"), *r_s = trn_safetensors_meta(f, "shard.rank"),
               *w_s = trn_safetensors_meta(f, "shard.world_size"), *n_s = trn_safetensors_meta(f, "shard.n_floats");
    if (!id) return trn_fail(TRN_ERR_MISMATCH, "%s: no save id: not a rank file of this checkpoint's save (%s)", path, mf->save_id);
    if (strcmp(id, mf->save_id) != 0)
        return trn_fail(TRN_ERR_MISMATCH, "%s: from another save (save id %.16s, the manifest's %s): a rank file of another run "
                        "or step", path, id, mf->save_id);
    if (!r_s || strtoull(r_s, NULL, 10) != (unsigned long long)k || !w_s ||
        strtoull(w_s, NULL, 10) != (unsigned long long)mf->world || !n_s || strtoull(n_s, NULL, 10) != mf->n_floats)
        return trn_fail(TRN_ERR_MISMATCH, "%s: says it is rank %s of %s (%s parameters); the manifest expects rank %d of %d (%zu)",
                        path, r_s ? r_s : "?", w_s ? w_s : "?", n_s ? n_s : "?", k, mf->world, mf->n_floats);
    if (!lo_s || !hi_s || strtoull(lo_s, NULL, 10) != a || strtoull(hi_s, NULL, 10) != b)
        return trn_fail(TRN_ERR_FORMAT, "%s: holds another slice than the manifest's [%zu,%zu)", path, a, b);
    return TRN_OK;
}

/* rank file k of DIR: open, checksum, identity; closed on failure */
static trn_result trn__sharded_open(trn_safetensors *f, const char *dir, const trn__manifest *mf, int k, char *path,
                                    size_t cap) {
    size_t a, b;
    trn_result rc;
    trn_comm_shard(mf->n_floats, mf->world, k, &a, &b);
    trn__sharded_file(path, cap, dir, k, mf->world);
    if ((rc = trn_safetensors_open(f, path)) != TRN_OK) return rc;
    if ((rc = trn_safetensors_verify(f)) == TRN_OK) rc = trn__sharded_check(f, path, mf, k, a, b);
    if (rc != TRN_OK) trn_safetensors_close(f);
    return rc;
}

TRNDEF trn_result trn_checkpoint_verify_sharded(const char *dir) {
    trn__manifest mf;
    trn_safetensors f;
    char path[1200];
    trn_result rc;
    int k;
    if (!dir) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_verify_sharded: NULL argument");
    if ((rc = trn__sharded_read_manifest(dir, NULL, &mf, NULL)) != TRN_OK) return rc;
    for (k = 0; k < mf.world; k++) {
        if ((rc = trn__sharded_open(&f, dir, &mf, k, path, sizeof path)) != TRN_OK) return rc;
        trn_safetensors_close(&f);
    }
    return TRN_OK;
}

/* copy the part of old file k's tensor `name` that meets [lo,hi) to
   dst + (j - lo) in backend memory (tensor element 0 is global a) */
static trn_result trn__sharded_take(trn_safetensors *f, const char *name, size_t a, size_t b, size_t lo, size_t hi,
                                    float *dst, const trn_backend *be, float **host, size_t *host_cap) {
    const trn_st_tensor *t = trn_safetensors_find(f, name);
    size_t x = TRN__DIST_MAX(a, lo), y = TRN__DIST_MIN(b, hi);
    trn_result rc;
    if (x >= y) return TRN_OK;
    if (!t) return trn_fail(TRN_ERR_FORMAT, "%s: no tensor %s", f->path, name);
    if (t->numel != b - a) return trn_fail(TRN_ERR_FORMAT, "%s: %s has %zu elements, the manifest says %zu", f->path, name,
                                               (size_t)t->numel, b - a);
    if (*host_cap < b - a) {
        trn_free(*host);
        *host_cap = 0;
        if (!(*host = (float *)trn_alloc((b - a) * sizeof(float), TRN_KIND_TEMP))) return TRN_ERR_NOMEM;
        *host_cap = b - a;
    }
    if ((rc = trn_safetensors_read(f, t, *host)) != TRN_OK) return rc;
    be->upload(dst + (x - lo), *host + (x - a), (y - x) * sizeof(float));
    return TRN_OK;
}

TRNDEF trn_result trn_ddp_checkpoint_load_sharded(trn_ddp *ddp, const char *dir, trn_model *m, trn_adamw *opt,
                                                  trn_meta *meta_out) {
    trn_result rc;
    trn__manifest mf;
    int W0 = 0, k, i;
    size_t N = 0, wlo, whi, olo, ohi, host_cap = 0;
    float *host = NULL;
    char path[1200];
    uint64_t step = 0;
    if (!ddp || !dir || !m || m != ddp->model) return trn_fail(TRN_ERR_INVALID, "trn_ddp_checkpoint_load_sharded: not the attached model");
    if (ddp->error) return trn__ddp_sticky(ddp);
    trn_params_changed(m); /* bf16: the weights' copy follows the loaded master */
    rc = trn__sharded_read_manifest(dir, m, &mf, NULL);
    W0 = mf.world;
    N = mf.n_floats;
    /* what this rank keeps: FSDP its shard of the weights, the others all;
       ZeRO (and FSDP) its shard of m and v, DDP all of them */
    wlo = ddp->units ? ddp->shard_lo : 0; whi = ddp->units ? ddp->shard_hi : m->n_floats;
    olo = ddp->desc.zero1 ? ddp->shard_lo : 0; ohi = ddp->desc.zero1 ? ddp->shard_hi : m->n_floats;
    if (rc == TRN_OK && opt) {
        if (opt->m && (opt->lo != olo || opt->hi != ohi)) {
            trn_adamw_free(opt);
        }
        if (!opt->m) {
            opt->backend = m->backend;
            opt->lo = olo; opt->hi = ohi;
            opt->m = (float *)m->backend->alloc((ohi - olo) * sizeof(float), TRN_KIND_OPTIM);
            opt->v = opt->m ? (float *)m->backend->alloc((ohi - olo) * sizeof(float), TRN_KIND_OPTIM) : NULL;
            if (!opt->m || !opt->v) rc = trn_fail(TRN_ERR_NOMEM, "rank %d: optimizer state: %s", ddp->rank, trn_error_reason());
        }
    }
    for (k = 0; rc == TRN_OK && k < W0; k++) {
        trn_safetensors f;
        size_t a, b;
        trn_comm_shard(N, W0, k, &a, &b);
        if (!((a < whi && b > wlo) || (opt && a < ohi && b > olo) || (k == 0 && meta_out))) continue;
        if ((rc = trn__sharded_open(&f, dir, &mf, k, path, sizeof path)) != TRN_OK) break; /* checksum, save id, slice */
        rc = trn__sharded_take(&f, "shard.weights", a, b, wlo, whi, m->param_data + wlo, m->backend, &host, &host_cap);
        if (rc == TRN_OK && opt) rc = trn__sharded_take(&f, "optim.m", a, b, olo, ohi, opt->m, m->backend, &host, &host_cap);
        if (rc == TRN_OK && opt) rc = trn__sharded_take(&f, "optim.v", a, b, olo, ohi, opt->v, m->backend, &host, &host_cap);
        if (rc == TRN_OK && k == 0) {
            const char *st = trn_safetensors_meta(&f, "trn.optim.step");
            step = st ? strtoull(st, NULL, 10) : 0;
            if (meta_out) {
                memset(meta_out, 0, sizeof *meta_out);
                for (i = 0; i < f.n_meta; i++)
                    if (strncmp(f.meta_key[i], "trn.", 4) != 0 && strncmp(f.meta_key[i], "shard.", 6) != 0)
                        trn_meta_set(meta_out, f.meta_key[i], f.meta_val[i]);
            }
        }
        trn_safetensors_close(&f);
    }
    trn_free(host);
    if (rc == TRN_OK && opt) opt->step = (long long)step;
    m->backend->sync();
    /* every rank read its part (or none goes on): the regather below is a
       collective, which a rank that failed would never join */
    if ((rc = trn_ddp_agree(ddp, rc)) != TRN_OK || !ddp->units) return rc;
    /* FSDP: the whole weights held now are stale */
    if ((rc = trn__fsdp_release_but(ddp, -1, -1)) == TRN_OK) rc = trn__fsdp_regather_roots(ddp);
    m->backend->sync();
    return trn_ddp_agree(ddp, rc);
}

/* the manifest's parameter table into t (declared in order; the offsets
   must be the ones the declarations give): one line per parameter */
static trn_result trn__sharded_table(const char *text, const char *path, trn_model *t) {
    const char *q;
    for (q = strstr(text, "{\"name\": \""); q; q = strstr(q + 1, "{\"name\": \"")) {
        char name[64];
        size_t off;
        int shape[TRN_MAX_DIMS], nd = 0;
        const char *e = strchr(q + 10, '"'), *s;
        if (!e || e == q + 10 || (size_t)(e - q - 10) >= sizeof name || !(s = strstr(e, "\"offset\": ")) || s[10] < '0' ||
            s[10] > '9' || sscanf(s + 10, "%zu", &off) != 1 || !(s = strchr(s, '[')))
            return trn_fail(TRN_ERR_FORMAT, "%s: a parameter line it cannot read", path);
        memcpy(name, q + 10, (size_t)(e - q - 10));
        name[e - q - 10] = 0;
        for (s++; nd < TRN_MAX_DIMS && *s != ']';) {
            char *end;
            long v;
            errno = 0;
            v = strtol(s, &end, 10);
            if (end == s || v < 1 || v > 1L << 30 || errno) break;
            shape[nd++] = (int)v;
            s = end;
            while (*s == ',' || *s == ' ') s++;
        }
        if (*s != ']' || nd == 0) return trn_fail(TRN_ERR_FORMAT, "%s: the shape of %s", path, name);
        {
            size_t numel = 1;
            int i;
            for (i = 0; i < nd; i++) {
                if (numel > ((size_t)1 << 40) / (size_t)shape[i]) return trn_fail(TRN_ERR_FORMAT, "%s: %s is too large", path, name);
                numel *= (size_t)shape[i];
            }
            if (t->n_floats + numel > (size_t)1 << 40) return trn_fail(TRN_ERR_FORMAT, "%s: the parameters are too large", path);
        }
        if (trn_model_find(t, name)) return trn_fail(TRN_ERR_FORMAT, "%s: parameter %s twice", path, name);
        if (t->n_floats != off)
            return trn_fail(TRN_ERR_FORMAT, "%s: %s at offset %zu, expected %zu (a gap or another order)", path, name, off,
                            t->n_floats);
        trn_param(t, name, nd, shape);
    }
    return TRN_OK;
}

TRNDEF trn_result trn_checkpoint_consolidate(const char *dir, const char *out_path) {
    trn_result rc;
    trn_model t;
    trn_meta meta;
    trn__manifest mf;
    char *text = NULL, path[1200];
    int k, i;
    size_t host_cap = 0;
    float *host = NULL;
    if (!dir || !out_path) return trn_fail(TRN_ERR_INVALID, "trn_checkpoint_consolidate: NULL argument");
    if ((rc = trn__sharded_read_manifest(dir, NULL, &mf, &text)) != TRN_OK) return rc;
    trn_model_init(&t, NULL);
    memset(&meta, 0, sizeof meta);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    rc = trn__sharded_table(text, path, &t);
    free(text);
    if (rc == TRN_OK && t.n_floats != mf.n_floats)
        rc = trn_fail(TRN_ERR_FORMAT, "%s: parameters add up to %zu, not %zu", path, t.n_floats, mf.n_floats);
    if (rc == TRN_OK) rc = trn_model_alloc(&t);
    for (k = 0; rc == TRN_OK && k < mf.world; k++) {
        trn_safetensors f;
        size_t a, b;
        trn_comm_shard(mf.n_floats, mf.world, k, &a, &b);
        if ((rc = trn__sharded_open(&f, dir, &mf, k, path, sizeof path)) != TRN_OK) break; /* checksum, save id, slice */
        rc = trn__sharded_take(&f, "shard.weights", a, b, 0, mf.n_floats, t.param_data, t.backend, &host, &host_cap);
        if (rc == TRN_OK && k == 0)
            for (i = 0; i < f.n_meta; i++)
                if (strncmp(f.meta_key[i], "trn.", 4) != 0 && strncmp(f.meta_key[i], "shard.", 6) != 0)
                    trn_meta_set(&meta, f.meta_key[i], f.meta_val[i]);
        trn_safetensors_close(&f);
    }
    trn_free(host);
    if (rc == TRN_OK) rc = trn_safetensors_save(out_path, &t, &meta);
    trn_model_free(&t);
    return rc;
}

#ifdef __cplusplus
}
#endif
#endif /* TRAIN_NCCL_IMPLEMENTATION_DONE */
#endif /* TRAIN_NCCL_IMPLEMENTATION */
