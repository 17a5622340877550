// Type declarations of @weftrun/weft (src/index.js). Hand-written:
// the package is plain ESM JavaScript (docs/adr/0024-typescript-sdk.md).
import type { NatsConnection } from "@nats-io/transport-node";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";

export * from "./errors.js";
import { WeftError } from "./errors.js";

/** A definite failure: the model sees {"error": message}; the run goes on. */
export class Explain { constructor(message: string); readonly message: string; }
/** The effect may have happened: never retried; a person or a settlement decides. */
export class Uncertain { constructor(evidence: string); readonly evidence: string; }
export function explain(message: string): Explain;
export function uncertain(evidence: string): Uncertain;

/** A tool definition: its name (1-64 of [A-Za-z0-9_-]) as the Go agent binds it. */
export interface ToolDefinition {
  name: string;
  description?: string;
  /** The JSON Schema the Go agent publishes (weft.api.catalog.<agent>); informational for now. */
  inputSchema?: object;
}

/** The settlement handle of a settling tool's call (docs/semantics.md §9). */
export interface Settlement<Out = unknown> {
  readonly run: string;
  readonly action: string;
  /** Resolves once recorded; throws AlreadyRecordedError, NotAwaitedError or SettleUnconfirmedError. */
  settle(output: Out, summary?: string): Promise<null>;
  fail(failure: Explain | Uncertain, summary?: string): Promise<null>;
}

/** What a handler gets besides its input. */
export interface Call<Out = unknown> {
  readonly run: string;
  readonly action: string;
  readonly attempt: number;
  readonly incarnation: number;
  readonly tool: string;
  readonly correlation?: string;
  /** The approver whose answer the body runs under, when the action was approved. */
  readonly reviewer?: string;
  /** Stable for the logical action across attempts, replays and recoveries. */
  readonly idempotencyKey: string;
  /** The attempt's deadline; null without a timeout. */
  readonly deadline: Date | null;
  /** Aborted at the deadline, by a stop of the run, or when the worker abandons its bodies. */
  readonly signal: AbortSignal;
  /** Settling tools only. */
  readonly settlement?: Settlement<Out>;
}

export type Handler<In, Out> = (input: In, call: Call<Out>) => Out | Promise<Out>;
/** Required: turns every error the handler throws into explain(...) or uncertain(...). */
export type Classify = (err: unknown, call: Call) => Explain | Uncertain;

export interface BoundTool {
  readonly name: string;
  readonly description?: string;
  readonly inputSchema?: object;
  readonly settling: boolean;
}

export function bind<In = any, Out = unknown>(def: ToolDefinition | string, handler: Handler<In, Out>, classify: Classify): BoundTool;
export function bindSettling<In = any, Out = unknown>(def: ToolDefinition | string, handler: Handler<In, Out>, classify: Classify): BoundTool;

export interface Logger {
  info(msg: string, fields?: object): void;
  warn(msg: string, fields?: object): void;
  error(msg: string, fields?: object): void;
}

/** A task body (docs/protocol/41-tasks.md). */
export interface Task {
  schema: number; run: string; action: string; agent: string; version: string; tool: string;
  attempt: number; incarnation: number; claim?: string; fence_version?: number; arguments: unknown;
  timeout_ms: number; deadline?: string; max_result_bytes?: number; settle_within_ms?: number;
  idempotency_key?: string; correlation?: string; reviewer?: string;
}

export interface WorkerOptions {
  agent: string;
  /** Default "1". */
  version?: string;
  /** Reported for audit and stored in claims. */
  id?: string;
  /** The consumers' ack wait; progress acks every third of it. Default 3000. */
  ackWaitMs?: number;
  /** How long a stopping worker waits for running bodies before abandoning them. Default 10000. */
  drainGraceMs?: number;
  /**
   * How long run tries its setup again while the server does not answer
   * (each try's requests wait 2 s doubling to 16 s); then run throws saying
   * why. Default DEFAULT_SETUP_WITHIN_MS (60000); 0 tries once.
   */
  setupWithinMs?: number;
  logger?: Logger;
  /**
   * Before serving, read the agent's catalog (weft.api.catalog.<agent>) and
   * refuse to run when a handled tool is not one of the agent's, or its
   * settling binding disagrees with the Go definition.
   */
  checkCatalog?: boolean;
  /** Replaces the attempt check of rule 2 (default: logCheck). Resolves current or not; throws when the run cannot be read. */
  attemptCheck?: (task: Task) => Promise<boolean>;
}

