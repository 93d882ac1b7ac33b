// Chat formats: a conversation rendered as the prompt text a chat model expects.
// (Built-in family formats are selected by the tokenizer; this file holds the plain fallback.)
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dspark.h"
#include "tokenizer/utf8.h"

const char *ds_chat_format_name(const ds_tokenizer *t) {
    (void)t;
    return "plain";
}

// Plain transcript: "role: content\n" per message, then "assistant:" when asked.
ds_status ds_chat_render(const ds_tokenizer *t, const ds_chat_message *msgs, int n, int add_generation_prompt,
                         char **out) {
    (void)t;
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) return ds_fail(DS_ERR_INVALID, "chat: bad message list");
    size_t len = 16;
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role, *c = msgs[i].content ? msgs[i].content : "";
        if (!r || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")))
            return ds_fail(DS_ERR_INVALID, "chat: message %d has an unknown role '%s'", i, r ? r : "(none)");
        if (!ds_utf8_valid((const uint8_t *)c, strlen(c), NULL)) return ds_fail(DS_ERR_INVALID, "chat: message %d is not valid UTF-8", i);
        len += strlen(r) + strlen(c) + 4;
    }
    char *s = malloc(len);
    if (!s) return ds_fail(DS_ERR_NOMEM, "chat: out of memory");
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *c = msgs[i].content ? msgs[i].content : "";
        size_t rl = strlen(msgs[i].role), cl = strlen(c);
        memcpy(s + k, msgs[i].role, rl), k += rl;
        s[k++] = ':', s[k++] = ' ';
        memcpy(s + k, c, cl), k += cl;
        s[k++] = '\n';
    }
    if (add_generation_prompt) memcpy(s + k, "assistant:", 10), k += 10;
    s[k] = 0;
    *out = s;
    return DS_OK;
}
