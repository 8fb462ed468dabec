// One published TypeScript MCP client against a running AmpUp Memory, run by
// tools/client_matrix.py with the client installed in SDKDIR (its own npm folder).
// Environment: SDKDIR, MODE (http | sse), URL (the /mcp endpoint), HEADERS (JSON).
// Prints one JSON object: what the client saw at each step, ok and, when it failed, error.
import { existsSync } from "node:fs";

const BASE = `${process.env.SDKDIR}/node_modules/@modelcontextprotocol/sdk/dist`;
const SDK = existsSync(`${BASE}/esm`) ? `${BASE}/esm` : BASE;
const headers = JSON.parse(process.env.HEADERS || "{}");
const agent = headers["X-AMP-Agent-ID"] || "agent_matrix";
const out = { kind: `ts-${process.env.MODE}` };
const calls = [
  ["amp_write", "amp_remember", { content: "The matrix client likes green tea", owner_id: agent,
    readable_by: ["agent_matrix_*"] }],
  ["amp_read", "amp_recall", { query: "green tea", owner_id: agent, limit: 3 }],
  ["ampup_write", "remember_memory", { scope: "acme/matrix",
    text: "The client matrix runs on Sundays.", acl: ["*"] }],
  ["ampup_read", "search_memory", { scope: "acme/matrix", query: "client matrix" }],
  ["tool_error", "amp_get", { memory_id: "mem_01HZZZZZZZZZZZZZZZZZZZZZZZ" }],
  ["bad_argument", "amp_recall", { query: "x", owner_id: agent, limit: 1000 }],
];
const short = (v, n = 90) => String(v).split(/\s+/).join(" ").slice(0, n);
const start = Date.now();
const finish = () => {
  out.seconds = Math.round((Date.now() - start) / 100) / 10;
  console.log(JSON.stringify(out));
  process.exit(0);
};
setTimeout(() => { out.ok = false; out.error = "TimeoutError"; finish(); },
  Number(process.env.TIMEOUT || 90) * 1000);
try {
  const { Client } = await import(`${SDK}/client/index.js`);
  const url = new URL(process.env.URL);
  let transport;
  if (process.env.MODE === "sse") {
    const { SSEClientTransport } = await import(`${SDK}/client/sse.js`);
    transport = new SSEClientTransport(url, { requestInit: { headers }, eventSourceInit: {
      fetch: (u, init) => fetch(u, { ...init, headers: { ...(init?.headers || {}), ...headers } }),
    } });
  } else {
    const { StreamableHTTPClientTransport } = await import(`${SDK}/client/streamableHttp.js`);
    transport = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  }
  const client = new Client({ name: "ampup-client-matrix", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  out.protocol = transport.protocolVersion;
  out.tools = (await client.listTools()).tools.length;
  for (const [step, name, args] of calls) {
    try {
      const r = await client.callTool({ name, arguments: args });
      out[step] = [r.isError ?? false, short(r.content?.[0]?.text ?? "")];
    } catch (e) { out[step] = [true, short(e)]; }
  }
  await client.close();
  out.ok = true;
} catch (e) { out.ok = false; out.error = short(e, 300); }
finish();
