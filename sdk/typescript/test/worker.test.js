// The TypeScript worker against a real runner and nats-server
// (internal/tsdktest/cmd/tsdkharness), rule by rule of
// docs/protocol/41-tasks.md.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { Worker, bind, explain, uncertain, idempotencyKey } from "../src/index.js";
import { startHarness } from "./support/harness.js";

let h;
before(async () => { h = await startHarness(); });
after(async () => { await h?.stop(); });

/** A worker on its own connection serving echo, counting body starts per run. */
async function serve(bodyFor, opts = {}) {
  const nc = await connect({ servers: h.url });
  const starts = [];
  const w = new Worker(nc, { agent: "tsdk", version: "1", id: "ts-test", ...opts });
  for (const name of ["echo", "slow", "replay"]) {
    w.handle(bind({ name }, async (input, call) => {
      starts.push({ tool: name, call, input });
      return bodyFor ? bodyFor(name, input, call) : { text: input.text };
    }, (err) => uncertain(String(err))));
  }
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  return { w, starts, async stop() { ac.abort(); await running; await nc.close(); } };
}

test("a run whose tool the TypeScript worker serves completes, with the output the body returned", async () => {
  const s = await serve();
  try {
    await h.start("ts-complete", [{ tool: "echo", args: { text: "hello" } }]);
    const st = await h.waitFor("ts-complete", (x) => x.status === "finished");
    assert.equal(st.outcome, "completed");
    assert.deepEqual(JSON.parse(st.answer), [{ text: "hello" }]);
    assert.equal(s.starts.length, 1);
    const call = s.starts[0].call;
    assert.equal(call.run, "ts-complete");
    assert.equal(call.attempt, 1);
    assert.equal(call.idempotencyKey, idempotencyKey("ts-complete", call.action), "the task's key is the one the SDK computes");
    assert.ok(call.signal instanceof AbortSignal);
  } finally {
    await s.stop();
  }
});

/** Takes the next task of tool's queue as a worker would, without acking it. */
async function takeTask(tool) {
  const { jetstream } = await import("@nats-io/jetstream");
  const js = jetstream(h.nc);
  const c = await js.consumers.get("WEFT_TASKS", `weft_task_tsdk@1@${tool}`);
  const m = await c.next({ expires: 10000 });
  assert.ok(m, `no task of ${tool} was delivered`);
  return { m, task: m.json() };
}

