// The round-based decoding engine over a set of sequences (docs/formats/deepspec-checkpoint.md §5, for R >= 1):
//
//   add:    queue the prompt; rounds first prefill prompt[0..N-2] in chunks of 256 rows (taps to
//           the drafter; at most 256 prompt rows per round over all sequences, so a long prompt
//           never stalls the others for more than one chunk); anchor = prompt[N-1] at position
//           s = N-1 (plain decoding, and speculation while the auto gate drafts nothing: the last
//           chunk rides with the first round, see can_ride)
//   round:  per sequence: feed pending tap rows to the drafter; draft d_0..d_{K-1}; choose ℓ
//           ONE target forward over every sequence's rows [anchor, d_0..d_{ℓ-1}] (positions s..s+ℓ)
//           per sequence: verify -> a accepted + next; commit d_0..d_{a-1}, next (stop at EOS or
//           max_new); crop the target KV cache to s + a + 1; pending taps = rows 0..a; s += a + 1;
//           anchor = next.
// Plain decoding is the same loop with ℓ = 0: every generated token goes through ds_verify.
//
// A grammar (ds_seq_params.grammar) masks every distribution: the state before row k is the
// committed state advanced over d_0..d_{k-1} (g_rows[k]); the drafter masks slot k with it (the
// constrain callback of its walk; ngram proposals are cut at the first token it disallows), and
// the target's row k logits are masked with it before ds_verify, so p and q are the masked
// processed distributions. After verification the committed state becomes g_rows[a] advanced by
// the next token; the other rows' states are dropped with the rejected drafts' KV rows.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "model/model.h"
#include "sched/schedule.h"
#include "sample/grammar.h"
#include "speculate/engine_hooks.h"
#include "speculate/ngram.h"
#include "speculate/prompt_cache.h"
#include "speculate/verify.h"

#define DS_PREFILL_CHUNK 256 // prompt rows per chunk, and prefilled per round over all sequences
#define DS_MAX_DRAFT 64
#define DS_GRAMMAR_CACHE 8 // compiled grammars kept per engine

// A token tree's candidate row (or branch point: a chain slot) with its estimated chance to lie on
// the accepted path.
typedef struct {
    float a;
    int row; // a tree row, or (branch points) a slot
    int32_t tok;
    float beta; // (branch points) β, before calibration
} tree_cand;

typedef struct {
    int used, finished;
    ds_kv *kv;
    ds_draft_state *ds;
    int32_t *toks;       // (cap_toks) prompt then generated tokens; the last one is the anchor
    int n_toks, cap_toks;
    int n_prompt, max_new, n_gen, taken;
    int n_prefilled;     // prompt rows in the target cache (prefill is done at n_prompt - 1)
    int ride;            // the prompt's rows from n_prefilled on go with this round's anchor (can_ride)
    int cache_use;       // the prompt cache: 1 = look it up before the first chunk, 2 = looked (keep
                         // the prompt's whole chunks when prefill ends); 0 = off for this sequence
    ds_finish_reason reason;
    int32_t stop_token;  // the stop id that ended it (DS_FINISH_STOP), else -1
    ds_sampler_params sp;
    ds_rng rng;
    int32_t stop_ids[DS_SEQ_MAX_STOP_IDS]; // its own stop ids (besides the model's)
    int n_stop_ids;
    int batch_invariant; // decoding forwards on the multi-row kernel (ds_seq_params)
    int n_pending;       // tap rows waiting for the drafter
    int cap_pending;     // rows `pending` holds
    float *pending;      // (cap_pending, T·H)
    int32_t rows[DS_MAX_DRAFT + 1]; // this round's target rows: anchor, then drafts (a token tree: the
                                    // chain's, then the branches')
    int ell;             // drafts of the chain verified this round
    int n_drafted;       // drafts proposed this round (ell <= n_drafted)
    int n_rows;          // target rows this round: 1 + ell, or with a token tree more
    int tree;            // this round verifies a token tree (rows past 1 + ell are branches)
    int32_t par[DS_MAX_DRAFT + 1];  // (n_rows) a tree's parent row of each row (-1 for the anchor)
    int q_row[DS_MAX_DRAFT + 1];    // (n_rows) a tree row's draft logits row in q_logits (-1: proposed
                                    // deterministically, a branch's first token)
    float row_a[DS_MAX_DRAFT + 1];  // (n_rows) a tree row's estimated chance to be on the accepted path
    float row_beta[DS_MAX_DRAFT + 1]; // (n_rows) a branch's first row: its estimated β (else -1)
    tree_cand bp[DS_MAX_DRAFT];     // (ell) each chain slot as a branch point: a and the alternative
    int cap_rows;        // rows p_logits and taps hold (1 + K, or 64 with token trees)
    float *q_logits;     // (cap_rows - 1, V) draft logits: the chain's slots, then tree branches' rows
    float conf[DS_MAX_DRAFT];
    float *p_logits;     // (cap_rows, V) target logits of this round
    float *taps;         // (cap_rows, T·H) this round's tap rows
    int lp_top;          // logprobs: alternatives per token (ds_engine_set_logprobs); lp NULL = off
    float *lp;           // (max_new, 1 + lp_top) per generated token: its log-probability, then the top ones'
    int32_t *lp_ids;     // (max_new, lp_top) their ids
    int plp_top;         // prompt logprobs (ds_engine_set_prompt_logprobs); plp NULL = off
    float *plp;          // (n_prompt, 1 + plp_top) prompt token i's, from prefill row i - 1 (row 0 unused)
    int32_t *plp_ids;    // (n_prompt, plp_top)
    float *plp_logits;   // (DS_PREFILL_CHUNK, V) one chunk's logits
    ds_seq_stats stats;
    int gslot;                   // its entry in the engine's grammar cache, -1 = unconstrained
    ds_grammar_matcher *gm;      // that entry's matcher (shared by the sequences with the same grammar)
    ds_grammar_state g_state;    // after the committed tokens
    ds_grammar_state g_rows[DS_MAX_DRAFT + 1]; // before row k: g_state advanced by d_0..d_{k-1}
    int g_failed;                // the grammar failed while drafting (seq_fail follows)
    char err[256];               // why it failed (DS_FINISH_ERROR)
    int V;
} seq;

