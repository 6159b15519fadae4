// Observability of a real `kvwarden serve` under load (issue 6 end to end):
//   1. a real Prometheus (/usr/bin/prometheus) scrapes the running server's /metrics and its query
//      API returns the server's own values (block count, requests, TTFT histogram count);
//   2. /dashboard in headless Chromium (playwright-core) draws the blocks that the running load
//      holds, keeps updating, and a screenshot is saved as a test artefact
//      ($KVW_ARTIFACT_DIR, default the build's working directory).
// Needs node_modules (npm ci) and /usr/bin/prometheus + /usr/bin/chromium; a missing one fails
// the test unless KVW_ALLOW_SKIP names it (then exit 77, skipped).
import { spawn } from "node:child_process";
import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import path from "node:path";
import { freePort, makeModel, makeTempDir, missingTool, startServer } from "./kvwarden_server.mjs";

const PROMETHEUS = "/usr/bin/prometheus";
const CHROMIUM = "/usr/bin/chromium";
let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch {
  missingTool("node_modules", "playwright-core not installed (npm ci --prefix tests/e2e)");
}
if (!existsSync(PROMETHEUS)) missingTool("prometheus", PROMETHEUS + " missing");
if (!existsSync(CHROMIUM)) missingTool("chromium", CHROMIUM + " missing");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(what, fn, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

const tmp = makeTempDir();
const model = makeModel(tmp.dir, ["--context", "4096"]);
// 256 blocks of 16 tokens; long generations keep blocks owned while the checks run.
const server = await startServer(model, ["--block-size", "16", "--max-num-seqs", "8",
                                         "--max-model-len", "4096"]);
let prom = null;
let stopLoad = false;
const load = [];
try {
  // Load: 4 clients, each streaming 300-token completions back to back until told to stop.
  for (let c = 0; c < 4; ++c) {
    load.push((async () => {
      let done = 0;
      while (!stopLoad) {
        const res = await fetch(`${server.url}/v1/completions`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ prompt: `client ${c} request ${done} the cat`, max_tokens: 300,
                                 temperature: 0.7, seed: c, ignore_eos: true, stream: true }),
        });
        assert.equal(res.status, 200);
        await res.text();
        ++done;
      }
      return done;
    })());
  }

  // 1. Prometheus scrapes the real server.
  const promPort = await freePort();
  const cfg = path.join(tmp.dir, "prometheus.yml");
  writeFileSync(cfg, `global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: kvwarden\n` +
                     `    static_configs:\n      - targets: ["127.0.0.1:${server.port}"]\n`);
  prom = spawn(PROMETHEUS, [`--config.file=${cfg}`, `--storage.tsdb.path=${tmp.dir}/tsdb`,
                            `--web.listen-address=127.0.0.1:${promPort}`, "--log.level=warn"],
               { stdio: ["ignore", "ignore", "inherit"] });
  const query = async (q) => {
    const r = await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=` +
                          encodeURIComponent(q));
    const j = await r.json();
    return j.status === "success" && j.data.result.length > 0
               ? Number(j.data.result[0].value[1]) : undefined;
  };
  const total = await waitFor("kvwarden_kv_blocks{state=\"total\"} in Prometheus",
                              () => query('kvwarden_kv_blocks{state="total"}'), 30000);
  const kv = await (await fetch(`${server.url}/debug/kv`)).json();
  assert.equal(total, kv.num_blocks, "Prometheus sees the server's block count");
  const running = await waitFor("vllm:num_requests_running > 0",
                                () => query("vllm:num_requests_running > 0"), 30000);
  assert.ok(running >= 1 && running <= 4, `running ${running}`);
  const usage = await waitFor("vllm:kv_cache_usage_perc > 0",
                              () => query("vllm:kv_cache_usage_perc > 0"), 30000);
  assert.ok(usage > 0 && usage <= 1, `usage ${usage}`);
  const ttftCount = await waitFor("TTFT histogram count",
                                  () => query("vllm:time_to_first_token_seconds_count > 0"), 60000);
  console.log(`prometheus: blocks ${total}, running ${running}, kv usage ${usage.toFixed(3)}, ` +
              `ttft count ${ttftCount}`);

  // 2. The dashboard draws the running load's blocks.
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    await page.goto(`${server.url}/dashboard`);
    await page.waitForFunction((n) => window.kvwDashboard?.kv?.num_blocks === n, kv.num_blocks,
                               { timeout: 20000 });
    // Used blocks (state 2) appear in the page's block map, and the pixels show them.
    const used = await page.waitForFunction(() => {
      const d = window.kvwDashboard;
      const n = d.kv.state.filter((s) => s === 2).length;
      return n > 0 ? n : null;
    }, null, { timeout: 20000 });
    const step0 = await page.evaluate(() => window.kvwDashboard.kv.step);
    await page.waitForFunction((s) => window.kvwDashboard.kv.step > s, step0, { timeout: 20000 });
    // The 4 clients' requests are equally long and end in the same step, so a snapshot can
    // fall between them with no block in use: wait for one that has used blocks, and check
    // that exactly those are painted in the used colour.
    const paintedHandle = await page.waitForFunction(() => {
      const d = window.kvwDashboard;
      d.drawHeat();
      const c = document.getElementById("heat");
      const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let usedPx = 0, used = 0;
      for (let i = 0; i < d.kv.num_blocks; ++i) {
        if (d.kv.state[i] !== 2) continue;
        ++used;
        if (px[4 * i] === 163 && px[4 * i + 1] === 190) ++usedPx;
      }
      return used > 0 ? { used, usedPx } : null;
    }, null, { timeout: 20000 });
    const { used: usedNow, usedPx: painted } = await paintedHandle.jsonValue();
    assert.equal(painted, usedNow, "every used block painted in the heatmap");
    const shot = path.join(process.env.KVW_ARTIFACT_DIR || process.cwd(),
                           "dashboard-under-load.png");
    await page.screenshot({ path: shot });
    assert.deepEqual(errors, []);
    console.log(`dashboard: ${await used.jsonValue()} used blocks drawn (${painted} checked), ` +
                `screenshot ${shot}`);
  } finally {
    await browser.close();
  }
} finally {
  stopLoad = true;
  const exit = await server.stop();
  await Promise.allSettled(load);
  if (prom) prom.kill("SIGTERM");
  tmp.remove();
  assert.equal(exit.code, 0, `server exit ${JSON.stringify(exit)}`);
}
console.log("serve observability: ok");
