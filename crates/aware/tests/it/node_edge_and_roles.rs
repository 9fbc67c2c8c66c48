//! The paired node's edge and PostgreSQL roles (decisions D33-D39), black box against the real
//! binary: `aware node serve`
//! behind the gateway's edge (Host, Origin, `Sec-Fetch-Site`, token, deadlines, open-file
//! limit), agent scope of `sessions_spawn`, wake streams that cannot take every connection,
//! PostgreSQL roles, and the low findings.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const THREAD: &str = "0b9f0c2e-1d3a-4c5b-8e7f-112233445566";

/// A running `aware node serve` on a loopback port, serving a Claude root with one transcript.
struct Node {
    child: Option<Child>,
    port: u16,
    logs: Arc<Mutex<String>>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Node {
    /// `args` go after `node serve --bind 127.0.0.1:0 --claude-root R --no-codex`; `shell` runs
    /// before the binary (`ulimit -Sn 256`).
    fn start(args: &[&str], shell: &str) -> Node {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("p");
        std::fs::create_dir_all(&project).unwrap();
        let row = json!({"type": "user", "uuid": "u-1", "cwd": "/w",
                         "message": {"role": "user", "content": "secret transcript text"}});
        std::fs::write(project.join(format!("{THREAD}.jsonl")), format!("{row}\n")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("{shell}\nexec \"$0\" \"$@\""))
            .arg(bin())
            .args(["node", "serve", "--bind", "127.0.0.1:0", "--no-codex"])
            .arg("--port-file")
            .arg(&port_file)
            .arg("--claude-root")
            .arg(root.path())
            .args(args)
            .env_remove("AWARE_TOKEN")
            .env_remove("AWARE_NODE_TOKEN")
            .env_remove("AWARE_NODE_TOKEN_FILE")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start aware node serve");
        let logs = Arc::new(Mutex::new(String::new()));
        let (stderr, l2) = (child.stderr.take().unwrap(), logs.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut l) = l2.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse().ok())
            {
                break port;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("node exited with {st}: {logs:?}");
            }
            assert!(Instant::now() < deadline, "node did not start: {logs:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        Node {
            child: Some(child),
            port,
            logs,
            _dirs: (root, dir),
        }
    }

