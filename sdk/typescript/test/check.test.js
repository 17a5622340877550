// The attempt check of rule 2 (src/check.js) answers as the Go worker's
// (worker.LogCheck) on the same live runs, at the points where it
// matters: a fresh fence, a reported attempt, a cancelled run, a timed-out
// attempt; with and without the fence_version shortcut.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { logCheck, foldAttempt } from "../src/index.js";
import { startHarness } from "./support/harness.js";

let h, check;
before(async () => {
  h = await startHarness();
  const jsm = await jetstreamManager(h.nc);
  check = logCheck(jsm, () => new Kvm(h.nc).open("weft_runners"));
});
after(async () => { await h?.stop(); });

async function goCheck(task) {
  const r = await h.nc.request("tsdktest.check", JSON.stringify(task), { timeout: 10000 });
  const body = r.json();
  assert.equal(body.error, undefined, `the Go check failed: ${body.error}`);
  return body.current;
}

/** Both checks of task, with its fence_version and without it; they must agree and equal want. */
async function agree(task, want, what) {
  const { fence_version, ...full } = task;
  for (const t of [task, full]) {
    const go = await goCheck(t);
    const ts = await check(t);
    assert.equal(go, want, `${what}: the Go check says ${go}`);
    assert.equal(ts, go, `${what}${t === full ? " (the whole run folded)" : ""}: the TypeScript check says ${ts}, the Go one ${go}`);
  }
}

test("the attempt check agrees with the Go worker's: fenced, then reported", async () => {
  await h.start("ts-check-rep", [{ tool: "echo", args: { text: "x" } }]);
  const { m, task } = await h.takeTask("echo");
  assert.ok(task.fence_version > 0);
  await agree(task, true, "a fresh fence");
  const r = await h.nc.request("weft.api.report.tsdk.1.echo", JSON.stringify({ schema: 1, command_id: "r-check", run: task.run, action: task.action,
    attempt: task.attempt, incarnation: task.incarnation, outcome: "output", content: { text: "x" } }), { timeout: 10000 });
  assert.equal(r.json().error, undefined);
  m.ack();
  await h.waitFor(task.run, (x) => x.status === "finished");
  await agree(task, false, "a reported attempt of a finished run");
});

test("the attempt check agrees with the Go worker's: a cancelled run", async () => {
  await h.start("ts-check-cancel", [{ tool: "echo", args: { text: "x" } }]);
  const { m, task } = await h.takeTask("echo");
  await agree(task, true, "a fresh fence");
  const r = await h.command("cancel", { command_id: "c-check", run: task.run });
  assert.equal(r.error, undefined);
  m.ack();
  await h.waitFor(task.run, (x) => x.status === "finished");
  await agree(task, false, "the attempt of a cancelled run");
});

test("the attempt check agrees with the Go worker's: an attempt its timer recorded lost", async () => {
  await h.start("ts-check-timeout", [{ tool: "slow", args: { text: "x" } }]);
  const { m, task } = await h.takeTask("slow");
  // At its deadline the run closes the claim no worker took and replays
  // the attempt (docs/semantics.md §8, "Closing an attempt"): attempt 2 is
  // fenced, attempt 1 is no longer current.
  await h.waitFor(task.run, (x) => x.actions?.[0]?.attempts === 2);
  m.ack();
  await agree(task, false, "a timed-out attempt");
  // An attempt never fenced is not visible yet to either: read again.
  const never = { ...task, attempt: 3 };
  delete never.fence_version;
  const r = (await h.nc.request("tsdktest.check", JSON.stringify(never), { timeout: 10000 })).json();
  assert.match(r.error ?? "", /not visible yet/);
  await assert.rejects(check(never), /not visible yet/);
});

test("foldAttempt: a run not read up to the task's fence is not visible; a later incarnation makes the attempt stale", () => {
  const t = { action: "1/c", attempt: 1, incarnation: 1 };
  const started = { type: "run_started", payload: {} };
  const fenced = { type: "attempt_fenced", payload: { action: "1/c", attempt: 1, incarnation: 1 } };
  assert.deepEqual(foldAttempt([started], t), { visible: false, current: false, handedOffBy: null });
  assert.equal(foldAttempt([started, fenced], t).current, true);
  assert.equal(foldAttempt([started, fenced, { type: "report_refused", payload: { action: "1/c", attempt: 2, reason: "foreign" } }], t).current, true);
  assert.equal(foldAttempt([started, fenced, { type: "run_handed_off", payload: { runner: "r1", incarnation: 1 } }], t).handedOffBy, "r1");
  assert.equal(foldAttempt([started, fenced, { type: "run_recovered", payload: { runner: "r2", incarnation: 2 } }], t).current, false);
  assert.equal(foldAttempt([started, fenced, { type: "actions_not_started", payload: { actions: ["1/c"] } }], t).current, false);
});
