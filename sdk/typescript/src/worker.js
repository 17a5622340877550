// The worker: serves the tools of one agent identity's queues, rule by rule
// as docs/protocol/41-tasks.md says and as the Go worker (worker/worker.go,
// worker/claim.go) does. For every task it:
//
//  1. never starts a task whose deadline passed (reported lost, timed_out;
//     a report saved in its claim is delivered instead);
//  2. checks that the attempt is still current (check.js): a stale attempt
//     is acked and never started; a run that cannot be read requeues it;
//  3. claims the attempt (create-only key in weft_claims) before any body
//     starts: a claim that exists means the body may have run, so it is
//     never started again (reported lost, worker_lost, or the saved report
//     delivered); a closed claim, or one its worker marked not started
//     (not_started), is acked and dropped (a marked claim is reported
//     lost, not_started, or the report saved in it delivered); a claim taken under a token the task names in
//     Weft-Unstarted-Claim is taken over, unless it is marked not started;
//     a claim that cannot be taken requeues the task naming its token; then
//     reads the run again;
//  4. looks a last time: an attempt that ended, a stop of the run or a
//     deadline passed meanwhile starts nothing and first marks its claim
//     not started, then reports the mark (docs/adr/0023-closing-attempts.md,
//     "Claims released as not started", "Late evidence"); a stopping worker starts nothing either (claim
//     released, requeued);
//  5. runs the body with the attempt's deadline as an AbortSignal, sending
//     progress acks;
//  6. reports until a runner answers, saving the report in the claim after
//     a failed try, and only then acks.
import { randomBytes } from "node:crypto";
import { headers, nanos } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, AckPolicy, JetStreamApiError } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { logCheck } from "./check.js";
import { sleep } from "./sleep.js";
import { Client } from "./client.js";
import { Explain, Uncertain } from "./tools.js";
import { WeftError, NotAwaitedError, SettleUnconfirmedError, retryable } from "./errors.js";
import {
  CLAIMS_BUCKET, HEADER_UNSTARTED_CLAIM, RUNNERS_BUCKET, SCHEMA, STOP_SUBJECT_PREFIX, TASK_STREAM,
  TransportError, claimKey, idempotencyKey, queue, request,
} from "./protocol.js";

/** A worker's default ack wait, as the Go worker's (worker.DefaultAckWait). */
export const DEFAULT_ACK_WAIT_MS = 3000;
/** A worker's default drain grace (worker.DefaultDrainGrace). */
export const DEFAULT_DRAIN_GRACE_MS = 10000;
/** How long undelivered reports and late settlements are still tried after abandon (worker.LateAfterAbandon). */
export const LATE_AFTER_ABANDON_MS = 5000;
/**
 * How long a worker's setup (the claims bucket, the stop subscription, a
 * consumer per queue) is tried again while the NATS server does not answer
 * (a worker started while its server restarts), by default; then run
 * throws, saying why.
 */
export const DEFAULT_SETUP_WITHIN_MS = 60000;
/**
 * The message a worker logs (warn, with queue: the queue's consumer) when a
 * queue's consume ended while it runs — its durable consumer deleted (an
 * operator, the task stream made again) or lost by a server — and it makes
 * the consumer again after a pause.
 */
export const CONSUMER_REBOUND = "worker: a queue's consume ended; making its consumer again";
/**
 * The longest pause before a queue's consumer is made again, and the
 * bound of each request of a try (up to three: add, update, info; the
 * drain ends a try at once). A consume that lived longer resets the pause to
 * 100 ms: one that ends at once after each make is made again at the cap.
 */
export const REBIND_CAP_MS = 5000;
/** The Reason of the not_awaited refusal of a handler settling its own running call. */
export const REASON_OWN_CALL = "own_call";

const CLAIM_MAX_AGE_MS = 7 * 24 * 3600 * 1000;
const CLAIM_MARGIN_MS = 10 * 60 * 1000;
const CLAIM_RENEW_MS = 24 * 3600 * 1000;
const STOP_TRIES = 20;
// While a queue's consumer cannot be made again (its stream is gone), the
// failure is logged at the first try and then every REBIND_LOG_EVERY
// tries (about once a minute at the cap).
const REBIND_LOG_EVERY = 12;
const LATE_TRIES = 20;

const STOPPED = "stopped by cancellation";

// unlessAborted resolves to { value } when p fulfils first, rejects as p
// when p rejects first, and resolves to null when signal aborts first.
function unlessAborted(p, signal) {
  if (signal.aborted) return Promise.resolve(null);
  return new Promise((resolve, reject) => {
    const on = () => resolve(null);
    signal.addEventListener("abort", on, { once: true });
    p.then((value) => { signal.removeEventListener("abort", on); resolve({ value }); },
      (err) => { signal.removeEventListener("abort", on); reject(err); });
  });
}
const TIMED_OUT = "body timed out";
const ABANDONED = "abandoned at the end of the drain window";

// Whether a refusal of a report or a settlement says "try again", as the
// Go worker's retryable (worker/worker.go): the retryable codes
// (RETRYABLE_CODES, weft.Code.Retryable's); quarantined — the run's log
// holds a message no reader can fold, and the report is kept until a
// repair voids it; and internal — the runtime's own fault, never the
// report's: a real result is not given up for it (docs/semantics.md §8).
function reportRetryable(code) {
  return retryable(code) || code === "quarantined" || code === "internal";
}
const MAX_TEXT = 64 * 1024;

