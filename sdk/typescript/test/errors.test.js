// The SDK's error classes agree with docs/protocol.md's error table, as the
// Go doc-check tests keep the Go codes honest (errortable_test.go).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { CODES, ERROR_CLASSES, WeftError, errorOf, RunnerBusyError } from "../src/errors.js";

function table() {
  const doc = readFileSync(fileURLToPath(new URL("../../../docs/protocol.md", import.meta.url)), "utf8");
  const start = doc.indexOf("| code | number | meaning |");
  assert.ok(start >= 0, "docs/protocol.md has no error table");
  const rows = {};
  for (const line of doc.slice(start).split("\n").slice(2)) {
    if (!line.startsWith("|")) break;
    const m = /^\| `([a-z_]+)` \| (\d+) \|/.exec(line);
    assert.ok(m, `a row of the error table does not parse: ${line.slice(0, 60)}`);
    rows[m[1]] = Number(m[2]);
  }
  return rows;
}

test("TestErrorTableMatchesCode: every code of docs/protocol.md has its class, with its number, and no other", () => {
  const rows = table();
  assert.deepEqual({ ...CODES }, rows);
  assert.deepEqual(Object.keys(ERROR_CLASSES).sort(), Object.keys(rows).sort());
  for (const [code, number] of Object.entries(rows)) {
    const e = new ERROR_CLASSES[code]("m", { reason: "r" });
    assert.ok(e instanceof WeftError);
    assert.equal(e.code, code);
    assert.equal(e.status, number);
    assert.equal(e.reason, "r");
    assert.equal(e.name, ERROR_CLASSES[code].name);
  }
});

test("errorOf gives the class of a reply's code and keeps its other members", () => {
  const e = errorOf({ code: "already_started", message: "run r exists", same_input: true });
  assert.equal(e.code, "already_started");
  assert.equal(e.details.same_input, true);
  assert.ok(errorOf({ code: "runner_busy" }) instanceof RunnerBusyError);
  const unknown = errorOf({ code: "from_the_future", message: "x" });
  assert.ok(unknown instanceof WeftError);
  assert.equal(unknown.code, "from_the_future");
});
