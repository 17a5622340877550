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
async function serve(bodyFor) {
  const nc = await connect({ servers: h.url });
  const starts = [];
  const w = new Worker(nc, { agent: "tsdk", version: "1", id: "ts-test" });
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
