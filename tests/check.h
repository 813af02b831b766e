/* tests/check.h - the smallest test harness: CHECK, CHECK_NEAR, a summary.
   Every test program ends with `return check_summary();`, which prints
   "N passed, M failed" (tests/run.sh adds those up) and returns non-zero
   when anything failed. */
#ifndef CHECK_H
#define CHECK_H
#include <math.h>
#include <stdio.h>

static int check__passed, check__failed;

#define CHECK(cond, ...) do { \
    if (cond) { check__passed++; } \
    else { check__failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
           printf(__VA_ARGS__); printf("  [%s]\n", #cond); fflush(stdout); } \
} while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_NEAR(a, b, atol, rtol, what) do { \
    double check__a = (double)(a), check__b = (double)(b); \
    double check__tol = (atol) + (rtol) * fabs(check__b); \
    CHECK(fabs(check__a - check__b) <= check__tol, "%s: got %.9g want %.9g (tol %.3g)\n", \
          (what), check__a, check__b, check__tol); \
} while (0)

static int check_summary(void) {
    printf("%d passed, %d failed\n", check__passed, check__failed);
    return check__failed ? 1 : 0;
}

/* the kernel tests of train_cuda.h: faults the CUDA-on-CPU harness saw
   (out-of-bounds, races, divergent barriers); on a GPU that is
   compute-sanitizer's job (tests/gpu/run.sh), so none here */
#if defined(TRN_CUDA_ON_CPU)
static long harness_errors(void) { return cuemu::errors(); }
#elif defined(__CUDACC__)
static long harness_errors(void) { return 0; }
#endif
#endif
