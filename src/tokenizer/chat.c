// Chat formats: a conversation rendered as the prompt text a chat model expects. A tokenizer with a
// chat template renders through it (chat_template.c, the Jinja interpreter in jinja*.c). The
// built-in formats below are the fallback for tokenizers whose template is missing or does not
// parse; recognized from the template's markers, each renders plain system/user/assistant text
// messages exactly as the official template does:
//   chatml (Qwen):  "<|im_start|>{role}\n{content}<|im_end|>\n" per message; Qwen3's template
//                   (it mentions <think>) strips "...</think>" from earlier assistant turns and
//                   wraps a final assistant turn as "<think>\n\n</think>\n\n{content}"; Qwen2.5's
//                   adds its default system message when there is none.
//   gemma:          "<bos>" then "<start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n"; a
//                   system message is folded into the first user turn as "{system}\n\n"; the
//                   roles must alternate user/assistant.
//   llama3:         "<|begin_of_text|>" then "<|start_header_id|>{role}<|end_header_id|>\n\n
//                   {content|trim}<|eot_id|>" per message (Llama 3's template adds the assistant
//                   header unconditionally; here add_generation_prompt decides, as elsewhere).
//                   Llama 3.1/3.2 templates (they mention "Cutting Knowledge Date") always open
//                   with a system turn: "Cutting Knowledge Date: December 2023\nToday Date: {date}
//                   \n\n{system|trim}".
//   plain:          "role: content\n" per message (tokenizers without a chat template).
// The rendered text already holds BOS where the template puts it: tokenize it with ds_tokenize
// (which never doubles a leading BOS) or ds_tokenize_ex without DS_TOK_ADD_SPECIAL.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "dspark/tokenizer.h"
#include "tokenizer/hf_internal.h"
#include "tokenizer/utf8.h"

int ds_chat_detect(const char *tmpl) {
    if (!tmpl) return DS_CHAT_PLAIN;
    if (strstr(tmpl, "<|im_start|>")) return DS_CHAT_CHATML;
    if (strstr(tmpl, "<start_of_turn>")) return DS_CHAT_GEMMA;
    if (strstr(tmpl, "<|start_header_id|>")) return DS_CHAT_LLAMA3;
    return DS_CHAT_PLAIN;
}

unsigned ds_chat_variant(const char *tmpl) {
    unsigned f = 0;
    if (tmpl && strstr(tmpl, "</think>") && strstr(tmpl, "reasoning_content")) f |= DS_CHAT_QWEN3_THINK;
    if (tmpl && strstr(tmpl, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")) f |= DS_CHAT_QWEN25_SYSTEM;
    if (tmpl && strstr(tmpl, "Cutting Knowledge Date")) f |= DS_CHAT_LLAMA31_SYSTEM;
    if (tmpl && strstr(tmpl, "strftime_now")) f |= DS_CHAT_DATE_NOW;
    return f;
}

const char *ds_chat_format_name(const ds_tokenizer *t) {
    switch (t ? t->chat_format : DS_CHAT_PLAIN) {
    case DS_CHAT_CHATML: return "chatml";
    case DS_CHAT_GEMMA: return "gemma";
    case DS_CHAT_LLAMA3: return "llama3";
    default: return "plain";
    }
}

int ds_chat_eot(const ds_tokenizer *t) {
    if (t && t->tmpl) return t->tmpl_eot;
    return t && t->kind == DS_TOK_HF && t->chat_format != DS_CHAT_PLAIN ? t->hf->eot : -1;
}

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *p, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *ns = realloc(b->s, c);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns, b->cap = c;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(sbuf *b, const char *p) { put(b, p, strlen(p)); }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Jinja's trim (Python str.strip() over ASCII whitespace).
static void put_trimmed(sbuf *b, const char *p) {
    size_t n = strlen(p), i = 0;
    while (i < n && is_ws(p[i])) i++;
    while (n > i && is_ws(p[n - 1])) n--;
    put(b, p + i, n - i);
}

static const char *token_text(const ds_tokenizer *t, int id) {
    static _Thread_local char buf[64];
    size_t n = t->off[id + 1] - t->off[id];
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, t->pool + t->off[id], n);
    buf[n] = 0;
    return buf;
}

static void render_chatml(const ds_tokenizer *t, sbuf *b, const ds_chat_message *m, int n, int gen) {
    const int qwen3 = (t->chat_flags & DS_CHAT_QWEN3_THINK) != 0, qwen25 = (t->chat_flags & DS_CHAT_QWEN25_SYSTEM) != 0;
    if (qwen25 && (n == 0 || strcmp(m[0].role, "system") != 0))
        puts_(b, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
    int last_user = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(m[i].role, "user")) {
            last_user = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        const char *c = m[i].content ? m[i].content : "";
        if (qwen3 && !strcmp(m[i].role, "assistant")) {
            const char *content = c, *think = strstr(c, "</think>");
            if (think) {
                const char *last = think;
                while ((think = strstr(last + 1, "</think>"))) last = think;
                content = last + 8;
                while (*content == '\n') content++;
            }
            puts_(b, "<|im_start|>assistant\n");
            if (i > last_user && (i == n - 1 || content != c)) { // the template: loop.last or reasoning_content
                // reasoning_content: the text before the first </think>, after the last <think>.
                puts_(b, "<think>\n");
                if (content != c) {
                    const char *end = strstr(c, "</think>"), *st = c, *p;
                    while ((p = strstr(st, "<think>")) && p < end) st = p + 7;
                    while (st < end && *st == '\n') st++;
                    while (end > st && end[-1] == '\n') end--;
                    put(b, st, (size_t)(end - st));
                }
                puts_(b, "\n</think>\n\n");
            }
            puts_(b, content);
            puts_(b, "<|im_end|>\n");
            continue;
        }
        puts_(b, "<|im_start|>");
        puts_(b, m[i].role);
        puts_(b, "\n");
        puts_(b, c);
        puts_(b, "<|im_end|>\n");
    }
    if (gen) puts_(b, "<|im_start|>assistant\n");
}

static ds_status render_gemma(const ds_tokenizer *t, sbuf *b, const ds_chat_message *m, int n, int gen) {
    if (t->bos >= 0) puts_(b, token_text(t, t->bos));
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) sys = m[0].content ? m[0].content : "", m++, n--;
    for (int i = 0; i < n; i++) {
        int user = !strcmp(m[i].role, "user");
        if (user != (i % 2 == 0))
            return ds_fail(DS_ERR_INVALID, "chat: Gemma conversation roles must alternate user/assistant/user/... (message %d is '%s')",
                           i + (sys != NULL), m[i].role);
        puts_(b, "<start_of_turn>");
        puts_(b, user ? "user\n" : "model\n");
        if (i == 0 && sys) {
            puts_(b, sys);
            puts_(b, "\n\n");
        }
        put_trimmed(b, m[i].content ? m[i].content : "");
        puts_(b, "<end_of_turn>\n");
    }
    if (gen) puts_(b, "<start_of_turn>model\n");
    return DS_OK;
}

