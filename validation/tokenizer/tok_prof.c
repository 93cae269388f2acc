/* tok_prof.c - where k3_tok_encode spends its time on a machine without hardware counters or
 * perf (the GPU machine's host is a VM that exposes none): a POSIX timer interrupts the
 * encoding every US microseconds, and the interrupted instruction addresses are written to
 * OUT, one hex address per line. The binary is built without PIE, so `addr2line -e tok_prof`
 * or `nm -n tok_prof` on the build machine maps them (prof_table.py).
 *
 *   tok_prof MODEL CONFIG FILE SECONDS OUT [US (default 200)] [warm]
 *
 * Every call is on new text (the tokenizer's kept memos emptied before it, outside the
 * sampling), unless "warm": then later calls find the pieces of earlier ones in the memos
 * (no kept chunks, so that every piece is a memo hit rather than a chunk's copy).
 *
 * Sampling costs a signal per interrupt: at 200 us the encode runs a few percent slower. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include "core/clock.h"
#include "frontend/tokenizer.h"
#include "tok_tool.h"

#define MAX_SAMPLES (1u << 22)

static unsigned long samples[MAX_SAMPLES];
static volatile sig_atomic_t inside;
static volatile size_t n_samples;

static void on_sample(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
#if defined(__x86_64__)
    unsigned long pc = (unsigned long)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    unsigned long pc = (unsigned long)((ucontext_t *)ctx)->uc_mcontext.pc;
#else
    unsigned long pc = 0;
    (void)ctx;
#endif
    if (inside && n_samples < MAX_SAMPLES) samples[n_samples++] = pc;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: tok_prof MODEL CONFIG FILE SECONDS OUT [US] [warm]\n");
        return 2;
    }
    struct k3_tok *tok;
    size_t len;
    char *text = tok_tool_open("tok_prof", argv, &tok, &len);
    if (!text) return 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sample;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    timer_t timer;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGPROF;
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer)) {
        perror("tok_prof: timer_create");
        return 1;
    }
    long us = argc > 6 ? atol(argv[6]) : 200;
    int warm = argc > 7 && !strcmp(argv[7], "warm");
    if (warm) k3_tok_chunk_budget(tok, 0);
    struct itimerspec its = {{us / 1000000, us % 1000000 * 1000}, {us / 1000000, us % 1000000 * 1000}};
    timer_settime(timer, 0, &its, NULL);

    double seconds = atof(argv[4]), t0 = k3_now_s(), best = 1e30;
    int calls = 0;
    while (k3_now_s() - t0 < seconds) {
        struct k3_tok_ids ids = {0};
        if (!warm) k3_tok_forget(tok);
        double a = k3_now_s();
        inside = 1;
        k3_tok_encode(tok, text, len, K3_TOK_PLAIN, NULL, &ids);
        inside = 0;
        double dt = k3_now_s() - a;
        best = dt < best ? dt : best;
        calls++;
        k3_tok_ids_free(&ids);
    }
    timer_delete(timer);
    FILE *o = fopen(argv[5], "w");
    if (!o) {
        fprintf(stderr, "tok_prof: cannot write %s\n", argv[5]);
        return 1;
    }
    for (size_t i = 0; i < n_samples; i++) fprintf(o, "%lx\n", samples[i]);
    fclose(o);
    printf("{\"file\": \"%s\", \"calls\": %d, \"best_ms\": %.3f, \"samples\": %zu, \"interval_us\": %ld}\n",
           argv[3], calls, best * 1e3, (size_t)n_samples, us);
    k3_tok_free(tok);
    free(text);
    return 0;
}
