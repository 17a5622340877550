// Every name index.d.ts declares is exported by src/index.js, and every
// export is declared: the hand-written declarations follow the code.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as sdk from "../src/index.js";
import * as errors from "../src/errors.js";

function declared(file) {
  const text = readFileSync(new URL(`../${file}`, import.meta.url), "utf8");
  return [...text.matchAll(/^export (?:declare )?(?:class|function|const) ([A-Za-z_]\w*)/gm)].map((m) => m[1]);
}

test("index.d.ts and errors.d.ts declare exactly the package's exports", () => {
  const names = [...declared("index.d.ts"), ...declared("errors.d.ts")].sort();
  assert.deepEqual(names, Object.keys(sdk).sort());
  for (const k of Object.keys(errors)) assert.ok(k in sdk, `${k} of errors.js is not exported by index.js`);
});
