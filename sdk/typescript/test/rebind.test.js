// A queue's consumer made again while the worker runs (docs/semantics.md
// §8, "a run can always be answered"): the TypeScript worker against a
// real runner and nats-server (internal/tsdktest/cmd/tsdkharness).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { startHarness } from "./support/harness.js";

let h;
before(async () => { h = await startHarness(); });
after(async () => { await h?.stop(); });

const ECHO_CONSUMER = "weft_task_tsdk@1@echo";

test("TestSemantics8_ATypeScriptWorkerMakesADeletedConsumerAgain: a task published after its queue's consumer was deleted is executed", async () => {
  const warned = [];
  const logger = { info() {}, error() {}, warn(msg, attrs) { warned.push({ msg, attrs }); } };
  const s = await h.serve(undefined, { logger });
  try {
    await h.start("ts-rebind-1", [{ tool: "echo", args: { text: "before" } }]);
    assert.equal((await h.waitFor("ts-rebind-1", (x) => x.status === "finished")).outcome, "completed");
    // The task of ts-rebind-1 is acked before the consumer goes: a
    // deletion that reached the server first would lose the ack and the
    // consumer made again would deliver it again (reported worker_lost,
    // refused already_recorded: harmless, but not this test's subject).
    await h.queueEmpty("echo");
    const jsm = await jetstreamManager(h.nc);
    assert.equal(await jsm.consumers.delete("WEFT_TASKS", ECHO_CONSUMER), true);

    await h.start("ts-rebind-2", [{ tool: "echo", args: { text: "after" } }]);
    const st = await h.waitFor("ts-rebind-2", (x) => x.status === "finished", 20000);
    assert.equal(st.outcome, "completed");
    assert.deepEqual(JSON.parse(st.answer), [{ text: "after" }]);
    assert.equal(s.of("ts-rebind-2").length, 1);
    assert.ok(s.w.stats.rebinds >= 1, `consumes made again: ${s.w.stats.rebinds}`);
    assert.ok(warned.some((w) => w.msg === "worker: a queue's consume ended; making its consumer again" && w.attrs?.queue === ECHO_CONSUMER),
      `warnings: ${JSON.stringify(warned.map((w) => w.msg))}`);
    const ci = await jsm.consumers.info("WEFT_TASKS", ECHO_CONSUMER);
    assert.equal(ci.config.ack_policy, "explicit", "the consumer made again has the setup's configuration");
    assert.equal(ci.config.max_deliver, -1);
  } finally {
    await s.stop();
  }
});