struct ds_engine {
    const ds_model *m;
    const ds_drafter *d;
    ds_spec_params sp;
    int K;               // most drafts per round
    int tap_w;           // floats per tap row (n_taps · hidden), 0 without a drafter
    seq *seqs;
    int n_seqs, cap_seqs;
    ds_workspace *ws;
    ds_forward_seq *fwd; // (cap_seqs)
    int *fwd_owner;      // (cap_seqs)
    ds_verify_scratch vs;
    ds_cost_table costs; // DS_SCHEDULE_AUTO
    const float **sched_conf; // (cap_seqs) scheduler inputs
    int *sched_k, *sched_ell, *sched_owner;
    void *sched_scratch;
    ds_round_observer observer;
    void *observer_ctx;
    ds_draft_gate gate;  // DS_SCHEDULE_AUTO: whether drafting pays (see schedule.h)
    int gate_closed;     // ... and the last round's gate drafted nothing (new prompts may ride, can_ride)
    int gate_force;      // ... or its decision forced (-1: not; engine_hooks.h)
    double tree_pred, tree_hit; // token trees: Σ β of the branches' first tokens tried, and how many
                                // were accepted (decayed): β's calibration from past rounds
    ds_prompt_cache *pc; // NULL = off
    int round_tokens;    // tokens committed by the round being committed (finish_round adds)
    // This round's drafter batch (cap_seqs entries each).
    ds_draft_batch *bt;
    int bt_n;
    double bt_append_s;  // seconds this round spent feeding queued context rows to the drafter
    ds_draft_seq *bt_seqs; // (cap_seqs) the sequences drafted this round
    int *bt_owner;         // (cap_seqs) their index in seqs
    int *bt_ndrafted;      // (cap_seqs) slots each drafted (a grammar may stop it early)
    ds_grammar_vocab *gvoc; // the target's token bytes and trie, built for the first grammar
    // Compiled grammars with their matchers, by (GBNF text, end tokens): sequences with the same
    // grammar share the memo of transitions and the mask cache (states are values; the engine is
    // single-threaded and applies every mask before asking for the next). Kept after their last
    // sequence until DS_GRAMMAR_CACHE others need room.
    struct {
        char *text;
        int32_t ends[DS_MAX_STOP + DS_SEQ_MAX_STOP_IDS + 1];
        int n_ends, refs;
        uint64_t used;
        ds_grammar *g;
        ds_grammar_matcher *m;
    } gc[DS_GRAMMAR_CACHE];
    uint64_t gc_clock;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// s fails on its own (DS_FINISH_ERROR, the last error as its message); the others go on.
static void seq_fail(seq *s) {
    s->finished = 1;
    s->reason = DS_FINISH_ERROR;
    snprintf(s->err, sizeof s->err, "%s", ds_last_error());
}

const char *ds_spec_kind_name(ds_spec_kind k) {
    return k == DS_SPEC_DSPARK ? "dspark" : k == DS_SPEC_NGRAM ? "ngram" : "none";
}

ds_status ds_engine_init(const ds_model *m, const ds_drafter *drafter, const ds_spec_params *sp, ds_engine **out) {
    *out = NULL;
    if (sp->kind == DS_SPEC_DSPARK && !drafter)
        return ds_fail(DS_ERR_INVALID, "speculation with a DSpark drafter needs a drafter (-d DIR)");
    if (sp->draft_max < 0 || sp->draft_max > DS_MAX_DRAFT)
        return ds_fail(DS_ERR_INVALID, "draft length %d outside 0..%d", sp->draft_max, DS_MAX_DRAFT);
    ds_engine *e = ds_calloc(1, sizeof *e);
    if (!e) return DS_ERR_NOMEM;
    e->gate_force = -1;
    e->m = m;
    e->sp = *sp;
    if (sp->kind == DS_SPEC_DSPARK) {
        const ds_drafter_info *di = ds_drafter_get_info(drafter);
        e->d = drafter;
        e->tap_w = di->n_taps * di->hidden;
        ds_status bst = ds_draft_batch_init(drafter, &e->bt);
        if (bst) {
            free(e);
            return bst;
        }
        e->K = sp->draft_max ? sp->draft_max : di->block_size;
        if (e->K > di->block_size) e->K = di->block_size;
    } else if (sp->kind == DS_SPEC_NGRAM) {
        e->K = sp->draft_max ? sp->draft_max : 7;
        if (!e->sp.ngram_n) e->sp.ngram_n = 3;
    }
    if (sp->schedule == DS_SCHEDULE_AUTO) {
        ds_status st = DS_OK;
        if (sp->costs) e->costs = *sp->costs;
        else st = ds_profile_costs(m, 64, 256, 3, 1, &e->costs); // quick start-up profile
        // The drafting gate's priors: the drafter's round cost on this machine (measured now at R = 1
        // and 4, fitted as a + b·R) and the acceptance its calibration run realized.
        double a = 0, b = 0;
        if (!st && sp->kind == DS_SPEC_DSPARK && ds_drafter_get_info(drafter)->has_confidence && e->K > 0) {
            double d1 = 0, d4 = 0;
            st = ds_drafter_profile_round(drafter, 1, e->K, 64, 3, &d1);
            if (!st) st = ds_drafter_profile_round(drafter, 4, e->K, 64, 3, &d4);
            b = d4 > d1 ? (d4 - d1) / 3 : 0;
            a = d1 - b > 0 ? d1 - b : 0;
        }
        const float *prior[DS_GATE_CLASSES] = {NULL};
        int n_prior[DS_GATE_CLASSES] = {0};
        for (int c = 0; e->d && c < DS_GATE_CLASSES; c++)
            n_prior[c] = ds_drafter_acceptance_prior(e->d, c == DS_GATE_SAMPLED, &prior[c]);
        ds_gate_init(&e->gate, a, b, prior, n_prior);
        if (st) {
            ds_engine_free(e);
            return st;
        }
    }
    const int V = m->info.vocab_size;
    e->vs.p = malloc(sizeof(float) * V);
    e->vs.q = malloc(sizeof(float) * V);
    e->vs.sscratch = malloc(ds_sampler_scratch_size(V));
    ds_status st = ds_workspace_init(m, &e->ws);
    if (!st && sp->prompt_cache_bytes) {
        ds_kv *probe = NULL; // the floats one KV row holds
        if (!(st = ds_kv_init(m, 1, &probe)))
            st = ds_prompt_cache_init(sp->prompt_cache_bytes, ds_kv_row_bytes(probe), (size_t)e->tap_w, &e->pc);
        ds_kv_free(probe);
    }
    if (!st && (!e->vs.p || !e->vs.q || !e->vs.sscratch)) st = ds_fail(DS_ERR_NOMEM, "out of memory");
    if (st) {
        ds_engine_free(e);
        return st;
    }
    *out = e;
    return DS_OK;
}

static void seq_release(ds_engine *e, seq *s) {
    if (s->gm) e->gc[s->gslot].refs--;
    free(s->plp);
    free(s->plp_ids);
    free(s->plp_logits);
    ds_kv_free(s->kv);
    ds_draft_state_free(s->ds);
    free(s->toks);
    free(s->pending);
    free(s->q_logits);
    free(s->p_logits);
    free(s->taps);
    free(s->lp);
    free(s->lp_ids);
    memset(s, 0, sizeof *s);
}

void ds_engine_free(ds_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_seqs; i++) seq_release(e, &e->seqs[i]);
    for (int i = 0; i < DS_GRAMMAR_CACHE; i++) {
        ds_grammar_matcher_free(e->gc[i].m);
        ds_grammar_free(e->gc[i].g);
        free(e->gc[i].text);
    }
    free(e->seqs);
    free(e->fwd);
    free(e->fwd_owner);
    free(e->sched_conf);
    free(e->sched_k);
    free(e->sched_ell);
    free(e->sched_owner);
    free(e->sched_scratch);
    free(e->bt_seqs);
    free(e->bt_owner);
    free(e->bt_ndrafted);
    ds_grammar_vocab_free(e->gvoc);
    ds_draft_batch_free(e->bt);
    ds_workspace_free(e->ws);
    ds_prompt_cache_free(e->pc);
    free(e->vs.p);
    free(e->vs.q);
    free(e->vs.sscratch);
    free(e);
}

static seq *get(const ds_engine *e, int id) { return id >= 0 && id < e->n_seqs && e->seqs[id].used ? &e->seqs[id] : NULL; }

// Append committed token t; returns 0 when the sequence ends here (EOS or max_new reached).
static int is_stop(const ds_engine *e, const seq *s, int32_t t) {
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == t) return 1;
    return ds_model_is_stop(e->m, t);
}

static int commit(const ds_engine *e, seq *s, int32_t t) {
    if (is_stop(e, s, t)) {
        s->finished = 1;
        s->reason = DS_FINISH_STOP;
        s->stop_token = t;
        return 0;
    }
    s->toks[s->n_toks++] = t;
    s->n_gen++;
    s->stats.generated++;
    if (s->n_gen >= s->max_new) {
        s->finished = 1;
        s->reason = DS_FINISH_LENGTH;
        return 0;
    }
    return 1;
}

static ds_status slot_for(ds_engine *e, int *id) {
    for (int i = 0; i < e->n_seqs; i++)
        if (!e->seqs[i].used) {
            *id = i;
            return DS_OK;
        }
    if (e->n_seqs == e->cap_seqs) {
        const int cap = e->cap_seqs ? 2 * e->cap_seqs : 4;
        seq *ns = realloc(e->seqs, sizeof *ns * cap);
        if (!ns) return ds_fail(DS_ERR_NOMEM, "out of memory");
        e->seqs = ns;
        ds_forward_seq *nf = realloc(e->fwd, sizeof *nf * cap);
        if (!nf) return ds_fail(DS_ERR_NOMEM, "out of memory");
        e->fwd = nf;
        int *no = realloc(e->fwd_owner, sizeof *no * cap);
        if (!no) return ds_fail(DS_ERR_NOMEM, "out of memory");
        e->fwd_owner = no;
        const float **sc = realloc(e->sched_conf, sizeof *sc * cap);
        if (sc) e->sched_conf = sc;
        int *sk = sc ? realloc(e->sched_k, sizeof *sk * cap) : NULL;
        if (sk) e->sched_k = sk;
        int *se = sk ? realloc(e->sched_ell, sizeof *se * cap) : NULL;
        if (se) e->sched_ell = se;
        int *so = se ? realloc(e->sched_owner, sizeof *so * cap) : NULL;
        if (so) e->sched_owner = so;
        void *ss = so ? realloc(e->sched_scratch, ds_schedule_scratch_size(cap * (DS_MAX_DRAFT + 1))) : NULL;
        if (ss) e->sched_scratch = ss;
        ds_draft_seq *bs = ss ? realloc(e->bt_seqs, sizeof *bs * cap) : NULL;
        if (bs) e->bt_seqs = bs;
        int *bo = bs ? realloc(e->bt_owner, sizeof *bo * cap) : NULL;
        if (bo) e->bt_owner = bo;
        int *bn = bo ? realloc(e->bt_ndrafted, sizeof *bn * cap) : NULL;
        if (bn) e->bt_ndrafted = bn;
        if (!bn) return ds_fail(DS_ERR_NOMEM, "out of memory");
        e->cap_seqs = cap;
    }
    memset(&e->seqs[e->n_seqs], 0, sizeof(seq));
    *id = e->n_seqs++;
    return DS_OK;
}

