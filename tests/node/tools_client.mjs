// The official `openai` npm SDK with tools against `dspark serve` on a templated model (driven by
// tests/reference/test_serve_tools.py).
//   node tools_client.mjs BASE_URL TOOL_CALL_TOKEN_ID
// The history carries the SDK's own shapes (an assistant's tool_calls with arguments as a JSON
// string, a tool result); the model is forced to emit "<tool_call>" tokens that never form a call,
// so the reply is content, streamed or not. Then a forced call (tool_choice naming the function:
// the grammar engine constrains the reply) comes back as tool_calls whose arguments parse, streamed
// and not, and the round trip (that call and its result in the history) is accepted. Prints one
// line per failed check and exits 1 if any failed.
import OpenAI from "openai";

const [base, tok] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: "none", maxRetries: 0, timeout: 120000 });
let checks = 0, fails = 0;
const check = (cond, msg) => { checks++; if (!cond) { fails++; console.log("FAIL:", msg); } };
const model = (await client.models.list()).data[0].id;
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const messages = [
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
    function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
  { role: "tool", tool_call_id: "call_1", content: "18 C" },
  { role: "user", content: "And Rome?" },
];
const req = { model, messages, tools, tool_choice: "auto", parallel_tool_calls: true, max_tokens: 5, temperature: 0,
  logit_bias: { [tok]: 100 } };
const r = await client.chat.completions.create(req);
const want = "<tool_call>".repeat(5);
check(r.choices[0].message.content === want && !r.choices[0].message.tool_calls && r.choices[0].finish_reason === "length",
  `tools, not a call: ${JSON.stringify(r.choices[0])}`);
let text = "", role = null, finish = null;
for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
  const c = ch.choices[0];
  if (!c) continue;
  if (c.delta.role) role = c.delta.role;
  text += c.delta.content || "";
  check(!c.delta.tool_calls, `no tool_calls deltas: ${JSON.stringify(c.delta)}`);
  if (c.finish_reason) finish = c.finish_reason;
}
check(text === want && role === "assistant" && finish === "length", `stream: ${JSON.stringify([text, role, finish])}`);
// (a bounded string: a random tiny model would otherwise never close an unbounded one)
const bounded = [{ type: "function", function: { name: "get_weather", description: "Weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"] } } }];
const forced = { model, messages, tools: bounded, tool_choice: { type: "function", function: { name: "get_weather" } },
  parallel_tool_calls: false, max_tokens: 400, temperature: 0 };
const f = await client.chat.completions.create(forced);
const call = f.choices[0].message.tool_calls?.[0];
let args = null;
try { args = JSON.parse(call.function.arguments); } catch (e) { args = null; }
check(f.choices[0].finish_reason === "tool_calls" && call?.type === "function" && call.function.name === "get_weather" &&
  typeof call.id === "string" && typeof args?.city === "string", `forced call: ${JSON.stringify(f.choices[0])}`);
let sargs = "", sname = null, sfinish = null;
for await (const ch of await client.chat.completions.create({ ...forced, stream: true })) {
  const c = ch.choices[0];
  if (!c) continue;
  for (const tc of c.delta.tool_calls || []) {
    if (tc.function?.name) sname = tc.function.name;
    sargs += tc.function?.arguments || "";
  }
  if (c.finish_reason) sfinish = c.finish_reason;
}
check(sname === "get_weather" && sargs === call?.function.arguments && sfinish === "tool_calls",
  `forced call, streamed: ${JSON.stringify([sname, sargs, sfinish])}`);
const back = await client.chat.completions.create({ model, tools, max_tokens: 3, temperature: 0,
  messages: [...messages, f.choices[0].message, { role: "tool", tool_call_id: call?.id ?? "x", content: "21 C" }] });
check(back.choices.length === 1, `round trip with the forced call in the history: ${JSON.stringify(back)}`);
console.log(`openai sdk tools: ${checks - fails} of ${checks} checks passed`);
process.exit(fails ? 1 : 0);
