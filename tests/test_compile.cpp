// test_compile.cpp - train.h compiles as C++ (implementation included) and
// in static mode in the same program (a second translation unit would be
// the usual case; here the static copy lives in a namespace-free header).
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "train.h"  // a second include expands nothing
#include "check.h"

int main() {
    trn_model m;
    trn_model_init(&m, nullptr);
    trn_tensor *w = trn_param2(&m, "w", 2, 2);
    CHECK(trn_model_alloc(&m) == TRN_OK, "alloc from C++\n");
    trn_init_const(&m, w, 0.5f);
    CHECK(w->data[3] == 0.5f, "init from C++\n");
    trn_model_free(&m);
    return check_summary();
}
