// Answers the pending approval request of a run from TypeScript, as a
// Node service would (docs/typescript.md, "Approvals from a Node
// service"), for the end-to-end test internal/tsdktest/e2e_test.go: it
// waits until the approvals inbox lists the run's request, signs a proof
// with the user nkey whose seed is in WEFT_APPROVER_SEED and approves it
// with approver "keys" through the Client. It prints the approve reply
// as JSON on stdout, or exits 1 saying why.
// Usage: WEFT_APPROVER_SEED=SU... node approve.js <nats url> <run>.
import { connect } from "@nats-io/transport-node";
import { fromSeed } from "@nats-io/nkeys";
import { Client, argumentsSha256, signProof } from "../../src/index.js";
import { natsURL } from "./nats-url.js";

const [url, run] = process.argv.slice(2);
const signer = fromSeed(new TextEncoder().encode(process.env.WEFT_APPROVER_SEED ?? ""));
const nc = await connect(natsURL(url));
const client = new Client(nc);
let item;
for (const until = Date.now() + 30000; !item; await new Promise((r) => setTimeout(r, 50))) {
  [item] = await client.approvals({ run });
  if (!item && Date.now() > until) {
    process.stderr.write(`approve.js: no pending approval of ${run} in 30 s\n`);
    process.exit(1);
  }
}
const proof = signProof({
  run: item.run, action: item.action, revision: item.revision, requirement: item.requirement, tool: item.tool,
  arguments_sha256: argumentsSha256(JSON.stringify(item.arguments)), answer: "approve",
}, signer, new Date(Date.now() + 30000));
const reply = await client.approve({ run, action: item.action, revision: item.revision, approver: "keys", proof });
process.stdout.write(JSON.stringify(reply) + "\n");
await nc.close();