const silent = { info() {}, warn() {}, error() {} };

function backoff(base, cap) {
  let d = base;
  return async (signal) => {
    const ok = await sleep(d, signal);
    d = Math.min(d * 2, cap);
    return ok;
  };
}

// Whether err (or a cause of it) says that the server did not answer: a
// request timed out, had no responders, or the connection is down — not an
// answer of the JetStream API, which would be the same next time.
function unanswered(err) {
  for (let e = err, i = 0; e && i < 8; e = e.cause, i++) {
    if (e instanceof JetStreamApiError) return false;
    if (["TimeoutError", "NoResponders", "RequestError", "ConnectionError"].includes(e.name)) return true;
    if (/timeout|no responders|disconnect|connection/i.test(String(e.message ?? ""))) return true;
  }
  return false;
}

function deadlineOf(t) {
  if (!t.deadline) return null;
  const ms = Date.parse(t.deadline);
  return Number.isFinite(ms) ? ms : null;
}

function isKeyExists(err) {
  return err?.code === 10071 || err?.code === 10164 || /wrong last sequence/i.test(err?.message ?? "");
}

function decodeClaim(bytes) {
  const text = new TextDecoder().decode(bytes);
  try {
    const c = JSON.parse(text);
    if (c && typeof c === "object" && c.schema) return c;
  } catch { /* another worker's value */ }
  return { worker: text.replace(/[^\x20-\x7e]/g, "").slice(0, 64) };
}

/**
 * The settlement errors a tool's settlement handle promises (docs/semantics.md
 * §9), as the Go worker.SettleError: already_recorded, not_awaited or
 * settle_unconfirmed.
 */
export function settleError(err) {
  if (err === null || err === undefined) return null;
  // A reply that could not be read: the run may have recorded the
  // settlement, as when the reply was lost (Go: api.ReasonUnreadableReply).
  if (err instanceof WeftError && err.code === "internal" && err.reason === "unreadable_reply") {
    return new SettleUnconfirmedError(err.message, { reason: "transport", cause: err });
  }
  if (err instanceof WeftError) {
    switch (err.code) {
      case "already_recorded": case "not_awaited": case "settle_unconfirmed": return err;
      case "run_ended": case "unknown_run": case "wrong_reference": case "stale_reference":
        return new NotAwaitedError(err.message, { reason: err.code, cause: err });
    }
    return new SettleUnconfirmedError(`the settlement was not recorded: ${err.message}`, { reason: err.code, cause: err });
  }
  const reason = err instanceof TransportError ? err.kind : "transport";
  return new SettleUnconfirmedError(String(err?.message ?? err), { reason, cause: err });
}

/**
 * A worker serving the tools of one agent identity (agent@version).
 */
export class Worker {
  /**
   * @param {import("@nats-io/transport-node").NatsConnection} nc
   * checkCatalog: before serving, read the agent's catalog
   * (weft.api.catalog.<agent>) and refuse to run when a handled tool is
   * not one of the agent's, or a settling binding disagrees with the Go
   * definition: such a worker would wait for tasks that never come.
   * @param {{agent: string, version?: string, id?: string, ackWaitMs?: number, drainGraceMs?: number, checkCatalog?: boolean,
   *   logger?: {info: Function, warn: Function, error: Function}, attemptCheck?: (task: object) => Promise<boolean>}} opts
   */
  constructor(nc, opts) {
    if (!opts?.agent) throw new TypeError("Worker: opts.agent is required");
    this.nc = nc;
    this.agent = opts.agent;
    this.version = opts.version ?? "1";
    this.id = opts.id ?? "worker";
    this.ackWaitMs = opts.ackWaitMs ?? DEFAULT_ACK_WAIT_MS;
    this.graceMs = opts.drainGraceMs > 0 ? opts.drainGraceMs : DEFAULT_DRAIN_GRACE_MS;
    this.setupWithinMs = Math.max(opts.setupWithinMs ?? DEFAULT_SETUP_WITHIN_MS, 0);
    this.log = opts.logger ?? silent;
    this.check = opts.attemptCheck;
    this.checkCatalog = !!opts.checkCatalog;
    this.tools = new Map();
    this.js = jetstream(nc);
    this.group = new Set();
    this.running = new Map(); // claim key → {run, ac}: every attempt this worker may start or runs
    this.held = new Map(); // claim key → {done, resolve, acked}
    this.stopping = false;
    this.abandoned = false;
    this.stoppedAC = new AbortController(); // Run's end or abandon: the checks before a start stop retrying
    this.lateAC = new AbortController(); // LATE_AFTER_ABANDON_MS after abandon: the report tries stop
    this.abandonAC = new AbortController();
    this.consumesAC = new AbortController(); // the drain: a consume that ends is not made again
    this.stats = { started: 0, joined: 0, stops: 0, rebinds: 0 };
  }

  /** Registers a bound tool (bind, bindSettling) as the body of its queue's tasks. Call it before run. */
  handle(tool) {
    this.tools.set(tool.name, { tool, q: queue(this.agent, this.version, tool.name) });
    return this;
  }

