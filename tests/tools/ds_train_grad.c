// Test tool for the gradient check (tests/reference/test_train_grad.py): the training loss of one
// sequence with given anchors, and the gradient of every trainable tensor.
//   ds_train_grad TARGET DRAFTER_DIR --tokens 1,2,.. --n-prompt P --anchors 3,7 [--ce 0.1 --l1 0.9 --conf 1]
//                 [--target-softcap C]
//                 --out FILE.safetensors
// Writes each gradient under its tensor's name (F32), and scalars loss, loss_ce, loss_l1, loss_conf.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "train/train.h"
#include "tool_util.h"

static int die(const char *what) {
    fprintf(stderr, "ds_train_grad: %s: %s\n", what, ds_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ds_train_grad TARGET DRAFTER --tokens IDS --n-prompt P --anchors A --out FILE\n");
        return 2;
    }
    static int tok[8192], anchors[1024];
    int n = 0, n_anchors = 0, n_prompt = 0;
    ds_loss_weights lw = {0.1f, 0.9f, 1.0f, 4.0f, 0.0f};
    const char *out = NULL;
    float target_softcap = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--tokens")) n = parse_list(v, tok, 8192);
        else if (!strcmp(o, "--anchors")) n_anchors = parse_list(v, anchors, 1024);
        else if (!strcmp(o, "--n-prompt")) n_prompt = atoi(v);
        else if (!strcmp(o, "--ce")) lw.ce = (float)atof(v);
        else if (!strcmp(o, "--l1")) lw.l1 = (float)atof(v);
        else if (!strcmp(o, "--conf")) lw.conf = (float)atof(v);
        else if (!strcmp(o, "--kl")) lw.kl = (float)atof(v);
        else if (!strcmp(o, "--target-softcap")) target_softcap = (float)atof(v);
        else if (!strcmp(o, "--out")) out = v;
        else {
            fprintf(stderr, "ds_train_grad: unknown option %s\n", o);
            return 2;
        }
    }
    if (n <= 0 || n_anchors <= 0 || !out) {
        fprintf(stderr, "ds_train_grad: need --tokens, --anchors and --out\n");
        return 2;
    }
    ds_model *m;
    ds_model_params mp = {.n_threads = 1};
    if (ds_model_load(argv[1], &mp, &m)) return die("target");
    ds_tmodel tm;
    if (ds_tmodel_load(argv[2], m, &tm)) return die("drafter");
    const ds_drafter_info *di = ds_drafter_get_info(tm.d);
    const int H = di->hidden, TH = di->n_taps * H;
    float *taps = malloc(sizeof(float) * (size_t)n * TH), *hidden = malloc(sizeof(float) * (size_t)n * H);
    ds_kv *kv;
    ds_workspace *ws;
    if (ds_kv_init(m, n, &kv) || ds_workspace_init(m, &ws)) return die("target state");
    ds_forward_seq f = {.kv = kv, .tokens = tok, .n_tokens = n, .tap_layers = di->tap_layers, .n_taps = di->n_taps,
                        .taps = taps, .hidden = hidden};
    if (ds_model_forward(m, ws, &f, 1)) return die("target forward");
    ds_tsample s = {tok, n, n_prompt, taps, hidden, anchors, n_anchors, target_softcap};
    ds_tws *tws;
    float *grad = calloc(tm.n_params, sizeof(float));
    ds_loss_stats st = {0};
    if (ds_tws_init(&tm, &tws) || ds_train_sequence(&tm, tws, &s, &lw, grad, &st)) return die("train");
    const float inv = st.weight > 0 ? (float)(1.0 / st.weight) : 0.0f;
    for (size_t i = 0; i < tm.n_params; i++) grad[i] *= inv;
    float loss[5] = {(float)(st.loss * inv), (float)(st.ce * inv), (float)(st.l1 * inv), (float)(st.conf * inv),
                     (float)(st.kl * inv)};
    ds_st_writer *w = ds_st_writer_new();
    const int64_t one = 1;
    const char *ln[5] = {"loss", "loss_ce", "loss_l1", "loss_conf", "loss_kl"};
    for (int i = 0; i < 5; i++)
        if (ds_st_writer_add(w, ln[i], DS_F32, 1, &one, &loss[i])) return die("write");
    for (int i = 0; i < tm.n_entries; i++) {
        const ds_tentry *e = &tm.entries[i];
        const int64_t shape[2] = {e->rows, e->cols};
        if (ds_st_writer_add(w, e->name, DS_F32, e->cols ? 2 : 1, shape, grad + e->offset)) return die("write");
    }
    if (ds_st_writer_write_file(w, out)) return die("write");
    ds_st_writer_free(w);
    ds_tws_free(tws);
    ds_tmodel_free(&tm);
    ds_kv_free(kv);
    ds_workspace_free(ws);
    ds_model_free(m);
    free(grad), free(taps), free(hidden);
    return 0;
}
