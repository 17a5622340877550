// The TypeScript worker against a real runner and nats-server
// (internal/tsdktest/cmd/tsdkharness), rule by rule of
// docs/protocol/41-tasks.md.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Worker, bind, explain, uncertain, idempotencyKey } from "../src/index.js";
import { startHarness } from "./support/harness.js";

let h;
before(async () => { h = await startHarness(); });
after(async () => { await h?.stop(); });

const serve = (...a) => h.serve(...a);

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

test("TestSemantics5_ASecondDeliveryOfAClaimedAttemptIsReportedLostAndNotStarted", async () => {
  await h.start("ts-claimed", [{ tool: "echo", args: { text: "pay" } }]);
  // A worker took the attempt and vanished mid-body: its claim exists.
  const { m, task } = await h.takeTask("echo");
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
  const { m, task } = await h.takeTask("slow");
  assert.ok(task.deadline, "the slow tool's task has a deadline");
  // Hold the task until its deadline passed, then give it back.
  await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(task.deadline) - Date.now()) + 200));
  m.nak();
  // An attempt check that always answers "current": only the deadline
  // (rule 1) keeps attempt 1's body from starting. At the deadline the
  // runtime closed attempt 1's claim, which no worker had taken
  // (docs/semantics.md §8, "Closing an attempt"): it provably did not act,
  // so it is replayed without spending the budget, and attempt 2 runs.
  const s = await serve(undefined, { attemptCheck: async () => true });
  try {
    await h.acked("slow", m);
    const st = await h.waitFor("ts-deadline", (x) => x.status === "finished");
    assert.equal(s.starts.filter((x) => x.call.run === "ts-deadline" && x.call.attempt === 1).length, 0, "attempt 1's body started after its deadline");
    assert.equal(st.actions[0].state, "succeeded");
    assert.equal(st.actions[0].attempts, 2);
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

test("TestSemantics8_SIGKILLOfTheTypeScriptWorkerMidBody: a non-replayable action becomes uncertain, its body not started again", async () => {
  const hw = h.spawnWorker("ts-kill");
  await h.start("ts-kill", [{ tool: "echo", args: { text: "pay", mode: "hang" } }]);
  await hw.started;
  hw.child.kill("SIGKILL");
  await hw.exited;
  const s = await serve();
  try {
    const st = await h.waitFor("ts-kill", (x) => x.status === "suspended");
    assert.equal(st.actions[0].state, "uncertain");
    assert.match(st.actions[0].detail, /claimed before by worker ts-worker-/);
    assert.equal(st.actions[0].attempts, 1);
    assert.equal(s.starts.filter((x) => x.call.run === "ts-kill").length, 0, "the killed worker's body started again");
  } finally {
    await s.stop();
  }
});

test("TestSemantics8_SIGKILLOfTheTypeScriptWorkerMidBody: a replayable action is started again once and the run completes", async () => {
  const hw = h.spawnWorker("ts-kill-replay");
  await h.start("ts-kill-replay", [{ tool: "replay", args: { text: "read", mode: "hang" } }]);
  await hw.started;
  hw.child.kill("SIGKILL");
  await hw.exited;
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