/** Waits until tool's queue holds no task, delivered or not: every task was acked. */
async function queueEmpty(tool) {
  const { jetstreamManager } = await import("@nats-io/jetstream");
  const jsm = await jetstreamManager(h.nc);
  for (const until = Date.now() + 30000; ;) {
    const ci = await jsm.consumers.info("WEFT_TASKS", `weft_task_tsdk@1@${tool}`);
    if (ci.num_pending === 0 && ci.num_ack_pending === 0) return;
    assert.ok(Date.now() < until, `the queue of ${tool} is not empty: ${JSON.stringify({ pending: ci.num_pending, ack_pending: ci.num_ack_pending })}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("TestSemantics5_ASecondDeliveryOfAClaimedAttemptIsReportedLostAndNotStarted", async () => {
  await h.start("ts-claimed", [{ tool: "echo", args: { text: "pay" } }]);
  // A worker took the attempt and vanished mid-body: its claim exists.
  const { m, task } = await takeTask("echo");
  const { Kvm } = await import("@nats-io/kv");
  const claims = await new Kvm(h.nc).open("weft_claims");
  await claims.create(task.claim, JSON.stringify({ schema: 1, worker: "vanished", token: "0123456789abcdef", claimed: new Date().toISOString() }));
  m.nak();
  const s = await serve();
  try {
    const st = await h.waitFor("ts-claimed", (x) => x.status === "suspended");
    const a = st.actions[0];
    assert.equal(a.state, "uncertain");
    assert.match(a.detail, /claimed before by worker vanished/);
    assert.equal(s.starts.filter((x) => x.call.run === "ts-claimed").length, 0, "the body started again");
  } finally {
    await s.stop();
  }
});

test("TestSemantics3_ABodyNeverStartsAfterItsDeadline", async () => {
  await h.start("ts-deadline", [{ tool: "slow", args: { text: "late" } }]);
  const { m, task } = await takeTask("slow");
  assert.ok(task.deadline, "the slow tool's task has a deadline");
  // Hold the task until its deadline passed, then give it back.
  await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(task.deadline) - Date.now()) + 200));
  m.nak();
  // An attempt check that always answers "current": only the deadline
  // (rule 1) keeps the body from starting, though the run's timer has
  // recorded the attempt lost meanwhile.
  const s = await serve(undefined, { attemptCheck: async () => true });
  try {
    await queueEmpty("slow");
    assert.equal(s.starts.filter((x) => x.call.run === "ts-deadline").length, 0, "a body started after its deadline");
    const st = await h.waitFor("ts-deadline", (x) => x.status === "suspended");
    assert.equal(st.actions[0].state, "uncertain");
  } finally {
    await s.stop();
  }
});

test("a thrown error is classified by the tool's classify: explain reaches the model as {error}", async () => {
  const nc = await connect({ servers: h.url });
  const w = new Worker(nc, { agent: "tsdk", version: "1" });
  w.handle(bind({ name: "echo" }, () => { throw new Error("card declined"); }, (err) => explain(err.message)));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  try {
    await h.start("ts-explain", [{ tool: "echo", args: { text: "x" } }]);
    const st = await h.waitFor("ts-explain", (x) => x.status === "finished");
    assert.equal(st.actions[0].state, "tool_failed");
    assert.deepEqual(JSON.parse(st.answer), [{ error: "card declined" }]);
  } finally {
    ac.abort();
    await running;
    await nc.close();
  }
});

/** Starts test/support/hanging-worker.js and resolves once a body of run started in it. */
async function hangingWorker(run) {
  const { spawn } = await import("node:child_process");
  const { fileURLToPath } = await import("node:url");
  const child = spawn(process.execPath, [fileURLToPath(new URL("./support/hanging-worker.js", import.meta.url)), h.url], { stdio: ["ignore", "pipe", "inherit"] });
  const started = new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (b) => {
      out += b;
      if (out.includes(`STARTED ${run} `)) resolve();
    });
    child.on("exit", (code, sig) => reject(new Error(`the hanging worker exited (${code ?? sig}) before a body of ${run} started`)));
  });
  return { child, started };
}

test("TestSemantics8_SIGKILLOfTheTypeScriptWorkerMidBody: a non-replayable action becomes uncertain, its body not started again", async () => {
  const hw = await hangingWorker("ts-kill");
  await h.start("ts-kill", [{ tool: "echo", args: { text: "pay" } }]);
  await hw.started;
  const gone = new Promise((r) => hw.child.on("exit", r));
  hw.child.kill("SIGKILL");
  await gone;
  const s = await serve();
  try {
    const st = await h.waitFor("ts-kill", (x) => x.status === "suspended");
    assert.equal(st.actions[0].state, "uncertain");
    assert.match(st.actions[0].detail, /claimed before by worker hanging-/);
    assert.equal(st.actions[0].attempts, 1);
    assert.equal(s.starts.filter((x) => x.call.run === "ts-kill").length, 0, "the killed worker's body started again");
  } finally {
    await s.stop();
  }
});

test("TestSemantics8_SIGKILLOfTheTypeScriptWorkerMidBody: a replayable action is started again once and the run completes", async () => {
  const hw = await hangingWorker("ts-kill-replay");
  await h.start("ts-kill-replay", [{ tool: "replay", args: { text: "read" } }]);
  await hw.started;
  const gone = new Promise((r) => hw.child.on("exit", r));
  hw.child.kill("SIGKILL");
  await gone;
  const s = await serve();
  try {
    const st = await h.waitFor("ts-kill-replay", (x) => x.status === "finished");
    assert.equal(st.outcome, "completed");
    assert.equal(st.actions[0].attempts, 2);
    const mine = s.starts.filter((x) => x.call.run === "ts-kill-replay");
    assert.deepEqual(mine.map((x) => x.call.attempt), [2]);
    assert.equal(mine[0].call.idempotencyKey, idempotencyKey("ts-kill-replay", mine[0].call.action), "the key is stable across attempts");
  } finally {
    await s.stop();
  }
});
