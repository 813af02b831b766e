/* test_static.c - TRAIN_STATIC: every function is static, so two libraries
   can each embed their own copy without symbol clashes. */
// asan: no
#define TRAIN_STATIC
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

int main(void) {
    float x[4] = {-1, 2, -3, 4}, y[4];
    trn_relu_forward(y, x, 4);
    CHECK(y[0] == 0 && y[1] == 2 && y[3] == 4, "static build runs\n");
    return check_summary();
}