  /**
   * Consumes the registered queues' tasks until signal aborts, then drains:
   * no new body starts (tasks held but not started are requeued), running
   * bodies finish and are reported; at the end of the drain grace the
   * bodies still running are abandoned (reported lost, worker_lost).
   *
   * Its setup is tried again while the server does not answer, as the Go
   * worker's (worker.Run): each try's requests wait 2 s, doubling up to
   * 16 s, with 100 ms doubling up to 2 s between tries, for up to
   * setupWithinMs (DEFAULT_SETUP_WITHIN_MS); then, or at once for an
   * answer that will not change (no task stream: no runner set this server
   * up), it throws an Error saying why. A signal aborted meanwhile ends it
   * with nothing served.
   * @param {{signal?: AbortSignal}} [opts]
   */
  async run(opts = {}) {
    if (this.checkCatalog) await this.#checkCatalog();
    const subs = await this.#serve(opts.signal);
    if (!subs) return;
    if (!opts.signal?.aborted) {
      await new Promise((resolve) => opts.signal?.addEventListener("abort", resolve, { once: true }));
    }
    this.stopping = true;
    this.stoppedAC.abort();
    this.consumesAC.abort();
    await Promise.allSettled(subs.consumers.map((c) => c.msgs.close()));
    const grace = setTimeout(() => {
      if (this.group.size > 0) {
        this.log.warn("worker: bodies still running at the end of the drain grace; abandoning them (reported worker_lost)");
        this.abandon();
      }
    }, this.graceMs);
    await this.#drained();
    clearTimeout(grace);
    await Promise.allSettled(subs.loops);
    subs.stop.unsubscribe();
  }

  /** Runs until SIGTERM or SIGINT, then drains as run does. */
  async runUntilSignal() {
    const ac = new AbortController();
    const on = () => ac.abort();
    process.once("SIGTERM", on);
    process.once("SIGINT", on);
    try {
      await this.run({ signal: ac.signal });
    } finally {
      process.off("SIGTERM", on);
      process.off("SIGINT", on);
    }
  }

  /**
   * Stops every body this worker runs as if the worker were lost: each
   * attempt is reported lost, cause worker_lost; attempts not started yet
   * never start.
   */
  abandon() {
    if (!this.abandoned) {
      this.abandoned = true;
      this.abandonAC.abort();
      this.stoppedAC.abort();
      setTimeout(() => this.lateAC.abort(), LATE_AFTER_ABANDON_MS).unref?.();
    }
    for (const r of this.running.values()) r.ac.abort(ABANDONED);
  }

