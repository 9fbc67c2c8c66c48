#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/<target>/ (run from anywhere).

Every target has a few valid inputs and a few near-valid ones (one field or byte wrong).

Seeds are named by the SHA-1 of their content, as libFuzzer names its own inputs. The
claude_classifier seeds are lines of the real transcripts vendored in
crates/aware-upstream/tests/fixtures/claude-code (MIT-licensed, see SOURCES.md there): every user and queue-operation row of at most 4 KiB, a few
rows of each other type, a few short multi-row windows, and hand-written rows for the rules the
fixtures do not show (images, IDE context, rejected-tool feedback, queue rows, odd timestamps).
"""
import glob, hashlib, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENDORED = os.path.join(HERE, "..", "crates", "aware-upstream", "tests", "fixtures")
FIXTURES = os.path.join(VENDORED, "claude-code")


def write(target, items):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    seen = set()
    for item in items:
        b = item.encode() if isinstance(item, str) else item
        h = hashlib.sha1(b).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        with open(os.path.join(d, h), "wb") as f:
            f.write(b)
    print(f"{target}: {len(seen)} seeds, {sum(len(x.encode() if isinstance(x, str) else x) for x in items)} bytes")


keys = [
    "main", "global", "  global  ", "agent:main:main", "Agent:MAIN:Work", "AGENT:Ops:x",
    "agent:main:subagent:c1", "agent:main:SubAgent:z", "agent:main:claude:" + "ab" * 32,
    "agent:a_b-c9:x:y:z", "agent:0:0", "agent:main: spaced rest ", "agentx:y", "agent:main",
    "agent::x", "AGENT:main:", "agent:bad/id:x", "agent:-x:y", "agent:" + "a" * 64 + ":r",
    "agent:" + "a" * 65 + ":r", "agent:main:" + "a" * 501, "agent:main:a\nb", "tab\there",
    "\u3000agent:main:全角\u3000", "agent:main:日本語", "agent:main:\ufeffbom", "\u212a", "   ",
    "", "agent:main:café", "agent:İ:x", "agent:main:\u0085x",
]
write("session_key", keys)

def enc(s):
    return "session-state:" + s.encode().hex()

ctx = [enc(k) for k in ["agent:main:main", "ab", "global", "agent:main:日本語", "\ufeffx"]]
ctx += [
    "session-state:", "session-state:6", "session-state:616", "session-state:6G", "session-state:ABCD",
    "session-state:c328", "session-state:ff", "session-state:00", "Session-State:6162",
    " session-state:6162", "session-state:6162 ", "session-created:6162", "6162",
    "agent:main:main", "deploy finished\0build:42", "deploy finished\0session-state:6162",
    "deploy finished\0 SESSION-STATE:6162 ", "\0ctx", "text\0", "x\0" + "k" * 257,
]
write("context_key", ctx)

rows = []
other = {}
windows = []
for path in sorted(glob.glob(os.path.join(FIXTURES, "*.jsonl"))):
    lines = open(path, "rb").read().split(b"\n")
    small = []
    for line in lines:
        if not line.strip() or len(line) > 4096:
            small.append(None)
            continue
        small.append(line)
        try:
            r = json.loads(line)
        except Exception:
            continue
        t = r.get("type")
        if t in ("user", "queue-operation"):
            rows.append(line + b"\n")
        else:
            sub = r.get("subtype") or (r.get("data") or {}).get("type") if isinstance(r.get("data"), dict) else r.get("subtype")
            k = (t, sub)
            if len(other.setdefault(k, [])) < 2:
                other[k].append(line + b"\n")
    # Two short windows per file: runs of consecutive small rows, the last one cut mid-row.
    runs, i = [], 0
    while i < len(small) and len(runs) < 2:
        if all(x is not None and len(x) < 1500 for x in small[i:i + 4]) and i + 4 <= len(small):
            runs.append(b"\n".join(small[i:i + 4]) + b"\n" + small[i + 4][:40] if i + 4 < len(small) and small[i + 4] else b"\n".join(small[i:i + 4]) + b"\n")
            i += 20
        else:
            i += 1
    windows += runs
for v in other.values():
    rows += v

ts = "2026-01-01T00:00:01.000Z"
def row(content, **extra):
    r = {"type": "user", "message": {"role": "user", "content": content}, "timestamp": ts}
    r.update(extra)
    return json.dumps(r) + "\n"

synthetic = [
    row("hello"), row("  run   the\n tests "), row("fix it"),
    row([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]),
    row([{"type": "text", "text": "<ide_opened_file>The user opened a.rs</ide_opened_file>"}, {"type": "text", "text": "why does this fail?"}]),
    row([{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "The user doesn't want to proceed with this tool use. The tool use was rejected. To tell you how to proceed, the user said:\nuse the other file"}]),
    row([{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}, {"type": "text", "text": "also check the logs"}]),
    row("(no content)"), row("<system-reminder>x</system-reminder>"), row("hi", isMeta=True),
    row("hi", isSidechain=True), row("hi", agentId="a1"), row("hi", isCompactSummary=True),
    row("hi", timestamp="2026-01-01T00:00:01+02:00"), row("hi", timestamp="2026-02-30T00:00:00Z"),
    row("hi", timestamp="2024-02-29T23:59:60.123456789z"), row("hi", timestamp="9999-12-31T23:59:59.999-23:59"),
    row("hi", timestamp=12), row("hi", origin={"kind": "human"}),
    json.dumps({"type": "queue-operation", "operation": "enqueue", "content": "fix it", "timestamp": ts}) + "\n",
    json.dumps({"type": "queue-operation", "operation": "enqueue", "content": "next task", "timestamp": ts}) + "\n",
    json.dumps({"type": "queue-operation", "operation": "remove", "timestamp": ts}) + "\n",
    json.dumps({"type": "queue-operation", "operation": "popAll", "content": "x"}) + "\n",
    json.dumps({"type": "userMessage", "content": "from a node", "timestamp": ts, "flags": {"meta": False}, "originKind": "human"}) + "\n",
    json.dumps({"type": "queueOperation", "operation": "enqueue", "content": "queued on a node"}) + "\n",
    row("fix it") + json.dumps({"type": "queue-operation", "operation": "enqueue", "content": "later"}) + "\n" + row("later") + "\r\n\n  \n{not json\n",
    b"\xff\xfe\n" + row("after bad bytes").encode() + b'{"type":"us',
    "2026-01-01T00:00:12.000Z", "no newline at all",
]
write("claude_classifier", rows + windows + synthetic)

# codex_classifier: lines of the real rollouts vendored in
# crates/aware-upstream/tests/fixtures/codex (MIT / Apache-2.0, see SOURCES.md there): every prompt event and user-role item of at most 4 KiB, two rows of each other
# shape, one short window per file, and hand-written rows for the shapes no fixture holds.
CODEX = os.path.join(VENDORED, "codex")
crow, cother, cwin = [], {}, []
for path in sorted(glob.glob(os.path.join(CODEX, "*.jsonl"))):
    lines = [l for l in open(path, "rb").read().split(b"\n") if l.strip()]
    for line in lines:
        if len(line) > 4096:
            continue
        r = json.loads(line)
        p = r.get("payload") if isinstance(r.get("payload"), dict) else {}
        k = (r.get("type"), p.get("type"), p.get("role"))
        if k in (("event_msg", "user_message", None), ("response_item", "message", "user")):
            crow.append(line + b"\n")
        elif len(cother.setdefault(k, [])) < 2:
            cother[k].append(line + b"\n")
    short = [l for l in lines if len(l) < 1500][:4]
    cwin.append(b"\n".join(short) + b"\n" + (short[0][:40] if short else b""))
for v in cother.values():
    crow += v
def ev(payload, ts=ts):
    return json.dumps({"timestamp": ts, "type": "event_msg", "payload": payload}) + "\n"
csynthetic = [
    ev({"type": "user_message", "message": "hello", "kind": "plain"}),
    ev({"type": "user_message", "message": "x", "kind": "environment_context"}),
    ev({"type": "user_message", "message": "", "images": ["data:image/png;base64,iVBORw0KGgo="]}),
    ev({"type": "user_message", "message": "# Context from my IDE setup:\n\n## My request for Codex:\nwhy?"}),
    ev({"type": "user_message", "message": "<turn_aborted>\ninterrupted\n</turn_aborted>"}),
    ev({"type": "item_completed", "item": {"type": "UserMessage", "id": "i", "content": [{"type": "text", "text": "paginated"}, {"type": "local_image", "path": "/a.png"}]}}),
    json.dumps({"id": "0198c0de-0000-7000-8000-000000000001", "timestamp": ts, "instructions": None}) + "\n",
    '{"record_type":"state"}\n',
    json.dumps({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "legacy prompt"}]}) + "\n",
    json.dumps({"type": "session_meta", "payload": {"id": "s", "source": {"subagent": "review"}}}) + "\n",
    json.dumps({"type": "compacted", "payload": {"message": "summary", "replacement_history": []}}) + "\n",
    "no newline at all",
]
write("codex_classifier", crow + cwin + csynthetic)

# tool_bodies: the first byte picks the route (see the target), the rest is the body. Keys are
# spelt `agent:main:…`, which the target turns into the input's own agent.
S, W = "agent:main:main", "agent:main:worker"
status = [{}, {"sessionKey": W}, {"sessionKey": W, "changesSince": 0}, {"sessionKey": W, "changesSince": 0, "limit": 5},
          {"limit": 5}, {"sessionKey": "worker", "agentId": "main"}, {"sessionKey": "agent:ops:x"},
          {"sessionKey": W, "changesSince": -1}, {"sessionKey": W, "changesSince": 1.5}, {"sessionKey": W, "extra": 1}]
send = [{"sessionKey": W, "message": "please rebase", "timeoutSeconds": 0},
        {"label": "w1", "message": "hi", "timeoutSeconds": 0, "watch": True},
        {"label": "w1", "agentId": "ops", "message": "hi", "timeoutSeconds": 0},
        {"sessionKey": W, "label": "w1", "message": "x"}, {"message": "x"}, {"sessionKey": W, "message": ""},
        {"sessionKey": W, "message": "x", "timeoutSeconds": 601}, {"sessionKey": S, "message": "self", "timeoutSeconds": 0}]
lst = [{}, {"kinds": ["main", "subagent", "adopted"]}, {"kinds": ["nope"]},
       {"label": "w1"}, {"parentSessionKey": S}, {"excludeSubagents": True, "activeMinutes": 5},
       {"limit": 1, "offset": 1}, {"limit": 200, "offset": 9223372036854775807}, {"activeMinutes": 153722867280912},
       {"agentId": "ops"}]
history = [{"sessionKey": W}, {"sessionKey": W, "limit": 1, "offset": 0, "includeTools": True},
           {"sessionKey": S, "limit": 201}, {}, {"sessionKey": "agent:ops:x"}, {"sessionKey": W, "includeTools": "yes"}]
spawn = [{"task": "write the tests"}, {"task": "x", "label": "c1", "runTimeoutSeconds": 60},
         {"task": "x", "label": "w1"}, {"task": ""}, {"task": "x", "agentId": "ops"},
         {"task": "x", "runTimeoutSeconds": 86401}, {"label": "c2"}]
unwatch = [{"sessionKey": W}, {"sessionKey": "worker", "agentId": "main"}, {}, {"sessionKey": S},
           {"sessionKey": "agent:ops:x"}, {"sessionKey": W, "watch": True}]
create = [{"key": "agent:main:c1"}, {"key": "c2"}, {"key": "agent:main:c3", "agentId": "ops"},
          {"key": "agent:main:c4", "kind": "group", "label": "l4", "parentSessionKey": S},
          {"key": "agent:main:c5", "createdVia": "hook"}, {"key": "agent:main:c6", "kind": "main"},
          {"key": "agent:main:c7", "parentSessionKey": "agent:main:missing"}, {"key": ""}, {"key": None},
          {"key": "agent:ops:c8"}]
turns = [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "done", "runId": "r1"},
         {"role": "user", "text": "x", "provenance": {"kind": "inter_session", "sourceSessionKey": S, "sourceTool": "sessions_send"}},
         {"role": "user", "text": "x", "provenance": {"kind": "inter_session"}},
         {"role": "user", "text": "x", "provenance": {"kind": "human", "humanId": "ana", "extra": 1}},
         {"role": "tool", "text": "x", "channel": "slack", "occurredAt": 1767225600000, "idempotencyKey": "k1"},
         {"role": "user", "text": "x", "origin": "import", "upstreamText": "x"}, {"role": "user", "text": "x", "origin": "web"},
         {"role": "compaction", "text": "x"}, {"role": "user"}, {"role": "user", "text": "x", "occurredAt": -1},
         {"role": "user", "text": "x", "colour": "red"}]
goal = [{"text": "ship it"}, {"text": "ship it", "status": "complete"}, {"text": "  "}, {"text": "x", "status": "done"},
        {"text": "x", "actor": {"type": "human", "id": "ana"}}, {"text": "x", "actor": {"type": "robot"}},
        {"text": "x", "actor": {"type": "human", "extra": 1}}, {}]
watch = [{"target": W}, {"target": "worker", "targetAgentId": "main"}, {"target": S}, {"target": "agent:ops:x"},
         {"target": "agent:main:missing"}, {"target": ""}, {"target": W, "mute": True}]
ack = [{}, {"notices": [{"contextKey": "session-state:" + W.encode().hex(), "lastSeen": 1}]},
       {"notices": [{"contextKey": "session-state:" + W.encode().hex(), "targetAgentId": "main"}], "systemEventIds": [1, 2]},
       {"notices": [{"lastSeen": 1}]}, {"notices": [{"contextKey": "x", "lastSeen": -1}]}, {"notices": [1]},
       {"notices": [{"contextKey": "x", "extra": 1}]}, {"systemEventIds": ["1"]}, {"systemEventIds": [9223372036854775807]}]
drain = [{}, {"limit": 1}, {"limit": 0}, {"limit": 101}, {"limit": "1"}, {"max": 1}]
groups = [status, send, lst, history, spawn, unwatch, create, turns, goal, watch, ack, drain]
bodies: list = [bytes([i]) + json.dumps(b).encode() for i, g in enumerate(groups) for b in g]
bodies += [b"\x00", b"\x01", b"\x02 ", b"\x06", b"\x00[]", b"\x01null", b"\x02{", b"\x06{\"key\":\"a\",\"key\":\"agent:main:dup\"}",
           b"\x00\xff", b"\x02{\"limit\":1e2}", b"\x07{\"role\":\"user\",\"text\":\"a\",\"text\":\"b\"}", b"\x08", b"\x0a", b"\x0b  ",
           b"\x09{\"target\":\"agent:main:worker\"} x"]
write("tool_bodies", bodies)

# http_path: request targets, valid and near-valid.
K = "agent%3Amain%3Awork%2Fer"
paths = ["/health", "/", "/metrics", "/v1/sessions", "/v1/sessions?limit=5&offset=10", "/v1/sessions?agentId=main&kind=group",
         "/v1/sessions/" + K, "/v1/sessions/agent:main:main/turns?after=3&limit=2", "/v1/sessions/a%2Fb/runs/r%201/end",
         "/v1/sessions/k/watches/agent%3Aops%3Ax?targetAgentId=ops", "/v1/sessions/k/goal", "/v1/sessions/k/drain?limit=1",
         "/v1/sessions/k/system-events", "/v1/sessions/k/compaction", "/v1/sessions/k/watchers", "/v1/sessions/k/pending",
         "/v1/tools", "/v1/tools/sessions_send", "/v1/tools/sessions%5Fsend", "/v1/wakes?agentId=main", "/v1/catalog?cursor=x",
         "/v1/catalog/continue", "/v1/admin/clock", "/v1/admin/nope", "/v1/console/sessions/" + K, "/v1/console/graph",
         "/ui/app.js", "//v1//sessions", "/v1/sessions/", "/v1/sessions/%", "/v1/sessions/%zz", "/v1/sessions/%C3%28",
         "/v1/sessions/caf%C3%A9", "/v1/sessions/k?limit=1&limit=2", "/v1/sessions?a=%FF", "/v1/sessions?=&&x+y=%2B",
         "/v1/sessions/k/turns?limit=0", "/v1/sessions/k/turns?limit=501&offset=-1", "http://127.0.0.1:7420/v1/sessions?x=1",
         "*", "/v1/sessions/ké", "/v1/sessions/k#frag",
         # Found by the fuzzer (a harness bug: a raw `#` in another segment cut the path in http::Uri).
         "/v1/sessions/a%1Fb/runs/#r%*20l/end"]
write("http_path", paths)

# request_bodies: the first byte picks parse_turn (even) or parse_ack (odd).
rb = [b"\x00" + json.dumps(t).encode() for t in turns] + [b"\x01" + json.dumps(a).encode() for a in ack]
rb += [b"\x00", b"\x01", b"\x01  ", b"\x00{\"role\":\"user\",\"text\":\"a\",\"text\":\"b\"}", b"\x00[1]", b"\x01{\"notices\":{}}",
       b"\x00{\"role\":\"user\",\"text\":\"x\",\"provenance\":{\"kind\":\"inter_session\",\"sourceSessionKey\":\"agent::x\"}}",
       b"\x01{\"notices\":[{\"contextKey\":\"x\",\"targetAgentId\":\"OPS\"}]}", b"\x00{\"role\":\"user\",\"text\":\"x\",\"occurredAt\":1.0}",
       b"\x00{\"role\":\"user\",\"text\":\"x\"} ", b"\x01{\"systemEventIds\":[1,null]}", b"\x00{\"a\":{\"b\":1,\"b\":2}}"]
write("request_bodies", rb)

# hook_stdin: what Claude Code and Codex write, and near misses.
sid = "0a1b2c3d-0000-4000-8000-000000000001"
hooks = [{"hook_event_name": "UserPromptSubmit", "session_id": sid, "prompt": "fix the tests", "transcript_path": "/t.jsonl", "cwd": "/w"},
         {"hook_event_name": "SessionStart", "session_id": sid, "source": "startup"},
         {"hook_event_name": "PostToolUse", "session_id": sid, "tool_name": "Bash", "tool_input": {"command": "ls"}},
         {"hook_event_name": "Stop", "session_id": sid, "stop_hook_active": True},
         {"hook_event_name": "SubagentStart", "session_id": sid, "agent_id": "a1", "agent_type": "Explore"},
         {"hook_event_name": "SubagentStop", "session_id": sid, "agent_id": "a1", "agent_type": ""},
         {"hook_event_name": "PreCompact", "session_id": sid, "trigger": "auto"},
         {"hook_event_name": "SessionEnd", "session_id": sid, "reason": "logout"},
         {"hook_event_name": "PreToolUse", "session_id": sid}, {"hook_event_name": "Stop", "stop_hook_active": "yes"},
         {"hook_event_name": "UserPromptSubmit", "session_id": sid}, {"hook_event_name": "SubagentStop", "session_id": sid},
         {"hook_event_name": 3}, {"session_id": sid}, {"hook_event_name": "Stop", "session_id": ""},
         {"hook_event_name": "Stop", "session_id": None, "agent_id": None, "trigger": 1}]
hook_seeds = [json.dumps(h) for h in hooks] + ["[]", "null", "{", "", "{\"hook_event_name\":\"Stop\"} trailing"]
write("hook_stdin", hook_seeds)

# mcp_stdin: byte 0 the line limit (>= 64: the real one), byte 1 the buffer size, then stdin.
msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "session_status", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": 7}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "sessions_send", "arguments": []}},
        {"jsonrpc": "2.0", "id": "x", "method": "tools/call"}, {"jsonrpc": "1.0", "id": 6, "method": "ping"},
        {"jsonrpc": "2.0", "id": 7, "result": {}}, {"id": 8, "method": "ping"}]
stdin = "\n".join(json.dumps(m) for m in msgs) + "\n"
mcp = [bytes([255, 7]) + stdin.encode(), bytes([255, 0]) + json.dumps(msgs[0]).encode(),
       bytes([20, 3]) + stdin.encode(), bytes([0, 1]) + b"\n\n\n", bytes([5, 2]) + b"12345\n123456\n1234",
       bytes([255, 15]) + b"not json\n[]\n[{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}]\n42\n\"s\"\n\xff\xfe\n  \n",
       bytes([255, 4]) + b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\"}\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\",\"arguments\":null}}"]
write("mcp_stdin", mcp)

# node_answers: byte 0 the catalog and marker, then answers cut at 0xFF (see the target).
def item(uuid, text=None, typ="userMessage", **extra):
    d = {"uuid": uuid, "type": typ, "timestamp": ts}
    if text is not None:
        d["content"] = text
    d.update(extra)
    return d
claude_items = [item("u3", "run the tests"), item("u2", "hello"), item("u1", "earlier")]
threads = {"items": [{"catalogId": "claude", "threadId": "t1", "updatedAt": 5, "sizeBytes": 10, "cwd": "/w", "title": "x"}], "nextCursor": "c2"}
def page(items, more=False, found=True, status=0):
    return bytes([status]) + json.dumps({"items": items, "more": more, "found": found}).encode()
def cut(*parts):
    return b"\xff".join(p if isinstance(p, bytes) else json.dumps(p).encode() for p in parts)
codex_items = [{"uuid": "row:2", "type": "agentMessage", "text": "done"},
               {"uuid": "row:1", "type": "userMessage", "row": {"type": "event_msg", "timestamp": ts, "payload": {"type": "user_message", "message": "fix it"}}},
               {"uuid": "row:0", "type": "toolCall", "x": 1}]
node = [bytes([m]) + cut(threads, {"items": claude_items},
                         page(list(reversed(claude_items))[:2], more=True), page([claude_items[0]]))
        for m in (0, 2, 4)]
node += [bytes([1]) + cut(threads, {"items": codex_items}, page(list(reversed(codex_items)), more=True), page([])),
         bytes([3]) + cut({"items": []}, {"items": []}, page([], found=False)),
         bytes([0]) + cut({"items": [{"threadId": "t"}]}, {"items": [item("", "no id")]}, page([item(None, "x")])),
         bytes([2]) + cut(threads, {"items": [item("u9", "q", typ="queueOperation", operation="enqueue")]}, bytes([4])),
         bytes([4]) + cut(threads, {"items": claude_items}, bytes([5])),
         bytes([0]) + cut(threads, {"items": claude_items}, bytes([6])),
         bytes([0]) + cut(threads, {"items": claude_items}, bytes([7]) + b"{}", page(claude_items)),
         bytes([6]) + cut(threads, {"items": claude_items}, page(claude_items)),
         bytes([0]) + cut("{\"items\":", "{\"items\":[1]}", bytes([0]) + b"{\"items\":[],\"more\":true}")]
write("node_answers", node)

# config_file: a full file, minimal ones, and near misses.
full = """bind = "127.0.0.1:7420"
durability = "normal"
default_agent = "main"
main_key = "main"
notify_on_create = false

