// @weftrun/weft: Weft tool workers for Node.js (docs/typescript.md).
export * from "./errors.js";
export { Explain, Uncertain, explain, uncertain, bind, bindSettling } from "./tools.js";
export { Worker, settleError, DEFAULT_ACK_WAIT_MS, DEFAULT_DRAIN_GRACE_MS, DEFAULT_SETUP_WITHIN_MS, LATE_AFTER_ABANDON_MS, REASON_OWN_CALL, CONSUMER_REBOUND, REBIND_CAP_MS } from "./worker.js";
export { Client, finished, suspended, settled, RETRY_FIRST_DELAY_MS, RETRY_MAX_DELAY_MS, DEFAULT_RETRY_WITHIN_MS } from "./client.js";
export { argumentsSha256, canonicalArguments, proofDigest, signProof } from "./proof.js";
export { foldAttempt, logCheck } from "./check.js";
export {
  SCHEMA, TASK_STREAM, EVENT_STREAM, CLAIMS_BUCKET, RUNNERS_BUCKET, HEADER_UNSTARTED_CLAIM,
  TransportError, claimKey, idempotencyKey, queue, request, versionToken,
} from "./protocol.js";
