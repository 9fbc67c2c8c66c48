#!/usr/bin/env node
// Drives `aware mcp` with the official TypeScript MCP SDK (@modelcontextprotocol/sdk) over its
// stdio client transport.
//
// Usage: node mcp_client.mjs AWARE_BIN GATEWAY_URL [WATCHER_KEY CHILD_KEY]
//
// The gateway must already hold WATCHER_KEY (default agent:main:ts) and CHILD_KEY (default
// agent:main:subagent:ts-c1, created with parentSessionKey WATCHER_KEY, so the watcher watches
// it). The script lists the tools, calls each of the six, posts a human turn on the child over
// plain HTTP and expects the notice appended to the next tool result, then checks isError on bad
// arguments. It prints `N passed, M failed` and exits non-zero when anything failed.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const READ_ONLY = ["session_status", "sessions_history", "sessions_list"];
const TOOLS = [
  "session_status",
  "sessions_history",
  "sessions_list",
  "sessions_send",
  "sessions_spawn",
  "sessions_unwatch",
];

let passed = 0;
let failed = 0;

function check(name, ok, detail) {
  if (ok) {
    passed += 1;
    console.log(`ok   ${name}`);
  } else {
    failed += 1;
    console.log(`FAIL ${name}: ${JSON.stringify(detail)}`);
  }
}

const texts = (r) => (r.content ?? []).filter((c) => c.type === "text").map((c) => c.text);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

async function run(binary, url, watcher, child) {
  const transport = new StdioClientTransport({
    command: binary,
    args: ["mcp", "--url", url, "--session", watcher],
    stderr: "inherit",
  });
  const client = new Client({ name: "aware-ts-check", version: "0.0.0" });
  await client.connect(transport);
  try {
    const info = client.getServerVersion();
    check("initialize: server name is aware", info?.name === "aware", info);
    check("initialize: tools capability", client.getServerCapabilities()?.tools !== undefined, client.getServerCapabilities());
    const pong = await client.ping();
    check("ping", pong !== undefined, pong);

    const listed = await client.listTools();
    const names = listed.tools.map((t) => t.name).sort();
    check("tools/list: the six tools", same(names, TOOLS), names);
    const ro = listed.tools.filter((t) => t.annotations?.readOnlyHint === true).map((t) => t.name).sort();
    check("tools/list: readOnlyHint on the read tools", same(ro, READ_ONLY), ro);
    const statusTool = listed.tools.find((t) => t.name === "session_status");
    check(
      "tools/list: session_status schema",
      same(statusTool?.inputSchema?.properties?.changesSince, { type: "integer", minimum: 0 }),
      statusTool,
    );

    let r = await client.callTool({ name: "session_status", arguments: { sessionKey: child } });
    let t = texts(r);
    check(
      "session_status: text is statusText",
      !r.isError &&
        t.length >= 1 &&
        t[0] === r.structuredContent?.statusText &&
        t[0].startsWith(`Session ${child} (agent main, kind subagent)`),
      r,
    );

    r = await client.callTool({ name: "sessions_list", arguments: {} });
    t = texts(r);
    const keys = (r.structuredContent?.sessions ?? []).map((s) => s.key);
    check(
      "sessions_list: pretty JSON text and both sessions",
      !r.isError &&
        t[0] === JSON.stringify(r.structuredContent, null, 2) &&
        keys.includes(watcher) &&
        keys.includes(child),
      r,
    );

    r = await client.callTool({ name: "sessions_history", arguments: { sessionKey: child } });
    check(
      "sessions_history: messages",
      !r.isError && r.structuredContent?.sessionKey === child && Array.isArray(r.structuredContent?.messages),
      r,
    );

    r = await client.callTool({ name: "sessions_spawn", arguments: { task: "count the files" } });
    check(
      "sessions_spawn: accepted",
      !r.isError &&
        r.structuredContent?.status === "accepted" &&
        String(r.structuredContent?.childSessionKey).startsWith("agent:main:subagent:"),
      r,
    );

    r = await client.callTool({
      name: "sessions_send",
      arguments: { sessionKey: child, message: "status please", timeoutSeconds: 0, watch: true },
    });
    check(
      "sessions_send: accepted and watched",
      !r.isError && r.structuredContent?.status === "accepted" && r.structuredContent?.watched === true,
      r,
    );

    // A human steps in on the watched child: the next tool result carries the notice.
    const resp = await fetch(`${url}/v1/sessions/${encodeURIComponent(child)}/turns`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ role: "user", text: "hello", channel: "telegram" }),
    });
    const turn = await resp.json();
    check("human turn on the child recorded", resp.status === 201 && turn.event !== undefined, turn);

    r = await client.callTool({ name: "session_status", arguments: { sessionKey: child, changesSince: 0 } });
    t = texts(r);
    check(
      "notice appended after the human turn",
      !r.isError &&
        t.length === 2 &&
        t[1].startsWith("System: [") &&
        t[1].includes(`Session "${child}" changed (other actor).`),
      t,
    );

    r = await client.callTool({ name: "sessions_unwatch", arguments: { sessionKey: child } });
    check(
      "sessions_unwatch: unwatched, notice consumed",
      !r.isError && r.structuredContent?.unwatched === true && texts(r).length === 1,
      r,
    );

    r = await client.callTool({ name: "session_status", arguments: { changesSince: -1 } });
    check(
      "bad changesSince: isError",
      r.isError === true && same(texts(r), ["invalid_argument: changesSince must be a non-negative integer"]),
      r,
    );
    r = await client.callTool({ name: "sessions_history", arguments: {} });
    t = texts(r);
    check(
      "missing sessionKey: isError",
      r.isError === true && t.length === 1 && t[0].startsWith("invalid_argument: "),
      r,
    );
  } finally {
    await client.close();
  }
}

const argv = process.argv.slice(2);
if (argv.length !== 2 && argv.length !== 4) {
  console.error("usage: node mcp_client.mjs AWARE_BIN GATEWAY_URL [WATCHER_KEY CHILD_KEY]");
  process.exit(2);
}
const [binary, rawUrl] = argv;
const url = rawUrl.replace(/\/+$/, "");
const [watcher, child] = argv.length === 4 ? argv.slice(2) : ["agent:main:ts", "agent:main:subagent:ts-c1"];
try {
  await run(binary, url, watcher, child);
} catch (e) {
  console.error(e);
  failed += 1;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
