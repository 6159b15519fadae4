// tests/e2e/kvwarden_server.mjs: starts a real `kvwarden serve` process for the end-to-end tests.
// makeModel() writes a random-weight GGUF with `kvwarden make-model`; startServer() picks a free
// loopback port, waits for the "kvwarden serving MODEL on http://HOST:PORT" line and then for
// /ready, and returns a handle whose stop() sends SIGTERM and reports how the process ended.
// Shared by every test file in this folder (the dashboard test uses it too).
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

// The binary comes from CTest ($<TARGET_FILE:kvwarden>) or from the person running the test.
export function kvwardenBin() {
  const bin = process.env.KVWARDEN_BIN;
  if (!bin) throw new Error("set KVWARDEN_BIN to the kvwarden binary");
  return bin;
}

export function makeTempDir() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "kvw-e2e-"));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

// Random weights: the text is gibberish but fully deterministic for a given seed.
export function makeModel(dir, extraArgs = []) {
  const out = path.join(dir, "model.gguf");
  execFileSync(kvwardenBin(), ["make-model", "--out", out, "--seed", "7", ...extraArgs], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  return out;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const kReadyLine = /kvwarden serving (.+) on (http:\/\/\S+)/;

// Resolves once the server printed its ready line and GET /ready answered 200; rejects (with the
// server's output) if it exits first or takes longer than startTimeoutMs.
export async function startServer(modelPath, extraArgs = [], startTimeoutMs = 60000) {
  const port = await freePort();
  const args = ["serve", "--model", modelPath, "--host", "127.0.0.1", "--port", String(port),
                ...extraArgs];
  const child = spawn(kvwardenBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  let exited = null;
  const exitPromise = new Promise((resolve) => {
    child.on("exit", (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
  });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(
        () => reject(new Error(`no ready line after ${startTimeoutMs} ms:\n${output}`)),
        startTimeoutMs);
    const onData = (buf) => {
      output += buf.toString();
      const m = output.match(kReadyLine);
      if (m) {
        clearTimeout(timer);
        resolve(m[2].replace(/\/+$/, ""));
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    exitPromise.then((e) => {
      clearTimeout(timer);
      reject(new Error(`kvwarden serve exited (${JSON.stringify(e)}) before ready:\n${output}`));
    });
  });
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    try {
      const res = await fetch(`${url}/ready`);
      if (res.status === 200) break;
    } catch {
      // Not accepting yet.
    }
    if (exited || Date.now() > deadline) {
      throw new Error(`/ready never answered 200 (exit: ${JSON.stringify(exited)}):\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    port,
    output: () => output,
    alive: () => exited === null,
    // SIGTERM drains; a server that ignores it gets SIGKILL after graceMs so no test hangs.
    async stop(graceMs = 20000) {
      if (exited) return exited;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      const e = await exitPromise;
      clearTimeout(timer);
      return e;
    },
  };
}

// A missing optional tool fails the test unless KVW_ALLOW_SKIP (comma-separated names) allows
// skipping it by name; then the test exits 77 (CTest "skipped"). No silent skips.
export function missingTool(name, why) {
  const allowed = (process.env.KVW_ALLOW_SKIP || "").split(",").map((s) => s.trim());
  if (allowed.includes(name)) {
    console.log(`skipped: ${why} (allowed by KVW_ALLOW_SKIP=${name})`);
    process.exit(77);
  }
  console.error(`FAIL: ${why}; install it, or set KVW_ALLOW_SKIP=${name} to skip on purpose`);
  process.exit(1);
}
