// The client for commands and queries (docs/protocol/40-commands.md,
// docs/protocol/50-queries.md), as the Go package client: each method
// returns the reply body, or throws the WeftError class of the reply's
// code. No responders is unavailable, as the Go client says it. Request
// bodies are the wire's (snake_case); schema is set, and command_id
// generated when left out.
//
// Commands follow docs/protocol.md's retry rules, as the Go client (package
// client, api.WithRetry) does: a command answered with a retryable code
// (RETRYABLE_CODES, weft.Code.Retryable's) is sent again with the same
// command id after a backoff of 100 ms doubling up to 2 s, as long as a
// retry can start within retryWithinMs (default 30 s; 0 sends once) of the
// first try and the caller's signal has not aborted; then the last answer
// is thrown. A try that gets no answer (a timeout, the caller's signal) is
// thrown as a TransportError, never as an earlier try's retryable code: it
// may have been applied. outcome_unknown is never retried (the same
// command id answers it again): the error names the run (err.run) to read
// (run, history, waitFor) to learn whether the command was applied. A
// start without a run id gets one the client picks, so that every try
// starts the same run and an unknown outcome names it; a retry of it
// answered already_started with the same input is the start this call
// made, answered as started.
import { randomBytes } from "node:crypto";
import { UnavailableError, WeftError, retryable } from "./errors.js";
import { SCHEMA, TransportError, request } from "./protocol.js";
import { sleep } from "./sleep.js";

/** The wait before a command's first retry (api.RetryFirstDelay). */
export const RETRY_FIRST_DELAY_MS = 100;
/** The longest wait between two tries (api.RetryMaxDelay). */
export const RETRY_MAX_DELAY_MS = 2000;
/** The default bound of a command's retries (api.DefaultRetryWithin): no retry starts later than this after the first try. */
export const DEFAULT_RETRY_WITHIN_MS = 30000;

