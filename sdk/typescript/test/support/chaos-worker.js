// The TypeScript worker as a part of the chaos harness (internal/chaos/typescript.go,
// docs/reliability.md): it serves the tool named by WEFT_CHAOS_TS_TOOL of
// agent "chaos" (its one version) with the body the Go parts run
// (internal/chaos/agent.go, work): a line in the side ledger WEFT_CHAOS_LEDGER,
// fsynced before anything else, then args.ms of work stopped by the
// attempt's signal, then a definite failure (args.fail) or the output
// {done}. A body called with an ended signal, or past its deadline by the
// clock, writes a late line instead and does nothing. Its attempt check is
// logCheck, wrapped to record each look that found the attempt current,
// as the Go parts' (the ledger line carries it). It drains on SIGTERM and
// exits 70 when the ledger cannot be written, as the Go parts do.
// Environment: NATS_URL (comma-separated), WEFT_CHAOS_ID, WEFT_CHAOS_LEDGER,
// WEFT_CHAOS_TS_TOOL, WEFT_CHAOS_ACK_WAIT (a Go duration in s or ms).
import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { RUNNERS_BUCKET, Worker, bind, explain, logCheck, uncertain } from "../../src/index.js";
import { natsURL } from "./nats-url.js";

const env = process.env;
const id = env.WEFT_CHAOS_ID;
const tool = env.WEFT_CHAOS_TS_TOOL;
const processName = `${id}.${process.pid}`;

// The ack wait as the Go parts read it ("1s", "500ms").
function millis(d, def) {
  const m = /^(\d+(?:\.\d+)?)(ms|s)$/.exec(d ?? "");
  if (!m) return def;
  return Number(m[1]) * (m[2] === "s" ? 1000 : 1);
}

// Unix nanoseconds with sub-millisecond precision, comparable with the Go
// parts' time.Now().UnixNano().
function nowNanos() {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
}

const looks = new Map();
const lookKey = (run, action, attempt) => `${run} ${action} ${attempt}`;

function ledgerLine(kind, call) {
  const lk = looks.get(lookKey(call.run, call.action, call.attempt)) ?? { began: 0n, ended: 0n };
  const line = `${kind} ${nowNanos()} ${call.run} ${call.action} ${tool} ${call.attempt} ${processName} ${lk.began} ${lk.ended}\n`;
  try {
    const fd = openSync(env.WEFT_CHAOS_LEDGER, "a", 0o644);
    writeSync(fd, line);
    fsyncSync(fd);
    closeSync(fd);
  } catch (err) {
    process.stderr.write(`chaos: ledger: ${err}\n`);
    process.exit(70);
  }
}

class Declined extends Error {}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (!(ms > 0)) return resolve();
    const t = setTimeout(() => { signal.removeEventListener("abort", onAbort); resolve(); }, ms);
    const onAbort = () => { clearTimeout(t); reject(new Error(`stopped: ${signal.reason}`)); };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

// ignoreAuthErrorAbort: refused by another server on a node's port (another
// chaos run's), keep trying the harness's own nodes (internal/chaos, writeNodes).
const nc = await connect({ ...natsURL(env.NATS_URL), name: id, waitOnFirstConnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 100, ignoreAuthErrorAbort: true });
// Its errors go to the log (stderr), as the Go parts' do: a refusal there is
// what the harness reports as foreign_server (checkForeignServers).
(async () => {
  for await (const s of nc.status()) {
    if (s.type === "error") process.stderr.write(`nats: ${s.error?.message ?? s.error}\n`);
  }
})();
const inner = logCheck(await jetstreamManager(nc, { checkAPI: false }), () => new Kvm(nc).open(RUNNERS_BUCKET));
const w = new Worker(nc, {
  agent: "chaos", version: "1", id, ackWaitMs: millis(env.WEFT_CHAOS_ACK_WAIT, 1000),
  // The setup waits for a server that restarts, as the Go parts do.
  setupWithinMs: 10 * 60 * 1000,
  logger: {
    info() {},
    warn: (msg, f) => process.stderr.write(`WARN ${msg} ${JSON.stringify(f ?? {})}\n`),
    error: (msg, f) => process.stderr.write(`ERROR ${msg} ${JSON.stringify(f ?? {})}\n`),
  },
  attemptCheck: async (t) => {
    const began = nowNanos();
    const current = await inner(t);
    if (current) looks.set(lookKey(t.run, t.action, t.attempt), { began, ended: nowNanos() });
    return current;
  },
});
w.handle(bind({ name: tool }, async (input, call) => {
  if (call.signal.aborted || (call.deadline && Date.now() >= call.deadline.getTime())) {
    ledgerLine("late", call);
    throw new Error("called after its context ended; did nothing");
  }
  ledgerLine("start", call);
  await sleep(input.ms, call.signal);
  if (input.fail) throw new Declined("declined by the test tool");
  return { done: `${tool} ${call.action} attempt ${call.attempt}` };
}, (err) => (err instanceof Declined ? explain(err.message) : uncertain(String(err?.message ?? err)))));
await w.runUntilSignal();
await nc.close();
