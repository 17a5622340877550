// An MCP client written with the official TypeScript SDK, calling
// `weft mcp serve` over stdio: the Go test cmd/weft TestNodeClientCallsWeftMCPServe
// runs it. It exits non-zero, saying why, on the first surprise.
//
// Environment: WEFT_MCP_COMMAND (JSON array: the command that runs
// `weft mcp serve ...`), WEFT_STARTED_FILE (appears when the slow tool's
// body started), WEFT_RELEASE_FILE (this script creates it to let the body
// finish).
import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = JSON.parse(process.env.WEFT_MCP_COMMAND);
const KEY_META = "run.weft/idempotency-key";

function log(step, value) {
  console.log(JSON.stringify({ step, ...value }));
}

async function open(wait) {
  const transport = new StdioClientTransport({ command, args: [...args, "--wait", wait], env: { ...process.env }, stderr: "inherit" });
  const client = new Client({ name: "weft-node-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

async function call(client, name, args, meta) {
  const params = { name, arguments: args };
  if (meta) params._meta = meta;
  const res = await client.callTool(params, undefined, { timeout: 120000 });
  const answer = res.structuredContent;
  assert.ok(answer && typeof answer.status === "string", `no structured answer: ${JSON.stringify(res)}`);
  if (answer.run) assert.equal(res._meta?.["run.weft/run"], answer.run, "the run id travels in _meta");
  return { res, answer, text: res.content.map((c) => c.text).join("\n") };
}

async function waitFor(file, what) {
  for (let i = 0; i < 1200; i++) {
    if (existsSync(file)) return;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

// The first server waits long, so that its answer cannot come before the kill.
const first = await open("120s");
const { tools } = await first.client.listTools();
const names = tools.map((t) => t.name).sort();
assert.deepEqual(names, ["notes", "weft_run_status"]);
assert.deepEqual(tools.find((t) => t.name === "notes").inputSchema.required, ["input"]);
log("list", { tools: names });

// A keyed call whose run is still working when the server is killed.
const pending = first.client.callTool({ name: "notes", arguments: { input: "slow note", key: "k-node" } }, undefined, { timeout: 120000 });
pending.catch(() => {}); // judged below
await waitFor(process.env.WEFT_STARTED_FILE, "the slow body to start");
const pid = first.transport.pid;
assert.ok(pid > 0, "the server's pid is known");
process.kill(pid, "SIGKILL");
let lost;
try {
  await pending;
  throw new Error("the call on the killed server returned an answer");
} catch (err) {
  lost = String(err?.message ?? err);
}
log("killed", { pid, error: lost });
await first.client.close().catch(() => {});

// A new server process (waiting 1 s per call), the same key: the same run,
// still working.
const second = await open("1s");
const working = await call(second.client, "notes", { input: "slow note", key: "k-node" });
assert.equal(working.answer.status, "working", working.text);
assert.equal(working.res.isError ?? false, false);
assert.match(working.text, /Still working \(run mcp-[0-9a-f]{64}\)/);
log("retry-working", { run: working.answer.run, status: working.answer.status });

// Let the body finish; asking again (key in _meta this time) gives the
// answer once the run has it (still working until then).
writeFileSync(process.env.WEFT_RELEASE_FILE, "go\n");
let done;
for (let i = 0; ; i++) {
  done = await call(second.client, "notes", { input: "slow note" }, { [KEY_META]: "k-node" });
  if (done.answer.status !== "working" || i === 60) break;
}
assert.equal(done.answer.status, "completed", done.text);
assert.equal(done.answer.run, working.answer.run, "the retry reopened the same run");
assert.match(done.text, /^Completed \(run /);
log("retry-completed", { run: done.answer.run, answer: done.answer.answer });

// The same key with another input is refused, and starts nothing.
const reused = await call(second.client, "notes", { input: "another note", key: "k-node" });
assert.equal(reused.res.isError, true);
assert.equal(reused.answer.status, "refused");
assert.equal(reused.answer.error.code, "key_reused");
log("key-reused", { code: reused.answer.error.code });

// Without a key, each call is a fresh run.
const a = await call(second.client, "notes", { input: "hello" });
const b = await call(second.client, "notes", { input: "hello" });
assert.notEqual(a.answer.run, b.answer.run);
assert.notEqual(a.answer.run, done.answer.run);
log("unkeyed", { runs: [a.answer.run, b.answer.run] });

// The status tool answers for a run id (asked again while still working).
let status;
for (let i = 0; ; i++) {
  status = await call(second.client, "weft_run_status", { run: a.answer.run });
  if (status.answer.status !== "working" || i === 60) break;
}
assert.equal(status.answer.status, "completed", status.text);
assert.equal(status.answer.answer, "echo: hello");
log("status", { run: status.answer.run, status: status.answer.status });

await second.client.close();
log("done", { ok: true });
