// The client against a real runner, projector and query service
// (internal/tsdktest/cmd/tsdkharness): a run of the Go agent whose tool
// the TypeScript worker serves suspends for an approval answered from
// TypeScript, and refusals come back as the classes of their codes.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { createUser } from "@nats-io/nkeys";
import { Client, Worker, bind, uncertain, finished, suspended, signProof, argumentsSha256, canonicalArguments, RunEndedError, UnknownRunError, WrongReferenceError, WeftError, ProofRefusedError, InvalidContentError } from "../src/index.js";
import { startHarness } from "./support/harness.js";

const approverKey = createUser();
let h, client;

/** The run's pending approval requests, once the inbox (a read model beside the run view) lists one. */
async function pendingApprovals(run) {
  for (let i = 0; ; i++) {
    const items = await client.approvals({ run });
    if (items.length > 0 || i >= 400) return items;
    await new Promise((r) => setTimeout(r, 25));
  }
}
before(async () => {
  h = await startHarness({ approverKey: approverKey.getPublicKey() });
  client = new Client(h.nc);
});
after(async () => { await h?.stop(); });

test("TestScenario15_ApprovalAnsweredFromTypeScript: the tool runs once, under the reviewer's answer", async () => {
  const nc = await connect({ servers: h.url });
  const w = new Worker(nc, { agent: "tsdk", version: "1" });
  const calls = [];
  w.handle(bind({ name: "guarded" }, (input, call) => { calls.push(call); return { text: input.text }; }, (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  try {
    const started = await client.start({ run: "ts-approve", agent: "tsdk", input: JSON.stringify([{ tool: "guarded", args: { text: "pay 10" } }]) });
    assert.equal(started.run, "ts-approve");
    await client.waitFor("ts-approve", suspended);
    const items = await pendingApprovals("ts-approve");
    assert.equal(items.length, 1);
    const { action, revision, requirement } = items[0];
    assert.deepEqual(requirement, { name: "finance", version: 1 });
    assert.equal(calls.length, 0, "the body ran before the approval");
    await client.approve({ run: "ts-approve", action, revision, approver: "tsdk", credential: "alice" });
    const view = await client.waitFor("ts-approve", finished);
    assert.equal(view.outcome.kind, "completed");
    assert.equal(calls.length, 1);
    assert.equal(calls[0].reviewer, "alice");
    // The run ended: approve checks that before the reference (docs/protocol/40-commands.md).
    await assert.rejects(client.approve({ run: "ts-approve", action, revision, approver: "tsdk", credential: "bob" }), RunEndedError);
  } finally {
    ac.abort();
    await running;
    await nc.close();
  }
});

test("refusals are the classes of their codes", async () => {
  await assert.rejects(client.run("ts-no-such-run"), UnknownRunError);
  await client.start({ run: "ts-refusals", agent: "tsdk", input: JSON.stringify([{ tool: "guarded", args: { text: "x" } }]) });
  await client.waitFor("ts-refusals", suspended);
  await assert.rejects(client.approve({ run: "ts-refusals", action: "9/none", revision: 1, approver: "tsdk", credential: "alice" }), WrongReferenceError);
  await client.cancel({ run: "ts-refusals" });
  await client.waitFor("ts-refusals", finished);
  const err = await client.cancel({ run: "ts-refusals" }).catch((e) => e);
  assert.ok(err instanceof RunEndedError, `cancel of an ended run: ${err}`);
  assert.ok(err instanceof WeftError);
  assert.equal(err.status, 409);
});

test("TestScenario15_ApprovalWithASignedProofFromTypeScript: the proof is recorded, the tool runs once under its key's reviewer", async () => {
  const nc = await connect({ servers: h.url });
  const w = new Worker(nc, { agent: "tsdk", version: "1" });
  const calls = [];
  w.handle(bind({ name: "guarded" }, (input, call) => { calls.push(call); return { text: input.text }; }, (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  try {
    await client.start({ run: "ts-signed", agent: "tsdk", input: JSON.stringify([{ tool: "guarded", args: { text: "pay 20" } }]) });
    await client.waitFor("ts-signed", suspended);
    const [item] = await pendingApprovals("ts-signed");
    const proof = signProof({
      run: item.run, action: item.action, revision: item.revision, requirement: item.requirement, tool: item.tool,
      // The canonical bytes as the inbox carries them: {"text":"pay 20"}
      // is spelled the same once parsed and written again.
      arguments_sha256: argumentsSha256(JSON.stringify(item.arguments)), answer: "approve",
    }, approverKey, new Date(Date.now() + 30000));
    await client.approve({ run: "ts-signed", action: item.action, revision: item.revision, approver: "keys", proof });
    await client.waitFor("ts-signed", finished);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].reviewer, "carol");
  } finally {
    ac.abort();
    await running;
    await nc.close();
  }
});

test("TestSecuritySignedReject_FromTypeScript: a reject signed with its reason is recorded with a proof that covers it; a proof of another reason is refused other_reason", async () => {
  await client.start({ run: "ts-reject", agent: "tsdk", input: JSON.stringify([{ tool: "guarded", args: { text: "pay 40" } }]) });
  await client.waitFor("ts-reject", suspended);
  const [item] = await pendingApprovals("ts-reject");
  const subject = {
    run: item.run, action: item.action, revision: item.revision, requirement: item.requirement, tool: item.tool,
    arguments_sha256: argumentsSha256(canonicalArguments(item.arguments)), answer: "reject",
  };
  const expires = new Date(Date.now() + 30000);
  const ref = { run: "ts-reject", action: item.action, revision: item.revision, approver: "keys", reason: "a duplicate" };
  const other = signProof({ ...subject, reason: "paid by card" }, approverKey, expires);
  const refused = await client.reject({ ...ref, proof: other }).catch((e) => e);
  assert.ok(refused instanceof ProofRefusedError, `a proof of another reason: ${refused}`);
  assert.equal(refused.reason, "other_reason");
  const proof = signProof({ ...subject, reason: ref.reason }, approverKey, expires);
  await client.reject({ ...ref, proof });
  const view = await client.waitFor("ts-reject", finished);
  const [answered] = view.actions.find((a) => a.id === item.action).approvals;
  assert.equal(answered.answer, "reject");
  assert.equal(answered.reason, "a duplicate");
  assert.deepEqual(answered.proof, { key: approverKey.getPublicKey(), verified: true });
});

test("TestSemantics4_ApproveNarrower_FromTypeScript: an edited approve with a v2 proof runs the tool with the edit; a v1 proof or arguments the tool refuses record nothing", async () => {
  const nc = await connect({ servers: h.url });
  const w = new Worker(nc, { agent: "tsdk", version: "1" });
  const inputs = [];
  w.handle(bind({ name: "guarded" }, (input, call) => { inputs.push({ input, reviewer: call.reviewer }); return { text: input.text }; }, (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  try {
    await client.start({ run: "ts-narrow", agent: "tsdk", input: JSON.stringify([{ tool: "guarded", args: { text: "pay 30 <EUR> & co" } }]) });
    await client.waitFor("ts-narrow", suspended);
    const [item] = await pendingApprovals("ts-narrow");
    const edit = { text: "pay 3 <EUR> & co" };
    const subject = {
      run: item.run, action: item.action, revision: item.revision, requirement: item.requirement, tool: item.tool,
      // JSON.stringify alone would not escape <, > and &: the log's bytes do.
      arguments_sha256: argumentsSha256(canonicalArguments(item.arguments)), answer: "approve",
    };
    const expires = new Date(Date.now() + 30000);
    const ref = { run: "ts-narrow", action: item.action, revision: item.revision };
    const asAsked = signProof(subject, approverKey, expires);
    const refused = await client.approve({ ...ref, approver: "keys", proof: asAsked, arguments: edit }).catch((e) => e);
    assert.ok(refused instanceof ProofRefusedError, `a v1 proof with an edit: ${refused}`);
    assert.equal(refused.reason, "other_arguments");
    await assert.rejects(client.approve({ ...ref, approver: "tsdk", credential: "alice", arguments: { text: 3 } }), InvalidContentError);
    const proof = signProof({ ...subject, approved_sha256: argumentsSha256(canonicalArguments(edit)) }, approverKey, expires);
    await client.approve({ ...ref, approver: "keys", proof, arguments: edit });
    const view = await client.waitFor("ts-narrow", finished);
    assert.deepEqual(inputs, [{ input: edit, reviewer: "carol" }]);
    const action = view.actions.find((a) => a.id === item.action);
    assert.deepEqual(action.approved_arguments, edit);
    assert.deepEqual(action.arguments, { text: "pay 30 <EUR> & co" });
  } finally {
    ac.abort();
    await running;
    await nc.close();
  }
});

test("the catalog gives the JSON Schema the Go agent publishes; a worker checking it refuses a tool the agent does not bind", async () => {
  const cat = await client.catalog("tsdk", "1");
  const echo = cat.tools.find((t) => t.name === "echo");
  assert.deepEqual(echo.input_schema.properties, { text: { type: "string" }, mode: { type: "string" } });
  assert.equal(cat.tools.find((t) => t.name === "settle").settling, true);
  const nc = await connect({ servers: h.url });
  try {
    const w = new Worker(nc, { agent: "tsdk", version: "1", checkCatalog: true });
    w.handle(bind({ name: "ech0" }, () => ({}), (err) => uncertain(String(err))));
    w.handle(bind({ name: "settle" }, () => ({}), (err) => uncertain(String(err))));
    await assert.rejects(w.run({ signal: AbortSignal.abort() }), /ech0 is not a tool of tsdk@1.*settle is a settling tool in the Go agent: bind it with bindSettling/);
  } finally {
    await nc.close();
  }
});
