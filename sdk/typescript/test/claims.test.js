// Claims (docs/protocol/41-tasks.md, rule 3 and "A closed claim") and
// requeues (rule 9): the TypeScript worker against a real runner
// (internal/tsdktest/cmd/tsdkharness).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { headers } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { HEADER_UNSTARTED_CLAIM } from "../src/index.js";
import { startHarness } from "./support/harness.js";

let h, claims;
before(async () => {
  h = await startHarness();
  claims = await new Kvm(h.nc).open("weft_claims");
});
after(async () => { await h?.stop(); });

const claimOf = (worker, token, extra = {}) => JSON.stringify({ schema: 1, worker, token, claimed: new Date().toISOString(), ...extra });

test("TestSemantics8_ADeliveryWhoseClaimWasClosedNeitherStartsNorReports", async () => {
  await h.start("ts-closed", [{ tool: "echo", args: { text: "x" } }]);
  const { m, task } = await h.takeTask("echo");
  await claims.create(task.claim, claimOf("", "", { closed: { by: "runner-x", why: "cancelled", at: new Date().toISOString() } }));
  m.nak();
  const s = await h.serve();
  try {
    await h.acked("echo", m);
    assert.equal(s.of("ts-closed").length, 0, "the body of a closed attempt started");
    const st = await h.state("ts-closed");
    assert.equal(st.actions[0].state, "running", "a report was recorded for a closed attempt");
  } finally {
    await s.stop();
  }
});

test("TestSemantics5_AClaimTakenUnansweredByAWorkerThatNeverStartedTheBodyIsNotALoss", async () => {
  await h.start("ts-unstarted", [{ tool: "echo", args: { text: "once" } }]);
  const { m, task } = await h.takeTask("echo");
  // A worker created the claim, got no answer, and requeued the task
  // naming its token: no body started under that claim.
  await claims.create(task.claim, claimOf("w-gone", "feedfacefeedface"));
  const hdr = headers();
  hdr.append(HEADER_UNSTARTED_CLAIM, "feedfacefeedface");
  await jetstream(h.nc).publish(m.subject, m.data, { headers: hdr, msgID: `${task.run}/${task.action}/1/1/requeued/${m.info.streamSequence}` });
  m.ack();
  const s = await h.serve();
  try {
    const st = await h.waitFor("ts-unstarted", (x) => x.status === "finished");
    assert.equal(st.outcome, "completed");
    assert.equal(s.of("ts-unstarted").length, 1);
    const c = JSON.parse(new TextDecoder().decode((await claims.get(task.claim)).value));
    assert.equal(c.worker, "ts-test");
    assert.notEqual(c.token, "feedfacefeedface", "the claim was not taken over under the delivery's own token");
  } finally {
    await s.stop();
  }
});

test("TestSemantics8_AReportSavedInTheClaimIsDeliveredInsteadOfALoss", async () => {
  await h.start("ts-saved", [{ tool: "echo", args: { text: "x" } }]);
  const { m, task } = await h.takeTask("echo");
  const report = { schema: 1, command_id: `report/${task.run}/${task.action}/1/1`, run: task.run, action: task.action, attempt: 1, incarnation: 1,
    outcome: "output", content: { text: "saved" }, worker: "w-gone", queue: { agent: "tsdk", version: "1", tool: "echo" } };
  await claims.create(task.claim, claimOf("w-gone", "0011223344556677", { report }));
  m.nak();
  const s = await h.serve();
  try {
    const st = await h.waitFor("ts-saved", (x) => x.status === "finished");
    assert.equal(st.outcome, "completed");
    assert.deepEqual(JSON.parse(st.answer), [{ text: "saved" }]);
    assert.equal(s.of("ts-saved").length, 0);
  } finally {
    await s.stop();
  }
});

test("TestSemantics8_ATaskAStoppingWorkerDidNotStartIsRequeuedNeverReported", async () => {
  // The first worker is checking the attempt when it is told to stop.
  let entered, release;
  const inCheck = new Promise((r) => { entered = r; });
  const gate = new Promise((r) => { release = r; });
  const first = await h.serve(undefined, {
    attemptCheck: async (t) => {
      if (t.run === "ts-requeue") { entered(); await gate; }
      return true;
    },
  });
  await h.start("ts-requeue", [{ tool: "echo", args: { text: "later" } }]);
  await inCheck;
  const stopped = first.stop();
  while (!first.w.stopping) await new Promise((r) => setTimeout(r, 10));
  release();
  await stopped;
  assert.equal(first.of("ts-requeue").length, 0);
  const second = await h.serve();
  try {
    const st = await h.waitFor("ts-requeue", (x) => x.status === "finished");
    assert.equal(st.outcome, "completed");
    assert.equal(st.actions[0].attempts, 1);
    assert.equal(second.of("ts-requeue").length, 1);
  } finally {
    await second.stop();
  }
});
