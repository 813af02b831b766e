/* tools/consolidate.c - a sharded checkpoint (train_nccl.h's
   trn_ddp_checkpoint_save_sharded: DIR/manifest.json + one file per rank)
   merged into ONE safetensors file of the whole weights, each parameter
   under its name and shape (the model's table, from the manifest), with
   the checkpoint's metadata: the model.safetensors that Hugging Face's
   safetensors, PyTorch (load_state_dict) and the examples' --init read.
   One process, no ranks; it needs the memory of the whole weights.
   Every shard's CRC-32C is checked, and that it belongs to the manifest's
   save (its save id, rank, world size and slice: a rank file of another
   run or step is refused, naming the file); a directory without its
   manifest (a save that did not finish) is refused; a FIFO or directory
   where a file should be is an error, not a hang.

     tools/consolidate DIR OUT.safetensors

   Exit status: 0 written, 1 the checkpoint is broken or the write failed,
   2 bad arguments.
   build: -pthread
*/
#define TRAIN_IMPLEMENTATION
#include "train.h"
#define TRAIN_NCCL_CPU_ONLY
#define TRAIN_NCCL_IMPLEMENTATION
#include "train_nccl.h"

static void usage(FILE *to) {
    fprintf(to, "usage: consolidate DIR OUT.safetensors\n"
                "  merge a sharded checkpoint directory (manifest.json + rank-*-of-*.safetensors)\n"
                "  into one safetensors file of the whole weights, under the parameters' names\n");
}

int main(int argc, char **argv) {
    trn_result r;
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) { usage(stdout); return 0; }
    if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-') { usage(stderr); return 2; }
    if ((r = trn_checkpoint_consolidate(argv[1], argv[2])) != TRN_OK) {
        fprintf(stderr, "consolidate: %s: %s\n", trn_result_string(r), trn_error_reason());
        return 1;
    }
    printf("wrote %s\n", argv[2]);
    return 0;
}
