// test_compile.cpp - train.h compiles as C++ (implementation included) and
// in static mode in the same program (a second translation unit would be
// the usual case; here the static copy lives in a namespace-free header).
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "train.h"  // a second include expands nothing
#include "extras/train_data.h"
#include "extras/train_loop.h"
#include "extras/train_run.h"
#include "extras/train_generate.h"
#include "extras/train_ops.h"
#include "extras/train_json.h"
#include "extras/train_data.h" // nor here
#include "extras/train_loop.h"
#include "extras/train_run.h"
#include "extras/train_generate.h"
#include "extras/train_ops.h"
#include "extras/train_json.h"
#include "check.h"

int main() {
    trn_model m;
    trn_model_init(&m, nullptr);
    trn_tensor *w = trn_param2(&m, "w", 2, 2);
    CHECK(trn_model_alloc(&m) == TRN_OK, "alloc from C++\n");
    trn_init_const(&m, w, 0.5f);
    CHECK(w->data[3] == 0.5f, "init from C++\n");
    trn_model_free(&m);
    trn_tokenizer tok; // the companions, from C++
    trn_tokenizer_init_bytes(&tok);
    CHECK(tok.vocab_size == 256, "train_data.h from C++\n");
    char buf[32];
    CHECK(strcmp(trn_duration_str(75, buf, sizeof buf), "1:15") == 0, "train_loop.h from C++: %s\n", buf);
    return check_summary();
}