// Compile s's grammar against the target's tokenizer (whose token bytes the engine keeps for every
// grammar sequence); its end tokens are the model's stop ids and the sequence's own.
static ds_status grammar_init(ds_engine *e, seq *s, const char *text) {
    ds_status st;
    if (!e->gvoc) {
        const ds_tokenizer *t = ds_model_tokenizer(e->m);
        if (!t) return ds_fail(DS_ERR_UNSUPPORTED, "a grammar needs the model's tokenizer, and this model has none");
        if ((st = ds_grammar_vocab_init(t, e->m->info.vocab_size, &e->gvoc))) return st;
    }
    int32_t ends[DS_MAX_STOP + DS_SEQ_MAX_STOP_IDS + 1];
    int n = 0;
    if (e->m->info.eos_id >= 0) ends[n++] = e->m->info.eos_id; // (ds_model_is_stop's set)
    for (int i = 0; i < e->m->n_stop; i++) ends[n++] = e->m->stop_ids[i];
    for (int i = 0; i < s->n_stop_ids; i++) ends[n++] = s->stop_ids[i];
    int slot = -1, free_slot = -1;
    for (int i = 0; i < DS_GRAMMAR_CACHE && slot < 0; i++) {
        if (e->gc[i].text && e->gc[i].n_ends == n && !memcmp(e->gc[i].ends, ends, sizeof(int32_t) * (size_t)n) &&
            !strcmp(e->gc[i].text, text))
            slot = i;
        else if (!e->gc[i].refs && (free_slot < 0 || e->gc[i].used < e->gc[free_slot].used))
            free_slot = i; // (empty entries have used 0: taken first)
    }
    if (slot < 0) {
        if (free_slot < 0) return ds_fail(DS_ERR_INVALID, "more than %d different grammars at once", DS_GRAMMAR_CACHE);
        slot = free_slot;
        ds_grammar_matcher_free(e->gc[slot].m);
        ds_grammar_free(e->gc[slot].g);
        free(e->gc[slot].text);
        memset(&e->gc[slot], 0, sizeof e->gc[slot]);
        if ((st = ds_grammar_parse(text, &e->gc[slot].g))) return st;
        if ((st = ds_grammar_matcher_init(e->gc[slot].g, e->gvoc, ends, n, &e->gc[slot].m)) ||
            !(e->gc[slot].text = strdup(text))) {
            ds_grammar_matcher_free(e->gc[slot].m);
            ds_grammar_free(e->gc[slot].g);
            memset(&e->gc[slot], 0, sizeof e->gc[slot]);
            return st ? st : ds_fail(DS_ERR_NOMEM, "out of memory");
        }
        memcpy(e->gc[slot].ends, ends, sizeof(int32_t) * (size_t)n);
        e->gc[slot].n_ends = n;
    }
    e->gc[slot].refs++;
    e->gc[slot].used = ++e->gc_clock;
    s->gslot = slot;
    s->gm = e->gc[slot].m;
    s->g_state = ds_grammar_start(s->gm);
    return DS_OK;
}

// The drafter's slot k under s's grammar: the state after the drafts before it masks its logits.
// Stops drafting after an end token, or where no token the grammar allows has a finite logit.
static int grammar_constrain(void *ctx, int k, const int32_t *tokens, float *logits) {
    seq *s = ctx;
    if (k > 0) {
        if (s->g_rows[k - 1].ended) return 0;
        s->g_rows[k] = s->g_rows[k - 1];
        const int r = ds_grammar_accept(s->gm, &s->g_rows[k], tokens[k - 1]);
        if (r < 0) s->g_failed = 1; // (stop drafting it; the engine fails it after the batch)
        if (r <= 0) return 0;
        if (s->g_rows[k].ended) return 0;
    } else {
        s->g_rows[0] = s->g_state;
    }
    const uint32_t *mask = ds_grammar_mask(s->gm, &s->g_rows[k]);
    if (!mask) {
        s->g_failed = 1;
        return 0;
    }
    ds_logits_mask(logits, mask, s->V);
    return ds_logits_mask_any(logits, mask, s->V);
}

// This round's row states for the drafts s->rows[1..ell], cutting ℓ at the first draft the grammar
// disallows (ngram) and after an end token.
static ds_status grammar_rows(seq *s) {
    s->g_rows[0] = s->g_state;
    for (int k = 0; k < s->ell; k++) {
        s->g_rows[k + 1] = s->g_rows[k];
        const int r = s->g_rows[k].ended ? 0 : ds_grammar_accept(s->gm, &s->g_rows[k + 1], s->rows[1 + k]);
        if (r < 0) return ds_grammar_matcher_fail(s->gm);
        if (!r) {
            s->ell = k;
            break;
        }
    }
    return DS_OK;
}

ds_status ds_engine_add(ds_engine *e, const ds_seq_params *p, int *id) {
    const ds_model_info *in = &e->m->info;
    const int32_t *prompt = p->prompt;
    const int n_prompt = p->n_prompt, max_new = p->max_new;
    if (p->n_stop_ids < 0 || p->n_stop_ids > DS_SEQ_MAX_STOP_IDS || (p->n_stop_ids && !p->stop_ids))
        return ds_fail(DS_ERR_INVALID, "a sequence takes 0..%d stop ids, not %d", DS_SEQ_MAX_STOP_IDS, p->n_stop_ids);
    if (n_prompt < 1) return ds_fail(DS_ERR_INVALID, "empty prompt (at least BOS is needed)");
    if (max_new < 0) return ds_fail(DS_ERR_INVALID, "negative token budget");
    if ((long)n_prompt + max_new > in->max_ctx)
        return ds_fail(DS_ERR_INVALID, "prompt (%d tokens) + %d new tokens exceed the model's context of %d", n_prompt,
                       max_new, in->max_ctx);
    ds_status st = slot_for(e, id);
    if (st) return st;
    seq *s = &e->seqs[*id];
    s->used = 1;
    s->sp = p->sp ? *p->sp : ds_sampler_default();
    s->rng = ds_rng_init(p->seed, 0);
    if (p->n_stop_ids) memcpy(s->stop_ids, p->stop_ids, sizeof(int32_t) * (size_t)p->n_stop_ids);
    s->n_stop_ids = p->n_stop_ids;
    s->batch_invariant = p->batch_invariant != 0;
    s->n_prompt = n_prompt;
    s->max_new = max_new;
    s->cap_toks = n_prompt + max_new + 1;
    const int V = in->vocab_size, K = e->K;
    const int rows = e->sp.tree_branches && K + 1 < DS_TREE_MAX_ROWS ? DS_TREE_MAX_ROWS : K + 1; // (ds_forward_seq.parent)
    s->cap_rows = rows;
    s->toks = malloc(sizeof(int32_t) * s->cap_toks);
    s->p_logits = malloc(sizeof(float) * (size_t)rows * V);
    if (e->d) {
        s->q_logits = malloc(sizeof(float) * (size_t)(rows > 1 ? rows - 1 : 1) * V);
        s->taps = malloc(sizeof(float) * (size_t)rows * e->tap_w);
        s->cap_pending = rows > DS_PREFILL_CHUNK ? rows : DS_PREFILL_CHUNK;
        s->pending = malloc(sizeof(float) * (size_t)s->cap_pending * e->tap_w);
    }
    if (!s->toks || !s->p_logits || (e->d && (!s->q_logits || !s->taps || !s->pending))) {
        st = ds_fail(DS_ERR_NOMEM, "out of memory for a sequence");
        goto fail;
    }
    // Room for every committed row plus one round's unverified drafts.
    if ((st = ds_kv_init(e->m, n_prompt + max_new + rows, &s->kv))) goto fail;
    if (e->d && (st = ds_draft_state_init(e->d, n_prompt + max_new + 1, &s->ds))) goto fail;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            st = ds_fail(DS_ERR_INVALID, "prompt token %d is outside the vocabulary (0..%d)", prompt[i], V - 1);
            goto fail;
        }
    memcpy(s->toks, prompt, sizeof(int32_t) * n_prompt);
    s->n_toks = n_prompt;
    s->finished = max_new == 0;
    s->reason = max_new == 0 ? DS_FINISH_LENGTH : DS_FINISH_NONE;
    s->stop_token = -1;
    s->n_prefilled = 0; // rounds prefill it
    s->cache_use = e->pc && !p->no_prompt_cache;
    s->V = V;
    if (p->grammar && (st = grammar_init(e, s, p->grammar))) goto fail;
    return DS_OK;