export class Worker {
  constructor(nc: NatsConnection, opts: WorkerOptions);
  handle(tool: BoundTool): this;
  /**
   * Serves until signal aborts, then drains (bounded by drainGraceMs). Its
   * setup is tried again while the server does not answer, up to
   * setupWithinMs; it throws saying why it gives up, or at once for an
   * answer that will not change (no task stream). A queue's consume that
   * ends while it serves (its consumer deleted, or lost by a server) is
   * made again after a pause (100 ms doubling up to REBIND_CAP_MS), logged
   * CONSUMER_REBOUND.
   */
  run(opts?: { signal?: AbortSignal }): Promise<void>;
  /** Serves until SIGTERM or SIGINT, then drains. */
  runUntilSignal(): Promise<void>;
  /** Stops the running bodies as a lost worker's: reported lost, worker_lost. */
  abandon(): void;
}

export function settleError(err: unknown): WeftError | null;
export const DEFAULT_ACK_WAIT_MS: number;
export const DEFAULT_DRAIN_GRACE_MS: number;
export const DEFAULT_SETUP_WITHIN_MS: number;
export const LATE_AFTER_ABANDON_MS: number;
export const REASON_OWN_CALL: "own_call";
/**
 * The message a worker logs (warn, with queue and err) when a queue's
 * consume ended while it runs (its consumer deleted, or lost by a server)
 * and it makes the consumer again after a pause.
 */
export const CONSUMER_REBOUND: "worker: a queue's consume ended; making its consumer again";
/** The longest pause before a queue's consumer is made again, and the bound of each request of a try: 5000. */
export const REBIND_CAP_MS: number;

export function foldAttempt(envelopes: Array<{ type: string; payload?: any; version?: number }>, task: Pick<Task, "action" | "attempt" | "incarnation">): { visible: boolean; current: boolean; handedOffBy: string | null };
export function logCheck(jsm: JetStreamManager, runners: () => Promise<KV>): (task: Task) => Promise<boolean>;

export const SCHEMA: 1;
export const TASK_STREAM: "WEFT_TASKS";
export const EVENT_STREAM: "WEFT_EVENTS";
export const CLAIMS_BUCKET: "weft_claims";
export const RUNNERS_BUCKET: "weft_runners";
export const HEADER_UNSTARTED_CLAIM: "Weft-Unstarted-Claim";

/** A request without a coded answer. */
export class TransportError extends Error {
  constructor(kind: "no_responders" | "timeout" | "transport", message: string, cause?: unknown);
  readonly kind: "no_responders" | "timeout" | "transport";
  /** The run of a command that got no answer: read it to learn whether the command was applied. */
  run?: string;
}
export interface Queue { agent: string; version: string; tool: string; subject: string; consumer: string; reportSubject: string; settleSubject: string; }
export function queue(agent: string, version: string, tool: string): Queue;
export function claimKey(run: string, action: string, attempt: number, incarnation: number): string;
export function idempotencyKey(run: string, action: string): string;
export function versionToken(version: string): string;
export function request(nc: NatsConnection, subject: string, body: unknown, timeoutMs: number): Promise<any>;

/** A run view (docs/protocol/50-queries.md, "Run view"). */
export type RunView = { run: string; status: "working" | "unattended" | "suspended" | "paused" | "finished" | "quarantined"; [k: string]: any };
export const finished: (v: RunView) => boolean;
export const suspended: (v: RunView) => boolean;
export const settled: (v: RunView) => boolean;

/** The wait before a command's first retry (api.RetryFirstDelay): 100. */
export const RETRY_FIRST_DELAY_MS: number;
/** The longest wait between two tries (api.RetryMaxDelay): 2000. */
export const RETRY_MAX_DELAY_MS: number;
/** The default bound of a command's retries (api.DefaultRetryWithin): 30000. */
export const DEFAULT_RETRY_WITHIN_MS: number;

/** A command's per-call options: the caller's deadline or cancellation. */
export interface CommandOptions { signal?: AbortSignal }
type CommandReply = Promise<{ schema: 1; run: string; status: string }>;

/**
 * Commands and queries (docs/protocol/40-commands.md, 50-queries.md). Bodies
 * are the wire's (snake_case); schema is set and command_id generated when
 * left out. A coded refusal throws the WeftError class of its code; no
 * responders throws UnavailableError.
 *
 * Commands follow docs/protocol.md's retry rules: a retryable answer
 * (RETRYABLE_CODES) is sent again with the same command id after a backoff
 * (RETRY_FIRST_DELAY_MS doubling up to RETRY_MAX_DELAY_MS) while a retry
 * can start within retryWithinMs (DEFAULT_RETRY_WITHIN_MS; 0 sends once)
 * and opts.signal has not aborted; a try with no answer throws a
 * TransportError (never an earlier retryable code); outcome_unknown is
 * never retried and names the run to read (err.run). A start without a
 * run id gets one the client picks; its retry answered already_started
 * with the same input resolves as started.
 */