[http]
allowed_origins = ["http://localhost:5173"]
allowed_hosts = ["aware.local"]
max_connections = 256

[retention]
max_age_days = 30
batch_rows = 500

[wakes]
coalesce_secs = 5
stream_buffer = 64

[agents.ops]
visible_agents = ["main", "*"]

[agents.ops.wake_webhook]
url = "http://127.0.0.1:9/wake"
secret = "s"
max_attempts = 3

[monitor]
interval_secs = 5

[claude]
enabled = false

[codex]
home = "/nonexistent/codex"

[[nodes]]
id = "laptop"
url = "http://laptop:7421"
token = "t"

[limits]
health_deadline_ms = 500
"""
configs = [full, "", "bind = \"0.0.0.0:1\"\n", "[store]\nurl = \"postgres://u:pw@db/aware\"\n", "[store]\npassword_file = \"pw\"\n",
           "[http]\nmax_connections = \"x\"\n", "bind = \"nope\"\n", "durability = \"fast\"\n", "default_agent = \"Bad Agent\"\n",
           "main_key = \"\"\n", "[retention]\nbatch_rows = 0\n", "[wakes]\nstream_buffer = 0\n", "[agents.\"x y\"]\n",
           "[agents.a.wake_webhook]\nurl = \"https://h/x\"\n", "[agents.a.wake_webhook]\nurl = \"http://u:p@h/x\"\n",
           "[[nodes]]\nid = \"n\"\nurl = \"ftp://x\"\n", "[[nodes]]\nid = \"n\"\nurl = \"http://a\"\n[[nodes]]\nid = \"n\"\nurl = \"http://b\"\n",
           "[monitor]\ninterval_secs = 0\n", "[limits]\nhealth_deadline_ms = 0\n", "colour = \"red\"\n", "[http]\ncolour = 1\n",
           "[wakes\n", "bind = \n", "token = \"s3cret\"\ntoken = \"again\"\n", b"bind = \"\xff\"\n", "[agents.a]\ntoken_file = \"missing\"\n"]
write("config_file", configs)