fail:
    seq_release(e, s);
    return st;
}

// Prepare s's drafts for this round (depth at most K_cap): ngram proposes at once; for a DeepSpec
// drafter the pending tap rows are fed to its context and the sequence is queued in the round's
// batch (e->bt_*), drafted for all sequences together by draft_batch.
static ds_status draft_prepare(ds_engine *e, seq *s, int K_cap) {
    s->ell = 0;
    s->n_drafted = 0;
    s->tree = 0;
    if (s->ride) return DS_OK; // (its prompt's taps come with this round: it drafts from the next)
    const int remaining = s->max_new - s->n_gen; // tokens this sequence may still commit
    int K = e->K < remaining - 1 ? e->K : remaining - 1;
    if (K > K_cap) K = K_cap;
    if (e->sp.kind == DS_SPEC_NONE || K <= 0) return DS_OK;
    if (e->sp.kind == DS_SPEC_NGRAM) {
        s->ell = s->n_drafted = ds_ngram_propose(s->toks, s->n_toks, e->sp.ngram_n, K, s->rows + 1);
        return DS_OK;
    }
    const double t0 = now_s();
    ds_status st;
    if (s->n_pending) {
        if ((st = ds_drafter_append(e->d, s->ds, s->pending, s->n_pending))) return st;
        s->n_pending = 0;
    }
    e->bt_append_s += now_s() - t0;
    // The draft context must hold exactly the committed positions before the anchor.
    if (ds_draft_state_len(s->ds) != s->n_toks - 1)
        return ds_fail(DS_ERR_INVALID, "internal: draft context holds %d rows for anchor position %d",
                       ds_draft_state_len(s->ds), s->n_toks - 1);
    ds_draft_state_set_history(s->ds, s->toks + s->n_prompt, s->n_toks - s->n_prompt); // penalties count these
    const int j = e->bt_n++;
    e->bt_seqs[j] = (ds_draft_seq){.state = s->ds, .anchor = s->toks[s->n_toks - 1], .n_slots = K, .sp = &s->sp,
                                   .rng = &s->rng, .tokens = s->rows + 1, .logits = s->q_logits, .conf = s->conf,
                                   .constrain = s->gm ? grammar_constrain : NULL, .constrain_ctx = s,
                                   .n_drafted = &e->bt_ndrafted[e->bt_n - 1]};
    e->bt_ndrafted[j] = K;
    e->bt_owner[j] = (int)(s - e->seqs);
    s->stats.draft_s += now_s() - t0;
    return DS_OK;
}

// Draft every queued sequence in one batched drafter forward; then each one's ℓ for the fixed and
// threshold schedules.
static ds_status draft_batch(ds_engine *e) {
    if (!e->bt_n) return DS_OK;
    const double t0 = now_s();
    ds_status st = ds_drafter_draft_batch(e->d, e->bt, e->bt_seqs, e->bt_n);
    if (st) return st;
    const double per = (now_s() - t0) / e->bt_n; // drafting time per sequence-round
    for (int j = 0; j < e->bt_n; j++) {
        seq *s = &e->seqs[e->bt_owner[j]];
        const int K = e->bt_ndrafted[j];
        s->stats.draft_s += per;
        s->ell = s->n_drafted = K;
        // Static truncation (DeepSpec's --confidence-threshold): ℓ = first k with c_k < threshold.
        if (e->sp.schedule == DS_SCHEDULE_THRESHOLD && ds_drafter_get_info(e->d)->has_confidence)
            for (int k = 0; k < K; k++)
                if (s->conf[k] < e->sp.conf_threshold) {
                    s->ell = k;
                    break;
                }
    }
    ds_gate_observe_draft(&e->gate, e->bt_n, e->bt_append_s + per * e->bt_n);
    return DS_OK;
}

// Room for n more tap rows in s's queue: grow it up to 64 MiB (a drafter that is not drafting costs
// nothing), else hand the queued rows to the drafter now.
static ds_status reserve_pending(ds_engine *e, seq *s, int n) {
    if (s->n_pending + n <= s->cap_pending) return DS_OK;
    const size_t row = sizeof(float) * (size_t)e->tap_w;
    const int limit = (int)((64u << 20) / row);
    int cap = s->cap_pending;
    while (cap < s->n_pending + n && 2 * cap <= limit) cap *= 2;
    float *p = cap >= s->n_pending + n ? realloc(s->pending, row * (size_t)cap) : NULL;
    if (p) {
        s->pending = p;
        s->cap_pending = cap;
        return DS_OK;
    }
    ds_status st = ds_drafter_append(e->d, s->ds, s->pending, s->n_pending);
    s->n_pending = 0;
    if (!st && n > s->cap_pending) st = ds_fail(DS_ERR_INVALID, "internal: %d tap rows exceed the queue", n);
    return st;
}

// Log-probability of `tok` and the N most likely tokens (ties: lower id), best first, into lp
// (1 + N) and ids (N), from the target's processed distribution of `logits` with the given token
// history (the generated tokens, then drafts), at temperature 1 when decoding greedily.
static ds_status logprobs_of(ds_engine *e, const seq *s, const float *logits, const int32_t *hist, int n_hist,
                             const int32_t *drafts, int n_drafts, int32_t tok, int N, float *lp, int32_t *ids) {
    const int V = e->m->info.vocab_size;
    ds_sampler_params sp = s->sp;
    if (sp.temperature == 0) sp.temperature = 1;
    float *p = e->vs.p;
    ds_status st = ds_probs_process_hist(&sp, logits, V, hist, n_hist, drafts, n_drafts, p, e->vs.sscratch);
    if (st) return st;
    lp[0] = logf(p[tok]);
    for (int j = 0; j < N; j++) {
        int32_t best = -1;
        for (int i = 0; i < V; i++) {
            if (p[i] <= 0 || (best >= 0 && p[i] <= p[best])) continue;
            int taken = 0;
            for (int q = 0; q < j && !taken; q++) taken = ids[q] == i;
            if (!taken) best = i;
        }
        ids[j] = best;
        lp[1 + j] = best >= 0 ? logf(p[best]) : -INFINITY;
    }
    return DS_OK;
}

// The token committed at depth k of the accepted path (from target row `row`; history: the generated
// tokens, then the path's tokens before it, d) into generated slot g.
static ds_status record_logprobs(ds_engine *e, seq *s, int row, const int32_t *d, int k, int32_t tok, int g) {
    const int V = e->m->info.vocab_size, N = s->lp_top;
    return logprobs_of(e, s, s->p_logits + (size_t)row * V, s->toks + s->n_prompt, s->n_toks - s->n_prompt, d, k, tok,
                       N, s->lp + (size_t)g * (1 + N), s->lp_ids + (size_t)g * N);
}

