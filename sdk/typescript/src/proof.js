// Signed approval proofs (docs/protocol/20-events.md, "Signed approval
// proofs"; docs/security.md): what the Go package proof computes, for a
// Node service that answers approvals with an approver of signed proofs
// (approvers.Signed).
import { createHash } from "node:crypto";

const DOMAIN = "weft approval proof v1";

/**
 * The lowercase hex SHA-256 of a call's canonical arguments bytes: take
 * them as the run view or the approvals inbox carries them (a string of
 * JSON, or the bytes), never re-serialized.
 * @param {string|Uint8Array} canonical
 */
export function argumentsSha256(canonical) {
  return createHash("sha256").update(canonical).digest("hex");
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
 * as Unix seconds, key).
 * @returns {Buffer}
 */
export function proofDigest(p) {
  const expires = Date.parse(p.expires);
  if (!Number.isFinite(expires)) throw new TypeError(`proof expires ${JSON.stringify(p.expires)} is not RFC 3339`);
  const h = createHash("sha256");
  h.update(DOMAIN);
  for (const f of [p.answer, p.run, p.action, p.revision, p.requirement.name, p.requirement.version, p.tool,
    p.arguments_sha256, Math.floor(expires / 1000), p.key]) {
    field(h, f);
  }
  return h.digest();
}

/**
 * Signs the answer to a pending approval request: subject is {run, action,
 * revision, requirement: {name, version}, tool, arguments_sha256, answer
 * ("approve" or "reject")}; signer is an nkey user key pair (@nats-io/nkeys
 * fromSeed of the approver's .nk file) or anything with getPublicKey() and
 * sign(bytes); expires is cut to whole seconds (the approver refuses a
 * proof valid for longer than its lifetime, 60 s by default). Returns the
 * proof to send as the approve or reject request's proof.
 */
export function signProof(subject, signer, expires) {
  const { run, action, revision, requirement, tool, arguments_sha256, answer } = subject;
  if (answer !== "approve" && answer !== "reject") throw new TypeError(`proof answer ${JSON.stringify(answer)}: approve or reject`);
  const at = new Date(Math.floor(new Date(expires).getTime() / 1000) * 1000).toISOString().replace(".000Z", "Z");
  const p = { key: signer.getPublicKey(), run, action, revision, requirement: { name: requirement.name, version: requirement.version }, tool, arguments_sha256, answer, expires: at };
  p.signature = Buffer.from(signer.sign(proofDigest(p))).toString("base64url");
  return p;
}