static void render_llama3(const ds_tokenizer *t, sbuf *b, const ds_chat_message *m, int n, int gen) {
    if (t->chat_flags & DS_CHAT_LLAMA31_SYSTEM) {
        // Llama 3.1 / 3.2: BOS, then always a system turn with the knowledge cutoff and the date
        // ("26 Jul 2024", or today's as strftime_now("%d %b %Y") when the template asks), then the
        // (trimmed) system message, if any.
        char date[32] = "26 Jul 2024";
        if (t->chat_flags & DS_CHAT_DATE_NOW) {
            time_t now = time(NULL);
            struct tm tm;
            if (localtime_r(&now, &tm)) strftime(date, sizeof date, "%d %b %Y", &tm);
        }
        if (t->bos >= 0) puts_(b, token_text(t, t->bos));
        puts_(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        puts_(b, date);
        puts_(b, "\n\n");
        if (n > 0 && !strcmp(m[0].role, "system")) put_trimmed(b, m[0].content ? m[0].content : ""), m++, n--;
        puts_(b, "<|eot_id|>");
    }
    for (int i = 0; i < n; i++) {
        if (i == 0 && t->bos >= 0 && !(t->chat_flags & DS_CHAT_LLAMA31_SYSTEM)) puts_(b, token_text(t, t->bos));
        puts_(b, "<|start_header_id|>");
        puts_(b, m[i].role);
        puts_(b, "<|end_header_id|>\n\n");
        put_trimmed(b, m[i].content ? m[i].content : "");
        puts_(b, "<|eot_id|>");
    }
    if (gen) puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_plain(sbuf *b, const ds_chat_message *m, int n, int gen) {
    for (int i = 0; i < n; i++) {
        puts_(b, m[i].role);
        puts_(b, ": ");
        puts_(b, m[i].content ? m[i].content : "");
        puts_(b, "\n");
    }
    if (gen) puts_(b, "assistant:");
}

ds_status ds_chat_render(const ds_tokenizer *t, const ds_chat_message *msgs, int n, int add_generation_prompt,
                         char **out) {
    if (!out) return ds_fail(DS_ERR_INVALID, "chat: NULL output");
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) return ds_fail(DS_ERR_INVALID, "chat: bad message list");
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role, *c = msgs[i].content ? msgs[i].content : "";
        if (!r || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")))
            return ds_fail(DS_ERR_INVALID, "chat: message %d has an unknown role '%s'", i, r ? r : "(none)");
        if (!ds_utf8_valid((const uint8_t *)c, strlen(c), NULL)) return ds_fail(DS_ERR_INVALID, "chat: message %d is not valid UTF-8", i);
    }
    if (t && t->tmpl) { // the model's own template, with the messages as JSON
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; arr && i < n; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, o);
            cJSON_AddStringToObject(o, "role", msgs[i].role);
            cJSON_AddStringToObject(o, "content", msgs[i].content ? msgs[i].content : "");
        }
        char *js = arr ? cJSON_PrintUnformatted(arr) : NULL;
        cJSON_Delete(arr);
        if (!js) return ds_fail(DS_ERR_NOMEM, "chat: out of memory");
        ds_status st = ds_chat_template_render(t->tmpl, js, NULL, NULL, add_generation_prompt, out);
        free(js);
        return st;
    }
    sbuf b = {0};
    puts_(&b, "");
    switch (t ? t->chat_format : DS_CHAT_PLAIN) {
    case DS_CHAT_CHATML: render_chatml(t, &b, msgs, n, add_generation_prompt); break;
    case DS_CHAT_GEMMA: {
        ds_status st = render_gemma(t, &b, msgs, n, add_generation_prompt);
        if (st) return free(b.s), st;
        break;
    }
    case DS_CHAT_LLAMA3: render_llama3(t, &b, msgs, n, add_generation_prompt); break;
    default: render_plain(&b, msgs, n, add_generation_prompt); break;
    }
    if (b.oom) return free(b.s), ds_fail(DS_ERR_NOMEM, "chat: out of memory");
    *out = b.s;
    return DS_OK;
}