// Prompt tokens from+1 .. from+rows from the logits of prefill rows from .. from+rows-1 (no history:
// nothing was generated yet).
static ds_status record_prompt_logprobs(ds_engine *e, seq *s, int from, int rows) {
    const int V = e->m->info.vocab_size, N = s->plp_top;
    for (int r = 0; r < rows; r++) {
        const int i = from + r + 1;
        ds_status st = logprobs_of(e, s, s->plp_logits + (size_t)r * V, NULL, 0, NULL, 0, s->toks[i], N,
                                   s->plp + (size_t)i * (1 + N), s->plp_ids + (size_t)i * N);
        if (st) return st;
    }
    return DS_OK;
}

// β's calibration: a branch's first token (row r, child of chain row k) was tried when the accepted
// path followed the chain through row k (rows 1..k) and not on to row k + 1; it predicted acceptance β.
static void tree_observe(ds_engine *e, const seq *s, int k, const int *keep, int a) {
    for (int r = s->ell + 1; r < s->n_rows; r++) {
        if (s->row_beta[r] < 0 || s->par[r] != k) continue;
        e->tree_pred = 0.995 * e->tree_pred + s->row_beta[r];
        e->tree_hit = 0.995 * e->tree_hit + (k < a && keep[k + 1] == r);
    }
}

// Verify and commit s's round after the shared forward.
static ds_status finish_round(ds_engine *e, seq *s) {
    const int V = e->m->info.vocab_size;
    const int base = s->n_toks - 1; // position of the anchor
    int a;
    int32_t next;
    if (s->gm) // row k's logits masked with the state before it (the drafter masked slot k alike)
        for (int k = 0; k <= s->ell; k++) {
            const uint32_t *mask = ds_grammar_mask(s->gm, &s->g_rows[k]);
            if (!mask) {
                seq_fail(s);
                return DS_OK;
            }
            ds_logits_mask(s->p_logits + (size_t)k * V, mask, V);
        }
    int keep[DS_MAX_DRAFT + 1]; // the accepted path's rows, the anchor's first
    int32_t d[DS_MAX_DRAFT + 1];   // ... and their tokens past the anchor
    ds_status st;
    if (s->tree) {
        st = ds_verify_tree(&s->sp, V, s->n_rows, s->rows, s->par, s->q_row, s->p_logits, s->q_logits,
                            s->toks + s->n_prompt, s->n_toks - s->n_prompt, &s->rng, s->n_toks, &e->vs, keep + 1, &a,
                            &next);
    } else {
        st = ds_verify(&s->sp, V, s->ell, s->rows + 1, s->p_logits, e->sp.kind == DS_SPEC_DSPARK ? s->q_logits : NULL,
                       s->toks + s->n_prompt, s->n_toks - s->n_prompt, &s->rng, s->n_toks, &e->vs, &a, &next);
        for (int k = 1; k <= a; k++) keep[k] = k;
    }
    if (st) return st;
    keep[0] = 0;
    for (int k = 0; k < a; k++) d[k] = s->rows[keep[k + 1]];
    int ca = 0; // the drafted chain's slots accepted (a tree's path may leave it): what calibration,
    while (ca < a && keep[ca + 1] == ca + 1) ca++; // the gate and acceptance by position count
    if (s->tree) tree_observe(e, s, ca, keep, a);
    if (e->observer)
        e->observer(e->observer_ctx, (int)(s - e->seqs), s->n_drafted,
                    e->sp.kind == DS_SPEC_DSPARK && ds_drafter_get_info(e->d)->has_confidence ? s->conf : NULL, s->ell, ca);
    ds_seq_stats *t = &s->stats;
    t->rounds++;
    t->drafted += s->n_rows - 1;
    t->accepted += a;
    e->round_tokens += a + 1;
    t->tree_rounds += s->tree;
    t->branch_accepted += ca < a;
    ds_gate_observe_round(&e->gate, s->ell, ca, s->sp.temperature > 0, s->n_drafted > 0);
    for (int k = 0; k < s->ell && k <= ca && k < 64; k++) {
        t->tried_by_pos[k]++;
        if (k < ca) t->accepted_by_pos[k]++;
    }
    for (int k = 0; k <= a && s->lp && s->n_gen + k < s->max_new; k++)
        if ((st = record_logprobs(e, s, keep[k], d, k, k < a ? d[k] : next, s->n_gen + k))) return st;
    if (s->gm) { // the state after the accepted drafts, then the next token; other rows are dropped
        s->g_state = s->g_rows[a];
        if (ds_grammar_accept(s->gm, &s->g_state, next) < 0) {
            seq_fail(s); // (this round's tokens are not committed: the request fails)
            return DS_OK;
        }
    }
    int more = 1;
    for (int k = 0; k < a && more; k++) more = commit(e, s, d[k]);
    if (more) commit(e, s, next);
    t->tau = t->rounds ? (double)(t->accepted + t->rounds) / t->rounds : 0;
    if (s->finished) return DS_OK;
    // Keep the anchor and the accepted drafts in the target cache; their taps go to the drafter.
    if ((st = s->tree ? ds_kv_keep(s->kv, base, keep, a + 1) : ds_kv_truncate(s->kv, base + a + 1))) return st;
    if (e->d) { // queue the rows; they reach the drafter when it next drafts (batched if it skips rounds)
        if ((st = reserve_pending(e, s, a + 1))) return st;
        for (int k = 0; k <= a; k++)
            memcpy(s->pending + (size_t)(s->n_pending + k) * e->tap_w, s->taps + (size_t)keep[k] * e->tap_w,
                   sizeof(float) * (size_t)e->tap_w);
        s->n_pending += a + 1;
    }
    return DS_OK;
}

static int prefilling(const seq *s) { return s->n_prefilled < s->n_prompt - 1; }
// Whether s takes part in this round: past its prefill, or its prompt's rest riding with it.
static int in_round(const seq *s) { return s->used && !s->finished && (!prefilling(s) || s->ride); }

// Whether every decoding sequence decodes greedily: its committed tokens are then the target's own
// whatever is verified, so no schedule can change the output and the search may look past a drop
// (ds_schedule_retrospective). The coupled rule has the same property (test_schedule shows it), but
// sampled rounds keep Algorithm 1's early stop: confidences are usually calibrated at temperature 0
// (dspark calibrate's default) and are overconfident at T = 1, where the early stop limits what
// they overspend, and the best prefix was measured at T = 0 only (docs/results.md). Under the residual
// rule the early stop is required for losslessness.
static int all_greedy(const ds_engine *e) {
    for (int i = 0; i < e->n_seqs; i++) {
        const seq *s = &e->seqs[i];
        if (s->used && !s->finished && !prefilling(s) && s->sp.temperature > 0) return 0;
    }
    return 1;
}

// Algorithm 1 over every sequence that drafted with confidences this round: the best admission
// prefix in greedy rounds (all_greedy, computed once per round by the caller), else the early stop.
static void schedule_auto(ds_engine *e, int greedy) {
    int R = 0;
    for (int i = 0; i < e->n_seqs; i++) {
        seq *s = &e->seqs[i];
        if (!s->used || s->finished || !s->n_drafted) continue;
        e->sched_conf[R] = s->conf;
        e->sched_k[R] = s->n_drafted;
        e->sched_owner[R++] = i;
    }
    if (!R) return;
    (greedy ? ds_schedule_retrospective : ds_schedule_auto)(e->sched_conf, e->sched_k, R, &e->costs, e->sched_ell,
                                                            e->sched_scratch);
    for (int j = 0; j < R; j++) e->seqs[e->sched_owner[j]].ell = e->sched_ell[j];
}

// ---- token trees ---------------------------------------------------------------------------------
// A round may verify a tree instead of a chain: the chain as drafted and scheduled, plus side branches
// at the verified slots where the drafted token is least likely the target's. A branch starts with the
// drafter's best other token at that slot and continues with its walk (ds_drafter_draft_branch: the
// block forward is shared, a branch costs its Markov head). Every row r gets a_r, its estimated
// chance to lie on the accepted path: a chain slot k has A_k = Π_{i≤k} c_i, a branch's first token at
// slot k A_{k-1}·(1 − c_k)·β_k with β_k = q_k(alt) / (1 − q_k(drafted)) (the target's token is not
// the drafted one; how likely it is the alternative), its continuation that times its confidences.
// Under DS_SCHEDULE_AUTO branch rows are admitted by decreasing a_r while τ·SPS(B) grows, stopping
// at the first that does not (Algorithm 1 over the chain's result); otherwise every branch row goes.
// Losslessness: the shape depends on the drafter's proposals only; greedy and coupled verification
// commit the target's own tokens whatever the tree, and the residual rule's recursive rejection of
// deterministic candidates keeps each token's probability (verify.h).

