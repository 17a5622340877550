// ask.mjs calls one tool of an MCP server started over stdio, with the
// official TypeScript SDK's client, and prints the answer's text: the
// runnable example of docs/mcp.md.
//
//   node internal/mcptest/node/ask.mjs [--key KEY] TOOL INPUT -- COMMAND [ARGS...]
//
// e.g. node internal/mcptest/node/ask.mjs --key inv-7 payment-desk "pay invoice INV-7" -- weft mcp serve --agent payment-desk
//
// The tool is called with {"input": INPUT, "key": KEY}; the status tool
// (weft_run_status) with {"run": INPUT}. It exits 1 when the answer is an
// error (isError).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const argv = process.argv.slice(2);
const sep = argv.indexOf("--");
if (sep < 0 || sep + 1 >= argv.length) {
  console.error("usage: node ask.mjs [--key KEY] TOOL INPUT -- COMMAND [ARGS...]");
  process.exit(2);
}
const mine = argv.slice(0, sep);
const [command, ...commandArgs] = argv.slice(sep + 1);
let key;
const k = mine.indexOf("--key");
if (k >= 0) {
  key = mine[k + 1];
  mine.splice(k, 2);
}
const [tool, input] = mine;
if (!tool || input === undefined) {
  console.error("usage: node ask.mjs [--key KEY] TOOL INPUT -- COMMAND [ARGS...]");
  process.exit(2);
}
const args = tool === "weft_run_status" ? { run: input } : { input, ...(key ? { key } : {}) };

const transport = new StdioClientTransport({ command, args: commandArgs, env: { ...process.env }, stderr: "inherit" });
const client = new Client({ name: "weft-ask", version: "1.0.0" });
await client.connect(transport);
const res = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: 120000 });
for (const c of res.content) if (c.type === "text") console.log(c.text);
await client.close();
process.exit(res.isError ? 1 : 0);
