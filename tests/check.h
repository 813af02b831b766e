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

/* the larger of two errors, where a NaN wins (fmax would drop it and a
   test would pass on NaN). Also: GCC 12.2 for AArch64 stops with an
   internal compiler error vectorizing an fmax over a loop of differences. */
static double check_worse(double d, double e) { return e <= d ? d : e; }

static int check_summary(void) {
    printf("%d passed, %d failed\n", check__passed, check__failed);
    return check__failed ? 1 : 0;
}

/* misuse that must stop the program: fn(arg) runs in a child whose stderr
   comes back in buf (cap bytes, NUL-terminated); checked: exit code 3
   (trn_fatal's), one line, naming word1 and word2 (NULL: anything).
   Returns 1 when every check passed. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static int check_fatal(const char *what, void (*fn)(void *), void *arg, const char *word1, const char *word2,
                       char *buf, size_t cap) {
    int fd[2], status = 0, before = check__failed;
    size_t got = 0;
    ssize_t r;
    pid_t pid;
    buf[0] = 0;
    if (pipe(fd) != 0) { CHECK(0, "%s: pipe failed\n", what); return 0; }
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(arg);
        _exit(0); /* no fatal: the parent sees exit 0 */
    }
    close(fd[1]);
    while (got < cap - 1 && (r = read(fd[0], buf + got, cap - 1 - got)) > 0) got += (size_t)r;
    buf[got] = 0;
    close(fd[0]);
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3, "%s: exit code 3 (status %d), stderr: %s\n", what, status, buf);
    CHECK((!word1 || strstr(buf, word1)) && (!word2 || strstr(buf, word2)), "%s: the message names '%s' and '%s': %s\n",
          what, word1 ? word1 : "", word2 ? word2 : "", buf);
    CHECK(got > 0 && strchr(buf, '\n') == buf + got - 1, "%s: one line: %s\n", what, buf);
    return check__failed == before;
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