    /// One raw HTTP/1.1 request with `Connection: close`: status and body.
    fn raw(&self, path: &str, headers: &str) -> (u16, String) {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let req = format!(
            "GET {path} HTTP/1.1\r\n{}Connection: close\r\n\r\n",
            headers.replace("{port}", &self.port.to_string())
        );
        c.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).to_string();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string();
        (status, body)
    }

    fn logs(&self) -> String {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn code_of(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default()
}

const THREADS: &str = "/v1/node/claude/threads";

#[test]
fn node_serve_refuses_a_rebinding_host_and_cross_site_pages() {
    // No token: on loopback that is allowed, which is exactly what DNS rebinding exploits.
    let n = Node::start(&["--allowed-host", "laptop.lan"], "");
    let items = format!("{THREADS}/{THREAD}/items");
    for path in [THREADS, items.as_str(), "/health"] {
        let (st, body) = n.raw(path, "Host: rebind.attacker.example\r\n");
        assert_eq!(st, 421, "{path}: {body}");
        assert_eq!(code_of(&body), "misdirected_request", "{body}");
        assert!(!body.contains(THREAD) && !body.contains("secret"), "{body}");
        let (st, _) = n.raw(path, "Host: rebind.attacker.example:{port}\r\n");
        assert_eq!(st, 421, "{path}");
    }
    // A page of another origin, even under a loopback Host name, and a cross-site fetch.
    for headers in [
        "Host: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n",
        "Host: localhost:{port}\r\nSec-Fetch-Site: cross-site\r\n",
    ] {
        let (st, body) = n.raw(&items, headers);
        assert_eq!(st, 403, "{headers}: {body}");
        assert_eq!(code_of(&body), "forbidden_origin", "{body}");
    }
    // The node's own names still answer, and a name added with --allowed-host.
    for host in ["127.0.0.1:{port}", "localhost", "laptop.lan:{port}"] {
        let (st, body) = n.raw(THREADS, &format!("Host: {host}\r\n"));
        assert_eq!(st, 200, "{host}: {body}");
        assert!(body.contains(THREAD), "{body}");
    }
    let (st, body) = n.raw(
        &items,
        "Host: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n",
    );
    assert_eq!(st, 200, "{body}");
}

#[test]
fn node_serve_cuts_idle_and_trickling_sockets_and_raises_the_open_file_limit() {
    let n = Node::start(
        &[
            "--token",
            "nt-0123456789abcdef",
            "--max-connections",
            "4",
            "--header-timeout-secs",
            "1",
            "--idle-timeout-secs",
            "1",
        ],
        "ulimit -Sn 256",
    );
    // The soft limit the shell set is raised to the hard limit, as `aware serve` does.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", n.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let nums: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(nums.len(), 2, "{line}");
    assert_eq!(nums[0], nums[1], "soft limit not raised: {line}");
    assert_ne!(nums[0], "256", "{line}");
    // Idle sockets and half-sent heads on every slot, twice over: each is cut after its
    // deadline, so /health is answered.
    let mut held = Vec::new();
    for i in 0..8 {
        let mut c = TcpStream::connect(("127.0.0.1", n.port)).unwrap();
        if i % 2 == 0 {
            let _ = c.write_all(b"GET /health HTTP/1.1\r\nHo");
        }
        held.push(c);
    }
    let (st, body) = n.raw("/health", "Host: 127.0.0.1\r\n");
    assert_eq!(st, 200, "{body} {}", n.logs());
    drop(held);
    // An idle keep-alive connection is closed after its request.
    let mut c = TcpStream::connect(("127.0.0.1", n.port)).unwrap();
    c.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    // read_to_end returns only once the server closes the socket (or after 30 s of silence).
    let r = c.read_to_end(&mut out);
    assert!(r.is_ok(), "the idle connection was not closed: {r:?}");
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
}

/// Runs `aware node serve` with `args` and expects exit 2 with `shown` on stderr.
fn node_refuses(args: &[&str], prepare: impl FnOnce(&Path), shown: &str) {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let out = Command::new(bin())
        .args(["node", "serve", "--no-codex", "--claude-root"])
        .arg(dir.path())
        .args(args)
        .current_dir(dir.path())
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_NODE_TOKEN")
        .env_remove("AWARE_NODE_TOKEN_FILE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(shown), "{args:?}: {err}");
}

#[test]
fn node_serve_refuses_weak_tokens_off_loopback() {
    node_refuses(
        &["--bind", "0.0.0.0:0", "--token", "abc"],
        |_| {},
        "refusing to listen on 0.0.0.0:0 with a weak token: the node token must be at least 16 bytes",
    );
    node_refuses(
        &["--bind", "0.0.0.0:0", "--token", "                "],
        |_| {},
        "weak token",
    );
    node_refuses(
        &["--bind", "0.0.0.0:0", "--token-file", "t"],
        |d| std::fs::write(d.join("t"), "short\n").unwrap(),
        "weak token",
    );
    node_refuses(&["--bind", "0.0.0.0:0"], |_| {}, "without a bearer token");
    node_refuses(
        &["--allowed-host", "a/b"],
        |_| {},
        "--allowed-host: \"a/b\" must be a host name",
    );
}

const MAIN_TOKEN: &str = "main-token-0123456789";
const OPS_TOKEN: &str = "ops-token-0123456789ab";

/// A gateway with a main token and a token for agent `ops`, which may also see `shared`.
fn with_ops_token(extra: &str) -> (Server, tempfile::TempDir) {
    let secrets = tempfile::tempdir().unwrap();
    let ops = secrets.path().join("ops.token");
    std::fs::write(&ops, format!("{OPS_TOKEN}\n")).unwrap();
    let cfg = format!(
        "{DEFAULT_CONFIG}[agents.ops]\ntoken_file = \"{}\"\nvisible_agents = [\"shared\"]\n{extra}",
        ops.display()
    );
    let s = Server::with_args(&cfg, &["--token", MAIN_TOKEN]);
    for k in ["agent:ops:main", "agent:shared:main"] {
        s.create(k);
    }
    (s, secrets)
}

fn as_ops(s: &Server, method: &str, path: &str, caller: Option<&str>, body: Option<Value>) -> Resp {
    let mut h = vec![("Authorization", format!("Bearer {OPS_TOKEN}"))];
    if let Some(c) = caller {
        h.push(("X-Aware-Session", seg(c)));
    }
    s.request_with(method, path, &h, body.map(|b| b.to_string()).as_deref())
}

#[test]
fn sessions_spawn_with_agent_id_obeys_the_scope_of_create() {
    let (s, _secrets) = with_ops_token("");
    // Creating a session of `shared` (visible, not its own) is refused...
    let r = as_ops(
        &s,
        "POST",
        "/v1/sessions",
        Some("agent:ops:main"),
        Some(json!({"key": "agent:shared:x"})),
    );
    assert_eq!(r.status, 403, "{:?}", r.body);
    // ...and so is spawning one.
    let r = as_ops(
        &s,
        "POST",
        "/v1/tools/sessions_spawn",
        Some("agent:ops:main"),
        Some(json!({"task": "t", "agentId": "shared"})),
    );
    assert_eq!(r.status, 403, "{:?}", r.body);
    assert_eq!(r.code(), "forbidden", "{:?}", r.body);
    assert!(r.message().contains("ops"), "{:?}", r.body);
    let listed = s.get("/v1/sessions?agentId=shared");
    let keys: Vec<&str> = listed.body["sessions"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["key"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        keys.iter().all(|k| !k.contains(":subagent:")),
        "a subagent of shared was created: {keys:?}"
    );
    // Its own agent, named or by default, is spawned.
    for body in [json!({"task": "t", "agentId": "ops"}), json!({"task": "t"})] {
        let r = as_ops(
            &s,
            "POST",
            "/v1/tools/sessions_spawn",
            Some("agent:ops:main"),
            Some(body),
        );
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert!(r.body["childSessionKey"]
            .as_str()
            .unwrap_or("")
            .starts_with("agent:ops:subagent:"));
    }
    // The operator's token keeps the visibility rule only (as for create).
    let r = s.request_with(
        "POST",
        "/v1/tools/sessions_spawn",
        &[
            ("Authorization", format!("Bearer {MAIN_TOKEN}")),
            ("X-Aware-Session", seg("agent:ops:main")),
        ],
        Some(&json!({"task": "t", "agentId": "shared"}).to_string()),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
}

/// Opens `GET {path}` on a new socket and reads only the answer's head, never the body: a
/// client that keeps a stream and never reads it. The status is 0 when no head came within
/// 20 s (the connection waits for a slot).
pub(crate) fn open_unread(port: u16, path: &str, token: Option<&str>) -> (u16, String, TcpStream) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match c.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return (0, String::from_utf8_lossy(&head).to_string(), c),
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head, c)
}

#[test]
fn a_thousand_unread_wake_streams_leave_health_and_the_api_answering() {
    // The defaults: 1,024 connections, of which at most 768 may be streams.
    let s = Server::start();
    let mut held = Vec::new();
    let (mut served, mut refused) = (0, 0);
    for i in 0..1030 {
        let (status, head, c) = open_unread(s.port, "/v1/wakes", None);
        match status {
            200 => served += 1,
            429 => {
                refused += 1;
                assert!(
                    head.to_ascii_lowercase().contains("connection: close"),
                    "{head}"
                );
            }
            // No answer: every slot is taken (the finding); /health below shows it.
            0 => break,
            other => panic!("stream {i}: {other} {head}"),
        }
        held.push(c);
    }
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    let health = agent.get(&format!("{}/health", s.base)).call();
    assert!(
        matches!(&health, Ok(r) if r.status() == 200),
        "/health with {served} streams open: {health:?}"
    );
    assert_eq!((served, refused), (768, 262));
    // Operator routes answer too.
    let r = agent
        .post(&format!("{}/v1/sessions", s.base))
        .send_json(json!({"key": "agent:main:after"}));
    assert!(matches!(&r, Ok(r) if r.status() == 201), "{r:?}");
    // The refusal says what to do.
    let (status, _, mut c) = open_unread(s.port, "/v1/wakes", None);
    assert_eq!(status, 429);
    let mut body = String::new();
    let _ = c.read_to_string(&mut body);
    assert!(
        body.contains("too_many_streams") && body.contains("max_streams"),
        "{body}"
    );
    drop(held);
}

#[test]
fn one_agent_token_cannot_take_every_stream() {
    let (s, _secrets) = with_ops_token("[http]\nmax_streams_per_agent = 3\n");
    let mut held = Vec::new();
    for _ in 0..3 {
        let (status, head, c) = open_unread(s.port, "/v1/wakes", Some(OPS_TOKEN));
        assert_eq!(status, 200, "{head}");
        held.push(c);
    }
    let (status, head, mut c) = open_unread(s.port, "/v1/wakes", Some(OPS_TOKEN));
    assert_eq!(status, 429, "{head}");
    let mut body = String::new();
    let _ = c.read_to_string(&mut body);
    assert!(
        body.contains("too_many_streams") && body.contains("max_streams_per_agent"),
        "{body}"
    );
    // Another identity still gets its stream.
    let (status, head, c) = open_unread(s.port, "/v1/wakes", Some(MAIN_TOKEN));
    assert_eq!(status, 200, "{head}");
    held.push(c);
    drop(held);
}

/// The advisory lock keys a gateway uses on PostgreSQL (docs/deployment.md, "Roles and
/// grants"): leadership, and the migrations' lock (which write transactions took before).
const LEADER_LOCK: i64 = 0x6177_6172_6500_6c64;
const MIGRATION_LOCK: i64 = 0x6177_6172_6500_0001;

#[test]
fn a_connect_only_postgres_role_cannot_forge_wakes_or_stall_writes() {
    use aware_store_pg::postgres::{Client, NoTls};
    let url = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("a test database");
    let role = format!("stranger_{}", std::process::id());
    let mut admin = Client::connect(&url, NoTls).expect("connect as the owner");
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN"
        ))
        .unwrap();
    // No grant at all: CONNECT comes from PUBLIC, as on a default installation.
    let stranger_url = url.replacen("postgres@", &format!("{role}@"), 1);
    let mut stranger = Client::connect(&stranger_url, NoTls).expect("connect as the stranger");
    // The stranger holds the leadership lock before any gateway starts.
    stranger
        .execute("SELECT pg_advisory_lock($1)", &[&LEADER_LOCK])
        .unwrap();
    let s = Server::with_options(ServerOptions {
        config: DEFAULT_CONFIG.to_string(),
        args: Vec::new(),
        gateways: 2,
        store: StoreChoice::PostgresAt(url.clone()),
        pick: Pick::First,
    });
    // It is named, in the log and on /health.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.all_logs().contains("cluster_lock_held_by_stranger") {
        assert!(Instant::now() < deadline, "{}", s.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(s.all_logs().contains(&role), "{}", s.all_logs());
    let health = s.get("/health");
    let held_by = health.body["cluster"]["leaderLockHeldBy"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(held_by.contains(&role), "{:?}", health.body);

    // Writes do not wait for any lock the stranger can take.
    stranger
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .unwrap();
    for i in 0..2 {
        let r = s.request_to(
            s.gateway_base(i),
            "POST",
            "/v1/sessions",
            &[],
            Some(&json!({"key": format!("agent:main:w{i}")}).to_string()),
        );
        assert_eq!(r.status, 201, "gateway {i}: {:?}", r.body);
    }

    // A forged wake, unsigned and with a made-up signature, then a real wake produced on the
    // other gateway: notifications arrive in commit order, so the real one is a fence.
    let (status, head, sse) = open_unread(s.port, "/v1/wakes", None);
    assert_eq!(status, 200, "{head}");
    let forged = json!({"node": "forged", "sessionKey": "agent:main:forged", "agentId": "main",
                        "reason": "message", "at": 1})
    .to_string();
    let fake_mac = format!("aware1:{}:{forged}", "0".repeat(64));
    for payload in [forged.as_str(), fake_mac.as_str()] {
        stranger
            .execute("SELECT pg_notify('aware_wakes', $1)", &[&payload])
            .unwrap();
    }
    // Signed with the real key (read here as the owner), but its agentId is not its key's
    // agent: refused as well (a receiver filters visibility by agentId).
    let key: String = admin
        .query_one("SELECT key FROM aware_cluster_key WHERE id = 1", &[])
        .unwrap()
        .get(0);
    let liar = json!({"node": "forged", "sessionKey": "agent:main:liar", "agentId": "other",
                      "reason": "message", "at": 1})
    .to_string();
    let signed_liar = aware_cluster::sign(key.as_bytes(), &liar);
    admin
        .execute("SELECT pg_notify('aware_wakes', $1)", &[&signed_liar])
        .unwrap();
    let other = s.gateway_base(1).to_string();
    let boss = "agent:main:boss";
    let r = s.request_to(
        &other,
        "POST",
        "/v1/sessions",
        &[],
        Some(&json!({"key": boss}).to_string()),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let r = s.request_to(
        &other,
        "POST",
        "/v1/tools/sessions_spawn",
        &[("X-Aware-Session", seg(boss))],
        Some(&json!({"task": "fence"}).to_string()),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let child = r.body["childSessionKey"].as_str().unwrap().to_string();
    let mut sse = BufReader::new(sse);
    let mut seen = String::new();
    let mut line = String::new();
    while !seen.contains(&child) {
        line.clear();
        let n = sse.read_line(&mut line).unwrap_or(0);
        assert!(n > 0, "the stream ended before the fence: {seen}");
        seen.push_str(&line);
    }
    assert!(
        !seen.contains("agent:main:forged"),
        "a forged wake was delivered: {seen}"
    );
    assert!(
        !seen.contains("agent:main:liar"),
        "a wake whose agentId lies was delivered: {seen}"
    );
    let rejected = s
        .metric("aware_cluster_notifications_rejected_total")
        .unwrap_or(0.0);
    assert!(rejected >= 3.0, "{rejected}");
    drop(stranger);
}

#[test]
fn a_hidden_agents_watchers_stay_hidden_and_a_hidden_target_is_403_either_way() {
    let (s, _secrets) = with_ops_token(
        "[agents.hidden]\nvisible_agents = [\"ops\"]\n[agents.shared]\nvisible_agents = [\"ops\"]\n",
    );
    let auth = [("Authorization", format!("Bearer {MAIN_TOKEN}"))];
    for k in ["agent:hidden:h", "agent:shared:s"] {
        let r = s.request_with(
            "POST",
            "/v1/sessions",
            &auth,
            Some(&json!({"key": k}).to_string()),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    // The operator registers a hidden and a visible watcher on ops's session.
    for w in ["agent:hidden:h", "agent:shared:s"] {
        let r = s.request_with(
            "POST",
            &format!("/v1/sessions/{}/watches", seg(w)),
            &auth,
            Some(&json!({"target": "agent:ops:main"}).to_string()),
        );
        assert_eq!(r.status, 200, "{w}: {:?}", r.body);
    }
    let r = as_ops(
        &s,
        "GET",
        "/v1/sessions/agent:ops:main/watchers",
        Some("agent:ops:main"),
        None,
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let watchers: Vec<&str> = r.body["watchers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["watcherSessionKey"].as_str())
        .collect();
    assert_eq!(watchers, ["agent:shared:s"], "{:?}", r.body);
    // The same without a caller session (the token's own view).
    let r = as_ops(
        &s,
        "GET",
        "/v1/sessions/agent:ops:main/watchers",
        None,
        None,
    );
    assert!(
        !r.body.to_string().contains("agent:hidden:"),
        "{:?}",
        r.body
    );
    // The operator sees both.
    let r = s.request_with("GET", "/v1/sessions/agent:ops:main/watchers", &auth, None);
    assert_eq!(
        r.body["watchers"].as_array().map(Vec::len),
        Some(2),
        "{:?}",
        r.body
    );
    // A hidden target is 403 whether it exists or not.
    for target in ["agent:hidden:h", "agent:hidden:does-not-exist"] {
        let r = as_ops(
            &s,
            "POST",
            "/v1/sessions/agent:ops:main/watches",
            Some("agent:ops:main"),
            Some(json!({"target": target})),
        );
        assert_eq!(
            (r.status, r.code()),
            (403, "forbidden"),
            "{target}: {:?}",
            r.body
        );
    }
}

#[test]
fn fan_out_answers_are_paged() {
    let s = Server::start();
    let target = "agent:main:popular";
    s.create(target);
    for i in 0..210 {
        let w = format!("agent:main:w{i:03}");
        s.create(&w);
        assert_eq!(s.watch(&w, target).status, 200);
    }
    let path = format!("/v1/sessions/{}/watchers", seg(target));
    let r = s.get(&path);
    assert_eq!(r.status, 200);
    assert_eq!(r.body["watchers"].as_array().map(Vec::len), Some(100));
    assert_eq!(
        (r.body["hasMore"].clone(), r.body["nextOffset"].clone()),
        (json!(true), json!(100))
    );
    let mut seen = 0;
    let mut offset = 0;
    loop {
        let r = s.get(&format!("{path}?limit=500&offset={offset}"));
        let n = r.body["watchers"].as_array().map_or(0, Vec::len);
        seen += n;
        if r.body["hasMore"] != json!(true) {
            break;
        }
        offset = r.body["nextOffset"].as_u64().unwrap() as usize;
    }
    assert_eq!(seen, 210);
    let r = s.get(&format!("{path}?limit=501"));
    assert_eq!(r.status, 400);
    // The console page keeps 200 of them and says how many there are.
    let r = s.get(&format!("/v1/console/sessions/{}", seg(target)));
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["watchers"].as_array().map(Vec::len), Some(200));
    assert_eq!(r.body["watchersTotal"], json!(210));
}

#[test]
fn a_garbage_catalog_cursor_is_a_400() {
    let root = tempfile::tempdir().unwrap();
    let cfg = format!(
        "{DEFAULT_CONFIG}[claude]\nroot = \"{}\"\n",
        root.path().display()
    );
    let s = Server::with_config(&cfg);
    for catalog in ["claude", "codex"] {
        let r = s.get(&format!("/v1/catalog?catalogId={catalog}&cursor=garbage"));
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_argument"),
            "{catalog}: {:?}",
            r.body
        );
    }
    assert!(!s.logs().contains("ERROR"), "{}", s.logs());
}

#[test]
fn the_test_clock_cannot_be_set_past_the_year_9999() {
    let s = Server::start();
    for now in [i64::MAX, 253_402_300_800_000] {
        let r = s.post("/v1/admin/clock", json!({"now": now}));
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_argument"),
            "{now}: {:?}",
            r.body
        );
    }
    let r = s.post("/v1/admin/clock", json!({"now": 253_402_300_799_999i64}));
    assert_eq!(r.status, 200, "{:?}", r.body);
    // The engine still answers (timers ran at the new time without overflowing).
    assert_eq!(s.get("/health").status, 200);
}

/// Runs the binary with `args` (and `config` as the data dir's config.toml) and expects exit 2
/// with `shown` and without `secret` on stderr.
fn exits_2_without_showing(args: &[&str], config: Option<&str>, shown: &str, secret: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("AWARE_STORE_URL")
        .env_remove("AWARE_TOKEN")
        .env_remove("AWARE_DATA_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(c) = config {
        std::fs::write(dir.path().join("config.toml"), c).unwrap();
        cmd.arg("--data-dir").arg(dir.path());
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(shown), "{args:?}: {err}");
    assert!(!err.contains(secret), "{args:?} shows the secret: {err}");
}

#[test]
fn store_passwords_stay_off_command_lines_and_out_of_messages() {
    // A password on the command line is readable by every local user: refused.
    exits_2_without_showing(
        &[
            "serve",
            "--store",
            "postgres://aware:s3cret@127.0.0.1:1/aware",
        ],
        Some(DEFAULT_CONFIG),
        "[store] password_file",
        "s3cret",
    );
    exits_2_without_showing(
        &[
            "migrate",
            "--from",
            "/nonexistent",
            "--to",
            "postgres://aware@127.0.0.1:1/aware?password=s3cret",
        ],
        None,
        "--password-file",
        "s3cret",
    );
    // A libpq key=value string is refused without being repeated, whatever its spacing.
    for url in [
        "host=db password=s3cret",
        "host=db password = s3cret",
        "host=db PASSWORD='s3cret'",
    ] {
        exits_2_without_showing(
            &["serve"],
            Some(&format!("{DEFAULT_CONFIG}[store]\nurl = \"{url}\"\n")),
            "must be a postgres:// or postgresql:// URL",
            "s3cret",
        );
    }
}

#[test]
fn a_webhook_url_with_credentials_is_refused() {
    exits_2_without_showing(
        &["serve"],
        Some(&format!(
            "{DEFAULT_CONFIG}[agents.main.wake_webhook]\nurl = \"http://hook:s3cret@127.0.0.1:9/wake\"\n"
        )),
        "must not carry user:password@",
        "s3cret",
    );
}

#[test]
fn migrate_creates_its_data_dir_private() {
    use std::os::unix::fs::PermissionsExt;
    let url = aware_store_pg::testing::PgCluster::shared()
        .database()
        .expect("a test database");
    let parent = tempfile::tempdir().unwrap();
    let to = parent.path().join("copy");
    let out = Command::new(bin())
        .args(["migrate", "--from", &url, "--to"])
        .arg(&to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(&to).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{mode:o}");
}
