// Starts internal/tsdktest/cmd/tsdkharness: an embedded nats-server and a
// real runner whose agent "tsdk" leaves every tool to external workers.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";

const repo = fileURLToPath(new URL("../../../../", import.meta.url));

let built = null;
/** Builds the harness once per test process, into a temporary folder. */
function binary() {
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "tsdkharness-bin-"));
    built = join(dir, "tsdkharness");
    execFileSync("go", ["build", "-o", built, "./internal/tsdktest/cmd/tsdkharness"], { cwd: repo, stdio: ["ignore", "inherit", "inherit"] });
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

/** Starts a harness; resolves {url, nc, state(run), waitFor(run, pred), start(run, calls), stop()}. */
export async function startHarness() {
  const data = mkdtempSync(join(tmpdir(), "tsdkharness-data-"));
  const child = spawn(binary(), ["-data", data], { stdio: ["pipe", "pipe", "inherit"] });
  const url = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (b) => {
      out += b;
      const m = /NATS_URL=(\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.on("exit", (code) => reject(new Error(`tsdkharness exited with ${code} before it was ready`)));
  });
  const nc = await connect({ servers: url });
  const h = {
    url, nc,
    async state(run) {
      const r = await nc.request("tsdktest.state", JSON.stringify({ run }), { timeout: 10000 });
      return r.json();
    },
    /** Polls the run's state (folded from its log) until pred holds; fails after timeoutMs. */
    async waitFor(run, pred, timeoutMs = 30000) {
      const until = Date.now() + timeoutMs;
      let s;
      for (;;) {
        s = await h.state(run);
        if (pred(s)) return s;
        if (Date.now() > until) throw new Error(`run ${run}: condition not reached; last state ${JSON.stringify(s)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    /** Starts run with the calls the scripted model makes: [{tool, args}]. */
    async start(run, calls) {
      const r = await nc.request("weft.api.start", JSON.stringify({ schema: 1, run, agent: "tsdk", input: JSON.stringify(calls) }), { timeout: 10000 });
      const body = r.json();
      if (body.error) throw new Error(`start ${run}: ${JSON.stringify(body.error)}`);
      return body;
    },
    async stop() {
      await nc.close();
      child.stdin.end();
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.on("exit", r)));
      rmSync(data, { recursive: true, force: true });
    },
  };
  return h;
}