// The temperature-1 probability of `tok` under draft logits l (V), and the best other token's.
static void slot_alternative(const float *l, int V, int32_t tok, float *p_tok, int32_t *alt, float *p_alt) {
    float mx = -INFINITY;
    int32_t best = -1;
    for (int i = 0; i < V; i++) {
        mx = l[i] > mx ? l[i] : mx;
        if (i != tok && l[i] > -INFINITY && (best < 0 || l[i] > l[best])) best = i;
    }
    double z = 0;
    for (int i = 0; i < V; i++) z += l[i] > -INFINITY ? expf(l[i] - mx) : 0;
    *p_tok = (float)(expf(l[tok] - mx) / z);
    *alt = best;
    *p_alt = best >= 0 ? (float)(expf(l[best] - mx) / z) : 0;
}


static int cmp_tree_cand(const void *x, const void *y) {
    const tree_cand *p = x, *q = y;
    if (p->a != q->a) return p->a > q->a ? -1 : 1;
    return p->row - q->row; // ties: earlier rows (parents before children)
}

// s's chain rows' a (row_a), parents and branch points (bp); returns its τ contribution 1 + Σ a.
static double chain_rows(const ds_engine *e, seq *s) {
    const int V = e->m->info.vocab_size;
    double tau = 1, A = 1;
    s->par[0] = -1;
    s->q_row[0] = -1;
    s->row_a[0] = 1;
    for (int k = 0; k < s->ell; k++) {
        float pm, pa;
        int32_t alt;
        slot_alternative(s->q_logits + (size_t)k * V, V, s->rows[1 + k], &pm, &alt, &pa);
        const float c = isfinite(s->conf[k]) ? s->conf[k] : pm, beta = pa / fmaxf(1 - pm, 1e-6f);
        // (alt -1: no other token); β scaled by how often past branches' first tokens were accepted
        // against their estimates (1 observation's worth of prior at the estimate)
        const double rho = (e->tree_hit + 1) / (e->tree_pred + 1);
        s->bp[k] = (tree_cand){(float)(A * (1 - c) * fmin(beta * rho, 1)), k, alt, fminf(beta, 1)};
        A *= c;
        s->par[1 + k] = k;
        s->q_row[1 + k] = k;
        s->row_a[1 + k] = (float)A;
        tau += A;
    }
    return tau;
}

// Branches for s (sequence j of this round's drafting batch), appended after its chain's rows.
static ds_status tree_branches(ds_engine *e, seq *s, int j) {
    const int V = e->m->info.vocab_size, ell = s->ell, depth = e->sp.tree_depth ? e->sp.tree_depth : 2;
    tree_cand bp[DS_MAX_DRAFT]; // the branch points (chain_rows), best first
    int nb = 0;
    for (int k = 0; k < ell; k++)
        if (s->bp[k].tok >= 0) bp[nb++] = s->bp[k];
    qsort(bp, (size_t)nb, sizeof *bp, cmp_tree_cand);
    int n = ell + 1, nq = s->n_drafted; // next row, next draft-logits row
    const double t0 = now_s();
    ds_status st = DS_OK;
    for (int b = 0; b < nb && b < e->sp.tree_branches && !st; b++) {
        const int k = bp[b].row, left = s->n_drafted - k - 1, m = depth < left ? depth : left;
        if (n + 1 + m > DS_TREE_MAX_ROWS || nq + m > s->cap_rows - 1) break;
        s->rows[n] = bp[b].tok; // its first token: proposed deterministically
        s->par[n] = k;
        s->q_row[n] = -1;
        s->row_a[n] = bp[b].a;
        s->row_beta[n] = bp[b].beta;
        n++;
        float conf[DS_MAX_DRAFT];
        if (m && (st = ds_drafter_draft_branch(e->d, e->bt, j, &e->bt_seqs[j], k, bp[b].tok, m, s->rows + n,
                                               s->q_logits + (size_t)nq * V, conf)))
            break;
        for (int i = 0; i < m; i++, n++, nq++) {
            float c = conf[i], pa;
            int32_t alt;
            if (!isfinite(c)) // no confidence head: the drafter's probability of its token
                slot_alternative(s->q_logits + (size_t)nq * V, V, s->rows[n], &c, &alt, &pa);
            s->par[n] = n - 1;
            s->q_row[n] = nq;
            s->row_a[n] = s->row_a[n - 1] * c;
            s->row_beta[n] = -1;
        }
    }
    s->stats.draft_s += now_s() - t0;
    s->n_rows = n;
    s->tree = n > ell + 1;
    return st;
}

// Keep the chain's rows and those of the branch rows `keep` marks (a set closed under parents), in
// order; parents renumbered.
static void tree_compact(seq *s, const unsigned char *keep) {
    int to[DS_MAX_DRAFT + 1], n = s->ell + 1;
    for (int r = 0; r < n; r++) to[r] = r;
    for (int r = s->ell + 1; r < s->n_rows; r++) {
        if (!keep[r]) continue;
        to[r] = n;
        s->rows[n] = s->rows[r];
        s->par[n] = to[s->par[r]];
        s->q_row[n] = s->q_row[r];
        s->row_a[n] = s->row_a[r];
        s->row_beta[n] = s->row_beta[r];
        n++;
    }
    s->n_rows = n;
    s->tree = n > s->ell + 1;
}

// This round's token trees: branches for every drafted sequence that verifies a chain, then (auto)
// the admission of branch rows against the cost table, over all sequences together.
static ds_status trees_build(ds_engine *e, int auto_sched) {
    int B = 0;
    double tau = 0;
    for (int i = 0; i < e->n_seqs; i++) { // every decoding sequence's chain: the batch as scheduled
        seq *s = &e->seqs[i];
        if (!s->used || s->finished || prefilling(s)) continue;
        B += 1 + s->ell;
        tau += s->n_drafted ? chain_rows(e, s) : 1;
    }
    tree_cand c[DS_TREE_MAX_ROWS];
    for (int j = 0; j < e->bt_n; j++) {
        seq *s = &e->seqs[e->bt_owner[j]];
        if (s->gm || s->ell < 1 || s->finished) continue;
        ds_status st = tree_branches(e, s, j);
        if (st) return st;
        if (!s->tree || !auto_sched) continue;
        int n = 0;
        for (int r = s->ell + 1; r < s->n_rows; r++) c[n++] = (tree_cand){s->row_a[r], r, 0};
        qsort(c, (size_t)n, sizeof *c, cmp_tree_cand);
        unsigned char keep[DS_MAX_DRAFT + 1] = {0};
        for (int i = 0; i < n; i++) { // admitted while τ·SPS(B) grows; the first that does not ends it
            if ((tau + c[i].a) * ds_cost_sps(&e->costs, B + 1) <= tau * ds_cost_sps(&e->costs, B)) break;
            keep[c[i].row] = 1;
            tau += c[i].a;
            B++;
        }
        tree_compact(s, keep);
    }
    return DS_OK;
}


// Before s's first chunk: start from the longest cached prefix of whole chunks (its KV rows into
// the target cache, its tap rows into the drafter's queue).
static ds_status cache_lookup(ds_engine *e, seq *s) {
    s->cache_use = 2;
    const void *kv = NULL;
    const float *taps = NULL;
    int stride = 0;
    const int rows = ds_prompt_cache_lookup(e->pc, s->toks, s->n_prompt - 1, DS_PREFILL_CHUNK, &kv, &taps, &stride);
    if (!rows) return DS_OK;
    ds_status st = ds_kv_load(s->kv, kv, stride, rows);
    if (!st && e->d && !(st = reserve_pending(e, s, rows))) {
        for (int r = 0; r < rows; r++)
            memcpy(s->pending + (size_t)(s->n_pending + r) * e->tap_w, taps + (size_t)r * e->tap_w,
                   sizeof(float) * (size_t)e->tap_w);
        s->n_pending += rows;
    }
    if (st) return st;
    s->n_prefilled = rows;
    s->stats.cached_tokens = rows;
    return DS_OK;
}

