// tests/e2e/openai_client.test.mjs: `kvwarden serve` driven by the official `openai` npm client,
// as a user's application would drive it. One server (random-weight model, --api-key) serves every
// test; the client never retries, so each status the server sends reaches the assertion.
// Run: KVWARDEN_BIN=/path/to/kvwarden node tests/e2e/openai_client.test.mjs
// Fails when `npm ci` has not been run in this folder, unless KVW_ALLOW_SKIP=node_modules.
import { existsSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { makeModel, makeTempDir, missingTool, startServer } from "./kvwarden_server.mjs";

if (!existsSync(new URL("./node_modules/openai/package.json", import.meta.url))) {
  missingTool("node_modules", "tests/e2e/node_modules is missing; run `npm ci --prefix tests/e2e`");
}
const { default: OpenAI } = await import("openai");

const kApiKey = "e2e-secret-key";
const kPrompt = "Once upon a time";
let tmp;
let server;
let client;
let modelId;

before(async () => {
  tmp = makeTempDir();
  const model = makeModel(tmp.dir);
  server = await startServer(model, ["--api-key", kApiKey]);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: kApiKey, maxRetries: 0,
                        timeout: 60000 });
});

after(async () => {
  if (server) {
    const exit = await server.stop();
    // SIGTERM is the documented way to stop the server: it drains and exits cleanly.
    assert.deepEqual(exit, { code: 0, signal: null }, `SIGTERM exit; output:\n${server.output()}`);
  }
  tmp?.remove();
});

