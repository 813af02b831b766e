/* test_profile_rows.c - "--profile charges ops to the wrong row" (issue 24
   item 14): the time of an op written with trn_op_apply (the kit's silu,
   rope, mul, rmsnorm and every user op) must land on its own row, not on
   the next op's. The profile's clock is replaced by a counter of work
   units that the ops themselves advance (no wall-clock time): the user op
   "slow" does 100 units in forward and 10 in backward, the built-in ops
   none. Exact rows are then known: slow forward 100 per pass, backward 10,
   and relu / linear / mse (the ops around it) 0. */
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "check.h"

static double g_units;      /* the "clock": work done so far */
static double g_at[4096];   /* its value at each mark of the pass */

static void fake_mark(trn_profile *p, int i) {
    (void)p;
    if (i < 4096) g_at[i] = g_units;
}
static void fake_read(trn_profile *p, int n, double *ms) {
    int i;
    (void)p;
    for (i = 1; i < n && i < 4096; i++) ms[i] = g_at[i] - g_at[i - 1];
}

/* slow: y = x, 100 units of work forward, 10 backward */
static void slow_forward(trn_model *m, trn_tape_entry *e) {
    (void)m;
    memcpy(e->out->data, e->in[0]->data, sizeof(float) * e->out->size);
    g_units += 100;
}
static void slow_backward(trn_model *m, trn_tape_entry *e) {
    float *dx = trn_grad(m, e->in[0]), *dy = trn_grad(m, e->out);
    size_t i;
    if (dx) for (i = 0; i < e->out->size; i++) dx[i] += dy[i];
    g_units += 10;
}
static const trn_op slow_op = {"slow", slow_forward, slow_backward, NULL, NULL, 0};

static trn_profile_row *row_of(trn_profile *p, const char *op) {
    int r;
    for (r = 0; r < p->n_rows; r++) if (strcmp(p->rows[r].op, op) == 0) return &p->rows[r];
    return NULL;
}

int main(void) {
    trn_model m;
    trn_profile prof;
    trn_tensor *w, *x, *h, *s, *loss;
    trn_profile_row *slow, *relu, *lin, *mse;
    float xin[4 * 8] = {0}, y[4 * 3] = {0};
    int shape[2] = {4, 8}, i;
    trn_rng rng;
    trn_model_init(&m, NULL);
    w = trn_param2(&m, "w", 3, 8);
    trn_model_alloc(&m);
    trn_rng_seed(&rng, 1);
    trn_init_normal(&m, w, 0, 0.3f, &rng);
    for (i = 0; i < 32; i++) xin[i] = (float)i / 32.0f;
    trn_profile_attach(&prof, &m);
    prof.mark = fake_mark;
    prof.read = fake_read;
    prof.clock_name = "work units";
    for (i = 0; i < 3; i++) { /* linear -> slow -> relu -> mse */
        trn_reset(&m);
        trn_zero_grad(&m);
        x = trn_input(&m, "x", 2, shape, xin);
        h = trn_linear(&m, x, w, NULL);
        s = trn_tensor_new(&m, "slow", h->ndim, h->shape);
        trn_op_apply(&m, &slow_op, s, h, NULL, NULL, NULL);
        loss = trn_mse(&m, trn_relu(&m, s), y);
        trn_backward(&m, loss);
    }
    slow = row_of(&prof, "slow");
    relu = row_of(&prof, "relu");
    lin = row_of(&prof, "linear");
    mse = row_of(&prof, "mse");
    CHECK(prof.passes == 3 && slow && relu && lin && mse, "rows slow, relu, linear, mse after 3 passes (%d rows)", prof.n_rows);
    if (slow && relu && lin && mse) {
        printf("  forward units: slow %.0f, relu %.0f, linear %.0f, mse %.0f; backward: slow %.0f, relu %.0f\n", slow->ms[0],
               relu->ms[0], lin->ms[0], mse->ms[0], slow->ms[1], relu->ms[1]);
        CHECK(slow->calls[0] == 3 && slow->calls[1] == 3, "slow: 3 forward and 3 backward calls");
        CHECK(slow->ms[0] == 300, "slow's forward work is on its own row: %.0f of 300", slow->ms[0]);
        CHECK(relu->ms[0] == 0, "none of it on the next op's row (relu): %.0f", relu->ms[0]);
        CHECK(lin->ms[0] == 0 && mse->ms[0] == 0, "nor on linear (%.0f) or mse (%.0f)", lin->ms[0], mse->ms[0]);
        CHECK(slow->ms[1] == 30 && relu->ms[1] == 0, "backward: slow %.0f of 30, relu %.0f", slow->ms[1], relu->ms[1]);
    }
    trn_profile_free(&prof);
    trn_model_free(&m);
    return check_summary();
}
