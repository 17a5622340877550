// Signed approval proofs (docs/protocol/20-events.md, "Signed approval
// proofs"; docs/security.md): what the Go package proof computes, for a
// Node service that answers approvals with an approver of signed proofs
// (approvers.Signed).
import { createHash } from "node:crypto";
import { goJSON } from "./protocol.js";

const DOMAIN = "weft approval proof v1";
// A proof of an approve with edited arguments (docs/semantics.md §4,
// "Approving narrower arguments") is digested under its own domain, with
// the approved arguments' hash after the key, so neither form reads as
// the other.
const DOMAIN_EDITED = "weft approval proof v2";
// A proof of a reject that states its reason (docs/protocol/20-events.md,
// the v3 digest) is digested under its own domain, with approved_sha256
// (empty) and the reason after the key: the proof then covers the reason
// the model reads, as weft reject --signing-key signs it.
const DOMAIN_REASON = "weft approval proof v3";

/**
 * The lowercase hex SHA-256 of a call's canonical arguments bytes: take
 * them as the run view or the approvals inbox carries them (a string of
 * JSON, or the bytes), or canonicalArguments of the parsed value, which
 * spells them as the log does except for number spellings JSON.stringify
 * changes (1.50, 1e3, integers beyond 2^53).
 * @param {string|Uint8Array} canonical
 */
export function argumentsSha256(canonical) {
  return createHash("sha256").update(canonical).digest("hex");
}

/**
 * The canonical bytes, as a string, of edited arguments the SDK sends
 * (client.approve's arguments): JSON.stringify's compact form with <, >,
 * &, U+2028 and U+2029 written \u003c, \u003e, \u0026, \u2028, \u2029 —
 * the form the runtime records and hashes (Go's proof.Canonical of the
 * bytes sent). Its argumentsSha256 is a proof's approved_sha256.
 * @param {unknown} value
 */
export function canonicalArguments(value) {
  if (JSON.stringify(value) === undefined) throw new TypeError("arguments are not a JSON value");
  return goJSON(value);
}

function field(h, s) {
  const b = Buffer.from(String(s), "utf8");
  const n = Buffer.alloc(4);
  n.writeUInt32BE(b.length);
  h.update(n);
  h.update(b);
}

/**
 * The digest a proof's signature signs: SHA-256 of "weft approval proof
 * v1" and ten length-prefixed fields (answer, run, action, revision,
 * requirement name, requirement version, tool, arguments_sha256, expires
 * as Unix seconds, key); for a proof with approved_sha256 (an approve
 * with edited arguments), of "weft approval proof v2", the same ten and
 * approved_sha256; for a proof with reason (a reject signed with its
 * reason), of "weft approval proof v3", the same ten, approved_sha256
 * (empty when absent) and reason.
 * @returns {Buffer}
 */
export function proofDigest(p) {
  const expires = Date.parse(p.expires);
  if (!Number.isFinite(expires)) throw new TypeError(`proof expires ${JSON.stringify(p.expires)} is not RFC 3339`);
  const fields = [p.answer, p.run, p.action, p.revision, p.requirement.name, p.requirement.version, p.tool,
    p.arguments_sha256, Math.floor(expires / 1000), p.key];
  let domain = DOMAIN;
  if (p.reason) {
    fields.push(p.approved_sha256 || "", p.reason);
    domain = DOMAIN_REASON;
  } else if (p.approved_sha256) {
    fields.push(p.approved_sha256);
    domain = DOMAIN_EDITED;
  }
  const h = createHash("sha256");
  h.update(domain);
  for (const f of fields) field(h, f);
  return h.digest();
}

/**
 * Signs the answer to a pending approval request: subject is {run, action,
 * revision, requirement: {name, version}, tool, arguments_sha256, answer
 * ("approve" or "reject")}, and for an approve with edited arguments
 * approved_sha256: argumentsSha256(canonicalArguments(edit)) of the
 * arguments sent with it (the runtime refuses a proof that leaves it out,
 * or states it for another edit, as other_arguments; an edit equal to the
 * call's arguments is no edit: leave it out), and for a reject reason: the
 * reason sent with it (the reject request's reason, exactly), which the
 * proof then covers ("weft approval proof v3"; without it the proof
 * verifies, but the audit lists the reject's reason as unsigned); signer is an nkey user key pair (@nats-io/nkeys
 * fromSeed of the approver's .nk file) or anything with getPublicKey() and
 * sign(bytes); expires is cut to whole seconds (the approver refuses a
 * proof valid for longer than its lifetime, 60 s by default). Returns the
 * proof to send as the approve or reject request's proof.
 */
export function signProof(subject, signer, expires) {
  const { run, action, revision, requirement, tool, arguments_sha256, approved_sha256, answer, reason } = subject;
  if (answer !== "approve" && answer !== "reject") throw new TypeError(`proof answer ${JSON.stringify(answer)}: approve or reject`);
  if (approved_sha256 && answer !== "approve") throw new TypeError("proof approved_sha256: a reject approves no edited arguments");
  if (reason && answer !== "reject") throw new TypeError("proof reason: an approve gives no reason");
  const at = new Date(Math.floor(new Date(expires).getTime() / 1000) * 1000).toISOString().replace(".000Z", "Z");
  const p = { key: signer.getPublicKey(), run, action, revision, requirement: { name: requirement.name, version: requirement.version }, tool, arguments_sha256 };
  if (approved_sha256) p.approved_sha256 = approved_sha256;
  p.answer = answer;
  if (reason) p.reason = reason;
  p.expires = at;
  p.signature = Buffer.from(signer.sign(proofDigest(p))).toString("base64url");
  return p;
}
