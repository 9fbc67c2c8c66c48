#!/usr/bin/env python3
"""Drives `aware mcp` with the official Python MCP SDK (PyPI `mcp`) over its stdio client.

Usage: mcp_client.py AWARE_BIN GATEWAY_URL [WATCHER_KEY CHILD_KEY]

The gateway must already hold WATCHER_KEY (default agent:main:py) and CHILD_KEY (default
agent:main:subagent:py-c1, created with parentSessionKey WATCHER_KEY, so the watcher watches
it). The script lists the tools, calls each of the six, posts a human turn on the child over
plain HTTP and expects the notice appended to the next tool result, then checks isError on bad
arguments. It prints `N passed, M failed` and exits non-zero when anything failed.
"""

import asyncio
import json
import sys
import traceback
import urllib.parse
import urllib.request

from mcp import ClientSession, MCPError, types
from mcp.client.stdio import StdioServerParameters, stdio_client

READ_ONLY = {"session_status", "sessions_list", "sessions_history"}
TOOLS = {
    "sessions_send",
    "session_status",
    "sessions_list",
    "sessions_history",
    "sessions_spawn",
    "sessions_unwatch",
}

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def http_post(url, body):
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read() or b"{}")


def texts(result):
    return [c.text for c in result.content if c.type == "text"]


async def run(binary, url, watcher, child):
    params = StdioServerParameters(
        command=binary, args=["mcp", "--url", url, "--session", watcher]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check("initialize: server name is aware", init.server_info.name == "aware", init.server_info)
            check("initialize: tools capability", init.capabilities.tools is not None, init.capabilities)
            # MCP ping: the answer is an empty result; an error answer fails this check by name
            # (and the run goes on) instead of passing a check that could not fail.
            try:
                pong = await session.send_ping()
                ping_ok = isinstance(pong, types.EmptyResult)
            except MCPError as e:
                pong, ping_ok = e, False
            check("ping: answered with an empty result", ping_ok, pong)

            listed = await session.list_tools()
            names = {t.name for t in listed.tools}
            check("tools/list: the six tools", names == TOOLS, sorted(names))
            ro = {t.name for t in listed.tools if t.annotations and t.annotations.read_only_hint}
            check("tools/list: readOnlyHint on the read tools", ro == READ_ONLY, sorted(ro))
            status_tool = next((t for t in listed.tools if t.name == "session_status"), None)
            check(
                "tools/list: session_status schema",
                status_tool is not None
                and status_tool.input_schema.get("properties", {}).get("changesSince")
                == {"type": "integer", "minimum": 0},
                status_tool,
            )

            r = await session.call_tool("session_status", {"sessionKey": child})
            t = texts(r)
            check(
                "session_status: text is statusText",
                not r.is_error
                and r.structured_content
                and t
                and t[0] == r.structured_content.get("statusText")
                and t[0].startswith(f"Session {child} (agent main, kind subagent)"),
                r,
            )

            r = await session.call_tool("sessions_list", {})
            t = texts(r)
            keys = [s["key"] for s in (r.structured_content or {}).get("sessions", [])]
            check(
                "sessions_list: pretty JSON text and both sessions",
                not r.is_error
                and t
                and json.loads(t[0]) == r.structured_content
                and t[0] == json.dumps(r.structured_content, indent=2, ensure_ascii=False)
                and watcher in keys
                and child in keys,
                r,
            )

            r = await session.call_tool("sessions_history", {"sessionKey": child})
            sc = r.structured_content or {}
            check(
                "sessions_history: messages",
                not r.is_error and sc.get("sessionKey") == child and isinstance(sc.get("messages"), list),
                r,
            )

            r = await session.call_tool("sessions_spawn", {"task": "count the files"})
            sc = r.structured_content or {}
            check(
                "sessions_spawn: accepted",
                not r.is_error
                and sc.get("status") == "accepted"
                and str(sc.get("childSessionKey", "")).startswith("agent:main:subagent:"),
                r,
            )

            r = await session.call_tool(
                "sessions_send",
                {"sessionKey": child, "message": "status please", "timeoutSeconds": 0, "watch": True},
            )
            sc = r.structured_content or {}
            check(
                "sessions_send: accepted and watched",
                not r.is_error and sc.get("status") == "accepted" and sc.get("watched") is True,
                r,
            )

            # A human steps in on the watched child: the next tool result carries the notice.
            status, body = http_post(
                f"{url}/v1/sessions/{urllib.parse.quote(child, safe='')}/turns",
                {"role": "user", "text": "hello", "channel": "telegram"},
            )
            check("human turn on the child recorded", status == 201 and "event" in body, body)

            r = await session.call_tool("session_status", {"sessionKey": child, "changesSince": 0})
            t = texts(r)
            check(
                "notice appended after the human turn",
                not r.is_error
                and len(t) == 2
                and t[1].startswith("System: [")
                and f'Session "{child}" changed (other actor).' in t[1],
                t,
            )

            r = await session.call_tool("sessions_unwatch", {"sessionKey": child})
            sc = r.structured_content or {}
            check(
                "sessions_unwatch: unwatched, notice consumed",
                not r.is_error and sc.get("unwatched") is True and len(texts(r)) == 1,
                r,
            )

            r = await session.call_tool("session_status", {"changesSince": -1})
            check(
                "bad changesSince: isError",
                r.is_error
                and texts(r) == ["invalid_argument: changesSince must be a non-negative integer"],
                r,
            )
            r = await session.call_tool("sessions_history", {})
            t = texts(r)
            check(
                "missing sessionKey: isError",
                r.is_error and len(t) == 1 and t[0].startswith("invalid_argument: "),
                r,
            )


def main():
    if len(sys.argv) not in (3, 5):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    binary, url = sys.argv[1], sys.argv[2].rstrip("/")
    watcher, child = (sys.argv[3], sys.argv[4]) if len(sys.argv) == 5 else (
        "agent:main:py",
        "agent:main:subagent:py-c1",
    )
    global failed
    try:
        asyncio.run(run(binary, url, watcher, child))
    except BaseException:  # noqa: BLE001 - any crash is a failed check
        traceback.print_exc()
        failed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
