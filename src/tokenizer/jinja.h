// A Jinja interpreter for chat templates (the subset Hugging Face chat templates use), rendering
// as transformers' apply_chat_template does: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and the loopcontrols extension, tojson as json.dumps(ensure_ascii=
// False), raise_exception(msg) and strftime_now(fmt) as globals. A template is parsed to an AST
// once (ds_jinja_parse) and rendered many times (ds_jinja_render) with variables from JSON.
// Files: jinja_lex.c (source -> tokens, whitespace control), jinja_parse.c (tokens -> AST),
// jinja_eval.c (values, statements, expressions), jinja_lib.c (filters, tests, methods, JSON).
// A template that needs a feature left out is refused with a one-line error naming it and its line.
#ifndef DS_TOKENIZER_JINJA_H
#define DS_TOKENIZER_JINJA_H

#include <stddef.h>

#include "base/status.h"

typedef struct ds_jinja ds_jinja;
struct cJSON;

// Parse template source (n bytes; UTF-8). `name` (e.g. the file) prefixes error messages:
// "NAME:LINE: problem". Syntax errors are DS_ERR_FORMAT, features left out DS_ERR_UNSUPPORTED.
ds_status ds_jinja_parse(const char *src, size_t n, const char *name, ds_jinja **out);
void ds_jinja_free(ds_jinja *t);

// Render with the variables of `vars` (a JSON object; NULL: none). *out is malloc'ed, NUL-ended,
// *n_out (optional) its length. Errors (raise_exception, undefined values where jinja2 fails, type
// errors) are DS_ERR_INVALID "NAME:LINE: message".
ds_status ds_jinja_render(const ds_jinja *t, const struct cJSON *vars, char **out, size_t *n_out);

#endif
