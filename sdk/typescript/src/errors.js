// The protocol's error codes as typed classes (docs/protocol.md, "Error
// codes"): every error reply of the command API, the queries and the
// catalog is {"schema":1,"error":{"code","message","reason"?,...}}, and
// fromReply turns it into the class of its code. test/errors.test.js keeps
// this file and the table in docs/protocol.md in agreement.

/** Every error the SDK raises for a coded refusal. */
export class WeftError extends Error {
  /**
   * @param {string} code the protocol's code (docs/protocol.md)
   * @param {string} [message]
   * @param {{reason?: string, details?: Record<string, unknown>, cause?: unknown}} [opts]
   */
  constructor(code, message, opts = {}) {
    super(message || code, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    /** @type {string} */
    this.code = code;
    /** @type {number|undefined} the code's number in docs/protocol.md */
    this.status = CODES[code];
    /** @type {string|undefined} */
    this.reason = opts.reason;
    /** @type {Record<string, unknown>} other members of the error object (same_input, ...) */
    this.details = opts.details ?? {};
  }
}

/** The codes of docs/protocol.md's error table with their numbers. */
export const CODES = Object.freeze({
  invalid_json: 400,
  invalid_request: 400,
  payload_too_large: 413,
  invalid_name: 400,
  unknown_run: 404,
  unknown_agent: 404,
  unknown_tool: 404,
  bad_filter: 400,
  bad_cursor: 400,
  already_started: 409,
  key_reused: 409,
  wrong_reference: 404,
  stale_reference: 409,
  already_answered: 409,
  approval_expired: 410,
  run_ended: 409,
  proof_refused: 403,
  edit_refused: 403,
  identity_required: 403,
  not_reconcilable: 409,
  already_recorded: 409,
  not_awaited: 409,
  settle_unconfirmed: 503,
  outcome_unknown: 504,
  invalid_content: 400,
  run_active: 409,
  run_not_ended: 409,
  not_resolvable: 409,
  already_resolved: 409,
  run_not_finished: 409,
  uncertain_actions: 409,
  permission_denied: 403,
  quarantined: 409,
  runner_busy: 503,
  contended: 503,
  conflict: 409,
  unavailable: 503,
  internal: 500,
});

/**
 * The retryable codes (docs/protocol.md, "Retry rules"): an answer with one
 * of them says "not applied, try again", so the Client sends the command
 * again with the same command id. It is weft.Code.Retryable (error.go),
 * the one table, spelt for Node: the Go test
 * TestRetryRules_TheTypeScriptRetryableCodesAreWeftCodeRetryable
 * (internal/tsdktest) reads this list and fails when it differs.
 */
export const RETRYABLE_CODES = Object.freeze(["runner_busy", "contended", "conflict", "unavailable", "settle_unconfirmed"]);

/** Whether an answer with code says "not applied, try again" (RETRYABLE_CODES). */
export function retryable(code) {
  return RETRYABLE_CODES.includes(code);
}

/** `invalid_json` (400). */
export class InvalidJsonError extends WeftError {
  constructor(message, opts) { super("invalid_json", message, opts); }
}
/** `invalid_request` (400). */
export class InvalidRequestError extends WeftError {
  constructor(message, opts) { super("invalid_request", message, opts); }
}
/** `payload_too_large` (413). */
export class PayloadTooLargeError extends WeftError {
  constructor(message, opts) { super("payload_too_large", message, opts); }
}
/** `invalid_name` (400). */
export class InvalidNameError extends WeftError {
  constructor(message, opts) { super("invalid_name", message, opts); }
}
/** `unknown_run` (404). */
export class UnknownRunError extends WeftError {
  constructor(message, opts) { super("unknown_run", message, opts); }
}
/** `unknown_agent` (404). */
export class UnknownAgentError extends WeftError {
  constructor(message, opts) { super("unknown_agent", message, opts); }
}
/** `unknown_tool` (404). */
export class UnknownToolError extends WeftError {
  constructor(message, opts) { super("unknown_tool", message, opts); }
}
/** `bad_filter` (400). */
export class BadFilterError extends WeftError {
  constructor(message, opts) { super("bad_filter", message, opts); }
}
/** `bad_cursor` (400). */
export class BadCursorError extends WeftError {
  constructor(message, opts) { super("bad_cursor", message, opts); }
}
/** `already_started` (409). */
export class AlreadyStartedError extends WeftError {
  constructor(message, opts) { super("already_started", message, opts); }
}
/** `key_reused` (409). */
export class KeyReusedError extends WeftError {
  constructor(message, opts) { super("key_reused", message, opts); }
}
/** `wrong_reference` (404). */
export class WrongReferenceError extends WeftError {
  constructor(message, opts) { super("wrong_reference", message, opts); }
}
/** `stale_reference` (409). */
export class StaleReferenceError extends WeftError {
  constructor(message, opts) { super("stale_reference", message, opts); }
}
/** `already_answered` (409). */
export class AlreadyAnsweredError extends WeftError {
  constructor(message, opts) { super("already_answered", message, opts); }
}
/** `approval_expired` (410). */
export class ApprovalExpiredError extends WeftError {
  constructor(message, opts) { super("approval_expired", message, opts); }
}
/** `run_ended` (409). */
export class RunEndedError extends WeftError {
  constructor(message, opts) { super("run_ended", message, opts); }
}
/** `proof_refused` (403). */
export class ProofRefusedError extends WeftError {
  constructor(message, opts) { super("proof_refused", message, opts); }
}
/** `edit_refused` (403): an approve with edited arguments the policy would not allow under the request answered. */
export class EditRefusedError extends WeftError {
  constructor(message, opts) { super("edit_refused", message, opts); }
}
/** `identity_required` (403): the deployment requires a verified identity (a signed proof) or a reason for a person's command. */
export class IdentityRequiredError extends WeftError {
  constructor(message, opts) { super("identity_required", message, opts); }
}
/** `not_reconcilable` (409). */
export class NotReconcilableError extends WeftError {
  constructor(message, opts) { super("not_reconcilable", message, opts); }
}
/** `already_recorded` (409). */
export class AlreadyRecordedError extends WeftError {
  constructor(message, opts) { super("already_recorded", message, opts); }
}
/** `not_awaited` (409). */
export class NotAwaitedError extends WeftError {
  constructor(message, opts) { super("not_awaited", message, opts); }
}
/** `settle_unconfirmed` (503). */
export class SettleUnconfirmedError extends WeftError {
  constructor(message, opts) { super("settle_unconfirmed", message, opts); }
}
/** `outcome_unknown` (504). */
export class OutcomeUnknownError extends WeftError {
  constructor(message, opts) { super("outcome_unknown", message, opts); }
}
/** `invalid_content` (400). */
export class InvalidContentError extends WeftError {
  constructor(message, opts) { super("invalid_content", message, opts); }
}
/** `run_active` (409). */
export class RunActiveError extends WeftError {
  constructor(message, opts) { super("run_active", message, opts); }
}
/** `run_not_ended` (409). */
export class RunNotEndedError extends WeftError {
  constructor(message, opts) { super("run_not_ended", message, opts); }
}
/** `not_resolvable` (409). */
export class NotResolvableError extends WeftError {
  constructor(message, opts) { super("not_resolvable", message, opts); }
}
/** `already_resolved` (409). */
export class AlreadyResolvedError extends WeftError {
  constructor(message, opts) { super("already_resolved", message, opts); }
}
/** `run_not_finished` (409): a restart named a run that has not finished. */
export class RunNotFinishedError extends WeftError {
  constructor(message, opts) { super("run_not_finished", message, opts); }
}
/** `uncertain_actions` (409): a restart past actions whose outcome nobody knows; `details.actions` names them. */
export class UncertainActionsError extends WeftError {
  constructor(message, opts) { super("uncertain_actions", message, opts); }
}
/** `permission_denied` (403): the NATS server refused this connection's user the subject; nothing was sent. */
export class PermissionDeniedError extends WeftError {
  constructor(message, opts) { super("permission_denied", message, opts); }
}
/** `quarantined` (409). */
export class QuarantinedError extends WeftError {
  constructor(message, opts) { super("quarantined", message, opts); }
}
/** `runner_busy` (503). */
export class RunnerBusyError extends WeftError {
  constructor(message, opts) { super("runner_busy", message, opts); }
}
/** `contended` (503). */
export class ContendedError extends WeftError {
  constructor(message, opts) { super("contended", message, opts); }
}
/** `conflict` (409). */
export class ConflictError extends WeftError {
  constructor(message, opts) { super("conflict", message, opts); }
}
/** `unavailable` (503). */
export class UnavailableError extends WeftError {
  constructor(message, opts) { super("unavailable", message, opts); }
}
/** `internal` (500). */
export class InternalError extends WeftError {
  constructor(message, opts) { super("internal", message, opts); }
}

/** The class of each code. */
export const ERROR_CLASSES = Object.freeze({
  invalid_json: InvalidJsonError,
  invalid_request: InvalidRequestError,
  payload_too_large: PayloadTooLargeError,
  invalid_name: InvalidNameError,
  unknown_run: UnknownRunError,
  unknown_agent: UnknownAgentError,
  unknown_tool: UnknownToolError,
  bad_filter: BadFilterError,
  bad_cursor: BadCursorError,
  already_started: AlreadyStartedError,
  key_reused: KeyReusedError,
  wrong_reference: WrongReferenceError,
  stale_reference: StaleReferenceError,
  already_answered: AlreadyAnsweredError,
  approval_expired: ApprovalExpiredError,
  run_ended: RunEndedError,
  proof_refused: ProofRefusedError,
  edit_refused: EditRefusedError,
  identity_required: IdentityRequiredError,
  not_reconcilable: NotReconcilableError,
  already_recorded: AlreadyRecordedError,
  not_awaited: NotAwaitedError,
  settle_unconfirmed: SettleUnconfirmedError,
  outcome_unknown: OutcomeUnknownError,
  invalid_content: InvalidContentError,
  run_active: RunActiveError,
  run_not_ended: RunNotEndedError,
  not_resolvable: NotResolvableError,
  already_resolved: AlreadyResolvedError,
  run_not_finished: RunNotFinishedError,
  uncertain_actions: UncertainActionsError,
  permission_denied: PermissionDeniedError,
  quarantined: QuarantinedError,
  runner_busy: RunnerBusyError,
  contended: ContendedError,
  conflict: ConflictError,
  unavailable: UnavailableError,
  internal: InternalError,
});

/**
 * The error of a coded error object ({code, message, reason, ...}), as the
 * class of its code; a code this SDK does not know yet is a plain
 * WeftError carrying it.
 * @param {{code: string, message?: string, reason?: string}} e
 * @returns {WeftError}
 */
export function errorOf(e) {
  const { code, message, reason, ...details } = e;
  const C = ERROR_CLASSES[code];
  return C ? new C(message, { reason, details }) : new WeftError(code, message, { reason, details });
}
