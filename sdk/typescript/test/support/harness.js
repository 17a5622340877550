// Starts internal/tsdktest/cmd/tsdkharness: an embedded nats-server and a
// real runner whose agent "tsdk" leaves every tool to external workers.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Worker, bind, uncertain } from "../../src/index.js";

const repo = fileURLToPath(new URL("../../../../", import.meta.url));

// Every temporary folder this process made, removed when it exits however
// it exits short of a signal (a failed build or start, a failed test that
// never called stop): the test command leaves nothing in the temp dir.
const made = new Set();
process.on("exit", () => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});
function tempDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.add(dir);
  return dir;
}

let built = null;
/** Builds the harness once per test process, into a temporary folder. */
function binary() {
  if (!built) {
    const bin = join(tempDir("tsdkharness-bin-"), "tsdkharness");
    execFileSync("go", ["build", "-o", bin, "./internal/tsdktest/cmd/tsdkharness"], { cwd: repo, stdio: ["ignore", "inherit", "inherit"] });
    built = bin;
  }
  return built;
}

/**
 * Starts a harness (opts.approverKey: the public user nkey of the agent's
 * approver of signed proofs, "keys"); resolves {url, nc, state, waitFor, start, command,
 * serve, takeTask, acked, queueEmpty, spawnWorker, pause, resume, stop}.
 */
export async function startHarness(opts = {}) {
  const data = tempDir("tsdkharness-data-");
  const args = ["-data", data];
  if (opts.approverKey) args.push("-approver-key", opts.approverKey);
  const child = spawn(binary(), args, { stdio: ["pipe", "pipe", "inherit"] });
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
    /** Sends a command of docs/protocol/40-commands.md; resolves its reply body (an error reply too). */
    async command(name, body) {
      const r = await nc.request(`weft.api.${name}`, JSON.stringify({ schema: 1, ...body }), { timeout: 10000 });
      return r.json();
    },
    /**
     * Runs a Worker in this process serving echo, slow, replay with
     * bodyFor(tool, input, call) (default: echo the text), classify
     * uncertain; records every body start in starts.
     */
    async serve(bodyFor, opts = {}) {
      const wnc = await connect({ servers: url });
      const starts = [];
      const w = new Worker(wnc, { agent: "tsdk", version: "1", id: "ts-test", ...opts });
      for (const name of opts.tools ?? ["echo", "slow", "replay"]) {
        w.handle(bind({ name }, async (input, call) => {
          starts.push({ tool: name, call, input });
          return bodyFor ? bodyFor(name, input, call) : { text: input.text };
        }, (err) => uncertain(String(err))));
      }
      const ac = new AbortController();
      const running = w.run({ signal: ac.signal });
      return {
        w, starts,
        of(run) { return starts.filter((x) => x.call.run === run); },
        async stop() { ac.abort(); await running; await wnc.close(); },
      };
    },
    /** Takes the next task of tool's queue as a worker would, without acking it. */
    async takeTask(tool) {
      const c = await jetstream(nc).consumers.get("WEFT_TASKS", `weft_task_tsdk@1@${tool}`);
      const m = await c.next({ expires: 10000 });
      if (!m) throw new Error(`no task of ${tool} was delivered`);
      return { m, task: m.json() };
    },
    /**
     * Waits until the task m of tool's queue, given back with nak, was
     * acked by a worker: the consumer's ack floor reached it. (An empty
     * queue says nothing before a worker took the task again: a task given
     * back is neither pending nor waiting for its ack.)
     */
    async acked(tool, m) {
      const jsm = await jetstreamManager(nc);
      for (const until = Date.now() + 30000; ;) {
        const ci = await jsm.consumers.info("WEFT_TASKS", `weft_task_tsdk@1@${tool}`);
        if (ci.ack_floor.stream_seq >= m.info.streamSequence) return;
        if (Date.now() > until) throw new Error(`the task of ${tool} (stream sequence ${m.info.streamSequence}) was not acked: ack floor ${JSON.stringify(ci.ack_floor)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    /** Waits until tool's queue holds no task, delivered or not: every task was acked. */
    async queueEmpty(tool) {
      const jsm = await jetstreamManager(nc);
      for (const until = Date.now() + 30000; ;) {
        const ci = await jsm.consumers.info("WEFT_TASKS", `weft_task_tsdk@1@${tool}`);
        if (ci.num_pending === 0 && ci.num_ack_pending === 0) return;
        if (Date.now() > until) throw new Error(`the queue of ${tool} is not empty: pending ${ci.num_pending}, ack pending ${ci.num_ack_pending}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    /**
     * Starts test/support/hanging-worker.js; started resolves once a body
     * of run started in it, exited once it exited.
     */
    spawnWorker(run, ...args) {
      const child = spawn(process.execPath, [fileURLToPath(new URL("./hanging-worker.js", import.meta.url)), url, ...args.map(String)], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      const exited = new Promise((resolve) => child.on("exit", (code, sig) => resolve({ code, sig, out })));
      const started = new Promise((resolve, reject) => {
        child.stdout.on("data", (b) => {
          out += b;
          if (out.includes(`STARTED ${run} `)) resolve();
        });
        exited.then(() => reject(new Error(`the worker process exited before a body of ${run} started`)));
      });
      started.catch(() => {});
      return { child, started, exited };
    },
    /** Stops the harness process (SIGSTOP): its server and runner answer nothing until resume. */
    pause() { child.kill("SIGSTOP"); },
    /** Lets a paused harness go on (SIGCONT). */
    resume() { child.kill("SIGCONT"); },
    async stop() {
      child.kill("SIGCONT");
      await nc.close();
      child.stdin.end();
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.on("exit", r)));
      rmSync(data, { recursive: true, force: true });
    },
  };
  return h;
}
