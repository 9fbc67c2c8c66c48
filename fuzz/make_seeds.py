#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/<target>/ (run from anywhere).

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

S, W = "agent:main:main", "agent:main:worker"
status = [{}, {"sessionKey": W}, {"sessionKey": W, "changesSince": 0}, {"sessionKey": W, "changesSince": 0, "limit": 5},
          {"limit": 5}, {"sessionKey": "worker", "agentId": "main"}, {"sessionKey": "agent:ops:x"},
          {"sessionKey": W, "changesSince": -1}, {"sessionKey": W, "changesSince": 1.5}, {"sessionKey": W, "extra": 1}]
send = [{"sessionKey": W, "message": "please rebase", "timeoutSeconds": 0},
        {"label": "w1", "message": "hi", "timeoutSeconds": 0, "watch": True},
        {"label": "w1", "agentId": "ops", "message": "hi", "timeoutSeconds": 0},
        {"sessionKey": W, "label": "w1", "message": "x"}, {"message": "x"}, {"sessionKey": W, "message": ""},
        {"sessionKey": W, "message": "x", "timeoutSeconds": 601}, {"sessionKey": S, "message": "self", "timeoutSeconds": 0}]
lst = [{}, {"agentId": "main"}, {"agentId": "ops"}, {"kinds": ["main", "subagent", "adopted"]}, {"kinds": ["nope"]},
       {"label": "w1"}, {"parentSessionKey": S}, {"excludeSubagents": True, "activeMinutes": 5},
       {"limit": 1, "offset": 1}, {"limit": 200, "offset": 9223372036854775807}, {"activeMinutes": 153722867280912}]
create = [{"key": "agent:main:c1"}, {"key": "c2", "agentId": "main"}, {"key": "agent:main:c3", "agentId": "ops"},
          {"key": "agent:main:c4", "kind": "group", "label": "l4", "parentSessionKey": S},
          {"key": "agent:main:c5", "createdVia": "hook"}, {"key": "agent:main:c6", "kind": "main"},
          {"key": "agent:main:c7", "parentSessionKey": "agent:main:missing"}, {"key": ""}, {"key": None}]
bodies: list = ["0" + json.dumps(b) for b in status] + ["1" + json.dumps(b) for b in send] + \
         ["2" + json.dumps(b) for b in lst] + ["3" + json.dumps(b) for b in create]
bodies += ["0", "1", "2 ", "3", "0[]", "1null", "2{", "3{\"key\":\"a\",\"key\":\"agent:main:dup\"}", b"0\xff", "2{\"limit\":1e2}"]
write("tool_bodies", bodies)
