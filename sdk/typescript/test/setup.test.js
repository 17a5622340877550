// The worker's setup is tried again while the server does not answer, as
// the Go worker's (worker.Run, worker/startdown_test.go), bounded by
// setupWithinMs, after which run throws saying why. The server that does
// not answer is the harness's, stopped with SIGSTOP: its connections stay
// open and nothing answers, as a server that hangs or restarts.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { Worker, bind, uncertain } from "../src/index.js";
import { startHarness } from "./support/harness.js";

let h;
before(async () => { h = await startHarness(); });
after(async () => { await h?.stop(); });

function echoWorker(nc, opts, warned) {
  const starts = [];
  const w = new Worker(nc, {
    agent: "tsdk", version: "1", id: "ts-setup",
    logger: { info() {}, error() {}, warn: (msg) => { if (/does not answer/.test(msg)) warned(); } },
    ...opts,
  });
  w.handle(bind({ name: "echo" }, (input, call) => { starts.push(call.run); return { text: input.text }; }, (err) => uncertain(String(err))));
  return { w, starts };
}

test("TestSemantics8_AWorkerStartedWhileTheServerDoesNotAnswerServesOnceItAnswers", async () => {
  const nc = await connect({ servers: h.url });
  let warned;
  const retried = new Promise((r) => { warned = r; });
  const { w, starts } = echoWorker(nc, {}, warned);
  const ac = new AbortController();
  h.pause();
  let running;
  try {
    running = w.run({ signal: ac.signal });
    // The worker's first try of its setup got no answer, and it tries again.
    await Promise.race([retried, running.then(() => { throw new Error("run returned while the server did not answer"); })]);
  } finally {
    h.resume();
  }
  try {
    await h.start("ts-setup-late", [{ tool: "echo", args: { text: "after" } }]);
    const st = await h.waitFor("ts-setup-late", (x) => x.status === "finished", 60000);
    assert.equal(st.outcome, "completed");
    assert.deepEqual(starts, ["ts-setup-late"]);
  } finally {
    ac.abort();
    await running;
    await nc.close();
  }
});

test("TestSemantics8_AWorkerWhoseServerNeverAnswersGivesUpSayingWhy", async () => {
  const nc = await connect({ servers: h.url });
  const { w } = echoWorker(nc, { setupWithinMs: 1500 }, () => {});
  h.pause();
  try {
    await assert.rejects(w.run(), /the NATS server did not answer the setup .* for 1500 ms; giving up/);
  } finally {
    h.resume();
    await nc.close();
  }
});
