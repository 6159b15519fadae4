// /dashboard in headless Chromium (playwright-core + /usr/bin/chromium) against
// obs_dashboard_server (a synthetic 100k-block pool that changes on every poll).
//   node dashboard_test.mjs <path to obs_dashboard_server>
// Checks: the page loads with no external requests and no console errors, polls /debug/stats
// and /debug/kv repeatedly, paints one pixel per block in the state colour, switches colour
// modes, and the hover tooltip names the block under the mouse. Prints the heatmap draw time.
import { spawn } from "node:child_process";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const serverPath = process.argv[2];
assert.ok(serverPath, "usage: node dashboard_test.mjs <obs_dashboard_server>");
const NUM_BLOCKS = 100000;

function startServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(serverPath, ["--blocks", String(NUM_BLOCKS)], { stdio: ["ignore", "pipe", "inherit"] });
    let buf = "";
    proc.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/PORT (\d+)/);
      if (m) resolve({ proc, port: Number(m[1]) });
    });
    proc.on("exit", (code) => reject(new Error("server exited " + code)));
  });
}

const { proc, port } = await startServer();
const origin = `http://127.0.0.1:${port}`;
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const consoleErrors = [], foreign = [], polled = { stats: 0, kv: 0 };
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.protocol !== "data:" && u.origin !== origin) foreign.push(r.url());
    if (u.pathname === "/debug/stats") polled.stats++;
    if (u.pathname === "/debug/kv") polled.kv++;
  });
  await page.goto(origin + "/dashboard");
  await page.waitForFunction((n) => window.kvwDashboard?.kv?.num_blocks === n, NUM_BLOCKS,
                             { timeout: 20000 });
  // Polling at least once a second: three samples of each within a bounded wait.
  await page.waitForFunction(() => window.kvwDashboard.hist.length >= 3, null, { timeout: 20000 });
  // Each /debug/kv poll advances the synthetic pool by 10 steps: two more block maps arrived.
  const step0 = await page.evaluate(() => window.kvwDashboard.kv.step);
  await page.waitForFunction((s) => window.kvwDashboard.kv.step >= s + 20, step0, { timeout: 20000 });
  assert.ok(polled.stats >= 3 && polled.kv >= 3, JSON.stringify(polled));

  // One pixel per block, in the state colour of the block map the page holds.
  const heat = await page.evaluate(() => {
    const d = window.kvwDashboard, kv = d.kv;
    const t0 = performance.now();
    d.drawHeat();
    const ms = performance.now() - t0;
    const c = document.getElementById("heat");
    const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    const want = [[46, 52, 64], [94, 129, 172], [163, 190, 140]];
    let bad = 0;
    for (let i = 0; i < kv.num_blocks; i += 97) {
      const w = want[kv.state[i]];
      if (px[4 * i] !== w[0] || px[4 * i + 1] !== w[1] || px[4 * i + 2] !== w[2]) bad++;
    }
    return { ms, cells: c.width * c.height, cols: c.width, bad,
             states: [0, 1, 2].map((s) => kv.state.filter((x) => x === s).length) };
  });
  console.log(`heatmap: ${NUM_BLOCKS} blocks on a ${heat.cols}-wide grid, drawHeat ${heat.ms.toFixed(1)} ms`);
  assert.ok(heat.cells >= NUM_BLOCKS);
  assert.equal(heat.bad, 0, "pixels that do not match their block's state");
  assert.ok(heat.states.every((n) => n > 0), "free, cached and used blocks all present");

  // Hover over block 12345 shows its record.
  const target = 12345;
  const box = await page.locator("#heat").boundingBox();
  const x = box.x + ((target % heat.cols) + 0.5) / heat.cols * box.width;
  const rows = Math.ceil(NUM_BLOCKS / heat.cols);
  const y = box.y + (Math.floor(target / heat.cols) + 0.5) / rows * box.height;
  await page.mouse.move(x, y);
  const tip = await page.locator("#tip").textContent();
  assert.match(tip, new RegExp(`^block ${target}\\n`), tip);
  assert.match(tip, /allocated at step \d+/);
  assert.match(tip, /last access step \d+/);

  for (const mode of ["owner", "age", "state"]) {
    await page.selectOption("#mode", mode);
    const ok = await page.evaluate(() => document.getElementById("heat").width > 1);
    assert.ok(ok, mode);
  }
  const budgetRows = await page.locator("#budget tr").count();
  assert.ok(budgetRows >= 6, "budget table rows: " + budgetRows);
  assert.equal((await page.locator("#err").textContent()).trim(), "");
  assert.deepEqual(foreign, [], "requests outside the server: " + foreign.join(", "));
  assert.deepEqual(consoleErrors, []);
  console.log("dashboard ok:", JSON.stringify(polled));
} finally {
  await browser.close();
  proc.kill("SIGTERM");
}
