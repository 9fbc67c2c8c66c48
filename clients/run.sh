#!/usr/bin/env bash
# Third-party MCP clients against `aware mcp` (03 §7): the official Python SDK (PyPI `mcp`) and
# the official TypeScript SDK (@modelcontextprotocol/sdk), each through its own stdio client.
#
# Needs a built binary (default target/debug/aware, or $AWARE_BIN), python3 with
# `pip install -r clients/python/requirements.txt`, and node with `npm ci` run in
# clients/typescript. Starts its own gateway on a free loopback port with the test clock and a
# temporary data dir, creates the sessions, runs both clients, then runs `aware init claude-code`
# into a temporary project and drives the hook and the MCP server from exactly the written
# configs (clients/python/init_config_client.py). Exits non-zero if anything failed (each client
# prints `N passed, M failed`).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${AWARE_BIN:-$root/target/debug/aware}
if [[ ! -x $bin ]]; then
  echo "clients/run.sh: $bin not found; run 'cargo build -p aware' first" >&2
  exit 2
fi
if [[ ! -d $here/typescript/node_modules/@modelcontextprotocol/sdk ]]; then
  echo "clients/run.sh: run 'npm ci' in clients/typescript first" >&2
  exit 2
fi

tmp=$(mktemp -d)
gateway=
cleanup() {
  if [[ -n $gateway ]]; then
    kill "$gateway" 2>/dev/null || true
    wait "$gateway" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# The scenarios' configuration (05 Conventions): no notice for a mere creation, no timers.
cat >"$tmp/config.toml" <<'EOF'
notify_on_create = false
[retention]
prune_interval_secs = 31536000
[monitor]
enabled = false
EOF

env -u AWARE_TOKEN -u AWARE_SESSION -u AWARE_URL "$bin" serve --bind 127.0.0.1:0 \
  --port-file "$tmp/port" --test-clock --data-dir "$tmp/data" --config "$tmp/config.toml" \
  >"$tmp/serve.log" 2>&1 &
gateway=$!

for _ in $(seq 1 200); do
  [[ -s $tmp/port ]] && break
  if ! kill -0 "$gateway" 2>/dev/null; then
    echo "clients/run.sh: aware serve exited:" >&2
    cat "$tmp/serve.log" >&2
    exit 1
  fi
  sleep 0.1
done
[[ -s $tmp/port ]] || { echo "clients/run.sh: no port file after 20 s" >&2; cat "$tmp/serve.log" >&2; exit 1; }
url="http://127.0.0.1:$(tr -d '[:space:]' <"$tmp/port")"

# Wait for /health, then create a watcher and a watched child per client (operator requests).
python3 - "$url" <<'EOF'
import json, sys, time, urllib.error, urllib.request

url = sys.argv[1]
deadline = time.time() + 20
while True:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            if r.status == 200:
                break
    except (urllib.error.URLError, OSError):
        pass
    if time.time() > deadline:
        sys.exit("clients/run.sh: gateway not healthy after 20 s")
    time.sleep(0.1)

def create(key, parent=None):
    body = {"key": key}
    if parent:
        body["parentSessionKey"] = parent
    req = urllib.request.Request(f"{url}/v1/sessions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status in (200, 201), r.status

for prefix in ("py", "ts"):
    create(f"agent:main:{prefix}")
    create(f"agent:main:subagent:{prefix}-c1", f"agent:main:{prefix}")
EOF

status=0
echo "== Python MCP SDK (mcp $(python3 -c 'import importlib.metadata as m; print(m.version("mcp"))'))"
python3 "$here/python/mcp_client.py" "$bin" "$url" agent:main:py agent:main:subagent:py-c1 || status=1
echo "== TypeScript MCP SDK (@modelcontextprotocol/sdk $(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1])).version' "$here/typescript/node_modules/@modelcontextprotocol/sdk/package.json"))"
(cd "$here/typescript" && node mcp_client.mjs "$bin" "$url" agent:main:ts agent:main:subagent:ts-c1) || status=1

echo "== aware init claude-code, then the hook and the Python SDK from exactly the written configs"
mkdir -p "$tmp/project"
"$bin" init claude-code --project "$tmp/project" --url "$url" --session agent:main:init-project \
  || status=1
python3 "$here/python/init_config_client.py" "$tmp/project" agent:main:init-project || status=1

if [[ $status -ne 0 ]]; then
  echo "clients/run.sh: a client failed; gateway log:" >&2
  tail -n 50 "$tmp/serve.log" >&2
fi
exit $status
