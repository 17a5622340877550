/** Every error the SDK raises for a coded refusal (docs/protocol.md, "Error codes"). */
export class WeftError extends Error {
  constructor(code: string, message?: string, opts?: { reason?: string; details?: Record<string, unknown>; cause?: unknown });
  /** The protocol's code. */
  readonly code: string;
  /** The code's number in docs/protocol.md's table. */
  readonly status: number | undefined;
  /** The refusal's reason, where the table names reasons. */
  readonly reason: string | undefined;
  /** Other members of the error object (same_input, ...). */
  readonly details: Record<string, unknown>;
  /** The run of a command answered outcome_unknown (the Client sets it): read it to learn whether the command was applied. */
  run?: string;
}
type ErrorOpts = { reason?: string; details?: Record<string, unknown>; cause?: unknown };
/** The codes of docs/protocol.md's error table with their numbers. */
export declare const CODES: Readonly<{
  invalid_json: 400;
  invalid_request: 400;
  payload_too_large: 413;
  invalid_name: 400;
  unknown_run: 404;
  unknown_agent: 404;
  unknown_tool: 404;
  bad_filter: 400;
  bad_cursor: 400;
  already_started: 409;
  key_reused: 409;
  wrong_reference: 404;
  stale_reference: 409;
  already_answered: 409;
  approval_expired: 410;
  run_ended: 409;
  proof_refused: 403;
  edit_refused: 403;
  not_reconcilable: 409;
  already_recorded: 409;
  not_awaited: 409;
  settle_unconfirmed: 503;
  outcome_unknown: 504;
  invalid_content: 400;
  run_active: 409;
  run_not_ended: 409;
  not_resolvable: 409;
  already_resolved: 409;
  run_not_finished: 409;
  uncertain_actions: 409;
  permission_denied: 403;
  quarantined: 409;
  runner_busy: 503;
  contended: 503;
  conflict: 409;
  unavailable: 503;
  internal: 500;
}>;
/** `invalid_json` (400). */
export class InvalidJsonError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "invalid_json";
}
/** `invalid_request` (400). */
export class InvalidRequestError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "invalid_request";
}
/** `payload_too_large` (413). */
export class PayloadTooLargeError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "payload_too_large";
}
/** `invalid_name` (400). */
export class InvalidNameError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "invalid_name";
}
/** `unknown_run` (404). */
export class UnknownRunError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "unknown_run";
}
/** `unknown_agent` (404). */
export class UnknownAgentError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "unknown_agent";
}
/** `unknown_tool` (404). */
export class UnknownToolError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "unknown_tool";
}
/** `bad_filter` (400). */
export class BadFilterError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "bad_filter";
}
/** `bad_cursor` (400). */
export class BadCursorError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "bad_cursor";
}
/** `already_started` (409). */
export class AlreadyStartedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "already_started";
}
/** `key_reused` (409). */
export class KeyReusedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "key_reused";
}
/** `wrong_reference` (404). */
export class WrongReferenceError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "wrong_reference";
}
/** `stale_reference` (409). */
export class StaleReferenceError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "stale_reference";
}
/** `already_answered` (409). */
export class AlreadyAnsweredError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "already_answered";
}
/** `approval_expired` (410). */
export class ApprovalExpiredError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "approval_expired";
}
/** `run_ended` (409). */
export class RunEndedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "run_ended";
}
/** `proof_refused` (403). */
export class ProofRefusedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "proof_refused";
}
/** `edit_refused` (403): an approve with edited arguments the policy would not allow under the request answered. */
export class EditRefusedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "edit_refused";
}
/** `identity_required` (403): the deployment requires a verified identity (a signed proof) or a reason for a person's command. */
export class IdentityRequiredError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "identity_required";
}
/** `not_reconcilable` (409). */
export class NotReconcilableError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "not_reconcilable";
}
/** `already_recorded` (409). */
export class AlreadyRecordedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "already_recorded";
}
/** `not_awaited` (409). */
export class NotAwaitedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "not_awaited";
}
/** `settle_unconfirmed` (503). */
export class SettleUnconfirmedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "settle_unconfirmed";
}
/** `outcome_unknown` (504). */
export class OutcomeUnknownError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "outcome_unknown";
}
/** `invalid_content` (400). */
export class InvalidContentError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "invalid_content";
}
/** `run_active` (409). */
export class RunActiveError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "run_active";
}
/** `run_not_ended` (409). */
export class RunNotEndedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "run_not_ended";
}
/** `not_resolvable` (409). */
export class NotResolvableError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "not_resolvable";
}
/** `already_resolved` (409). */
export class AlreadyResolvedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "already_resolved";
}
/** `run_not_finished` (409): a restart named a run that has not finished. */
export class RunNotFinishedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "run_not_finished";
}
/** `uncertain_actions` (409): a restart past actions whose outcome nobody knows; `details.actions` names them. */
export class UncertainActionsError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "uncertain_actions";
}
/** `permission_denied` (403): the NATS server refused this connection's user the subject; nothing was sent. */
export class PermissionDeniedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "permission_denied";
}
/** `quarantined` (409). */
export class QuarantinedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "quarantined";
}
/** `runner_busy` (503). */
export class RunnerBusyError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "runner_busy";
}
/** `contended` (503). */
export class ContendedError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "contended";
}
/** `conflict` (409). */
export class ConflictError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "conflict";
}
/** `unavailable` (503). */
export class UnavailableError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "unavailable";
}
/** `internal` (500). */
export class InternalError extends WeftError {
  constructor(message?: string, opts?: ErrorOpts);
  readonly code: "internal";
}
/** The retryable codes (docs/protocol.md, "Retry rules"): weft.Code.Retryable's, kept equal by a Go test. */
export declare const RETRYABLE_CODES: readonly string[];
/** Whether an answer with code says "not applied, try again" (RETRYABLE_CODES). */
export declare function retryable(code: string): boolean;

