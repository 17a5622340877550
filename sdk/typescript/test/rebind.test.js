// A queue's consumer made again while the worker runs (docs/semantics.md
// §8, "a run can always be answered"): the TypeScript worker against a
// real runner and nats-server (internal/tsdktest/cmd/tsdkharness).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, connect as tcpConnect } from "node:net";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Worker, bind, uncertain } from "../src/index.js";
import { startHarness } from "./support/harness.js";

let h;
before(async () => { h = await startHarness(); });
after(async () => { await h?.stop(); });

const ECHO_CONSUMER = "weft_task_tsdk@1@echo";

test("TestSemantics8_ATypeScriptWorkerMakesADeletedConsumerAgain: a task published after its queue's consumer was deleted is executed", { timeout: 60000 }, async () => {
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
    const setup = (await jsm.consumers.info("WEFT_TASKS", ECHO_CONSUMER)).config;
    assert.equal(await jsm.consumers.delete("WEFT_TASKS", ECHO_CONSUMER), true);

    await h.start("ts-rebind-2", [{ tool: "echo", args: { text: "after" } }]);
    const st = await h.waitFor("ts-rebind-2", (x) => x.status === "finished", 20000);
    assert.equal(st.outcome, "completed");
    assert.deepEqual(JSON.parse(st.answer), [{ text: "after" }]);
    assert.equal(s.of("ts-rebind-2").length, 1);
    assert.ok(s.w.stats.rebinds >= 1, `consumes made again: ${s.w.stats.rebinds}`);
    assert.ok(warned.some((w) => w.msg === "worker: a queue's consume ended; making its consumer again" && w.attrs?.queue === ECHO_CONSUMER),
      `warnings: ${JSON.stringify(warned.map((w) => w.msg))}`);
    const made = (await jsm.consumers.info("WEFT_TASKS", ECHO_CONSUMER)).config;
    const set = (c) => ({
      durable_name: c.durable_name, description: c.description, filter_subject: c.filter_subject, ack_policy: c.ack_policy,
      ack_wait: c.ack_wait, max_deliver: c.max_deliver, max_ack_pending: c.max_ack_pending,
    });
    assert.ok(setup.filter_subject, "the setup filters its queue's subject");
    assert.deepEqual(set(made), set(setup), "the consumer made again has the setup's configuration");
    // The drain ends the consume: it is not made again.
    const rebinds = s.w.stats.rebinds;
    await s.stop();
    assert.equal(s.w.stats.rebinds, rebinds, "a consume ended by the drain was made again");
  } finally {
    await s.stop();
  }
});

