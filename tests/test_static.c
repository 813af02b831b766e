/* test_static.c - TRAIN_STATIC: every function is static, so two libraries
   can each embed their own copy without symbol clashes. */
// asan: no
#define TRAIN_STATIC
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "extras/train_data.h"
#include "extras/train_loop.h"
#include "extras/train_run.h"
#include "extras/train_generate.h"
#include "extras/train_ops.h"
#include "extras/train_json.h"
#include "check.h"

int main(void) {
    float x[4] = {-1, 2, -3, 4}, y[4];
    trn_relu_forward(y, x, 4);
    CHECK(y[0] == 0 && y[1] == 2 && y[3] == 4, "static build runs\n");
    {   /* the companions follow TRAIN_STATIC too */
        trn_tokenizer tok;
        char buf[32];
        trn_tokenizer_init_bytes(&tok);
        CHECK(tok.vocab_size == 256, "static train_data.h\n");
        CHECK(strcmp(trn_duration_str(75, buf, sizeof buf), "1:15") == 0, "static train_loop.h: %s\n", buf);
        {   /* no save in flight: waiting returns at once */
            trn_ckpt_async ack = {0};
            CHECK(trn_checkpoint_wait(&ack) == TRN_OK && ack.saves == 0, "static train_run.h\n");
            trn_ckpt_async_free(&ack);
        }
    }
    return check_summary();
}
