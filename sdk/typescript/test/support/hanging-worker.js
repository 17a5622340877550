// The TypeScript worker as a process, for the kill and drain tests and for
// the conformance suite shared with the Go worker
// (internal/tsdktest/conformance.go; its Go twin is tsdktest.GoWorker,
// internal/tsdktest/goworker.go). It serves echo, slow, settle, replay and guarded of
// agent tsdk at the given version; each body says "STARTED <run> <attempt>" on
// stdout, then by its input's mode: "" returns {text}; "hang" runs until
// its signal aborts; "hang-first" does so on attempt 1 and returns {text}
// on later attempts; "finish" returns {text} after 1.5 s whatever happens.
// It prints "EXITED" after a clean stop (SIGTERM, SIGINT).
// Usage: node hanging-worker.js <nats url> [drainGraceMs] [version].
// For tests without a runner (a stand-in answers the reports):
// TSDK_AGENT=<name> serves that agent instead of tsdk, and
// TSDK_NO_ATTEMPT_CHECK=1 takes every attempt as current (there is no run
// in the log to check it against).
import { connect } from "@nats-io/transport-node";
import { Worker, bind, bindSettling, uncertain } from "../../src/index.js";
import { natsURL } from "./nats-url.js";

const [url, grace, version] = process.argv.slice(2);
// A worker process started while its server restarts waits for it (the
// Go worker's RetryOnFailedConnect).
const nc = await connect({ ...natsURL(url), waitOnFirstConnect: true, maxReconnectAttempts: -1 });
const w = new Worker(nc, {
  agent: process.env.TSDK_AGENT || "tsdk", version: version || "1", id: `ts-worker-${process.pid}`, drainGraceMs: Number(grace) || undefined,
  attemptCheck: process.env.TSDK_NO_ATTEMPT_CHECK === "1" ? async () => true : undefined,
});
for (const name of ["echo", "slow", "settle", "replay", "guarded"]) {
  w.handle((name === "settle" ? bindSettling : bind)({ name }, (input, call) => new Promise((resolve, reject) => {
    process.stdout.write(`STARTED ${call.run} ${call.attempt}\n`);
    if (input.mode === "finish") setTimeout(() => resolve({ text: input.text }), 1500);
    else if (input.mode === "hang" || (input.mode === "hang-first" && call.attempt === 1)) call.signal.addEventListener("abort", () => reject(new Error("aborted")), { once: true });
    else resolve({ text: input.text });
  }), (err) => uncertain(String(err))));
}
await w.runUntilSignal();
await nc.close();
process.stdout.write("EXITED\n");