function checkUsage(usage, maxCompletion) {
  assert.ok(usage, "usage present");
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, "prompt_tokens");
  assert.ok(Number.isInteger(usage.completion_tokens) && usage.completion_tokens >= 0);
  assert.ok(usage.completion_tokens <= maxCompletion, `completion_tokens <= ${maxCompletion}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

// Collects a stream; every chunk must carry the same id and object type.
async function collectStream(stream, object) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 2, "a stream has content chunks and a final chunk");
  for (const c of chunks) {
    assert.equal(c.object, object);
    assert.equal(c.id, chunks[0].id, "one id per stream");
    assert.equal(typeof c.created, "number");
    assert.equal(c.model, modelId);
    assert.ok(Array.isArray(c.choices));
  }
  return chunks;
}

describe("models", () => {
  test("models.list returns the served model", async () => {
    const page = await client.models.list();
    assert.ok(page.data.length >= 1);
    for (const m of page.data) {
      assert.equal(m.object, "model");
      assert.equal(typeof m.id, "string");
      assert.ok(m.id.length > 0);
    }
    modelId = page.data[0].id;
    const one = await client.models.retrieve(modelId).catch((e) => e);
    // Retrieve is optional in our spec; when it exists it must agree with the list.
    if (!(one instanceof OpenAI.APIError)) assert.equal(one.id, modelId);
  });
});

describe("completions", () => {
  test("non-streaming completion has the OpenAI shape", async () => {
    const r = await client.completions.create({ model: modelId, prompt: kPrompt, max_tokens: 8,
                                                temperature: 0 });
    assert.equal(r.object, "text_completion");
    assert.equal(typeof r.id, "string");
    assert.equal(r.model, modelId);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].index, 0);
    assert.equal(typeof r.choices[0].text, "string");
    assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
    checkUsage(r.usage, 8);
  });

  test("max_tokens ends the completion with finish_reason length", async () => {
    const r = await client.completions.create({ model: modelId, prompt: kPrompt, max_tokens: 5,
                                                temperature: 0 });
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.completion_tokens, 5);
  });

  test("streaming completion: deltas join to the non-streaming text, usage last", async () => {
    const args = { model: modelId, prompt: kPrompt, max_tokens: 12, temperature: 0 };
    const whole = await client.completions.create(args);
    const stream = await client.completions.create({ ...args, stream: true,
                                                     stream_options: { include_usage: true } });
    const chunks = await collectStream(stream, "text_completion");
    const usageChunk = chunks.at(-1);
    assert.deepEqual(usageChunk.choices, [], "usage chunk has no choices");
    checkUsage(usageChunk.usage, 12);
    assert.deepEqual(usageChunk.usage, whole.usage);
    const body = chunks.slice(0, -1);
    for (const c of body) assert.ok(c.usage == null, "usage only on the last chunk");
    const finishes = body.map((c) => c.choices[0].finish_reason).filter((f) => f != null);
    assert.deepEqual(finishes, [whole.choices[0].finish_reason], "exactly one finish_reason");
    assert.ok(body.at(-1).choices[0].finish_reason, "finish_reason is on the last choice chunk");
    assert.equal(body.map((c) => c.choices[0].text).join(""), whole.choices[0].text);
  });

  test("n=2 returns two indexed choices", async () => {
    const r = await client.completions.create({ model: modelId, prompt: kPrompt, max_tokens: 6,
                                                n: 2, temperature: 1, seed: 5 });
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
    for (const c of r.choices) assert.equal(typeof c.text, "string");
    checkUsage(r.usage, 12);
  });

  test("stop string cuts the text before its first occurrence", async () => {
    const args = { model: modelId, prompt: kPrompt, max_tokens: 24, temperature: 0 };
    const full = (await client.completions.create(args)).choices[0].text;
    assert.ok(full.length >= 6, `need some text to cut, got ${JSON.stringify(full)}`);
    const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 3);
    const cut = await client.completions.create({ ...args, stop: [stop] });
    assert.equal(cut.choices[0].finish_reason, "stop");
    assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(stop)));
  });

  test("same seed and temperature give the same text; other seeds differ", async () => {
    const args = { model: modelId, prompt: kPrompt, max_tokens: 16, temperature: 1.0, seed: 42 };
    const a = (await client.completions.create(args)).choices[0].text;
    const b = (await client.completions.create(args)).choices[0].text;
    assert.equal(a, b);
    const others = [];
    for (const seed of [43, 44, 45]) {
      others.push((await client.completions.create({ ...args, seed })).choices[0].text);
    }
    assert.ok(others.some((t) => t !== a), "the seed changes the sample");
  });
});

describe("chat", () => {
  const messages = [{ role: "user", content: "Tell me a story." }];

  test("non-streaming chat completion has the OpenAI shape", async () => {
    const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 8,
                                                     temperature: 0 });
    assert.equal(r.object, "chat.completion");
    assert.equal(typeof r.id, "string");
    assert.equal(r.model, modelId);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].index, 0);
    assert.equal(r.choices[0].message.role, "assistant");
    assert.equal(typeof r.choices[0].message.content, "string");
    assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
    checkUsage(r.usage, 8);
  });

  test("streaming chat: role first, content deltas, finish_reason, usage chunk", async () => {
    const args = { model: modelId, messages, max_tokens: 10, temperature: 0 };
    const whole = await client.chat.completions.create(args);
    const stream = await client.chat.completions.create({
      ...args, stream: true, stream_options: { include_usage: true } });
    const chunks = await collectStream(stream, "chat.completion.chunk");
    const usageChunk = chunks.at(-1);
    assert.deepEqual(usageChunk.choices, []);
    assert.deepEqual(usageChunk.usage, whole.usage);
    const body = chunks.slice(0, -1);
    assert.equal(body[0].choices[0].delta.role, "assistant", "first delta names the role");
    for (const c of body) {
      assert.equal(c.choices.length, 1);
      assert.equal(c.choices[0].index, 0);
      assert.ok(c.usage == null);
    }
    const finishes = body.map((c) => c.choices[0].finish_reason).filter((f) => f != null);
    assert.deepEqual(finishes, [whole.choices[0].finish_reason]);
    const text = body.map((c) => c.choices[0].delta.content ?? "").join("");
    assert.equal(text, whole.choices[0].message.content);
  });

  test("streaming without include_usage sends no usage", async () => {
    const stream = await client.chat.completions.create({ model: modelId, messages,
                                                          max_tokens: 4, stream: true });
    const chunks = await collectStream(stream, "chat.completion.chunk");
    for (const c of chunks) assert.ok(c.usage == null);
    assert.ok(chunks.at(-1).choices[0].finish_reason);
  });

  test("n=2 chat returns two assistant messages", async () => {
    const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 4,
                                                     n: 2, temperature: 1, seed: 3 });
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
    for (const c of r.choices) assert.equal(c.message.role, "assistant");
  });

  test("chat with the same seed is deterministic", async () => {
    const args = { model: modelId, messages, max_tokens: 12, temperature: 0.9, seed: 11 };
    const a = await client.chat.completions.create(args);
    const b = await client.chat.completions.create(args);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  });
});

describe("errors map to the client's APIError classes", () => {
  async function expectApiError(promise, status) {
    const err = await promise.then(() => null, (e) => e);
    assert.ok(err instanceof OpenAI.APIError, `expected APIError ${status}, got ${err}`);
    assert.equal(err.status, status, err.message);
    // OpenAI error JSON: {"error": {"message", "type", "param", "code"}}; the client unwraps it.
    assert.equal(typeof err.error?.message, "string", JSON.stringify(err.error));
    assert.ok(err.error.message.length > 0);
    assert.equal(typeof err.error.type, "string");
    assert.ok("param" in err.error && "code" in err.error, JSON.stringify(err.error));
    return err;
  }

  test("a bad parameter is 400 BadRequestError", async () => {
    const e1 = await expectApiError(client.completions.create(
        { model: modelId, prompt: kPrompt, max_tokens: 4, temperature: -1 }), 400);
    assert.ok(e1 instanceof OpenAI.BadRequestError);
    await expectApiError(client.chat.completions.create(
        { model: modelId, messages: [], max_tokens: 4 }), 400);
    await expectApiError(client.completions.create(
        { model: modelId, prompt: kPrompt, max_tokens: "many" }), 400);
  });

  test("a wrong api key is 401 AuthenticationError", async () => {
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "wrong", maxRetries: 0 });
    const err = await expectApiError(bad.completions.create(
        { model: modelId, prompt: kPrompt, max_tokens: 2 }), 401);
    assert.ok(err instanceof OpenAI.AuthenticationError);
    await expectApiError(bad.models.list(), 401);
  });

  test("an unknown model is 404 NotFoundError", async () => {
    const err = await expectApiError(client.chat.completions.create(
        { model: "no-such-model", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
        404);
    assert.ok(err instanceof OpenAI.NotFoundError);
    await expectApiError(client.completions.create(
        { model: "no-such-model", prompt: kPrompt, max_tokens: 2 }), 404);
  });

  test("the server is still healthy after the errors", async () => {
    const res = await fetch(`${server.url}/health`);
    assert.equal(res.status, 200);
    assert.ok(server.alive());
  });
});