  async #checkCatalog() {
    const cat = await new Client(this.nc).catalog(this.agent, this.version);
    const tools = new Map((cat.tools ?? []).map((t) => [t.name, t]));
    const problems = [];
    for (const { tool } of this.tools.values()) {
      const def = tools.get(tool.name);
      if (!def) problems.push(`${tool.name} is not a tool of ${this.agent}@${this.version} (its tools: ${[...tools.keys()].join(", ")})`);
      else if (!!def.settling !== tool.settling) problems.push(`${tool.name} is ${def.settling ? "" : "not "}a settling tool in the Go agent: bind it with ${def.settling ? "bindSettling" : "bind"}`);
    }
    if (problems.length > 0) throw new TypeError(`Worker: ${problems.join("; ")}`);
  }

  async #drained() {
    while (this.group.size > 0) await Promise.allSettled([...this.group]);
  }

  #go(fn) {
    const p = Promise.resolve().then(fn).catch((err) => this.log.error("worker: unexpected error", { err: String(err?.stack ?? err) }));
    this.group.add(p);
    p.finally(() => this.group.delete(p));
    return p;
  }

  // Tries #setup again while the server does not answer (run's comment).
  async #serve(signal) {
    const bound = Date.now() + this.setupWithinMs;
    for (let wait = 100, limit = 2000; ; wait = Math.min(wait * 2, 2000), limit = Math.min(limit * 2, 16000)) {
      if (signal?.aborted) return null;
      try {
        return await this.#setup(limit);
      } catch (err) {
        if (!unanswered(err)) {
          const why = err instanceof JetStreamApiError && err.code === 10059
            ? `stream ${TASK_STREAM} not found: no runner has set this NATS server up yet (start one first)`
            : String(err?.message ?? err);
          throw new Error(`worker: setup failed: ${why}`, { cause: err });
        }
        if (Date.now() + wait > bound) {
          throw new Error(`worker: the NATS server did not answer the setup (bucket ${CLAIMS_BUCKET}, the consumers of stream ${TASK_STREAM}) for ${this.setupWithinMs} ms; giving up: ${err?.message ?? err}`, { cause: err });
        }
        this.log.warn("worker: the server does not answer; retrying", { err: String(err?.message ?? err) });
        if (!(await sleep(wait, signal))) return null;
      }
    }
  }

  // One try of #serve, whose requests wait timeoutMs; on an error it undoes
  // what it set up.
  async #setup(timeoutMs) {
    const jsm = await jetstreamManager(this.nc, { timeout: timeoutMs });
    const js = jetstream(this.nc, { timeout: timeoutMs });
    const kvm = new Kvm(js);
    try {
      await (await kvm.open(CLAIMS_BUCKET)).status();
    } catch (err) {
      if (unanswered(err)) throw err;
      await kvm.create(CLAIMS_BUCKET, { history: 1, ttl: CLAIM_MAX_AGE_MS, storage: "file", markerTTL: 60000 });
    }
    // The bucket as the bodies' claims use it: with the default timeout
    // of the worker's JetStream context, not the try's.
    this.claims = await new Kvm(this.js).open(CLAIMS_BUCKET);
    if (!this.check) this.check = logCheck(await jetstreamManager(this.nc, { checkAPI: false }), () => new Kvm(this.js).open(RUNNERS_BUCKET));
    const stop = this.nc.subscribe(`${STOP_SUBJECT_PREFIX}*`, {
      callback: (_err, m) => {
        if (m) {
          this.#stopRun(m.subject.slice(STOP_SUBJECT_PREFIX.length));
          this.stats.stops++;
        }
      },
    });
    const consumers = [];
    try {
      for (const { tool, q } of this.tools.values()) {
        consumers.push({ tool, q, msgs: await this.#consume(jsm, js, q) });
      }
    } catch (err) {
      stop.unsubscribe();
      await Promise.allSettled(consumers.map((c) => c.msgs.close()));
      throw err;
    }
    return { stop, consumers, loops: consumers.map((c) => this.#keep(c)) };
  }

  // #consume makes q's durable consumer (or updates the one that exists
  // to the worker's ack wait) through jsm and starts consuming it through
  // js. The consume ends, and #keep makes the consumer again, when the
  // consumer or its stream is gone (abort_on_missing_resource): the
  // server says the consumer was deleted (an operator, the stream made
  // again), or nats.js looks it up after a reconnect or two missed
  // heartbeats and does not find it (a server that restarted without it,
  // a deletion told while the worker was away). Without that option the
  // consume goes on pulling a consumer that is gone, for ever.
  async #consume(jsm, js, q) {
    const cfg = {
      durable_name: q.consumer, description: `Weft tasks of ${q.agent}@${q.version}/${q.tool}`,
      filter_subject: q.subject, ack_policy: AckPolicy.Explicit, ack_wait: nanos(this.ackWaitMs),
      max_deliver: -1, max_ack_pending: 1000,
    };
    try {
      await jsm.consumers.add(TASK_STREAM, cfg);
    } catch (err) {
      if (unanswered(err) || (err instanceof JetStreamApiError && err.code === 10059)) throw err;
      await jsm.consumers.update(TASK_STREAM, q.consumer, { description: cfg.description, ack_wait: cfg.ack_wait, max_ack_pending: 1000, max_deliver: -1 });
    }
    const c = await js.consumers.get(TASK_STREAM, q.consumer);
    return await c.consume({ max_messages: 64, abort_on_missing_resource: true });
  }

  // #keep consumes cur's queue until the worker stops (docs/semantics.md
  // §8: a run whose tools a worker serves is never left waiting for a
  // consumer that is gone), as the Go worker's Run does. When the consume
  // ends while the worker is not stopping, the consumer is made again
  // with the setup's configuration after a pause (100 ms doubling up to
  // REBIND_CAP_MS while it fails or the consumes made again end at once),
  // logged CONSUMER_REBOUND at warn; a consume that ends during the drain
  // is not made again. cur.msgs is always the consume running, for run to
  // close.
  async #keep(cur) {
    const { tool, q } = cur;
    let wait = 100;
    for (;;) {
      const made = Date.now();
      let why = "the consume ended";
      try {
        for await (const m of cur.msgs) this.#go(() => this.#handle(q, tool, m));
      } catch (err) {
        why = String(err?.message ?? err);
      }
      if (this.stopping) return;
      if (this.#closedEnd(q, why)) return;
      if (Date.now() - made > REBIND_CAP_MS) wait = 100;
      this.stats.rebinds++;
      this.log.warn(CONSUMER_REBOUND, { queue: q.consumer, err: why });
      for (let failed = 0; ; failed++) {
        if (!(await sleep(wait, this.consumesAC.signal))) return;
        if (this.#closedEnd(q, why)) return;
        wait = Math.min(wait * 2, REBIND_CAP_MS);
        // Each request of a try is bounded: one sent while the server
        // restarts may never be answered. The drain does not wait for
        // them: it ends the try at once, and a consume the try makes
        // late is closed.
        const tried = (async () => {
          const jsm = await jetstreamManager(this.nc, { timeout: REBIND_CAP_MS, checkAPI: false });
          return await this.#consume(jsm, jetstream(this.nc, { timeout: REBIND_CAP_MS }), q);
        })();
        try {
          const won = await unlessAborted(tried, this.consumesAC.signal);
          if (!won || this.stopping) {
            tried.then((m) => m.close(), () => {});
            return;
          }
          cur.msgs = won.value;
          break;
        } catch (err) {
          why = String(err?.message ?? err);
          if (this.#closedEnd(q, why)) return;
          if (failed % REBIND_LOG_EVERY === 0) {
            this.log.warn("worker: a queue's consumer could not be made again; retrying", { queue: q.consumer, err: why, tries: failed + 1 });
          }
        }
      }
    }
  }

  // #closedEnd logs and says true when the caller closed the connection:
  // nothing can be made again on it.
  #closedEnd(q, why) {
    if (!this.nc.isClosed()) return false;
    this.log.error("worker: a queue's consume ended with its connection closed; the queue is no longer consumed", { queue: q.consumer, err: why });
    return true;
  }

  #stopRun(run) {
    for (const r of this.running.values()) if (r.run === run) r.ac.abort(STOPPED);
  }

  async #handle(q, tool, m) {
    let t;
    try {
      t = JSON.parse(m.string());
      if (!t?.run || !t?.action) throw new Error("a task names its run and action");
    } catch (err) {
      this.log.error("worker: malformed task, terminated", { subject: m.subject, err: String(err) });
      m.term();
      return;
    }
    if (t.agent !== q.agent || t.version !== q.version || t.tool !== q.tool) {
      // Not a task of this queue's binding: running the body would run
      // another agent identity's (docs/semantics.md §3).
      this.log.error("worker: task of another agent identity on this queue, terminated", { subject: m.subject, agent: t.agent, version: t.version, tool: t.tool });
      m.term();
      return;
    }
    let rep = {
      schema: SCHEMA, command_id: `report/${t.run}/${t.action}/${t.attempt}/${t.incarnation}`,
      run: t.run, action: t.action, attempt: t.attempt, incarnation: t.incarnation, worker: this.id,
    };
    const progress = setInterval(() => m.working(), Math.max(1, Math.floor(this.ackWaitMs / 3)));
    const key = t.claim || claimKey(t.run, t.action, t.attempt, t.incarnation);
    try {
      const prior = this.held.get(key);
      if (prior) {
        // This worker holds the attempt already (the server delivered it
        // again): this delivery neither starts nor reports; it ends as
        // the first one does.
        this.stats.joined++;
        const acked = await prior.done;
        acked ? m.ack() : m.nak();
        return;
      }
      let resolveHeld;
      const hold = { done: new Promise((r) => { resolveHeld = r; }) };
      this.held.set(key, hold);
      let released = false;
      const release = (acked) => {
        if (!released) {
          released = true;
          this.held.delete(key);
          resolveHeld(acked);
        }
      };
      const done = (ack) => {
        ack ? m.ack() : m.nak();
        release(ack);
      };
      const requeue = async (why, ...unstarted) => {
        release(false);
        await this.#requeue(m, t, why, unstarted);
      };
      // The attempt can be stopped from here on, before its body starts.
      const ac = new AbortController();
      this.running.set(key, { run: t.run, ac });
      try {
        await this.#attempt(q, tool, m, t, key, ac, rep, done, requeue);
      } finally {
        this.running.delete(key);
        release(false);
      }
    } finally {
      clearInterval(progress);
    }
  }

  async #attempt(q, tool, m, t, key, ac, rep, done, requeue) {
    const deadline = deadlineOf(t);
    if (deadline !== null && !(Date.now() < deadline)) {
      // Rule 1: the run's timer decides; a report saved by the worker that
      // ran the body is still delivered.
      const saved = await this.#savedReport(key);
      rep = saved ?? { ...rep, outcome: "lost", cause: "timed_out", evidence: "the task reached a worker after its deadline; the body was not started" };
      done(await this.#deliver(q, t, rep, null));
      return;
    }
    const cur = await this.#current(t);
    if (cur === "stale") {
      this.log.info("worker: task of an attempt that is no longer current, not started", { run: t.run, action: t.action, attempt: t.attempt });
      // A worker that marked its claim not started and died before its
      // report left the task unacked: this delivery reports the mark in
      // its place (docs/adr/0023-closing-attempts.md, "Late evidence").
      const c = await this.#claimAt(key);
      if (c && c.not_started && !c.closed) await this.#reportNotStarted(q, t, rep, c.not_started.why);
      done(true);
      return;
    }
    if (cur === "unknown") {
      await requeue("the run could not be read to check the attempt");
      return;
    }
    if (this.stopping) {
      await requeue("the worker is stopping");
      return;
    }
    const unstarted = m.headers?.values(HEADER_UNSTARTED_CLAIM) ?? [];
    const { res, own, found } = await this.#takeClaim(t, key, unstarted);
    if (res === "unknown") {
      await requeue("the attempt could not be claimed", own.val.token);
      return;
    }
    if (res === "held") {
      if (found.closed) {
        // Closed by the runtime before any worker claimed it: it never
        // acted; whoever closed it records its end.
        this.log.info("worker: attempt closed before any worker claimed it, not started", { run: t.run, action: t.action, by: found.closed.by, why: found.closed.why });
        done(true);
        return;
      }
      if (found.not_started && !found.report) {
        // Claimed by a worker that then decided not to start the body and
        // said so in its claim: no body ever started, none starts now, and
        // the run records the attempt's end (its close counts the claim
        // closed); the mark is reported (lost not_started) in case its
        // marker died before its own report — a report that worker saved
        // is delivered below instead, as any saved report.
        this.log.info("worker: attempt claimed and released as not started, not started", { run: t.run, action: t.action, by: found.worker, why: found.not_started.why });
        await this.#reportNotStarted(q, t, rep, found.not_started.why);
        done(true);
        return;
      }
      if (found.report) {
        rep = found.report;
      } else {
        rep = { ...rep, outcome: "lost", cause: "worker_lost",
          evidence: `attempt ${t.attempt} was claimed before by worker ${found.worker || "unknown"} (claim ${key}): its body may have run; not started again` };
      }
      done(await this.#deliver(q, t, rep, null));
      return;
    }
    // From here on, every path that does not start the body marks the
    // claim as not started before the task is acked or reported
    // (docs/adr/0023-closing-attempts.md, "Claims released as not started").
    if ((await this.#current(t)) === "stale") {
      this.log.info("worker: attempt ended while it was claimed, not started", { run: t.run, action: t.action });
      if (await this.#markNotStarted(t, own, "ended")) await this.#reportNotStarted(q, t, rep, "ended");
      done(true);
      return;
    }
    if (ac.signal.reason === STOPPED) {
      // Its run was cancelled meanwhile and recorded the attempt stopped.
      if (await this.#markNotStarted(t, own, "stopped")) await this.#reportNotStarted(q, t, rep, "stopped");
      done(true);
      return;
    }
    if (deadline !== null && !(Date.now() < deadline)) {
      await this.#markNotStarted(t, own, "deadline");
      rep = { ...rep, outcome: "lost", cause: "timed_out", evidence: "the deadline passed before the body started; the body was not started" };
      done(await this.#deliver(q, t, rep, own));
      return;
    }
    if (this.abandoned || this.stopping) {
      await this.#releaseClaim(own);
      await requeue("the worker stopped before the body started", own.val.token);
      return;
    }
    rep = await this.#run(q, tool, t, rep, own, ac, deadline);
    done(await this.#deliver(q, t, rep, own));
  }

  async #current(t) {
    const back = backoff(50, 2000);
    for (let i = 0; i < 8; i++) {
      try {
        return (await this.check(t)) ? "current" : "stale";
      } catch (err) {
        this.log.warn("worker: cannot check the attempt", { run: t.run, action: t.action, err: String(err?.message ?? err) });
      }
      if (!(await back(this.stoppedAC.signal))) break;
    }
    return "unknown";
  }

  async #takeClaim(t, key, unstarted) {
    const val = { schema: SCHEMA, worker: this.id, token: randomBytes(8).toString("hex"), claimed: new Date().toISOString() };
    const own = { key, val, rev: 0 };
    const body = JSON.stringify(val);
    const back = backoff(50, 2000);
    for (let i = 0; i < 6; i++) {
      try {
        own.rev = await this.claims.create(key, body, claimTTL(t));
        return { res: "taken", own };
      } catch (err) {
        if (isKeyExists(err)) {
          try {
            const e = await this.claims.get(key);
            if (e && e.operation === "PUT") {
              const found = decodeClaim(e.value);
              if (found.token && found.token === val.token) {
                own.rev = e.revision;
                return { res: "taken", own };
              }
              // A claim marked not started is never taken over.
              if (!found.token || found.not_started || !unstarted.includes(found.token)) return { res: "held", own, found };
              // A claim no body started under: taken over under this
              // delivery's own token.
              own.rev = await this.claims.update(key, body, e.revision);
              return { res: "taken", own };
            }
          } catch (err2) {
            this.log.warn("worker: cannot claim the attempt", { run: t.run, action: t.action, key, err: String(err2?.message ?? err2) });
          }
        } else {
          this.log.warn("worker: cannot claim the attempt", { run: t.run, action: t.action, key, err: String(err?.message ?? err) });
        }
      }
      if (!(await back(this.lateAC.signal))) break;
    }
    return { res: "unknown", own };
  }

  async #savedReport(key) {
    return (await this.#claimAt(key))?.report ?? null;
  }

  // #claimAt reads the claim at key; null when it cannot be read or is
  // absent.
  async #claimAt(key) {
    try {
      const e = await this.claims.get(key);
      if (!e || e.operation !== "PUT") return null;
      return decodeClaim(e.value);
    } catch {
      return null;
    }
  }

  // #reportNotStarted tells t's run that its attempt's claim is marked not
  // started (why): a lost report with cause not_started. It records
  // nothing by itself: the runner reads the claim and records the mark if
  // a decision read the claim before it (docs/protocol/41-tasks.md,
  // "Reporting the mark").
  async #reportNotStarted(q, t, rep, why) {
    await this.#deliver(q, t, { ...rep, outcome: "lost", cause: "not_started",
      evidence: `the claim of attempt ${t.attempt} was marked not started (${why}): its body never started and never will` }, null);
  }

  // #markNotStarted replaces own, this delivery's claim whose body it
  // decided not to start, by the same claim saying so (not_started): an
  // update at own's revision, so it changes only this delivery's claim.
  // The caller never starts the body afterwards, whatever the outcome
  // (docs/protocol/41-tasks.md, "A claim marked not started").
  async #markNotStarted(t, own, why) {
    const val = { ...own.val, not_started: { why, at: new Date().toISOString() } };
    try {
      own.rev = await this.claims.update(own.key, JSON.stringify(val), own.rev);
      own.val = val;
      return true;
    } catch (err) {
      // Lost to another value, or unanswered: the update may have
      // landed; the key's value says.
      try {
        const e = await this.claims.get(own.key);
        const c = e && e.operation === "PUT" ? decodeClaim(e.value) : null;
        if (c && c.token === val.token && c.not_started) {
          own.rev = e.revision;
          own.val = val;
          return true;
        }
      } catch { /* unanswered again */ }
      this.log.warn("worker: cannot mark the claim of a body not started; it counts as claimed", { run: t.run, action: t.action, key: own.key, why, err: String(err?.message ?? err) });
      return false;
    }
  }

  async #updateClaim(own) {
    own.rev = await this.claims.update(own.key, JSON.stringify(own.val), own.rev);
  }

  async #releaseClaim(own) {
    try {
      await this.claims.delete(own.key, { previousSeq: own.rev });
    } catch (err) {
      this.log.warn("worker: cannot release the claim of a body not started", { key: own.key, err: String(err?.message ?? err) });
    }
  }

  async #requeue(m, t, why, unstarted) {
    const h = headers();
    if (m.headers) {
      for (const k of m.headers.keys()) {
        if (k.toLowerCase() === "nats-msg-id") continue;
        for (const v of m.headers.values(k)) h.append(k, v);
      }
    }
    const have = h.values(HEADER_UNSTARTED_CLAIM);
    for (const tok of unstarted) if (tok && !have.includes(tok)) h.append(HEADER_UNSTARTED_CLAIM, tok);
    const msgID = `${t.run}/${t.action}/${t.attempt}/${t.incarnation}/requeued/${m.info.streamSequence}`;
    try {
      await this.js.publish(m.subject, m.data, { headers: h, msgID, timeout: 10000 });
    } catch (err) {
      this.log.error("worker: cannot requeue a task not started; nak'd", { why, run: t.run, action: t.action, err: String(err?.message ?? err) });
      m.nak();
      return;
    }
    this.log.info("worker: task not started and requeued", { why, run: t.run, action: t.action, attempt: t.attempt });
    m.ack();
  }

  async #run(q, tool, t, rep, own, ac, deadline) {
    let timer = null;
    if (t.timeout_ms >= 0) {
      const at = deadline ?? Date.now() + t.timeout_ms;
      timer = setTimeout(() => ac.abort(TIMED_OUT), Math.max(0, at - Date.now()));
    }
    const renew = setInterval(() => {
      this.#updateClaim(own).catch((err) => this.log.warn("worker: cannot renew the claim of a running body", { key: own.key, err: String(err) }));
    }, CLAIM_RENEW_MS);
    let returned = false, stopped = false;
    const settle = async (s) => {
      if (!returned && !stopped && s.run === t.run && s.action === t.action) {
        throw new NotAwaitedError("a handler cannot settle its own running call", { reason: REASON_OWN_CALL });
      }
      try {
        await request(this.nc, q.settleSubject, s, 15000);
        return null;
      } catch (err) {
        throw settleError(err);
      }
    };
    const call = {
      run: t.run, action: t.action, attempt: t.attempt, incarnation: t.incarnation, tool: t.tool,
      correlation: t.correlation, reviewer: t.reviewer,
      idempotencyKey: t.idempotency_key || idempotencyKey(t.run, t.action),
      deadline: deadline === null ? null : new Date(deadline), signal: ac.signal,
    };
    if (tool.settling) call.settlement = settlement(t, settle);
    this.stats.started++;
    const body = (async () => {
      let out;
      try {
        out = await tool.handler(t.arguments, call);
      } catch (err) {
        return classified(tool, err, call);
      }
      let content;
      try {
        content = JSON.stringify(out === undefined ? null : out);
      } catch (err) {
        return { outcome: "uncertain", evidence: `the output could not be encoded: ${err?.message ?? err}` };
      }
      return { outcome: "output", content };
    })().finally(() => { returned = true; });
    const aborted = new Promise((resolve) => {
      if (ac.signal.aborted) resolve(null);
      else ac.signal.addEventListener("abort", () => resolve(null), { once: true });
    });
    try {
      const res = await Promise.race([body, aborted]);
      if (res !== null) {
        if (res.outcome === "output" && t.max_result_bytes > 0 && Buffer.byteLength(res.content) > t.max_result_bytes) {
          return { ...rep, outcome: "oversize", bytes: Buffer.byteLength(res.content) };
        }
        return withResult(rep, res);
      }
      stopped = true;
      let lost;
      if (ac.signal.reason === TIMED_OUT) {
        lost = { outcome: "lost", cause: "timed_out", evidence: `the body was still running at its ${t.timeout_ms} ms timeout` };
      } else if (ac.signal.reason === ABANDONED) {
        lost = { outcome: "lost", cause: "worker_lost", evidence: "the body was still running when its worker's drain window ended; it was stopped" };
      } else {
        lost = { outcome: "lost", cause: "stopped", evidence: "stopped while running" };
      }
      this.#settleLate(q, t, body);
      return { ...rep, ...lost };
    } finally {
      clearTimeout(timer);
      clearInterval(renew);
    }
  }

  // A settling tool's own return value wins whenever it returns after its
  // task was stopped: a definite result is offered as its settlement.
  #settleLate(q, t, body) {
    if (!(t.settle_within_ms > 0)) return;
    this.#go(async () => {
      const abandoned = new Promise((resolve) => {
        if (this.abandonAC.signal.aborted) resolve(null);
        else this.abandonAC.signal.addEventListener("abort", () => resolve(null), { once: true });
      });
      const res = await Promise.race([body, abandoned]);
      if (res === null) {
        this.log.info("worker: abandoned a stopped body's wait for its return; no late settlement", { run: t.run, action: t.action });
        return;
      }
      const definite = (res.outcome === "output" && !(t.max_result_bytes > 0 && Buffer.byteLength(res.content) > t.max_result_bytes)) || res.outcome === "explain";
      if (!definite) return;
      const s = {
        schema: SCHEMA, command_id: `return/${t.run}/${t.action}/${t.attempt}/${t.incarnation}`, run: t.run, action: t.action,
        outcome: res.outcome, summary: `the body of attempt ${t.attempt} returned ${res.outcome} after it was stopped`,
      };
      if (res.outcome === "output") s.content = JSON.parse(res.content);
      else s.message = res.message;
      const back = backoff(50, 2000);
      for (let i = 0; i < LATE_TRIES; i++) {
        try {
          await request(this.nc, q.settleSubject, s, this.abandoned ? LATE_AFTER_ABANDON_MS / 2 : 15000);
          return;
        } catch (err) {
          const e = settleError(err);
          if (e instanceof WeftError && !reportRetryable(e.code)) {
            this.log.info("worker: late return refused", { run: t.run, action: t.action, err: e.message });
            return;
          }
        }
        if (this.lateAC.signal.aborted || !(await back(this.lateAC.signal))) break;
      }
      this.log.error("worker: a stopped body's late settlement was not confirmed; a person reconciles the action with the result logged here",
        { run: t.run, action: t.action, attempt: t.attempt, outcome: res.outcome, content: res.content, message: res.message });
    });
  }

  // Rule 6: report until a runner answers; save the report in the claim
  // after the first failed try. Resolves whether to ack the task.
  async #deliver(q, t, rep, own) {
    const back = backoff(50, 2000);
    let saved = own === null;
    for (let tr = 1; ; tr++) {
      let err = null;
      try {
        await request(this.nc, q.reportSubject, wire(rep), 10000);
      } catch (e) {
        err = e;
      }
      if (err instanceof WeftError && err.code === "payload_too_large" &&
          (rep.outcome === "output" || rep.outcome === "explain" || (rep.evidence?.length ?? 0) > MAX_TEXT)) {
        // The body ran: its effect may have happened. Report it uncertain.
        const size = (rep.content?.length ?? 0) + (rep.message?.length ?? 0) + (rep.evidence?.length ?? 0);
        rep = { ...rep, outcome: "uncertain", content: undefined, message: undefined,
          evidence: `the attempt's ${size}-byte result could not be recorded (payload_too_large: ${err.message}); the effect may have happened` };
        saved = own === null;
        continue;
      }
      if (err === null || (err instanceof WeftError && !reportRetryable(err.code))) {
        if (err) this.log.info("worker: report refused", { run: rep.run, action: rep.action, code: err.code, err: err.message });
        return true;
      }
      if (!saved) {
        own.val.report = wire(rep);
        try {
          await this.#updateClaim(own);
          saved = true;
        } catch (e) {
          delete own.val.report;
          this.log.warn("worker: cannot save the undelivered report with the attempt's claim", { run: rep.run, action: rep.action, err: String(e?.message ?? e) });
        }
      }
      if (tr % 10 === 0 && (await this.#stale(t))) return true;
      if (this.stopping && (saved || tr >= STOP_TRIES)) {
        this.log.warn("worker: stopping with an undelivered report; the task goes back to the queue", { run: rep.run, action: rep.action, saved });
        return false;
      }
      if (this.lateAC.signal.aborted || !(await back(this.lateAC.signal))) {
        this.log.error("worker: abandoned with an undelivered report; the task goes back to the queue", { run: rep.run, action: rep.action, saved, report: JSON.stringify(wire(rep)) });
        return false;
      }
    }
  }

  async #stale(t) {
    try {
      return !(await this.check(t));
    } catch {
      return false;
    }
  }
}

