// Throughput next to a CPU hog: decode and prefill tokens/s (and, with --train, training anchor
// blocks/s) at each thread count, on an idle machine and next to `--hogs` busy-looping processes
// that the bench starts and stops itself (pinned nowhere), interleaved repeat by repeat.
//
//   bench_contention (--model PATH | --synthetic DIR [--preset qwen3-0.6b|qwen3-4b] [shape options])
//                    [--threads 1,2] [--hogs 1] [-n DECODE_TOKENS] [--prompt PREFILL_TOKENS]
//                    [--repeats R] [--train DATA [--train-steps S]]
//
// One JSON line per (load, threads) with medians and min/max over the repeats, then one summary
// line: under load, 2-thread speed over 1-thread speed (the robustness goal: >= 0.5), and each
// thread count's loaded speed over its unloaded speed, all from this run.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "dspark.h"

#define MAX_T 8
#define MAX_R 64

// A process that burns one core until killed.
static pid_t hog_start(void) {
    const pid_t pid = fork();
    if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;) x++;
    }
    return pid;
}

static void hog_stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

// Tokens/s of one forward over `p` prompt tokens into an empty cache (median of 3).
static double prefill_tps(ds_model *m, int p) {
    const ds_model_info *in = ds_model_get_info(m);
    ds_kv *kv;
    ds_workspace *ws;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)p);
    float *logits = malloc(sizeof(float) * (size_t)in->vocab_size);
    if (!tok || !logits || ds_kv_init(m, p + 1, &kv)) return 0;
    if (ds_workspace_init(m, &ws)) return 0;
    for (int i = 0; i < p; i++) tok[i] = (int32_t)((i * 7919 + 1) % in->vocab_size);
    double t[3];
    for (int r = 0; r < 3; r++) {
        ds_kv_truncate(kv, 0);
        ds_forward_seq s = {.kv = kv, .tokens = tok, .n_tokens = p, .n_logits = 1, .logits = logits};
        const double t0 = bench_now();
        ds_model_forward(m, ws, &s, 1);
        t[r] = bench_now() - t0;
    }
    qsort(t, 3, sizeof *t, bench_cmp_double);
    ds_kv_free(kv);
    ds_workspace_free(ws);
    free(tok);
    free(logits);
    return p / t[1];
}

typedef struct {
    double v[MAX_R];
    int n;
} samples;

static double med(samples *s) {
    qsort(s->v, (size_t)s->n, sizeof *s->v, bench_cmp_double);
    return s->n ? s->v[s->n / 2] : 0;
}

