// Signed approval proofs are computed as the Go package proof computes
// them: the digest pinned in docs/protocol/20-events.md (and by
// proof.TestDigestPinned), and a signature that verifies with the key.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createUser, fromPublic, fromSeed } from "@nats-io/nkeys";
import { argumentsSha256, canonicalArguments, proofDigest, signProof } from "../src/index.js";

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

// The vectors below were computed by the Go package proof (proof.Canonical,
// proof.New with Subject.WithApproved, proof.Sign, proof.Digest) with the
// user nkey of raw seed 32 × 0x07 — the key of the example above and of
// proof_test.go's fixedKey(t, 7) — for the example with an edit whose payee
// holds <, >, & and U+2028 and whose amount is 200.5.
const seed = "SUAAOBYHA4DQOBYHA4DQOBYHA4DQOBYHA4DQOBYHA4DQOBYHA4DQOBZ5FE";
const edit = { invoice: "INV-7", payee: "ACME <Ltd> & Co\u2028", amount: 200.5, currency: "EUR" };
const goCanonical = '{"invoice":"INV-7","payee":"ACME \\u003cLtd\\u003e \\u0026 Co\\u2028","amount":200.5,"currency":"EUR"}';
const goEdited = {
  key: "UDVEU3DD4KOFECV66VIHWEZOYX4ZKR3WV27L464SIIPOU2IUI3JCYSJF", run: "pay-7", action: "2/call_2_1", revision: 1,
  requirement: { name: "finance", version: 1 }, tool: "send_payment",
  arguments_sha256: "3690a0c6469cc9c1d850060aa33d647a8591a36479274a8538e4260dbe25c814",
  approved_sha256: "f2686dafaea4a83888a3cd70690408383384b286b2f1acd936c03230aa5cd43d",
  answer: "approve", expires: "2026-11-30T10:01:00Z",
  signature: "7DoQzsSJ_m_bgXN8Jxqqf22yLuJ0cHwGqUYj_znUiwaprGBoKBa3JfzXRA4tsSDP90tjNmEg7N8_fn06TdpWBw",
};
const goDigest = "4b76e752e2df9bd06396c840e4e6d4bf4e1b9402364af721fa8dd32e3e078aba";
const goAsAsked = "VSqdtH9M0k8SO5Qj3R5bnpWTPHlVHYIFCm3_GNXw8wnzcWCozRWbw6S7ZzQIWNvL80DJioVl9UWO4P2wM-eaDg";

test("TestSemantics4_ApproveNarrower_CanonicalArgumentsAreGos: the edit's canonical bytes and hash are proof.Canonical's", () => {
  assert.equal(canonicalArguments(edit), goCanonical);
  assert.equal(argumentsSha256(canonicalArguments(edit)), goEdited.approved_sha256);
  assert.equal(canonicalArguments({ a: "\u2029>" }), '{"a":"\\u2029\\u003e"}');
  assert.throws(() => canonicalArguments(undefined), TypeError);
});

test("TestSemantics4_ApproveNarrower_ProofV2IsGos: an edited approve is signed as v2, byte for byte the Go proof; without an edit, v1", () => {
  const kp = fromSeed(new TextEncoder().encode(seed));
  const { key, signature, expires, ...subject } = goEdited;
  subject.approved_sha256 = argumentsSha256(canonicalArguments(edit));
  const p = signProof(subject, kp, new Date(expires));
  assert.deepEqual(p, goEdited);
  assert.deepEqual(Object.keys(p), Object.keys(goEdited), "the proof's members in the Go proof's order");
  assert.equal(proofDigest(p).toString("hex"), goDigest);
  const { approved_sha256, ...asAsked } = subject;
  const v1 = signProof(asAsked, kp, new Date(expires));
  assert.equal("approved_sha256" in v1, false);
  assert.equal(proofDigest(v1).toString("hex"), "6752121d809c9c928a4ee88aebde93bbee3a244d22e340b423899de8cb70ab77");
  assert.equal(v1.signature, goAsAsked);
  assert.throws(() => signProof({ ...subject, answer: "reject" }, kp, new Date(expires)), TypeError);
});

// Computed by the Go package proof (proof.Subject.Answering, proof.SignAnswer)
// with the key of seed 32 × 0x07: the example rejected with the reason of
// docs/protocol/20-events.md's v3 example, whose digest it pins.
const goRejected = {
  key: "UDVEU3DD4KOFECV66VIHWEZOYX4ZKR3WV27L464SIIPOU2IUI3JCYSJF", run: "pay-7", action: "2/call_2_1", revision: 1,
  requirement: { name: "finance", version: 1 }, tool: "send_payment",
  arguments_sha256: "3690a0c6469cc9c1d850060aa33d647a8591a36479274a8538e4260dbe25c814",
  answer: "reject", reason: "the invoice is a duplicate", expires: "2026-11-30T10:01:00Z",
  signature: "OZhXkqNMZ9Lb1gjQwnvr6l27-Q707aQAQTEuOwfGYs8ypEvujzaDSbK8BKS_YQxRnN4uZTYxY9aR2FEuPPhMDw",
};

test("TestSecuritySignedReject_ProofV3IsGos: a reject signed with its reason is the v3 proof, byte for byte the Go proof; an approve gives no reason", () => {
  const kp = fromSeed(new TextEncoder().encode(seed));
  const { key, signature, expires, ...subject } = goRejected;
  const p = signProof(subject, kp, new Date(expires));
  assert.deepEqual(p, goRejected);
  assert.deepEqual(Object.keys(p), Object.keys(goRejected), "the proof's members in the Go proof's order");
  assert.equal(proofDigest(p).toString("hex"), "008e38bd6f8b33b060cf2cb93f5807e814f2a6c0ed08b390d376455cabefe8a6");
  assert.throws(() => signProof({ ...subject, answer: "approve" }, kp, new Date(expires)), TypeError);
});
