// The client for commands and queries (docs/protocol/40-commands.md,
// docs/protocol/50-queries.md), as the Go package client: each method
// sends one request and returns the reply body, or throws the WeftError
// class of the reply's code. No responders is unavailable, as the Go
// client says it. Request bodies are the wire's (snake_case); schema is
// set, and command_id generated when left out.
import { randomBytes } from "node:crypto";
import { UnavailableError, WeftError } from "./errors.js";
import { SCHEMA, TransportError, request } from "./protocol.js";

/** Conditions for waitFor, on a run view (docs/protocol/50-queries.md, "Run view"). */
export const finished = (v) => v.status === "finished";
export const suspended = (v) => v.status === "suspended";
export const settled = (v) => suspended(v) || finished(v);

export class Client {
  /**
   * @param {import("@nats-io/transport-node").NatsConnection} nc
   * @param {{timeoutMs?: number}} [opts] each request's timeout (default 10000)
   */
  constructor(nc, opts = {}) {
    this.nc = nc;
    this.timeoutMs = opts.timeoutMs ?? 10000;
  }

  async #call(subject, body) {
    try {
      return await request(this.nc, subject, { ...body, schema: SCHEMA }, this.timeoutMs);
    } catch (err) {
      if (err instanceof TransportError && err.kind === "no_responders") {
        throw new UnavailableError(`nothing serves ${subject}`, { cause: err });
      }
      throw err;
    }
  }

  #command(name, body) {
    return this.#call(`weft.api.${name}`, { command_id: `ts-${name}-${randomBytes(8).toString("hex")}`, ...body });
  }

  /** Starts a run: {run?, agent, version?, input, correlation?}. Resolves {run, status}. */
  start(req) { return this.#command("start", req); }
  /** Approves a pending request: {run, action, revision, approver, credential} or {..., proof}. */
  approve(req) { return this.#command("approve", req); }
  /** Rejects a pending request: {run, action, revision, reason, approver?, credential?, proof?}. */
  reject(req) { return this.#command("reject", req); }
  /** Records what happened to an uncertain action of a live run: {run, action, content, by?}. */
  reconcile(req) { return this.#command("reconcile", req); }
  /** The same on a finished run, resuming nothing. */
  reconcileStored(req) { return this.#command("reconcile_stored", req); }
  /** Records the final truth of an open question: {run, action, content, by?}. */
  resolve(req) { return this.#command("resolve", req); }
  /** Cancels a run: {run, reason?, by?}. */
  cancel(req) { return this.#command("cancel", req); }
  /** Offers a settlement: {run, action, outcome, content|message|evidence, summary?}. */
  settle(req) { return this.#command("settle", req); }

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
