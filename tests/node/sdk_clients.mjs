// The clients applications build on, against `dspark serve` with a drafter (driven by
// tests/reference/test_sdk_clients.py):
//   node sdk_clients.mjs STORIES_BASE_URL TEMPLATED_BASE_URL
// STORIES: stories260K (no chat template: plain format) with a DSpark drafter; TEMPLATED: a tiny
// random model with Qwen3's tokenizer and chat template, with a drafter. Checks:
//   - the Vercel AI SDK: generateObject and generateText with Output.object (zod schemas: strings
//     with maxLength, an integer with bounds, an enum, a nested array) return objects the schema
//     accepts; streamText with a tool on the templated model streams to the end;
//   - LangChain: ChatOpenAI.withStructuredOutput (method jsonSchema) returns a valid object;
//     bindTools(...).invoke returns an AIMessage, and with tool_choice naming the tool, a call whose
//     arguments the tool's schema accepts;
//   - the openai SDK's chat.completions.parse with a json_schema response_format: message.parsed.
// Prints one line per failed check and exits 1 if any failed.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, streamText, Output, tool } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import OpenAI from "openai";
import { z } from "zod";

globalThis.AI_SDK_LOG_WARNINGS = false;
const [storiesBase, templatedBase] = process.argv.slice(2);
let checks = 0, fails = 0;
const check = (cond, msg) => { checks++; if (!cond) { fails++; console.log("FAIL:", msg); } };
const attempt = async (label, fn) => { try { await fn(); } catch (e) { check(false, `${label}: ${e.message} ${e.responseBody ?? ""}`); } };

const person = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(120),
  mood: z.enum(["happy", "sad", "tired"]),
  pets: z.array(z.object({ kind: z.string().max(8) })).max(2),
});
const stories = createOpenAI({ baseURL: storiesBase, apiKey: "none" }).chat("stories260K");
const templated = createOpenAI({ baseURL: templatedBase, apiKey: "none" }).chat("qwen3-tiny");

await attempt("AI SDK generateObject", async () => {
  for (const seed of [1, 2]) {
    const r = await generateObject({ model: stories, schema: person, prompt: "A person in a story", temperature: 1, seed,
      maxOutputTokens: 300 });
    check(person.safeParse(r.object).success && r.finishReason === "stop", `generateObject: ${JSON.stringify(r.object)}`);
  }
});
await attempt("AI SDK generateText + Output.object", async () => {
  const r = await generateText({ model: stories, output: Output.object({ schema: person }), prompt: "A person",
    temperature: 0, maxOutputTokens: 300 });
  check(person.safeParse(r.output).success, `generateText output: ${JSON.stringify(r.output)}`);
});
await attempt("AI SDK streamText with a tool", async () => {
  const r = streamText({ model: templated, prompt: "Weather in Paris?", maxOutputTokens: 8, temperature: 0,
    tools: { get_weather: tool({ description: "Weather in a city", inputSchema: z.object({ city: z.string().max(16) }),
      execute: async ({ city }) => `18 C in ${city}` }) } });
  let text = "";
  for await (const part of r.textStream) text += part;
  const fin = await r.finishReason;
  check(typeof text === "string" && ["stop", "length", "tool-calls"].includes(fin), `streamText: ${JSON.stringify([text, fin])}`);
});
await attempt("LangChain withStructuredOutput", async () => {
  const llm = new ChatOpenAI({ model: "stories260K", apiKey: "none", configuration: { baseURL: storiesBase }, temperature: 0,
    maxTokens: 300 });
  const out = await llm.withStructuredOutput(person, { method: "jsonSchema" }).invoke("A person");
  check(person.safeParse(out).success, `withStructuredOutput: ${JSON.stringify(out)}`);
});
await attempt("LangChain bindTools", async () => {
  const llm = new ChatOpenAI({ model: "qwen3-tiny", apiKey: "none", configuration: { baseURL: templatedBase }, temperature: 0,
    maxTokens: 200 });
  const weather = { type: "function", function: { name: "get_weather", description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"] } } };
  const free = await llm.bindTools([weather]).invoke("Weather in Paris?");
  check(typeof free.content === "string", `bindTools auto: ${JSON.stringify(free)}`);
  const forced = await llm.bindTools([weather], { tool_choice: { type: "function", function: { name: "get_weather" } } })
    .invoke("Weather in Paris?");
  const call = forced.tool_calls?.[0];
  check(call?.name === "get_weather" && typeof call?.args?.city === "string" && call.args.city.length <= 16,
    `bindTools forced: ${JSON.stringify(forced.tool_calls)}`);
});
await attempt("openai SDK parse", async () => {
  const client = new OpenAI({ baseURL: storiesBase, apiKey: "none", maxRetries: 0 });
  const r = await client.chat.completions.parse({ model: "m", messages: [{ role: "user", content: "A person" }],
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: z.toJSONSchema(person) } },
    temperature: 0, max_tokens: 300 });
  check(person.safeParse(r.choices[0].message.parsed).success, `parse: ${JSON.stringify(r.choices[0].message)}`);
});
console.log(`sdk clients: ${checks - fails} of ${checks} checks passed`);
process.exit(fails ? 1 : 0);
