// The DeepSpec drafter (DSpark / DFlash) as docs/formats/deepspec-checkpoint.md specifies it: layout
// of a loaded drafter and of one sequence's draft context. Loading is in load.c, the forward pass
// (context projection, block forward, Markov walk, confidence) in forward.c.
#ifndef DS_DRAFT_DRAFTER_H
#define DS_DRAFT_DRAFTER_H

#include "draft/calibration.h"
#include "dspark/draft.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "model/block.h"
#include "io/qconfig.h"
#include "io/gguf.h"

typedef enum { DS_STYLE_QWEN3, DS_STYLE_GEMMA4 } ds_draft_style;
typedef enum { DS_MARKOV_NONE, DS_MARKOV_VANILLA, DS_MARKOV_GATED, DS_MARKOV_RNN } ds_markov_type;

struct ds_drafter {
    ds_drafter_info info;
    ds_draft_style style;
    ds_markov_type markov;
    int H, V, F, nq, nkv, hd, T, r; // hidden, vocab, MLP width, heads, head dim, taps, Markov rank
    float eps;
    float embed_scale;    // Gemma: sqrt(H) rounded to the weight dtype; 1 for Qwen3
    float attn_scale;     // Qwen3: hd^-0.5; Gemma: 1
    float softcap;        // Gemma: final_logit_softcapping; 0 = none
    float *inv_freq;      // (hd / 2) RoPE inverse frequencies; 0 for pairs that do not rotate
    ds_weight embed;      // (V, H) embed_tokens
    ds_weight lm_head;    // (V, H)
    ds_weight fc;         // (H, T * H)
    float *hidden_norm;   // (H)
    float *norm;          // (H) final norm
    ds_layer *layers;     // (n_layers) the decoder blocks (model/block.h); Qwen3: ffn_norm is
                          // post_attention_layernorm; Gemma: attn_post_norm is, ffn_norm / ffn_post_norm are
                          // pre/post_feedforward_layernorm, out_scale is layer_scalar, K = V (v_norm)
    ds_block_cfg block;   // the blocks' model-wide options (libm GELU-tanh, halves RoPE, 2 attention jobs per item)
    ds_weight markov_w1;  // (V, r) lookup table
    ds_weight markov_w2;  // (V, r): bias = W2 · v
    ds_weight gate_proj;  // (r, H + r) gated head
    float *gate_bias;     // (r)
    ds_weight joint_proj; // (3r, 2r + H) rnn head
    float *joint_bias;    // (3r)
    float *conf_w;        // (H or H + r) confidence_head.proj.weight
    float conf_b;
    int tap_ids[64];
    // Per class of sequence (DS_CALIB_GREEDY: temperature 0, DS_CALIB_SAMPLED: above 0; calibration.h):
    float calib[DS_CALIB_CLASSES][64];       // STS temperatures per slot (n_calib of them); conf = σ(z / T)
    int n_calib[DS_CALIB_CLASSES];
    float accept_prior[DS_CALIB_CLASSES][64]; // realized prefix acceptance per slot in the calibration run (calibration.json)
    int n_accept_prior[DS_CALIB_CLASSES];
    // Draft vocabulary (vocab.c): when n_vocab < V, the LM head and the Markov head score only the
    // ids in vocab_ids, through copies of their rows; every other logit is -inf (never drafted, q = 0).
    int n_vocab;          // V when unrestricted
    int32_t *vocab_ids;   // (n_vocab) strictly increasing token ids, or NULL
    ds_weight vocab_head; // (n_vocab, H) lm_head rows of vocab_ids
    ds_weight vocab_w2;   // (n_vocab, r) markov_w2 rows of vocab_ids (r > 0)
    void *vocab_bufs[6];  // the copies' allocations
    char arch[32], markov_name[16], target_id[160], warning[512];
    float *owned;         // every f32 vector, one allocation
    size_t owned_used, owned_cap;
    ds_safetensors *st;
    ds_gguf *gg;          // a GGUF drafter (load_gguf.c): the open file the weights point into, else NULL
    ds_quant_config quant; // config.json's quantization block (present = 0: full precision)
};

// Scratch of a block forward or context append over up to cap_rows rows (one sequence's chunk, or
// R sequences' blocks drafted together).
typedef struct {
    int cap_rows;
    float *x;       // (cap_rows, max(H, T*H))
    float *xn;      // (cap_rows, H)
    float *q;       // (cap_rows, nq * hd)
    float *kb;      // (cap_rows, nkv * hd)
    float *vb;      // (cap_rows, nkv * hd)
    float *att;     // (cap_rows, nq * hd)
    float *hb;      // (cap_rows, F)
    float *hb2;     // (cap_rows, F)
    float *rcos, *rsin; // (cap_rows, hd / 2) RoPE angles of each row
    int *pos;       // (cap_rows) each row's position (its cache column)
    int *end;       // (cap_rows) the columns of its cache each row attends over
    ds_kvcache **kv; // (cap_rows) each row's cache
    float *scores;  // (scores_thr, DS_ATTEND_MAX_Q, scores_cap) attention scores per thread
    int scores_cap, scores_thr;
    float *u;       // (cap_rows, u_cols) LM head scores over a draft vocabulary of u_cols ids
    int u_cols;
    float *scratch; // (n_procs, matmul tile) widening scratch
} ds_draft_bufs;

struct ds_draft_state {
    const ds_drafter *d;
    ds_kvcache kv;  // per layer (nkv, hd, cap), K after k_norm and RoPE; kv.len committed context
                    // rows; room for max_ctx rows and one block
    const int32_t *hist; // (n_hist) the sequence's generated tokens (ds_draft_state_set_history)
    int n_hist;
    int max_ctx;
    ds_draft_bufs b; // scratch for appends and single-sequence blocks
    float *mv;      // (8r + H + 1) Markov / confidence features
    float *probs;   // (V) processed distribution of one slot
    void *sscratch; // sampler scratch for V
};

// What config.json (or a GGUF drafter's metadata) says beyond the fields of ds_drafter.
typedef struct {
    int layers, target_layers, block, mask, rank, conf, conf_markov, bias, k_eq_v;
    double theta, partial, softcap, eps;
    const char *head_type;
} draft_config;

// f32 vector storage of the drafter (sized by the loader up front), or NULL when it is full.
float *ds_drafter_own(ds_drafter *d, size_t n);
// The storage a drafter of this configuration needs (floats).
size_t ds_drafter_own_size(const ds_drafter *d, const draft_config *c);

// A DSpark / DFlash drafter in the GGUF form llama.cpp's converter writes (load_gguf.c): its
// metadata into d and c (the target fills in what the file leaves out), then its tensors, the
// embedding and LM head taken from the target (the file has none).
ds_status ds_drafter_gguf_config(ds_drafter *d, const char *path, const ds_model *target, draft_config *c);
ds_status ds_drafter_gguf_tensors(ds_drafter *d, const draft_config *c, const ds_model *target);

// draft_vocab.json in the drafter's directory, if present (vocab.c; called by ds_drafter_load).
ds_status ds_drafter_load_vocab(ds_drafter *d, const char *dir);
void ds_drafter_vocab_free(ds_drafter *d);

#endif
