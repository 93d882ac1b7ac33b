// The official `openai` npm SDK against `dspark serve` (driven by tests/cli/test_openai_sdk.sh).
//   node openai_client.mjs BASE_URL API_KEY EXPECT.json
// EXPECT.json: {"model", "greedy": {prompt, text}, "seeded": {prompt, seed, max_tokens, text}}: the
// texts `dspark generate` gives (greedy, and --seed S --temp 1 --spec none). Prints one line per
// failed check and exits 1 if any failed.
import fs from "node:fs";
import OpenAI from "openai";

const [base, key, expectPath] = process.argv.slice(2);
const want = JSON.parse(fs.readFileSync(expectPath, "utf8"));
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000 });
let checks = 0, fails = 0;
const check = (cond, msg) => { checks++; if (!cond) { fails++; console.log("FAIL:", msg); } };
const errorOf = async (p) => { try { await p; return null; } catch (e) { return e; } };

// Models.
const list = await client.models.list();
check(list.data.length === 1 && list.data[0].id === want.model, `models.list: ${JSON.stringify(list.data)}`);
const m = await client.models.retrieve(want.model);
check(m.id === want.model && m.object === "model", `models.retrieve: ${JSON.stringify(m)}`);
const missing = await errorOf(client.models.retrieve("no-such-model"));
check(missing instanceof OpenAI.NotFoundError, `models.retrieve(missing): ${missing}`);

// Completions: greedy text, streaming, batched prompts with n, logprobs, echo.
const g = want.greedy;
const c = await client.completions.create({ model: want.model, prompt: g.prompt, max_tokens: g.max_tokens, temperature: 0 });
check(c.choices[0].text === g.text, `completion ${JSON.stringify(c.choices[0].text)} != ${JSON.stringify(g.text)}`);
check(c.usage.completion_tokens === g.max_tokens, `usage ${JSON.stringify(c.usage)}`);
let streamed = "";
for await (const ch of await client.completions.create({ model: want.model, prompt: g.prompt, max_tokens: g.max_tokens,
  temperature: 0, stream: true })) streamed += ch.choices[0]?.text ?? "";
check(streamed === g.text, `completion stream ${JSON.stringify(streamed)}`);
const b = await client.completions.create({ model: want.model, prompt: [g.prompt, "The dog"], n: 2, max_tokens: 8,
  temperature: 0 });
check(b.choices.length === 4 && b.choices.map((x) => x.index).join() === "0,1,2,3" &&
  b.choices[0].text === b.choices[1].text && g.text.startsWith(b.choices[0].text), `batched: ${JSON.stringify(b.choices)}`);
const lp = await client.completions.create({ model: want.model, prompt: g.prompt, max_tokens: 4, temperature: 0, logprobs: 2 });
const L = lp.choices[0].logprobs;
check(L && L.tokens.length === 4 && L.token_logprobs.length === 4 && L.top_logprobs.length === 4 &&
  L.tokens.join("") === lp.choices[0].text && L.token_logprobs.every((x) => x <= 0), `completion logprobs ${JSON.stringify(L)}`);
const e = await client.completions.create({ model: want.model, prompt: g.prompt, max_tokens: 4, temperature: 0, echo: true });
check(e.choices[0].text.startsWith(g.prompt + g.text.slice(0, 3)), `echo: ${JSON.stringify(e.choices[0].text)}`);

// Chat: text parts, the developer role, n, logprobs, streaming.
const msgs = [{ role: "developer", content: "You tell stories." },
  { role: "user", content: [{ type: "text", text: "Tell me " }, { type: "text", text: "about a dog." }] }];
const cc = await client.chat.completions.create({ model: want.model, messages: msgs, max_tokens: 16, temperature: 0, n: 2,
  logprobs: true, top_logprobs: 2 });
check(cc.choices.length === 2 && cc.choices[0].message.role === "assistant" &&
  cc.choices[0].message.content === cc.choices[1].message.content, `chat n=2: ${JSON.stringify(cc.choices)}`);
const content = cc.choices[0].logprobs?.content ?? [];
check(content.length === cc.usage.completion_tokens / 2 && content.every((t) => t.top_logprobs.length === 2),
  `chat logprobs ${JSON.stringify(content).slice(0, 200)}`);
let chatStreamed = "";
for await (const ch of await client.chat.completions.create({ model: want.model, messages: msgs, max_tokens: 16,
  temperature: 0, stream: true, stream_options: { include_usage: true } })) chatStreamed += ch.choices[0]?.delta?.content ?? "";
check(chatStreamed === cc.choices[0].message.content, `chat stream ${JSON.stringify(chatStreamed)}`);

// Seeded sampling, 4 identical requests at once (with the drafter and --schedule auto): one text,
// the text of generate --seed --spec none.
const s = want.seeded;
const texts = await Promise.all([0, 1, 2, 3].map(() => client.completions.create({ model: want.model, prompt: s.prompt,
  max_tokens: s.max_tokens, temperature: 1, seed: s.seed }).then((r) => r.choices[0].text)));
check(texts.every((t) => t === s.text), `seeded: ${JSON.stringify(texts)} != ${JSON.stringify(s.text)}`);

// What the server does not serve is a clear 400; a wrong key is a 401.
const tools = await errorOf(client.chat.completions.create({ model: want.model, messages: msgs,
  tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }] }));
check(tools instanceof OpenAI.BadRequestError && /tools/.test(tools.message), `tools: ${tools}`);
const rf = await errorOf(client.chat.completions.create({ model: want.model, messages: msgs,
  response_format: { type: "json_schema", json_schema: { name: "t", schema: { type: "string", pattern: "a+" } } } }));
check(rf instanceof OpenAI.BadRequestError && /response_format/.test(rf.message) && /pattern/.test(rf.message),
  `response_format: ${rf}`);
const wrong = new OpenAI({ baseURL: base, apiKey: key + "x", maxRetries: 0 });
const auth = await errorOf(wrong.models.list());
check(auth instanceof OpenAI.AuthenticationError, `wrong key: ${auth}`);

console.log(`openai sdk: ${checks - fails} of ${checks} checks passed`);
process.exit(fails ? 1 : 0);
