// GBNF text (a request's "grammar", --grammar-file): parse; on success, walk the matcher with the
// masks over a small byte-level BPE vocabulary (fixtures/chat_chatml): at each step the first and
// the last allowed token are accepted in turn, every mask checked against the end tokens' rule.
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sample/grammar.h"

static ds_grammar_vocab *vocab(void) {
    static ds_grammar_vocab *v;
    static ds_tokenizer *t;
    if (!v) {
        if (ds_tokenizer_load(DS_FUZZ_FIXTURES "/chat_chatml", &t)) abort();
        if (ds_grammar_vocab_init(t, ds_tokenizer_vocab_size(t), &v)) abort();
    }
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    ds_grammar *g = NULL;
    if (ds_grammar_parse(text, &g) == DS_OK) {
        ds_grammar_vocab *v = vocab();
        const int V = ds_grammar_vocab_size(v);
        const int32_t end = V - 1;
        ds_grammar_matcher *m;
        if (ds_grammar_matcher_init(g, v, &end, 1, &m) == DS_OK) {
            ds_grammar_state s = ds_grammar_start(m);
            for (int step = 0; step < 16 && !s.ended; step++) {
                const uint32_t *mask = ds_grammar_mask(m, &s);
                if (!mask) break;
                int first = -1, last = -1;
                for (int i = 0; i < V; i++)
                    if ((mask[i >> 5] >> (i & 31)) & 1) last = i, first = first < 0 ? i : first;
                if (first < 0) abort(); // a mask always allows something (the end token at worst)
                if (((mask[end >> 5] >> (end & 31)) & 1) != (ds_grammar_complete(m, &s) || first == end)) abort();
                if (ds_grammar_accept(m, &s, step & 1 ? last : first) != 1) abort();
            }
            ds_grammar_matcher_free(m);
        }
        ds_grammar_free(g);
    }
    free(text);
    return 0;
}
