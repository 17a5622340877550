// A worker process for the kill and drain tests: serves echo and replay of
// agent tsdk@1 with bodies that say "STARTED <run> <attempt>" on stdout,
// then run until their signal aborts — or, for input mode "finish",
// return after finishMs (default 1500) whatever happens. Usage:
// node hanging-worker.js <nats url> [drainGraceMs].
import { connect } from "@nats-io/transport-node";
import { Worker, bind, uncertain } from "../../src/index.js";

const nc = await connect({ servers: process.argv[2] });
const grace = Number(process.argv[3]) || undefined;
const w = new Worker(nc, { agent: "tsdk", version: "1", id: `hanging-${process.pid}`, drainGraceMs: grace });
for (const name of ["echo", "replay"]) {
  w.handle(bind({ name }, (input, call) => new Promise((resolve, reject) => {
    process.stdout.write(`STARTED ${call.run} ${call.attempt}\n`);
    if (input.mode === "finish") setTimeout(() => resolve({ text: input.text }), 1500);
    else call.signal.addEventListener("abort", () => reject(new Error("aborted")), { once: true });
  }), (err) => uncertain(String(err))));
}
await w.runUntilSignal();
await nc.close();
process.stdout.write("EXITED\n");