int main(int argc, char **argv) {
    bench_openblas_reexec(argv);
    const char *model = NULL, *synth = NULL, *threads = "1,2", *train = NULL;
    bench_shape s = {2048, 16, 5632, 32, 8, 32000, DS_F32, 0, 0, NULL};
    int n = 64, prompt = 128, repeats = 5, hogs = 1, train_steps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (bench_model_option(o, v, &s, &model, &synth)) continue;
        if (!strcmp(o, "--threads")) threads = v;
        else if (!strcmp(o, "--hogs")) hogs = atoi(v);
        else if (!strcmp(o, "-n")) n = atoi(v);
        else if (!strcmp(o, "--prompt")) prompt = atoi(v);
        else if (!strcmp(o, "--repeats")) repeats = atoi(v);
        else if (!strcmp(o, "--train")) train = v;
        else if (!strcmp(o, "--train-steps")) train_steps = atoi(v);
        else {
            fprintf(stderr, "bench_contention: unknown option %s\n", o);
            return 2;
        }
    }
    if (synth) {
        if (bench_make_synthetic(synth, &s)) return 1;
        model = synth;
    }
    if (!model || repeats < 1 || repeats > MAX_R || n < 1 || prompt < 1 || hogs < 0 || hogs > 16) {
        fprintf(stderr, "usage: bench_contention (--model PATH | --synthetic DIR [shape options]) [--threads 1,2] "
                        "[--hogs 1] [-n N] [--prompt P] [--repeats R (<= 64)] [--train DATA [--train-steps S]]\n");
        return 2;
    }
    int ts[MAX_T], nt = 0;
    for (const char *p = threads; p && *p && nt < MAX_T;) {
        ts[nt++] = atoi(p);
        p = strchr(p, ',');
        if (p) p++;
    }
    ds_model *m;
    if (ds_model_load(model, NULL, &m)) {
        fprintf(stderr, "bench_contention: %s\n", ds_last_error());
        return 1;
    }
    const ds_model_info *in = ds_model_get_info(m);
    static samples dec[2][MAX_T], pre[2][MAX_T], trn[2][MAX_T]; // [loaded][thread index]
    for (int r = 0; r < repeats; r++)
        for (int load = 0; load < 2; load++) {
            pid_t hog[16] = {0};
            for (int h = 0; load && h < hogs; h++) hog[h] = hog_start();
            if (load) usleep(100000); // let the scheduler spread the hogs
            for (int k = 0; k < nt; k++) {
                ds_set_threads(ts[k]);
                dec[load][k].v[dec[load][k].n++] = bench_decode_tps(m, n, 1);
                pre[load][k].v[pre[load][k].n++] = prefill_tps(m, prompt);
                if (train) trn[load][k].v[trn[load][k].n++] = bench_train_blocks_per_s(model, train, ts[k], train_steps, 2, NULL);
            }
            for (int h = 0; h < hogs; h++) hog_stop(hog[h]);
        }
    double md[2][MAX_T], mp[2][MAX_T], mt[2][MAX_T];
    for (int load = 0; load < 2; load++)
        for (int k = 0; k < nt; k++) {
            md[load][k] = med(&dec[load][k]);
            mp[load][k] = med(&pre[load][k]);
            mt[load][k] = train ? med(&trn[load][k]) : 0;
            printf("{\"bench\": \"contention\", \"model\": \"%s\", \"weights\": \"%s\", \"hogs\": %d, \"threads\": %d, "
                   "\"repeats\": %d, \"decode_tok_per_s\": %.1f, \"decode_min\": %.1f, \"decode_max\": %.1f, "
                   "\"prefill_tokens\": %d, \"prefill_tok_per_s\": %.1f, \"prefill_min\": %.1f, \"prefill_max\": %.1f",
                   in->name, ds_dtype_name(in->weight_type), load ? hogs : 0, ts[k], repeats, md[load][k],
                   dec[load][k].v[0], dec[load][k].v[repeats - 1], prompt, mp[load][k], pre[load][k].v[0],
                   pre[load][k].v[repeats - 1]);
            if (train)
                printf(", \"train_blocks_per_s\": %.1f, \"train_min\": %.1f, \"train_max\": %.1f", mt[load][k],
                       trn[load][k].v[0], trn[load][k].v[repeats - 1]);
            printf("}\n");
        }
    // Summary: the last thread count against the first, under load; and load against none.
    const int a = 0, b = nt - 1;
    printf("{\"bench\": \"contention_summary\", \"model\": \"%s\", \"hogs\": %d, \"threads\": [%d, %d], "
           "\"loaded_decode_ratio\": %.2f, \"loaded_prefill_ratio\": %.2f, \"idle_decode_ratio\": %.2f, "
           "\"idle_prefill_ratio\": %.2f",
           in->name, hogs, ts[a], ts[b], md[1][b] / md[1][a], mp[1][b] / mp[1][a], md[0][b] / md[0][a],
           mp[0][b] / mp[0][a]);
    if (train)
        printf(", \"loaded_train_ratio\": %.2f, \"idle_train_ratio\": %.2f", mt[1][b] / mt[1][a], mt[0][b] / mt[0][a]);
    for (int k = 0; k < nt; k++)
        printf(", \"t%d_decode_loaded_over_idle\": %.2f, \"t%d_prefill_loaded_over_idle\": %.2f", ts[k],
               md[1][k] / md[0][k], ts[k], mp[1][k] / mp[0][k]);
    printf("}\n");
    ds_model_free(m);
    return 0;
}