/** The class of each code. */
export declare const ERROR_CLASSES: Readonly<{
  invalid_json: typeof InvalidJsonError;
  invalid_request: typeof InvalidRequestError;
  payload_too_large: typeof PayloadTooLargeError;
  invalid_name: typeof InvalidNameError;
  unknown_run: typeof UnknownRunError;
  unknown_agent: typeof UnknownAgentError;
  unknown_tool: typeof UnknownToolError;
  bad_filter: typeof BadFilterError;
  bad_cursor: typeof BadCursorError;
  already_started: typeof AlreadyStartedError;
  key_reused: typeof KeyReusedError;
  wrong_reference: typeof WrongReferenceError;
  stale_reference: typeof StaleReferenceError;
  already_answered: typeof AlreadyAnsweredError;
  approval_expired: typeof ApprovalExpiredError;
  run_ended: typeof RunEndedError;
  proof_refused: typeof ProofRefusedError;
  edit_refused: typeof EditRefusedError;
  identity_required: typeof IdentityRequiredError;
  not_reconcilable: typeof NotReconcilableError;
  already_recorded: typeof AlreadyRecordedError;
  not_awaited: typeof NotAwaitedError;
  settle_unconfirmed: typeof SettleUnconfirmedError;
  outcome_unknown: typeof OutcomeUnknownError;
  invalid_content: typeof InvalidContentError;
  run_active: typeof RunActiveError;
  run_not_ended: typeof RunNotEndedError;
  not_resolvable: typeof NotResolvableError;
  already_resolved: typeof AlreadyResolvedError;
  run_not_finished: typeof RunNotFinishedError;
  uncertain_actions: typeof UncertainActionsError;
  permission_denied: typeof PermissionDeniedError;
  quarantined: typeof QuarantinedError;
  runner_busy: typeof RunnerBusyError;
  contended: typeof ContendedError;
  conflict: typeof ConflictError;
  unavailable: typeof UnavailableError;
  internal: typeof InternalError;
}>;
/** The error of a coded error object, as the class of its code. */
export declare function errorOf(e: { code: string; message?: string; reason?: string; [k: string]: unknown }): WeftError;
