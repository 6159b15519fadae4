// tests/e2e/openai_tools.test.mjs (issue 31): tool calling and structured outputs driven by the
// official `openai` npm client: a tool-call round trip (call -> tool message -> answer), a
// streamed call reassembled by the SDK's stream helper, and `chat.completions.parse` with zod
// schemas (zodResponseFormat, zodFunction). The model has random weights, so every parsed call
// or object is the grammar's work; a run that cannot finish within max_tokens is retried with
// another seed.
// Run: KVWARDEN_BIN=/path/to/kvwarden node tests/e2e/openai_tools.test.mjs
import { existsSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { makeModel, makeTempDir, missingTool, startServer } from "./kvwarden_server.mjs";

for (const pkg of ["openai", "zod"]) {
  if (!existsSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url))) {
    missingTool("node_modules", "tests/e2e/node_modules lacks " + pkg +
                "; run `npm ci --prefix tests/e2e`");
  }
}
const { default: OpenAI } = await import("openai");
const { zodFunction, zodResponseFormat } = await import("openai/helpers/zod");
const { z } = await import("zod");

let tmp;
let server;
let client;
let model;

const weatherArgs = z.object({ city: z.string().max(8), days: z.number().int() });
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 8 }, days: { type: "integer" } },
      required: ["city", "days"],
      additionalProperties: false,
    },
  },
};
const kSeeds = [1, 2, 3, 4, 5, 6, 7, 8];

before(async () => {
  tmp = makeTempDir();
  // 2048 positions: the tool prompt alone is ~650 tokens of the small vocabulary.
  server = await startServer(makeModel(tmp.dir, ["--context", "2048"]), ["--max-model-len", "2048"]);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0,
                        timeout: 60000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  if (server) await server.stop();
  tmp?.remove();
});

// parse() throws when the output hit max_tokens; that seed is then skipped (null).
async function parseOrNull(request) {
  try {
    return await client.beta.chat.completions.parse(request);
  } catch (e) {
    if (e?.constructor?.name === "LengthFinishReasonError") return null;
    throw e;
  }
}

// The first seed whose answer `accept`s (a random model may not finish in max_tokens).
async function firstFinished(run, accept) {
  for (const seed of kSeeds) {
    const out = await run(seed);
    if (accept(out)) return out;
  }
  assert.fail("no seed finished within max_tokens");
}

describe("tool calling", () => {
  test("round trip: call, tool message, answer", async () => {
    const messages = [{ role: "user", content: "What is the weather in Oslo?" }];
    const first = await firstFinished(
      (seed) => client.chat.completions.create({
        model, messages, tools: [weatherTool], tool_choice: "required", max_tokens: 300,
        temperature: 1, seed }),
      (c) => c.choices[0].finish_reason !== "length");
    const choice = first.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.content, null);
    const call = choice.message.tool_calls[0];
    assert.match(call.id, /^call_/);
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "get_weather");
    const args = weatherArgs.parse(JSON.parse(call.function.arguments));
    // The call and its result go back; the model answers in text.
    messages.push(choice.message);
    messages.push({ role: "tool", tool_call_id: call.id,
                    content: JSON.stringify({ city: args.city, temp_c: 3 }) });
    // "auto": free text from a random model is never a call, so the answer is content.
    const answer = await client.chat.completions.create({
      model, messages, tools: [weatherTool], tool_choice: "auto", max_tokens: 8, seed: 1 });
    assert.equal(typeof answer.choices[0].message.content, "string");
    assert.ok(["stop", "length"].includes(answer.choices[0].finish_reason));
    assert.equal(answer.choices[0].message.tool_calls, undefined);
    assert.ok(answer.usage.prompt_tokens > first.usage.prompt_tokens,
              "the call and the tool result are in the second prompt");
  });

  test("streamed tool-call deltas are reassembled by the SDK", async () => {
    const final = await firstFinished(async (seed) => {
      const stream = client.beta.chat.completions.stream({
        model, messages: [{ role: "user", content: "Weather?" }], tools: [weatherTool],
        tool_choice: { type: "function", function: { name: "get_weather" } },
        parallel_tool_calls: false, max_tokens: 300, temperature: 1, seed });
      let deltas = 0;
      stream.on("chunk", (chunk) => { deltas += chunk.choices[0]?.delta?.tool_calls?.length ?? 0; });
      const completion = await stream.finalChatCompletion();
      return { completion, deltas };
    }, ({ completion }) => completion.choices[0].finish_reason !== "length");
    const choice = final.completion.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.tool_calls.length, 1);
    assert.ok(final.deltas >= 2, "name first, then argument fragments");
    const call = choice.message.tool_calls[0];
    assert.equal(call.function.name, "get_weather");
    weatherArgs.parse(JSON.parse(call.function.arguments));
  });

  test("with two calls, the first is streamed before the second is written", async () => {
    // The end of generation is banned, so "required"'s grammar makes the model write call
    // after call; logprobs give a chunk per token, so tokens after the first call's deltas show
    // it went out while the model was still writing.
    const tok = await fetch(`${server.url}/tokenize`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "</s>", add_special_tokens: false }) });
    const eos = (await tok.json()).tokens[0];
    assert.equal(typeof eos, "number");
    const stream = await client.chat.completions.create({
      model, messages: [{ role: "user", content: "Weather in Oslo and Rome?" }],
      tools: [weatherTool], tool_choice: "required", max_tokens: 300, temperature: 1, seed: 1,
      logprobs: true, logit_bias: { [eos]: -100 }, stream: true });
    const calls = [];
    let tokensAfterFirst = 0;
    let finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) finish = choice.finish_reason;
      if (choice.logprobs?.content?.length && calls.length === 1) tokensAfterFirst += 1;
      for (const d of choice.delta?.tool_calls ?? []) {
        if (d.id) {
          assert.equal(d.index, calls.length, "one index per call, in order");
          calls.push({ name: d.function.name, args: d.function.arguments ?? "" });
        } else {
          calls[d.index].args += d.function.arguments;
        }
      }
    }
    assert.ok(calls.length >= 2, `expected two calls or more, got ${calls.length}`);
    for (const c of calls) {
      assert.equal(c.name, "get_weather");
      weatherArgs.parse(JSON.parse(c.args));
    }
    assert.ok(tokensAfterFirst > 0, "the first call went out only with the second");
    assert.equal(finish, "length");
  });

  test("chat.completions.parse with zodFunction gives parsed arguments", async () => {
    const out = await firstFinished(
      (seed) => parseOrNull({
        model, messages: [{ role: "user", content: "Weather?" }],
        tools: [zodFunction({ name: "get_weather", parameters: weatherArgs })],
        tool_choice: "required", max_tokens: 300, temperature: 1, seed }),
      (c) => c !== null);
    const call = out.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(call.function.parsed_arguments, weatherArgs.parse(call.function.parsed_arguments));
  });
});

describe("structured outputs", () => {
  test("chat.completions.parse with zodResponseFormat", async () => {
    const Answer = z.object({ city: z.string().max(8), ok: z.boolean(),
                              kind: z.enum(["rain", "sun"]) });
    const out = await firstFinished(
      (seed) => parseOrNull({
        model, messages: [{ role: "user", content: "Answer in JSON." }],
        response_format: zodResponseFormat(Answer, "answer"), max_tokens: 300, temperature: 1,
        seed }),
      (c) => c !== null);
    const parsed = out.choices[0].message.parsed;
    assert.deepEqual(parsed, Answer.parse(parsed));
    assert.equal(out.choices[0].finish_reason, "stop");
  });
});