// Resolves as p does, or throws a TransportError (no answer) when signal
// aborts first: the request may still be applied.
function untilAborted(p, signal, subject) {
  if (!signal) return p;
  signal.throwIfAborted();
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(new TransportError("timeout", `request ${subject}: no answer before the caller's signal aborted: ${signal.reason}`, signal.reason));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Conditions for waitFor, on a run view (docs/protocol/50-queries.md, "Run view"). */
export const finished = (v) => v.status === "finished";
export const suspended = (v) => v.status === "suspended";
export const settled = (v) => suspended(v) || finished(v);

export class Client {
  /**
   * @param {import("@nats-io/transport-node").NatsConnection} nc
   * @param {{timeoutMs?: number, retryWithinMs?: number}} [opts] timeoutMs: each
   * request's timeout (default 10000); retryWithinMs: the bound of a
   * command's retries (default DEFAULT_RETRY_WITHIN_MS; 0 sends each
   * command once, as the Go client's WithoutRetry)
   */
  constructor(nc, opts = {}) {
    this.nc = nc;
    this.timeoutMs = opts.timeoutMs ?? 10000;
    this.retryWithinMs = Math.max(opts.retryWithinMs ?? DEFAULT_RETRY_WITHIN_MS, 0);
  }

  async #call(subject, body, signal) {
    try {
      return await untilAborted(request(this.nc, subject, { ...body, schema: SCHEMA }, this.timeoutMs), signal, subject);
    } catch (err) {
      if (err instanceof TransportError && err.kind === "no_responders") {
        throw new UnavailableError(`nothing serves ${subject}`, { cause: err });
      }
      throw err;
    }
  }

  // Sends the command, retrying as the retry rules say (the file's comment).
  async #command(name, body, opts = {}) {
    const subject = `weft.api.${name}`;
    body = { command_id: `ts-${name}-${randomBytes(8).toString("hex")}`, ...body };
    const bound = Date.now() + this.retryWithinMs;
    let last = null;
    for (let delay = RETRY_FIRST_DELAY_MS; ; delay = Math.min(delay * 2, RETRY_MAX_DELAY_MS)) {
      try {
        return await this.#call(subject, body, opts.signal);
      } catch (err) {
        if (body.run && err instanceof WeftError && err.code === "outcome_unknown") err.run = body.run;
        if (!(err instanceof WeftError)) {
          // No answer: the try may have been applied, so it is never
          // answered with an earlier try's retryable code, which says
          // nothing was applied.
          if (last && err instanceof Error) err.message += ` (the try before was answered: ${last.code}: ${last.message})`;
          if (body.run && err instanceof Error) err.run = body.run;
          throw err;
        }
        if (!retryable(err.code) || this.retryWithinMs <= 0) throw err;
        last = err;
        if (Date.now() + delay > bound || !(await sleep(delay, opts.signal))) throw err;
      }
    }
  }

  /**
   * Starts a run: {run?, agent, version?, input, correlation?}. Resolves
   * {run, status}. Without a run id, a client that retries picks one
   * ("run-" and 20 random hex digits) so that every try starts the same run.
   */
  async start(req, opts) {
    let ours = false;
    if (this.retryWithinMs > 0 && !req.run) {
      req = { ...req, run: `run-${randomBytes(10).toString("hex")}` };
      ours = true;
    }
    try {
      return await this.#command("start", req, opts);
    } catch (err) {
      // A try that may have landed was answered with a retryable code; the
      // retry finds the run this call started.
      if (ours && err instanceof WeftError && err.code === "already_started" && err.details.same_input === true) {
        return { schema: SCHEMA, run: req.run, status: "working" };
      }
      throw err;
    }
  }
  /**
   * Approves a pending request: {run, action, revision, approver, credential}
   * or {..., proof}; with arguments (a JSON value) it approves the call
   * narrowed to them (docs/semantics.md §4, "Approving narrower
   * arguments"), sent as JSON.stringify writes them — a signed proof states
   * argumentsSha256(canonicalArguments(arguments)) as approved_sha256.
   */
  approve(req, opts) { return this.#command("approve", req, opts); }
  /** Rejects a pending request: {run, action, revision, reason, approver?, credential?, proof?}. */
  reject(req, opts) { return this.#command("reject", req, opts); }
  /** Records what happened to an uncertain action of a live run: {run, action, content, by?}. */
  reconcile(req, opts) { return this.#command("reconcile", req, opts); }
  /** The same on a finished run, resuming nothing. */
  reconcileStored(req, opts) { return this.#command("reconcile_stored", req, opts); }
  /** Records the final truth of an open question: {run, action, content, by?}. */
  resolve(req, opts) { return this.#command("resolve", req, opts); }
  /** Cancels a run: {run, reason?, by?}. */
  cancel(req, opts) { return this.#command("cancel", req, opts); }
  /** Offers a settlement: {run, action, outcome, content|message|evidence, summary?}. */
  settle(req, opts) { return this.#command("settle", req, opts); }

  /**
   * The catalog of an agent (docs/protocol/45-catalog.md): its tools with
   * the input and output JSON Schemas the Go agent publishes, and its
   * approvers. version may be left out when one version is served.
   */
  catalog(agent, version) { return this.#call(`weft.api.catalog.${agent}`, version ? { version } : {}); }

  /** The run's view with its family status: {view, family_status, child_status?}. */
  run(run) { return this.#call("weft.api.query.run", { run }); }
  /** A page of runs: {status?, agent?, updated_since?, limit?, cursor?}. */
  list(q = {}) { return this.#call("weft.api.query.list", q); }
  /** A page of a run's history: {run, after?, limit?}. */
  history(q) { return this.#call("weft.api.query.history", q); }
  /** Every pending approval request the filter ({run?, agent?}) keeps, oldest first, all pages. */
  approvals(f = {}) { return this.#inbox("approvals", f); }
  /** Every uncertain effect the filter keeps, oldest first, all pages. */
  uncertain(f = {}) { return this.#inbox("uncertain", f); }
  /** Every open question the filter keeps, oldest first, all pages. */
  questions(f = {}) { return this.#inbox("questions", f); }

  async #inbox(name, f) {
    const items = [];
    for (let cursor; ;) {
      const page = await this.#call(`weft.api.query.${name}`, cursor ? { ...f, cursor } : f);
      items.push(...(page.items ?? []));
      if (!page.next) return items;
      cursor = page.next;
    }
  }

  /**
   * Resolves the run's view once until(view) holds, reading the run query
   * (backing off from 20 ms to 1 s between reads); throws the query's
   * error (unknown_run for a run with no events) or, when signal aborts,
   * its reason.
   * @param {string} run @param {(view: any) => boolean} until @param {{signal?: AbortSignal}} [opts]
   */
  async waitFor(run, until, opts = {}) {
    for (let delay = 20; ; delay = Math.min(delay * 2, 1000)) {
      opts.signal?.throwIfAborted();
      let view = null;
      try {
        view = (await this.run(run)).view;
      } catch (err) {
        // A run started a moment ago may not be readable yet.
        if (!(err instanceof WeftError && err.code === "unknown_run") || delay >= 1000) throw err;
      }
      if (view && until(view)) return view;
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}
