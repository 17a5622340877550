// Stopping: a run's cancellation (weft.stop.<run>), the worker's drain on
// SIGTERM, bounded by its drain grace, and the late settlement of a
// settling tool stopped by its timeout — the TypeScript worker against a
// real runner (internal/tsdktest/cmd/tsdkharness).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { Worker, bind, bindSettling, uncertain } from "../src/index.js";
import { startHarness } from "./support/harness.js";

let h;
before(async () => { h = await startHarness(); });
after(async () => { await h?.stop(); });

test("TestSemantics7_ACancelStopsTheRunningBody: its signal aborts, the action ends uncertain and the run cancelled", async () => {
  let aborted = null;
  const s = await h.serve((tool, input, call) => new Promise((resolve, reject) => {
    call.signal.addEventListener("abort", () => { aborted = call.signal.reason; reject(new Error("aborted")); }, { once: true });
  }));
  try {
    await h.start("ts-cancel", [{ tool: "echo", args: { text: "pay" } }]);
    await h.waitFor("ts-cancel", () => s.of("ts-cancel").length === 1);
    const r = await h.command("cancel", { command_id: "c-ts-cancel", run: "ts-cancel" });
    assert.equal(r.error, undefined, JSON.stringify(r));
    const st = await h.waitFor("ts-cancel", (x) => x.status === "finished");
    assert.equal(st.outcome, "cancelled");
    assert.equal(st.actions[0].state, "uncertain");
    await h.waitFor("ts-cancel", () => aborted !== null);
    assert.equal(aborted, "stopped by cancellation");
  } finally {
    await s.stop();
  }
});

test("TestSemantics7_ABodyNeverStartsAfterItsRunsStopReachedTheWorker", async () => {
  // The attempt check answers "current" but, on its second call (the
  // check after the claim is taken), first cancels the run and waits until
  // the cancellation's stop reached the worker: only the stop (rule 7)
  // keeps the body from starting. (Cancelled before the claim, the run
  // would close the attempt's claim instead — docs/semantics.md §8,
  // "Closing an attempt" — and no stop would be sent for it.)
  let w = null;
  let checks = 0;
  const check = async (t) => {
    if (t.run === "ts-stopgate" && ++checks === 2) {
      const r = await h.command("cancel", { command_id: "c-ts-stopgate", run: t.run });
      assert.equal(r.error, undefined, JSON.stringify(r));
      while (w.stats.stops === 0) await new Promise((res) => setTimeout(res, 10));
    }
    return true;
  };
  const s = await h.serve(undefined, { attemptCheck: check });
  w = s.w;
  try {
    await h.start("ts-stopgate", [{ tool: "echo", args: { text: "pay" } }]);
    const st = await h.waitFor("ts-stopgate", (x) => x.status === "finished");
    assert.equal(st.outcome, "cancelled");
    await h.queueEmpty("echo");
    assert.equal(s.of("ts-stopgate").length, 0, "the body started after its run's stop");
  } finally {
    await s.stop();
  }
});

test("TestSemantics8_SIGTERMDrainsTheTypeScriptWorker: the running body finishes, is reported, and the process exits", async () => {
  const hw = h.spawnWorker("ts-drain");
  await h.start("ts-drain", [{ tool: "echo", args: { text: "done", mode: "finish" } }]);
  await hw.started;
  hw.child.kill("SIGTERM");
  const { code, out } = await hw.exited;
  assert.equal(code, 0);
  assert.match(out, /EXITED/);
  const st = await h.waitFor("ts-drain", (x) => x.status === "finished");
  assert.equal(st.outcome, "completed");
  assert.deepEqual(JSON.parse(st.answer), [{ text: "done" }]);
});

test("TestSemantics8_TheDrainIsBounded: a body still running at the end of the drain grace is reported worker_lost and the process exits", async () => {
  const hw = h.spawnWorker("ts-drain-bound", 300);
  await h.start("ts-drain-bound", [{ tool: "echo", args: { text: "hang", mode: "hang" } }]);
  await hw.started;
  hw.child.kill("SIGTERM");
  const { code } = await hw.exited;
  assert.equal(code, 0);
  const st = await h.waitFor("ts-drain-bound", (x) => x.status === "suspended");
  assert.equal(st.actions[0].state, "uncertain");
  assert.match(st.actions[0].detail, /drain window ended/);
});

test("TestSemantics3_ASettlingToolsOwnReturnWinsAfterItsTimeout: the late return is offered as the settlement", async () => {
  const nc = await connect({ servers: h.url });
  const w = new Worker(nc, { agent: "tsdk", version: "1" });
  // settle has a one-second timeout and a ten-second settle window.
  w.handle(bindSettling({ name: "settle" }, async (input) => {
    await new Promise((r) => setTimeout(r, 1600));
    return { text: input.text };
  }, (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  try {
    await h.start("ts-late", [{ tool: "settle", args: { text: "refunded" } }]);
    const st = await h.waitFor("ts-late", (x) => x.status === "finished");
    assert.equal(st.outcome, "completed");
    assert.equal(st.actions[0].state, "succeeded");
    assert.deepEqual(JSON.parse(st.answer), [{ text: "refunded" }]);
  } finally {
    ac.abort();
    await running;
    await nc.close();
  }
});

test("a settling handler settling its own running call is refused not_awaited, reason own_call", async () => {
  const nc = await connect({ servers: h.url });
  const w = new Worker(nc, { agent: "tsdk", version: "1" });
  let refusal = null;
  w.handle(bindSettling({ name: "settle" }, async (input, call) => {
    try {
      await call.settlement.settle({ text: "mine" }, "own");
    } catch (err) {
      refusal = err;
    }
    return { text: input.text };
  }, (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  try {
    await h.start("ts-own", [{ tool: "settle", args: { text: "ok" } }]);
    await h.waitFor("ts-own", (x) => x.status === "finished");
    assert.equal(refusal?.code, "not_awaited");
    assert.equal(refusal?.reason, "own_call");
  } finally {
    ac.abort();
    await running;
    await nc.close();
  }
});

test("TestSemantics3_ATaskOfAnotherAgentVersionIsNotTaken", async () => {
  const nc = await connect({ servers: h.url });
  const v2 = [];
  const w2 = new Worker(nc, { agent: "tsdk", version: "2" });
  w2.handle(bind({ name: "echo" }, (input, call) => { v2.push(call.run); return { text: "v2" }; }, (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w2.run({ signal: ac.signal });
  const s = await h.serve();
  try {
    await h.start("ts-version", [{ tool: "echo", args: { text: "v1" } }]);
    const st = await h.waitFor("ts-version", (x) => x.status === "finished");
    assert.deepEqual(JSON.parse(st.answer), [{ text: "v1" }]);
    assert.deepEqual(v2, []);
    assert.equal(s.of("ts-version").length, 1);
  } finally {
    await s.stop();
    ac.abort();
    await running;
    await nc.close();
  }
});
