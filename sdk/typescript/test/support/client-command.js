// Sends one command through the TypeScript Client, for the Go tests of its
// retry rules (internal/tsdktest/client_retry_test.go), which answer it
// from a real runner or a stand-in. It prints one JSON line on stdout:
// {"reply": <reply body>} or {"error": {name, code, message, run, kind,
// details}}.
// Usage: node client-command.js <nats url> <method> <request JSON> [options JSON]
// with options {retryWithinMs?, timeoutMs?, signalMs?}: the Client's
// options, and an AbortSignal.timeout(signalMs) as the caller's deadline.
import { connect } from "@nats-io/transport-node";
import { Client } from "../../src/index.js";
import { natsURL } from "./nats-url.js";

const [url, method, body, options] = process.argv.slice(2);
const o = JSON.parse(options || "{}") ?? {};
const nc = await connect(natsURL(url));
const client = new Client(nc, { retryWithinMs: o.retryWithinMs, timeoutMs: o.timeoutMs });
let out;
try {
  out = { reply: await client[method](JSON.parse(body), o.signalMs ? { signal: AbortSignal.timeout(o.signalMs) } : {}) };
} catch (err) {
  out = { error: { name: err?.name, code: err?.code, message: err?.message, run: err?.run, kind: err?.kind, details: err?.details } };
}
process.stdout.write(JSON.stringify(out) + "\n");
await nc.close();
