// The Jinja chat-template interpreter and the tool-call parsers. Byte 0 even: the rest is a
// template's source, parsed and (when it parses) rendered with a fixed conversation (system, user,
// an assistant's tool call, a tool result), tools, bos/eos and enable_thinking, both
// add_generation_prompt values. Byte 0 odd: the rest is model output for the tool-call parser of
// syntax ((byte 0 >> 1) & 7) mod 5 (none, hermes, llama3, mistral, gemma4), with the streaming safe
// prefix at every length checked against it.
#include <cjson/cJSON.h>

#include "fuzz.h"

static const char k_messages[] =
    "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"W\\u00e9ather?\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\":"
    " {\"name\": \"get\", \"arguments\": {\"city\": \"Paris\", \"n\": 2.5}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"ok\"}]}]";
static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get\", \"description\": \"d\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *s = malloc(size);
    if (!s) return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = 0;
    const size_t n = size - 1;
    if (!(data[0] & 1)) {
        ds_chat_template *t;
        if (strlen(s) == n && ds_chat_template_init(s, "<s>", "</s>", "fuzz", &t) == DS_OK) {
            for (int gen = 0; gen < 2; gen++) {
                char *out = NULL;
                if (ds_chat_template_render(t, k_messages, gen ? k_tools : NULL, gen ? "{\"enable_thinking\": false}" : NULL, gen, &out) == DS_OK &&
                    !out)
                    abort();
                free(out);
            }
            ds_chat_template_free(t);
        }
    } else {
        const ds_tool_syntax syn = (ds_tool_syntax)(((data[0] >> 1) & 7) % 5);
        char *content = NULL, *calls = NULL;
        int nc = 0;
        if (ds_tool_calls_parse(syn, s, n, &content, &calls, &nc) == DS_OK) {
            if (!content || (nc > 0) != (calls != NULL)) abort();
            if (calls) { // the calls' JSON is an array of {name, arguments} with arguments an object's JSON text
                cJSON *a = cJSON_Parse(calls);
                if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != nc) abort();
                cJSON_Delete(a);
            }
        }
        free(content);
        free(calls);
        size_t prev = 0;
        for (size_t k = 0; k <= n && k < 4096; k++) { // the safe prefix never shrinks and stays in bounds
            size_t safe = ds_tool_calls_safe(syn, s, k);
            if (safe > k || ((syn == DS_TOOLS_HERMES || syn == DS_TOOLS_GEMMA4) && safe < prev)) abort();
            prev = safe;
        }
    }
    free(s);
    return 0;
}
