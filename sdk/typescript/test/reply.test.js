// The one reading of a reply (docs/protocol.md, "Error codes"), as the Go
// api.ReplyError reads it: the TypeScript request against replies a real
// nats-server carries (internal/tsdktest/cmd/tsdkharness's).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { headers } from "@nats-io/transport-node";
import { AlreadyStartedError, InternalError, UnavailableError, WeftError } from "../src/errors.js";
import { request } from "../src/protocol.js";
import { settleError } from "../src/worker.js";
import { startHarness } from "./support/harness.js";

let h;
before(async () => { h = await startHarness(); });
after(async () => { await h?.stop(); });

// Serves one reply on a subject of its own: body data and, when st is
// set, the micro error headers Nats-Service-Error (code) and
// Nats-Service-Error-Code (st).
let served = 0;
async function answered(data, code, st) {
  const subject = `tsdktest.reply.${served++}`;
  const sub = h.nc.subscribe(subject, {
    max: 1,
    callback: (_err, m) => {
      let hd;
      if (st !== undefined) {
        hd = headers();
        hd.set("Nats-Service-Error", code);
        hd.set("Nats-Service-Error-Code", st);
      }
      m.respond(data, hd ? { headers: hd } : undefined);
    },
  });
  await h.nc.flush();
  try {
    return await request(h.nc, subject, { schema: 1 }, 10000);
  } finally {
    sub.unsubscribe();
  }
}

// The replies the Go api tests read internal (api/replyerror_test.go).
const unreadable = [
  [`{"error":"x"}`],
  [`{"schema":1,"error":"refused","run":"r"}`],
  [`{"error":{"code":503,"err_code":10077,"description":"stream is offline"}}`],
  [`[1]`],
  [`{"schema":"1"}`],
  [`not json`],
  [`{"schema":1,"error":{"message":"no code"}}`],
  [`oops`, "some text", "500"],
  [`{"schema":1}`, "some text", "500"],
  [`not json`, "unavailable", "503"],
  [``, "", "500"],
  [``],
];

test("TestReplyErrorReadsTheOneEnvelope: the body's error, the header's protocol code for an error without a body, or the success", async () => {
  await assert.rejects(answered(`{"schema":1,"error":{"code":"already_started","message":"run pay-7 exists","same_input":true}}`, "already_started", "409"),
    (e) => e instanceof AlreadyStartedError && e.message === "run pay-7 exists");
  for (const data of [``, `{}`, `{"schema":1}`, `{"schema":1,"error":null}`]) {
    await assert.rejects(answered(data, "unavailable", "503"), (e) => e instanceof UnavailableError, `header unavailable, body ${JSON.stringify(data)}`);
  }
  assert.deepEqual(await answered(`{"schema":1,"run":"pay-7","status":"running"}`), { schema: 1, run: "pay-7", status: "running" });
  assert.deepEqual(await answered(`{"schema":1,"error":null}`), { schema: 1, error: null });
  assert.equal(await answered(`null`), null);
});

test("TestReplyErrorReadsAnUnreadableReplyInternal: a reply that is not the error envelope is internal, so a report is sent again and a settlement is unconfirmed", async () => {
  for (const [data, code, st] of unreadable) {
    const what = `body ${JSON.stringify(data)}, header ${JSON.stringify([code, st])}`;
    let got;
    try {
      got = await answered(data, code, st);
    } catch (e) {
      got = e;
    }
    assert.ok(got instanceof InternalError && /unreadable reply/.test(got.message) && got.reason === "unreadable_reply", `${what}: ${got}, want InternalError(unreadable_reply)`);
    const s = settleError(got);
    assert.ok(s instanceof WeftError && s.code === "settle_unconfirmed" && s.reason === "transport", `${what}: settlement ${s}, want settle_unconfirmed(transport): the outcome is unknown, as the Go worker's`);
  }
});