// A TCP proxy to the harness's server on a port the system picks: cut
// closes every connection through it and refuses new ones until mend, as
// a server that went away and came back; hold keeps what clients send
// (the server answers nothing, the connections stay up) until release,
// and seen(text) resolves once a held chunk contains text.
async function proxyTo(url) {
  const target = new URL(url);
  const socks = new Set();
  let refusing = false;
  let held = null;
  const sniffs = [];
  const srv = createServer((a) => {
    if (refusing) { a.destroy(); return; }
    const b = tcpConnect(Number(target.port), target.hostname);
    for (const [x, y] of [[a, b], [b, a]]) {
      socks.add(x);
      x.on("error", () => {});
      x.on("close", () => { socks.delete(x); y.destroy(); });
    }
    b.pipe(a);
    a.on("data", (d) => {
      if (!held) { b.write(d); return; }
      held.push([b, d]);
      for (const s of sniffs) if (d.includes(s.text)) s.resolve();
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `nats://127.0.0.1:${srv.address().port}`,
    cut() { refusing = true; for (const x of socks) x.destroy(); },
    mend() { refusing = false; },
    hold() { held = []; },
    release() { const hs = held ?? []; held = null; for (const [b, d] of hs) if (!b.destroyed) b.write(d); },
    seen(text) { return new Promise((resolve) => sniffs.push({ text, resolve })); },
    async close() { refusing = true; held = null; for (const x of socks) x.destroy(); await new Promise((r) => srv.close(r)); },
  };
}

test("TestSemantics8_ATypeScriptWorkerMakesAConsumerItsServerLostAgain: a consumer gone while the worker was away is made again when it is back", { timeout: 60000 }, async () => {
  const proxy = await proxyTo(h.url);
  const wnc = await connect({ servers: proxy.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
  const w = new Worker(wnc, { agent: "tsdk", version: "1", id: "ts-lost" });
  const starts = [];
  w.handle(bind({ name: "echo" }, async (input, call) => { starts.push(call.run); return { text: input.text }; }, (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  try {
    await h.start("ts-lost-1", [{ tool: "echo", args: { text: "before" } }]);
    assert.equal((await h.waitFor("ts-lost-1", (x) => x.status === "finished")).outcome, "completed");
    await h.queueEmpty("echo");
    // The worker's connection goes; meanwhile its consumer is deleted:
    // the server's notice (409 Consumer Deleted) has no one to reach,
    // as when a server restarted without the consumer.
    const disconnected = (async () => { for await (const st of wnc.status()) if (st.type === "disconnect") return; })();
    proxy.cut();
    await disconnected;
    const jsm = await jetstreamManager(h.nc);
    assert.equal(await jsm.consumers.delete("WEFT_TASKS", ECHO_CONSUMER), true);
    await h.start("ts-lost-2", [{ tool: "echo", args: { text: "after" } }]);
    proxy.mend();
    const st = await h.waitFor("ts-lost-2", (x) => x.status === "finished", 20000);
    assert.equal(st.outcome, "completed");
    assert.deepEqual(JSON.parse(st.answer), [{ text: "after" }]);
    assert.deepEqual(starts.filter((r) => r === "ts-lost-2"), ["ts-lost-2"]);
    assert.ok(w.stats.rebinds >= 1, `consumes made again: ${w.stats.rebinds}`);
  } finally {
    ac.abort();
    await running;
    await wnc.close();
    await proxy.close();
  }
});

// A worker whose echo consumer is deleted while the proxy holds what it
// sends: the consume ends (the server's 409 still reaches it) and its
// first try to make the consumer again waits for an answer that does not
// come. Resolves once the proxy holds that try's create request.
async function remakePending(proxy, logger, run) {
  const wnc = await connect({ servers: proxy.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
  const w = new Worker(wnc, { agent: "tsdk", version: "1", id: "ts-pending", logger });
  w.handle(bind({ name: "echo" }, async (input) => ({ text: input.text }), (err) => uncertain(String(err))));
  const ac = new AbortController();
  const running = w.run({ signal: ac.signal });
  await h.start(run, [{ tool: "echo", args: { text: "before" } }]);
  assert.equal((await h.waitFor(run, (x) => x.status === "finished")).outcome, "completed");
  await h.queueEmpty("echo");
  const asked = proxy.seen("CREATE.WEFT_TASKS");
  proxy.hold();
  const jsm = await jetstreamManager(h.nc);
  assert.equal(await jsm.consumers.delete("WEFT_TASKS", ECHO_CONSUMER), true);
  await asked;
  return { wnc, w, ac, running };
}

test("TestSemantics8_ATypeScriptWorkersDrainDoesNotWaitForAConsumerBeingMadeAgain: stop returns while a try to make the consumer again is unanswered", { timeout: 60000 }, async () => {
  const proxy = await proxyTo(h.url);
  const failed = [];
  const logger = { info() {}, error() {}, warn(msg) { if (/could not be made again/.test(msg)) failed.push(msg); } };
  const { wnc, ac, running } = await remakePending(proxy, logger, "ts-pending-drain");
  try {
    ac.abort();
    // The try's request is not answered before release (the proxy holds
    // it): a drain that waited for the try would end only once the try
    // failed (its request's own bound), which it logs first. The order of
    // the two, not a duration, is what is checked.
    await running;
    assert.deepEqual(failed, [], "the drain waited for a try to make the consumer again (it ended after the try failed)");
  } finally {
    ac.abort();
    proxy.release();
    await running;
    await wnc.close();
    await proxy.close();
  }
});

test("TestSemantics8_ATypeScriptWorkerStopsMakingAConsumerAgainOnAClosedConnection: the caller's close ends the tries, logged once", { timeout: 60000 }, async () => {
  const proxy = await proxyTo(h.url);
  const errors = [];
  const logger = { info() {}, warn() {}, error(msg, attrs) { errors.push({ msg, attrs }); } };
  const { wnc, w, ac, running } = await remakePending(proxy, logger, "ts-pending-closed");
  try {
    await wnc.close();
    const closedMsg = "worker: a queue's consume ended with its connection closed; the queue is no longer consumed";
    for (let i = 0; i < 200 && !errors.some((e) => e.msg === closedMsg); i++) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(errors.map((e) => [e.msg, e.attrs?.queue]), [[closedMsg, ECHO_CONSUMER]]);
    assert.equal(w.stats.rebinds, 1);
  } finally {
    ac.abort();
    await running;
    await proxy.close();
  }
});
