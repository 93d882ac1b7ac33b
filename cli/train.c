// dspark train: train a DSpark (or DFlash) drafter for a frozen target on datagen output.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/trainer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dspark train [-m TARGET] --data DATA (--init DIR | shape options) -o OUT [options]\n"
            "  --steps N        optimizer steps (default 200)\n"
            "  --batch SEQS     sequences per step, over all MPI ranks (default 8)\n"
            "  --anchors A      anchor blocks sampled per sequence (default 512)\n"
            "  --lr LR          peak learning rate (default 6e-4); --warmup F fraction of steps (0.04)\n"
            "  --clip C         gradient-norm clip (default 1.0; 0 = off)\n"
            "  --decay D        per-slot loss weight exp(-k/D) (default 4)\n"
            "  --ce W --l1 W --conf W   loss weights (default 0.1, 0.9, 1.0)\n"
            "  --seed S         data order, anchors and fresh init (default 0)\n"
            "  --save-every N   checkpoint period (default steps/10); also at the end and on Ctrl-C\n"
            "  --resume         continue the run in OUT exactly where it stopped\n"
            "  --stop-after N   save and stop after N steps of this run (resume later)\n"
            "  --plot FILE.png  draw the loss curve with gnuplot at the end\n"
            "  -t THREADS\n"
            "  shape options for a fresh drafter (no --init): --layers 5 --block 7 --markov-rank R\n"
            "                   --markov-head vanilla|gated|rnn --taps L1,L2,.. --no-confidence\n"
            "  --markov-rank 0 --ce 1 --l1 0 --conf 0 trains the DFlash baseline.\n"
            "  Data-parallel: mpirun -np N dspark train ... (rank 0 writes checkpoints and logs).\n");
}

int cmd_train(int argc, char **argv) {
    ds_mpi_init(&argc, &argv);
    ds_train_opts o = ds_train_defaults();
    const char *model = NULL;
    static int taps[64];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        double f;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            ds_mpi_finalize();
            return 0;
        }
        if (!strcmp(a, "--resume")) {
            o.resume = 1;
            continue;
        }
        if (!strcmp(a, "--no-confidence")) {
            o.shape.confidence = 0;
            continue;
        }
        if (!v) return cli_missing_value(a, "train", usage);
        i++;
#define INT(flag, lo, hi, dst)                                                                 \
    else if (!strcmp(a, flag)) {                                                               \
        if (!cli_parse_int(v, lo, hi, &n)) return cli_usage_error(flag " expects %ld..%ld, got '%s'", (long)(lo), (long)(hi), v); \
        dst = (int)n;                                                                          \
    }
#define FLT(flag, lo, hi, dst)                                                                 \
    else if (!strcmp(a, flag)) {                                                               \
        if (!cli_parse_float(v, lo, hi, &f)) return cli_usage_error(flag " expects a number in [%g, %g], got '%s'", (double)(lo), (double)(hi), v); \
        dst = (float)f;                                                                        \
    }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--data")) o.data = v;
        else if (!strcmp(a, "--init")) o.init = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--plot")) o.plot = v;
        INT("--steps", 1, 100000000, o.steps)
        INT("--batch", 1, 1000000, o.batch)
        INT("--anchors", 1, 1000000, o.anchors)
        INT("--save-every", 1, 100000000, o.save_every)
        INT("--stop-after", 1, 100000000, o.stop_after)
        INT("-t", 1, 1024, o.threads)
        INT("--layers", 1, 64, o.shape.n_layers)
        INT("--block", 1, 64, o.shape.block_size)
        INT("--markov-rank", 0, 65536, o.shape.markov_rank)
        FLT("--lr", 1e-9, 10, o.lr)
        FLT("--warmup", 0, 1, o.warmup)
        FLT("--clip", 0, 1e9, o.clip)
        FLT("--decay", 1e-3, 1e6, o.lw.decay)
        FLT("--ce", 0, 1e6, o.lw.ce)
        FLT("--l1", 0, 1e6, o.lw.l1)
        FLT("--conf", 0, 1e6, o.lw.conf)
        else if (!strcmp(a, "--seed")) {
            if (!cli_parse_int(v, 0, 0x7fffffffffffffffL, &n)) return cli_usage_error("--seed expects a non-negative integer");
            o.seed = (uint64_t)n;
            o.shape.seed = (uint64_t)n;
        } else if (!strcmp(a, "--markov-head")) {
            if (strcmp(v, "vanilla") && strcmp(v, "gated") && strcmp(v, "rnn"))
                return cli_usage_error("--markov-head expects vanilla, gated or rnn, got '%s'", v);
            o.shape.markov_head = v;
        } else if (!strcmp(a, "--taps")) {
            o.shape.n_taps = 0;
            for (const char *s = v; *s;) {
                char *end;
                long id = strtol(s, &end, 10);
                if (end == s || (*end && *end != ',') || o.shape.n_taps == 64)
                    return cli_usage_error("--taps expects comma-separated layer ids, got '%s'", v);
                taps[o.shape.n_taps++] = (int)id;
                s = *end ? end + 1 : end;
            }
            o.shape.tap_layers = taps;
        } else {
            return cli_usage_error("unknown option '%s' (see dspark train --help)", a);
        }
#undef INT
#undef FLT
    }
    if (!o.data) return cli_usage_error("train needs --data DATA (make it with dspark datagen)");
    if (!o.out) return cli_usage_error("train needs an output directory (-o OUT)");
    if (!(o.target = cli_model_path(model))) return 1;
    if (o.plot && !cli_check_writable(o.plot)) return 1; // before the training, not after
    cli_catch_interrupt();
    o.interrupted = &cli_interrupted;
    ds_status st = ds_train_run(&o);
    const int rank = ds_mpi_rank();
    ds_mpi_finalize();
    if (st && rank == 0) return cli_fail(st);
    if (st) return 1;
    if (rank == 0) fprintf(stderr, "dspark: drafter written to %s\n", o.out);
    return 0;
}
