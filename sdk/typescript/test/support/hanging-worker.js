// A worker process for the kill tests: serves echo and replay of agent
// tsdk@1 with bodies that say "STARTED <run> <attempt>" on stdout and then
// run until their signal aborts. Usage: node hanging-worker.js <nats url>.
import { connect } from "@nats-io/transport-node";
import { Worker, bind, uncertain } from "../../src/index.js";

const nc = await connect({ servers: process.argv[2] });
const w = new Worker(nc, { agent: "tsdk", version: "1", id: `hanging-${process.pid}` });
for (const name of ["echo", "replay"]) {
  w.handle(bind({ name }, (input, call) => new Promise((resolve, reject) => {
    process.stdout.write(`STARTED ${call.run} ${call.attempt}\n`);
    call.signal.addEventListener("abort", () => reject(new Error("aborted")), { once: true });
  }), (err) => uncertain(String(err))));
}
await w.runUntilSignal();
await nc.close();