export class Client {
  constructor(nc: NatsConnection, opts?: { timeoutMs?: number; retryWithinMs?: number });
  start(req: { run?: string; agent: string; version?: string; input: string; correlation?: string; command_id?: string }, opts?: CommandOptions): CommandReply;
  /**
   * Approves a pending request. arguments, when given (a JSON value, not a
   * string of JSON), approve the call narrowed to these edited arguments
   * (docs/semantics.md §4, "Approving narrower arguments"): the runtime
   * decodes them with the tool's input (else InvalidContentError) and
   * re-runs the policy with them (else EditRefusedError); a signed proof
   * must then state approved_sha256 (canonicalArguments). null is no edit.
   */
  approve(req: { run: string; action: string; revision: number; approver: string; credential?: string; proof?: object; arguments?: unknown; command_id?: string }, opts?: CommandOptions): CommandReply;
  reject(req: { run: string; action: string; revision: number; reason: string; approver?: string; credential?: string; by?: string; proof?: object; command_id?: string }, opts?: CommandOptions): CommandReply;
  reconcile(req: { run: string; action: string; content: unknown; by?: string; command_id?: string }, opts?: CommandOptions): CommandReply;
  reconcileStored(req: { run: string; action: string; content: unknown; by?: string; command_id?: string }, opts?: CommandOptions): CommandReply;
  resolve(req: { run: string; action: string; content: unknown; by?: string; command_id?: string }, opts?: CommandOptions): CommandReply;
  cancel(req: { run: string; reason?: string; by?: string; command_id?: string }, opts?: CommandOptions): CommandReply;
  settle(req: { run: string; action: string; outcome: "output" | "explain" | "uncertain"; content?: unknown; message?: string; evidence?: string; summary?: string; command_id?: string }, opts?: CommandOptions): CommandReply;
  /** An agent's catalog (docs/protocol/45-catalog.md): its tools with their JSON Schemas, its approvers. */
  catalog(agent: string, version?: string): Promise<{ schema: 1; agent: { name: string; version: string }; tools: Array<{ name: string; description: string; input_schema: object; output_schema?: object; settling?: boolean }>; approvers: string[] }>;
  run(run: string): Promise<{ schema: 1; view: RunView; family_status: { status: string; waiting?: string[] }; child_status?: object[] }>;
  list(q?: { status?: string; agent?: string; updated_since?: string; limit?: number; cursor?: string }): Promise<{ schema: 1; runs: object[]; next?: string }>;
  history(q: { run: string; after?: number; limit?: number }): Promise<{ schema: 1; run: string; events: object[]; head: object; next?: number }>;
  approvals(f?: { run?: string; agent?: string }): Promise<Array<{ run: string; action: string; revision: number; tool: string; arguments: unknown; approved_arguments?: unknown; requirement: { name: string; version: number }; [k: string]: any }>>;
  uncertain(f?: { run?: string; agent?: string }): Promise<object[]>;
  questions(f?: { run?: string; agent?: string }): Promise<object[]>;
  waitFor(run: string, until: (view: RunView) => boolean, opts?: { signal?: AbortSignal }): Promise<RunView>;
}

/** What a signed approval proof answers (docs/protocol/20-events.md, "Signed approval proofs"). */
export interface ProofSubject {
  run: string; action: string; revision: number; requirement: { name: string; version: number };
  tool: string; arguments_sha256: string;
  /**
   * For an approve with edited arguments only: argumentsSha256 of their
   * canonicalArguments; the proof is then signed as "weft approval proof v2".
   */
  approved_sha256?: string;
  answer: "approve" | "reject";
  /**
   * For a reject only: the reason sent with it, exactly; the proof then
   * covers it and is signed as "weft approval proof v3".
   */
  reason?: string;
}
export interface ApprovalProof extends ProofSubject { key: string; expires: string; signature: string; }
/** Lowercase hex SHA-256 of a call's canonical arguments bytes, as received (never re-serialized). */
export function argumentsSha256(canonical: string | Uint8Array): string;
/**
 * The canonical bytes (as a string) of a JSON value the SDK sends: JSON.stringify
 * with <, >, &, U+2028, U+2029 escaped as the runtime's canonical form
 * writes them. argumentsSha256(canonicalArguments(edit)) is approved_sha256.
 */
export function canonicalArguments(value: unknown): string;
/** The SHA-256 digest a proof's signature signs (v3 when reason is set, else v2 when approved_sha256 is set). */
export function proofDigest(p: Omit<ApprovalProof, "signature">): Buffer;
/** Signs the answer with an nkey user key pair (@nats-io/nkeys fromSeed) or any signer alike. */
export function signProof(subject: ProofSubject, signer: { getPublicKey(): string; sign(data: Uint8Array): Uint8Array }, expires: Date | string | number): ApprovalProof;