function claimTTL(t) {
  const deadline = deadlineOf(t);
  if (deadline === null) return undefined;
  const d = deadline - Date.now() + CLAIM_MARGIN_MS;
  if (d >= CLAIM_MAX_AGE_MS) return undefined;
  return `${Math.max(1, Math.ceil(d / 1000))}s`;
}

function classified(tool, err, call) {
  let f;
  try {
    f = tool.classify(err, call);
  } catch (e) {
    return { outcome: "uncertain", evidence: `classify threw ${e?.message ?? e} for the body's error: ${err?.message ?? err}` };
  }
  if (f instanceof Explain) return { outcome: "explain", message: f.message };
  if (f instanceof Uncertain) return { outcome: "uncertain", evidence: f.evidence };
  return { outcome: "uncertain", evidence: `classify returned neither explain nor uncertain for the body's error: ${err?.message ?? err}` };
}

function withResult(rep, res) {
  const r = { ...rep, outcome: res.outcome };
  if (res.outcome === "output") r.content = res.content;
  if (res.outcome === "explain") r.message = res.message;
  if (res.outcome === "uncertain") r.evidence = res.evidence;
  return r;
}

// The report's body on the wire: content is the encoded output, sent as
// raw JSON.
function wire(rep) {
  const { content, ...rest } = rep;
  const out = { ...rest };
  delete out.queue; // a Go worker's saved report names its queue; the subject does
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  if (content !== undefined) out.content = typeof content === "string" ? JSON.parse(content) : content;
  return out;
}

// The settlement handle of a settling tool's call (docs/semantics.md §9).
function settlement(t, settle) {
  const base = { schema: SCHEMA, run: t.run, action: t.action };
  return Object.freeze({
    run: t.run,
    action: t.action,
    /** Settles the action with an output. Resolves, or throws already_recorded, not_awaited or settle_unconfirmed. */
    settle: (output, summary) => settle({ ...base, command_id: `settle/${t.run}/${t.action}/${randomBytes(6).toString("hex")}`, outcome: "output", content: output ?? null, summary }),
    /** Settles the action with a failure: explain(...) or uncertain(...). */
    fail: (failure, summary) => {
      const s = { ...base, command_id: `settle/${t.run}/${t.action}/${randomBytes(6).toString("hex")}`, summary };
      if (failure instanceof Explain) Object.assign(s, { outcome: "explain", message: failure.message });
      else if (failure instanceof Uncertain) Object.assign(s, { outcome: "uncertain", evidence: failure.evidence });
      else throw new TypeError("fail takes explain(...) or uncertain(...)");
      return settle(s);
    },
  });
}
