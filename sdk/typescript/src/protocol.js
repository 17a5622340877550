// The names and bodies of the task protocol (docs/protocol/41-tasks.md):
// what the Go package api defines, for Node.
import { createHash } from "node:crypto";
import { ERROR_CLASSES, InternalError, errorOf, PayloadTooLargeError } from "./errors.js";

export const SCHEMA = 1;
export const TASK_STREAM = "WEFT_TASKS";
export const EVENT_STREAM = "WEFT_EVENTS";
export const CLAIMS_BUCKET = "weft_claims";
export const RUNNERS_BUCKET = "weft_runners";
export const STOP_SUBJECT_PREFIX = "weft.stop.";
/** Header of a requeued task naming the tokens of claims no body started under (rule 3). */
export const HEADER_UNSTARTED_CLAIM = "Weft-Unstarted-Claim";
export const HEADER_MSG_ID = "Nats-Msg-Id";

/** An agent version written as one NATS token: every "." as "~". */
export function versionToken(version) {
  return String(version).replaceAll(".", "~");
}

/**
 * The queue of one tool as bound in one agent identity, with its subjects
 * and durable consumer (docs/protocol/41-tasks.md, "Taking tasks").
 * @param {string} agent @param {string} version @param {string} tool
 */
export function queue(agent, version, tool) {
  const vt = versionToken(version);
  return {
    agent, version, tool,
    subject: `weft.task.${agent}.${vt}.${tool}`,
    consumer: `weft_task_${agent}@${vt}@${tool}`,
    reportSubject: `weft.api.report.${agent}.${vt}.${tool}`,
    settleSubject: `weft.api.settle.${agent}.${vt}.${tool}`,
  };
}

/** The key of an attempt's claim in weft_claims: <run>.<action in unpadded base64url>.<attempt>.<incarnation>. */
export function claimKey(run, action, attempt, incarnation) {
  return `${run}.${Buffer.from(action, "utf8").toString("base64url")}.${attempt}.${incarnation}`;
}

// Go's encoding/json escapes these inside strings; the key hashes Go's bytes
// (and so do approval proofs: proof.js canonicalArguments).
export function goJSON(v) {
  return JSON.stringify(v).replace(/[<>&\u2028\u2029]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

/**
 * The idempotency key of the logical action (docs/semantics.md §3): the
 * lowercase hex SHA-256 of the JSON array ["weft.idempotency.v1", run,
 * action], as the Go tools.IdempotencyKey; stable across attempts, replays
 * and recoveries.
 */
export function idempotencyKey(run, action) {
  return createHash("sha256").update(goJSON(["weft.idempotency.v1", run, action])).digest("hex");
}

/** Reasons of a settle_unconfirmed no runner gave (as the Go worker.SettleError). */
export const REASON_NO_RESPONDERS = "no_responders";
export const REASON_TIMEOUT = "timeout";
export const REASON_TRANSPORT = "transport";

/** A request that got no coded answer: no responders, a timeout, or a transport failure. */
export class TransportError extends Error {
  /** @param {"no_responders"|"timeout"|"transport"} kind */
  constructor(kind, message, cause) {
    super(message, { cause });
    this.name = "TransportError";
    this.kind = kind;
  }
}

function transportKind(err) {
  const s = `${err?.name ?? ""} ${err?.code ?? ""} ${err?.message ?? ""}`.toLowerCase();
  if (s.includes("no responders") || s.includes("503")) return REASON_NO_RESPONDERS;
  if (s.includes("timeout")) return REASON_TIMEOUT;
  return REASON_TRANSPORT;
}

/**
 * Sends body as a request of the command API and returns the reply; an
 * error reply is thrown as the WeftError class of its code (readReply: a
 * reply that is not the error envelope is InternalError), a request
 * without an answer as a TransportError. A body over the server's
 * max_payload is payload_too_large, as the Go worker says it.
 */
export async function request(nc, subject, body, timeoutMs) {
  const data = JSON.stringify(body);
  const size = Buffer.byteLength(data);
  const max = nc.info?.max_payload;
  if (max && size > max) {
    throw new PayloadTooLargeError(`request of ${size} bytes on ${subject} is over the NATS server's max_payload of ${max} bytes (weft needs at least 8 MiB: docs/protocol/10-log.md)`);
  }
  let m;
  try {
    m = await nc.request(subject, data, { timeout: timeoutMs });
  } catch (err) {
    throw new TransportError(transportKind(err), `request ${subject}: ${err?.message ?? err}`, err);
  }
  return readReply(m, subject);
}

const isString = (v) => v === null || v === undefined || typeof v === "string";
const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Reads a reply as the Go api.ReplyError does (docs/protocol.md, "Error
 * codes"): the body's error envelope {"schema":1,"error":{…}} is thrown as
 * the WeftError class of its code; a body that is not the envelope (not
 * JSON, not an object, a member of the wrong type, an error without a
 * code) is no answer and thrown as InternalError "unreadable reply"; a
 * reply whose Nats-Service-Error-Code header marks an error and whose body
 * is empty or carries none is the header's code (Nats-Service-Error),
 * InternalError when that is empty or not a protocol code; an empty body
 * without the header is InternalError. Anything else is the parsed body.
 * internal is a code the worker sends its report again for and a
 * settlement answers settle_unconfirmed for.
 */
export function readReply(m, subject) {
  const unreadable = (why, cause) => new InternalError(`unreadable reply to ${subject}: ${why}`, cause === undefined ? { reason: "unreadable_reply" } : { reason: "unreadable_reply", cause });
  const text = m.data && m.data.length > 0 ? m.string() : "";
  let r = null;
  if (text !== "") {
    try {
      r = JSON.parse(text);
    } catch (err) {
      throw unreadable("not JSON", err);
    }
    if (r !== null && !isObject(r)) throw unreadable("not a JSON object");
    const sc = r?.schema;
    if (sc !== null && sc !== undefined && !Number.isInteger(sc)) throw unreadable("schema is not an integer");
    const e = r?.error;
    if (e !== null && e !== undefined) {
      const ok = isObject(e) && isString(e.code) && isString(e.reason) && isString(e.message)
        && (e.same_input === null || e.same_input === undefined || typeof e.same_input === "boolean")
        && (e.actions === null || e.actions === undefined || (Array.isArray(e.actions) && e.actions.every(isString)));
      if (!ok) throw unreadable("error is not a Weft error object");
      if (!e.code) throw unreadable("an error without a code");
      throw errorOf(e);
    }
  }
  const st = m.headers?.get("Nats-Service-Error-Code") ?? "";
  if (st !== "") {
    const code = m.headers.get("Nats-Service-Error") ?? "";
    if (!Object.hasOwn(ERROR_CLASSES, code)) throw unreadable(`an error header ${st} whose code "${code}" is not a protocol code`);
    throw errorOf({ code, message: `error reply without a body: ${st}` });
  }
  if (text === "") throw unreadable("an empty body");
  return r;
}
