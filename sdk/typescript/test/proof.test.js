// Signed approval proofs are computed as the Go package proof computes
// them: the digest pinned in docs/protocol/20-events.md (and by
// proof.TestDigestPinned), and a signature that verifies with the key.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createUser, fromPublic } from "@nats-io/nkeys";
import { argumentsSha256, proofDigest, signProof } from "../src/index.js";

const example = {
  key: "UDVEU3DD4KOFECV66VIHWEZOYX4ZKR3WV27L464SIIPOU2IUI3JCYSJF", run: "pay-7", action: "2/call_2_1", revision: 1,
  requirement: { name: "finance", version: 1 }, tool: "send_payment",
  arguments_sha256: argumentsSha256('{"invoice":"INV-7","payee":"ACME Ltd","amount":1200,"currency":"EUR"}'),
  answer: "approve", expires: "2026-11-30T10:01:00Z",
};

test("the proof digest is the one docs/protocol/20-events.md pins", () => {
  assert.equal(example.arguments_sha256, "3690a0c6469cc9c1d850060aa33d647a8591a36479274a8538e4260dbe25c814");
  assert.equal(Date.parse(example.expires) / 1000, 1796032860);
  assert.equal(proofDigest(example).toString("hex"), "6752121d809c9c928a4ee88aebde93bbee3a244d22e340b423899de8cb70ab77");
});

test("signProof signs the digest with the approver's nkey, expiry cut to whole seconds", () => {
  const kp = createUser();
  const { key, signature, ...subject } = example;
  const p = signProof(subject, kp, new Date("2026-11-30T10:01:00.900Z"));
  assert.equal(p.key, kp.getPublicKey());
  assert.equal(p.expires, "2026-11-30T10:01:00Z");
  assert.ok(fromPublic(p.key).verify(proofDigest(p), Buffer.from(p.signature, "base64url")));
  assert.throws(() => signProof({ ...subject, answer: "maybe" }, kp, new Date()), TypeError);
});
