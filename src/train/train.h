// Training DSpark drafters (docs/formats/deepspec-checkpoint.md §6): trainable parameters in f32, the training
// forward over anchor blocks of one sequence with hand-written backward passes, AdamW.
#ifndef DS_TRAIN_TRAIN_H
#define DS_TRAIN_TRAIN_H

#include "draft/drafter.h"
#include "dspark/speculate.h"
#include "dspark/train.h"

// Views into one flat f32 buffer with every trainable tensor (the same layout serves parameters,
// gradients and both AdamW moments). Shapes follow the DeepSpec tensor names.
typedef struct {
    float *input_norm;     // (H)
    float *wq;             // (nq * hd, H)
    float *wk;             // (nkv * hd, H)
    float *wv;             // (nkv * hd, H)   Qwen3 only
    float *wo;             // (H, nq * hd)
    float *bq, *bk, *bv, *bo; // attention_bias: (nq*hd), (nkv*hd), (nkv*hd), (H)
    float *q_norm;         // (hd)
    float *k_norm;         // (hd)
    float *post_attn_norm; // (H)
    float *pre_ffn_norm;   // (H)   Gemma only
    float *post_ffn_norm;  // (H)   Gemma only
    float *layer_scalar;   // (1)   Gemma only
    float *w_gate;         // (F, H)
    float *w_up;           // (F, H)
    float *w_down;         // (H, F)
} ds_tlayer;

typedef struct {
    float *fc;          // (H, T * H)
    float *hidden_norm; // (H)
    ds_tlayer *layers;  // (n_layers)
    float *norm;        // (H)
    float *w1;          // (V, r)      markov_w1
    float *w2;          // (V, r)      markov_w2
    float *gate_w;      // (r, H + r)  gated head
    float *gate_b;      // (r)
    float *joint_w;     // (3r, 2r + H) rnn head
    float *joint_b;     // (3r)
    float *conf_w;      // (H or H + r)
    float *conf_b;      // (1)
} ds_tview;

// One named trainable tensor of the layout.
typedef struct {
    char name[96];
    int rows, cols;     // cols 0: a vector of `rows`
    size_t offset;      // in floats, into the flat buffer
} ds_tentry;

// The trainable drafter: the (immutable) loaded drafter for config and frozen tensors, plus the
// f32 master copy of everything that trains.
typedef struct {
    ds_drafter *d;       // config, embed_tokens and lm_head (frozen), mapped from the checkpoint
    size_t n_params;     // floats in the flat buffer
    float *params;       // (n_params) master weights
    ds_tview p;          // views into params
    ds_tentry *entries;  // (n_entries) name, shape and place of each trainable tensor
    int n_entries;
    float *lm_head;      // (V, H) f32 copy of the frozen lm_head
} ds_tmodel;

ds_status ds_tmodel_load(const char *dir, const ds_model *target, ds_tmodel *tm);
void ds_tmodel_free(ds_tmodel *tm);
// Views of the same layout over another buffer (gradients, moments).
void ds_tmodel_views(const ds_tmodel *tm, float *base, ds_tview *v);
// Write a DeepSpec checkpoint directory's tensors: trainable from `params`, frozen from the drafter.
ds_status ds_tmodel_write(const ds_tmodel *tm, const float *params, ds_dtype dtype, const char *dir);

// Loss weights (ds_loss_weights: include/dspark_jobs.h, the trainer's options) and results.

typedef struct {
    double loss, ce, l1, conf; // weighted total and each term (weight-normalized means)
    double kl;                 // the KL term (also weight-normalized; computed only when its weight is not 0)
    double weight;             // Σ w_k over the valid slots (the normalizer)
    int slots;                 // valid slots
    double ptau;               // Σ over blocks of (1 + Σ_j Π_{i≤j} c*_i): probabilistic τ numerator
    int blocks;
} ds_loss_stats;

// One training sequence: the target's tap rows and final hidden states for every position.
typedef struct {
    const int32_t *tokens; // (n)
    int n, n_prompt;       // loss mask: positions >= n_prompt
    const float *taps;     // (n, T * H)
    const float *hidden;   // (n, H) target final normed hidden
    const int *anchors;    // (n_anchors) positions p with mask[p] and mask[p+1]
    int n_anchors;
    float target_softcap;  // the target's final logit softcap (Gemma): its distribution is
                           // softmax(c·tanh(lm_head·G / c)); 0 = none
} ds_tsample;

typedef struct ds_tws ds_tws; // forward/backward scratch, grown on demand

ds_status ds_tws_init(const ds_tmodel *tm, ds_tws **out);
void ds_tws_free(ds_tws *ws);

// Forward and backward of one sequence: adds (+=) d(loss_sum)/dθ to `grad` (flat, tm layout),
// where loss_sum = Σ_valid w_k (ce·CE + l1·L1 + conf·BCE + kl·KL) — NOT yet divided by Σ w_k, so that
// sequences (and MPI ranks) sum; accumulates the unnormalized sums into *st.
ds_status ds_train_sequence(const ds_tmodel *tm, ds_tws *ws, const ds_tsample *s, const ds_loss_weights *lw,
                            float *grad, ds_loss_stats *st);

#endif