// When s's prefill ends: keep its whole chunks, if its tap rows are all still queued (a queue that
// overflowed to the drafter has lost the first ones).
static ds_status cache_keep(ds_engine *e, seq *s) {
    const int rows = (s->n_prompt - 1) / DS_PREFILL_CHUNK * DS_PREFILL_CHUNK;
    if (!rows || (e->d && s->n_pending != s->n_prefilled)) return DS_OK;
    return ds_prompt_cache_insert(e->pc, s->toks, rows, s->kv, e->d ? s->pending : NULL);
}

int ds_engine_prompt_cache(const ds_engine *e, ds_prompt_cache_stats *out) {
    if (!e->pc) {
        *out = (ds_prompt_cache_stats){0};
        return 0;
    }
    ds_prompt_cache_get_stats(e->pc, out);
    return 1;
}

// Whether the rest of s's prompt rides with its first round instead of a chunk of its own: one
// forward over [prompt rows n_prefilled .. N-2, anchor] whose last row's logits give the first
// token, so plain decoding saves the one-row step after the prefill (65-80 ms of a 12-16-token
// prompt's 260-330 ms on the inflated 2048 x 24 target, docs/results.md). Only where the first round
// would draft nothing for it anyway, since a drafter needs the prompt's taps before it drafts: plain
// decoding, and a DSpark engine whose auto gate drafted nothing last round (where drafting does not
// pay, as at R = 4 and T = 1 on the inflated pair; a rider's rows' taps go to its drafter queue as
// a chunk's would, and it drafts from its second round on, whatever the gate says now). Without
// prompt log-probabilities (they take every row's logits), for at most one chunk's rows, and for
// fewer rows than any product would send to sgemm: the riding forward runs on the multi-row kernels
// (batch_invariant), as the chunk and the one-row step would, so every row is the same bit for bit
// and riding never changes a token (test_engine's test_ride, test_ride_speculative).
static int can_ride(const ds_engine *e, const seq *s) {
    const int rows = s->n_prompt - s->n_prefilled; // the prompt's rest, the anchor included
    return (e->sp.kind == DS_SPEC_NONE || (e->sp.kind == DS_SPEC_DSPARK && e->gate_closed)) && !s->plp &&
           rows <= DS_PREFILL_CHUNK && rows < ds_model_gemm_rows(e->m);
}

// Prefill the next prompt chunks: sequences in order, each chunk min(DS_PREFILL_CHUNK, what is
// left) rows in a forward of its own, until DS_PREFILL_CHUNK rows were done this round (a riding
// rest counts; it goes with the round). A chunk is always the same rows whatever else runs (the
// numerics of a sequence never depend on the batch it shares a round with), and a long prompt
// delays the others' rounds by one chunk at most.
static ds_status prefill_chunks(ds_engine *e) {
    const ds_drafter_info *di = e->d ? ds_drafter_get_info(e->d) : NULL;
    ds_status st = DS_OK;
    // A chunk is the same rows whatever else runs, so it keeps the fastest kernels even for a
    // sequence that asked for batch invariance (its decoding rounds do not).
    for (int i = 0, budget = DS_PREFILL_CHUNK; i < e->n_seqs && budget > 0; i++) {
        seq *s = &e->seqs[i];
        if (!s->used || s->finished || !prefilling(s)) continue;
        if (s->cache_use == 1 && (st = cache_lookup(e, s))) break;
        if (!prefilling(s)) continue;
        if ((s->ride = can_ride(e, s))) {
            budget -= s->n_prompt - s->n_prefilled;
            continue;
        }
        const int left = s->n_prompt - 1 - s->n_prefilled, rows = left < DS_PREFILL_CHUNK ? left : DS_PREFILL_CHUNK;
        ds_forward_seq f = {.kv = s->kv, .tokens = s->toks + s->n_prefilled, .n_tokens = rows};
        if (s->plp) {
            f.n_logits = rows;
            f.logits = s->plp_logits;
        }
        if (di) { // tap rows straight into its queue: they reach the drafter when it first drafts
            if ((st = reserve_pending(e, s, rows))) break;
            f.tap_layers = di->tap_layers;
            f.n_taps = di->n_taps;
            f.taps = s->pending + (size_t)s->n_pending * e->tap_w;
        }
        const double t0 = now_s();
        if ((st = ds_model_forward(e->m, e->ws, &f, 1))) break;
        s->stats.prefill_s += now_s() - t0;
        s->stats.prefill_rows += rows;
        if (s->plp && (st = record_prompt_logprobs(e, s, s->n_prefilled, rows))) break;
        s->n_prefilled += rows;
        if (di) s->n_pending += rows;
        budget -= rows;
        if (s->cache_use && !prefilling(s) && (st = cache_keep(e, s))) break;
    }
    return st;
}

ds_status ds_engine_step(ds_engine *e) {
    for (int i = 0; i < e->n_seqs; i++) e->seqs[i].ride = 0; // (decided anew each step, even after an error)
    ds_status st = prefill_chunks(e);
    if (st) return st;
    const double t_round = now_s(); // the round from drafting to its commit (prefill chunks excluded)
    int n = 0, R = 0; // R: sequences decoding (past their prefill)
    for (int i = 0; i < e->n_seqs; i++) R += in_round(&e->seqs[i]);
    const int auto_sched =
        e->sp.schedule == DS_SCHEDULE_AUTO && e->sp.kind == DS_SPEC_DSPARK && ds_drafter_get_info(e->d)->has_confidence;
    if (auto_sched) {
        // MoE targets: the routing of every row fed so far prices verification (ds_cost_sps; past rows only).
        ds_workspace_expert_windows(e->ws, e->costs.obs_experts + 1, DS_COST_WINDOWS);
        // The schedule prices a round's drafting with its verification (ds_cost_table.round_s): at
        // R = 4 drafting took a fifth to a third of the round, and pricing verification alone kept ℓ short.
        const double D = ds_gate_round_cost(&e->gate, R);
        e->costs.round_s = D > 0 ? D : 0;
    }
    const int greedy = auto_sched && all_greedy(e);
    const int K_cap = !auto_sched            ? e->K
                      : e->gate_force >= 0 ? (e->gate_force < e->K ? e->gate_force : e->K)
                                           : ds_gate_depth(&e->gate, &e->costs, R,
                                                           (greedy ? ds_schedule_max_admissions_retrospective
                                                                   : ds_schedule_max_admissions)(&e->costs, R, e->K),
                                                           !greedy);
    e->gate_closed = auto_sched && K_cap == 0;
    for (int i = 0; i < e->n_seqs; i++) {
        seq *s = &e->seqs[i];
        if (!in_round(s)) continue;
        if ((st = draft_prepare(e, s, K_cap))) return st;
    }
    if ((st = draft_batch(e))) return st;
    if (auto_sched) schedule_auto(e, greedy);
    if (e->sp.tree_branches && e->bt_n && (st = trees_build(e, auto_sched))) return st;
    e->bt_n = 0;
    e->bt_append_s = 0;
    for (int i = 0; i < e->n_seqs; i++) { // grammar: the rows' states, ngram drafts cut where disallowed
        seq *s = &e->seqs[i];
        if (!in_round(s) || !s->gm) continue;
        if (s->g_failed) {
            ds_grammar_matcher_fail(s->gm);
            seq_fail(s);
        } else if (grammar_rows(s)) {
            seq_fail(s);
        }
    }
    const ds_drafter_info *di = e->d ? ds_drafter_get_info(e->d) : NULL;
    for (int i = 0; i < e->n_seqs; i++) {
        seq *s = &e->seqs[i];
        if (!in_round(s)) continue;
        ds_forward_seq *f = &e->fwd[n];
        s->rows[0] = s->toks[s->n_toks - 1];
        if (!s->tree) s->n_rows = s->ell + 1;
        // (a tree's rows run on the multi-row kernel, as a chain of up to 8 does: every row computed
        // bit for bit as plain decoding computes it)
        *f = (ds_forward_seq){.kv = s->kv, .tokens = s->rows, .n_tokens = s->n_rows, .n_logits = s->n_rows,
                              .logits = s->p_logits, .batch_invariant = s->batch_invariant || s->tree,
                              .parent = s->tree ? s->par : NULL};
        if (di) {
            f->tap_layers = di->tap_layers;
            f->n_taps = di->n_taps;
            f->taps = s->taps;
        }
        if (s->ride) { // the prompt's rest, then the anchor (ℓ = 0: nothing drafted)
            f->tokens = s->toks + s->n_prefilled;
            f->n_tokens = s->n_prompt - s->n_prefilled;
            f->batch_invariant = 1;
            if (di) { // the rows' taps straight into the queue, as a chunk's (the anchor's: see below)
                if ((st = reserve_pending(e, s, f->n_tokens))) return st;
                f->taps = s->pending + (size_t)s->n_pending * e->tap_w;
            }
        }
        e->fwd_owner[n++] = i;
    }
    if (!n) return DS_OK;
    const double t0 = now_s();
    if ((st = ds_model_forward(e->m, e->ws, e->fwd, n))) return st;
    const double t_fwd = now_s() - t0;
    for (int j = 0; j < n; j++) { // riders: their prompt is in the cache now; the round was their prefill
        seq *s = &e->seqs[e->fwd_owner[j]];
        if (!s->ride) continue;
        if (di) { // the rest's taps stay queued; the anchor's go where finish_round takes a round's
            s->n_pending += s->n_prompt - 1 - s->n_prefilled;
            memcpy(s->taps, s->pending + (size_t)s->n_pending * e->tap_w, sizeof(float) * (size_t)e->tap_w);
        }
        s->stats.prefill_rows += s->n_prompt - s->n_prefilled;
        s->stats.prefill_s += t_fwd;
        s->n_prefilled = s->n_prompt - 1;
        if (s->cache_use && (st = cache_keep(e, s))) return st;
    }
    e->round_tokens = 0;
    for (int j = 0; j < n; j++)
        if ((st = finish_round(e, &e->seqs[e->fwd_owner[j]]))) return st;
    // What the round realized (tokens per second, drafting included) checks the gate's model.
    if (auto_sched) ds_gate_observe_realized(&e->gate, R, !greedy, K_cap > 0, e->round_tokens, now_s() - t_round);
    const double dt = now_s() - t0;
    int B = 0;
    for (int j = 0; j < n; j++) {
        seq *s = &e->seqs[e->fwd_owner[j]];
        if (!s->ride) s->stats.verify_s += dt; // (a rider's forward counted as its prefill above)
        B += e->fwd[j].n_tokens;
    }
    if (auto_sched) ds_cost_observe(&e->costs, B, t_fwd); // as the profile measures: the forward
    return DS_OK;
}

const char *ds_engine_seq_error(const ds_engine *e, int id) {
    const seq *s = get(e, id);
    return s && s->reason == DS_FINISH_ERROR ? s->err : "";
}

ds_finish_reason ds_engine_finish_reason(const ds_engine *e, int id, int32_t *stop_token) {
    const seq *s = get(e, id);
    if (stop_token) *stop_token = s ? s->stop_token : -1;
    return s ? s->reason : DS_FINISH_NONE;
}

void ds_engine_force_gate(ds_engine *e, int depth) { e->gate_force = depth >= 0 ? depth : -1; }

void ds_engine_set_observer(ds_engine *e, ds_round_observer fn, void *ctx) {
    e->observer = fn;
    e->observer_ctx = ctx;
}

const ds_cost_table *ds_engine_costs(const ds_engine *e) { return &e->costs; }

int ds_engine_active(const ds_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_seqs; i++) n += e->seqs[i].used && !e->seqs[i].finished;
    return n;
}

int ds_engine_finished(const ds_engine *e, int id) {
    const seq *s = get(e, id);
    return !s || s->finished;
}

int ds_engine_take(ds_engine *e, int id, int32_t *out, int cap) {
    seq *s = get(e, id);
    if (!s) return 0;
    int n = s->n_gen - s->taken;
    if (n > cap) n = cap;
    memcpy(out, s->toks + s->n_prompt + s->taken, sizeof(int32_t) * (size_t)n);
    s->taken += n;
    return n;
}

ds_status ds_engine_set_logprobs(ds_engine *e, int id, int top) {
    seq *s = get(e, id);
    if (!s) return ds_fail(DS_ERR_INVALID, "no sequence %d", id);
    if (top < 0 || top > 20) return ds_fail(DS_ERR_INVALID, "top log-probabilities %d outside 0..20", top);
    free(s->lp);
    free(s->lp_ids);
    s->lp_top = top;
    s->lp = malloc(sizeof(float) * (size_t)(s->max_new ? s->max_new : 1) * (size_t)(1 + top));
    s->lp_ids = malloc(sizeof(int32_t) * (size_t)(s->max_new ? s->max_new : 1) * (size_t)(top ? top : 1));
    if (!s->lp || !s->lp_ids) {
        free(s->lp);
        free(s->lp_ids);
        s->lp = NULL;
        s->lp_ids = NULL;
        return ds_fail(DS_ERR_NOMEM, "out of memory");
    }
    return DS_OK;
}

int ds_engine_logprobs(const ds_engine *e, int id, int i, float *logprob, int32_t *top_ids, float *top_lps) {
    const seq *s = get(e, id);
    if (!s || !s->lp || i < 0 || i >= s->n_gen) return -1;
    const float *lp = s->lp + (size_t)i * (1 + s->lp_top);
    *logprob = lp[0];
    int n = 0;
    for (; n < s->lp_top && s->lp_ids[(size_t)i * s->lp_top + n] >= 0; n++) {
        top_ids[n] = s->lp_ids[(size_t)i * s->lp_top + n];
        top_lps[n] = lp[1 + n];
    }
    return n;
}

ds_status ds_engine_set_prompt_logprobs(ds_engine *e, int id, int top) {
    seq *s = get(e, id);
    if (!s) return ds_fail(DS_ERR_INVALID, "no sequence %d", id);
    if (top < 0 || top > 20) return ds_fail(DS_ERR_INVALID, "top log-probabilities %d outside 0..20", top);
    if (s->n_prefilled) return ds_fail(DS_ERR_INVALID, "prompt log-probabilities asked for after the prefill began");
    const int V = e->m->info.vocab_size, chunk = s->n_prompt - 1 < DS_PREFILL_CHUNK ? s->n_prompt - 1 : DS_PREFILL_CHUNK;
    free(s->plp);
    free(s->plp_ids);
    free(s->plp_logits);
    s->plp_top = top;
    s->plp = malloc(sizeof(float) * (size_t)s->n_prompt * (size_t)(1 + top));
    s->plp_ids = malloc(sizeof(int32_t) * (size_t)s->n_prompt * (size_t)(top ? top : 1));
    s->plp_logits = malloc(sizeof(float) * (size_t)(chunk > 0 ? chunk : 1) * (size_t)V);
    if (!s->plp || !s->plp_ids || !s->plp_logits) {
        free(s->plp);
        free(s->plp_ids);
        free(s->plp_logits);
        s->plp = s->plp_logits = NULL;
        s->plp_ids = NULL;
        return ds_fail(DS_ERR_NOMEM, "out of memory for prompt log-probabilities");
    }
    s->cache_use = 0; // every prompt row's logits are needed: nothing comes from the prompt cache
    return DS_OK;
}

int ds_engine_prompt_logprobs(const ds_engine *e, int id, int i, float *logprob, int32_t *top_ids, float *top_lps) {
    const seq *s = get(e, id);
    if (!s || !s->plp || i < 1 || i >= s->n_prompt || i > s->n_prefilled) return -1;
    const float *lp = s->plp + (size_t)i * (1 + s->plp_top);
    *logprob = lp[0];
    int n = 0;
    for (; n < s->plp_top && s->plp_ids[(size_t)i * s->plp_top + n] >= 0; n++) {
        top_ids[n] = s->plp_ids[(size_t)i * s->plp_top + n];
        top_lps[n] = lp[1 + n];
    }
    return n;
}

const ds_seq_stats *ds_engine_stats(const ds_engine *e, int id) {
    const seq *s = get(e, id);
    return s ? &s->stats : NULL;
}

ds_status ds_engine_remove(ds_engine *e, int id) {
    seq *s = get(e, id);
    if (!s) return ds_fail(DS_ERR_INVALID, "no sequence %d", id);
    seq_release(e, s);
    return DS_OK;
}
