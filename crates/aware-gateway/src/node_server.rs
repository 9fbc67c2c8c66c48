//! The paired-node server of `aware node serve` (04 §2.2): this machine's Claude Code transcripts
//! and Codex rollouts, read-only, for a gateway that lists the node in `[[nodes]]`.
//!
//! Routes: `GET /health` (open), and for each catalog `C` (`claude`, `codex`)
//! `GET /v1/node/C/threads?limit=&cursor=` and `GET /v1/node/C/threads/{threadId}/items?limit=N`
//! or `?after=UUID&limit=N` (docs/upstream.md §4). With a token every route but `/health` needs
//! `Authorization: Bearer <token>`, compared in constant time (03 §5.2). What each route answers
//! is `aware_upstream::node::serve`; this file parses, checks the token and runs the file reads
//! on the blocking pool.
//!
//! The node serves every transcript on the machine, so it stands behind the gateway's own edge,
//! not a copy of it: `edge::check_site` (Host against DNS rebinding, Origin and
//! `Sec-Fetch-Site` against cross-site pages) before anything else, the same token compare and
//! weak-token rule, and `conn::serve` (connection cap, request-head and keep-alive deadlines,
//! stalled writes, shutdown grace).

use crate::config::HttpSettings;
use crate::http::body::Query;
use crate::http::edge::{self, secrets_equal as constant_time_eq, Origin, Site};
use crate::http::error::{ApiError, ApiResult};
use aware_upstream::node::serve::NodeRoots;
use aware_upstream::node::{
    NodeCatalog, ITEMS_LIMIT, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, THREADS_LIMIT_DEFAULT,
    THREADS_LIMIT_MAX, THREAD_NOT_FOUND,
};
use aware_upstream::provider::ProviderError;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// What `aware node serve` runs with.
#[derive(Debug, Clone)]
pub struct NodeServerConfig {
    /// Reported by `/health`; the gateway names the node by its own `[[nodes]] id`.
    pub node_id: String,
    /// Bearer token; `None` leaves the routes open (loopback only, checked by the caller).
    pub token: Option<String>,
    /// `~/.claude/projects` or `--claude-root`.
    pub claude_root: PathBuf,
    /// `$CODEX_HOME` (default `~/.codex`) or `--codex-home`; `None` serves no Codex catalog.
    pub codex_home: Option<PathBuf>,
    /// The configured listen address: the `Host` rule depends on it (any IP literal on an
    /// unspecified bind, the address itself on a specific one, loopback names always).
    pub bind: SocketAddr,
    /// The gateway's `[http]` settings: extra `Host` names and origins, deadlines, the
    /// connection cap and the shutdown grace.
    pub http: HttpSettings,
}

impl NodeServerConfig {
    /// The gateway's bind rule (03 §5.2): off loopback a token is required, and it must not be
    /// weak. Returns the message `aware node serve` prints before it exits with 2.
    pub fn check_bind_policy(&self) -> Result<(), String> {
        match &self.token {
            None if !self.bind.ip().is_loopback() => Err(format!(
                "refusing to listen on {} without a bearer token (set --token-file, --token or AWARE_NODE_TOKEN)",
                self.bind
            )),
            None => Ok(()),
            Some(t) => {
                edge::check_token_strength(
                    self.bind,
                    [("the node token".to_string(), t.as_str())],
                )?;
                edge::check_plaintext_tokens(
                    self.bind,
                    true,
                    self.http.tls.is_some(),
                    self.http.allow_plaintext_tokens,
                    ("--tls-cert and --tls-key", "--allow-plaintext-tokens"),
                )
            }
        }
    }

    fn roots(&self) -> NodeRoots {
        NodeRoots {
            claude_root: self.claude_root.clone(),
            codex_home: self.codex_home.clone(),
        }
    }
}

/// Serves on an already-bound listener until `shutdown` resolves, through the gateway's own
/// connection handling (`conn`: connection cap, head and idle deadlines, and the lingering close
/// that keeps an early 401 or 404 from being lost to a reset), then lets open requests finish
/// for up to `http.shutdown_grace_secs`.
pub async fn run_node(
    listener: TcpListener,
    cfg: NodeServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let http = cfg.http.clone();
    let app = axum::Router::new()
        .fallback(dispatch)
        .with_state(Arc::new((cfg, port)));
    // The node has no streams to end and no start-up that can fail.
    let (stopping, _) = tokio::sync::watch::channel(false);
    let never_fatal = std::future::pending::<Option<String>>();
    crate::http::conn::serve(listener, app, http, stopping, shutdown, never_fatal).await;
    Ok(())
}

fn authorized(cfg: &NodeServerConfig, headers: &HeaderMap) -> bool {
    let Some(token) = &cfg.token else {
        return true;
    };
    constant_time_eq(edge::bearer(headers).as_bytes(), token.as_bytes())
}

enum Route {
    Health,
    Threads(NodeCatalog),
    Items(NodeCatalog, String),
}

async fn dispatch(
    State(node): State<Arc<(NodeServerConfig, u16)>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (cfg, port) = (&node.0, node.1);
    // Host and origin first, as on the gateway: a rebinding page learns nothing, not even
    // whether a token is needed.
    let origin = match edge::check_site(cfg.bind, &cfg.http, port, &method, &uri, &headers) {
        Ok(Site::Preflight(r)) => return r,
        Ok(Site::Pass(origin)) => origin,
        Err(e) => return e.into_response(),
    };
    let mut response = match handle(cfg, method, uri, headers).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    if let Origin::Allowed(o) = &origin {
        edge::add_cors(&mut response, o);
    }
    response
}

async fn handle(
    cfg: &NodeServerConfig,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let path = uri.path();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // A catalog this node does not serve has no routes (404 `not_found`): never confused with
    // the definitive `thread_not_found`.
    let catalog = |c: &str| NodeCatalog::from_id(c).filter(|c| cfg.roots().serves(*c));
    let route = match segments.as_slice() {
        ["health"] => Some(Route::Health),
        ["v1", "node", c, "threads"] => catalog(c).map(Route::Threads),
        ["v1", "node", c, "threads", id, "items"] => {
            catalog(c).map(|c| Route::Items(c, id.to_string()))
        }
        _ => None,
    };
    if !matches!(route, Some(Route::Health)) && !authorized(cfg, &headers) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        ));
    }
    let Some(route) = route else {
        return Err(ApiError::not_found(
            "not_found",
            format!("no route for {path}"),
        ));
    };
    if method != Method::GET {
        let mut r = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} is not allowed for {path}; use GET"),
        )
        .into_response();
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return Ok(r);
    }
    let mut query = Query::parse(uri.query())?;
    match route {
        Route::Health => {
            query.finish()?;
            Ok(json_ok(json!({"status": "ok", "nodeId": cfg.node_id})))
        }
        Route::Threads(catalog) => {
            let max = THREADS_LIMIT_MAX as i64;
            let limit = query
                .int(
                    "limit",
                    1..=max,
                    &format!("limit must be an integer in 1..={max}"),
                )?
                .unwrap_or(THREADS_LIMIT_DEFAULT as i64) as usize;
            let cursor = query.take("cursor")?;
            query.finish()?;
            let roots = cfg.roots();
            let page = blocking(move || roots.threads(catalog, limit, cursor.as_deref())).await?;
            Ok(json_ok(serde_json::to_value(page).map_err(|e| {
                ApiError::internal(format!("thread list not encodable: {e}"))
            })?))
        }
        Route::Items(catalog, raw_id) => {
            // `after` present: a page of the items after that uuid, oldest first (decision D24);
            // empty means from the start. Absent: the v1 answer, the newest items.
            let after = query.take("after")?;
            let (max, default) = if after.is_some() {
                (PAGE_LIMIT_MAX, PAGE_LIMIT_DEFAULT)
            } else {
                (ITEMS_LIMIT, ITEMS_LIMIT)
            };
            let limit = query
                .int(
                    "limit",
                    1..=max as i64,
                    &format!("limit must be an integer in 1..={max}"),
                )?
                .unwrap_or(default as i64) as usize;
            query.finish()?;
            let thread_id = percent_encoding::percent_decode_str(&raw_id)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| ApiError::invalid("threadId is not valid UTF-8"))?;
            let roots = cfg.roots();
            let answer = match after {
                Some(after) => {
                    blocking(move || roots.items_after(catalog, &thread_id, &after, limit)).await?
                }
                None => blocking(move || roots.items(catalog, &thread_id, limit)).await?,
            };
            Ok(json_ok(answer))
        }
    }
}

fn json_ok(v: Value) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

/// Runs a blocking file read off the async runtime, mapping provider errors to the wire.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ProviderError> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(ProviderError::ThreadNotFound)) => Err(ApiError::not_found(
            THREAD_NOT_FOUND,
            "transcript unavailable",
        )),
        Ok(Err(ProviderError::InvalidCursor)) => Err(ApiError::invalid("cursor is invalid")),
        Ok(Err(e)) => Err(ApiError::internal(e.to_string())),
        Err(e) => Err(ApiError::internal(format!("worker task failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node on `127.0.0.1:0` serving `root` with token `nt`, on its own runtime.
    struct Node {
        rt: tokio::runtime::Runtime,
        port: u16,
        stop_tx: tokio::sync::oneshot::Sender<()>,
        server: tokio::task::JoinHandle<std::io::Result<()>>,
    }

    impl Node {
        fn start(root: &std::path::Path) -> Node {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
            let port = listener.local_addr().unwrap().port();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let cfg = NodeServerConfig {
                node_id: "laptop".into(),
                token: Some("nt".into()),
                claude_root: root.to_path_buf(),
                codex_home: None,
                bind: "127.0.0.1:0".parse().unwrap(),
                http: HttpSettings::default(),
            };
            let server = rt.spawn(run_node(listener, cfg, async {
                let _ = stop_rx.await;
            }));
            Node {
                rt,
                port,
                stop_tx,
                server,
            }
        }
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"nt", b"nt"));
        assert!(!constant_time_eq(b"nt", b"nx"));
        assert!(!constant_time_eq(b"nt", b"ntt"));
        assert!(!constant_time_eq(b"", b"nt"));
        assert!(constant_time_eq(b"", b""));
    }

    const THREAD: &str = "0b9f0c2e-1d3a-4c5b-8e7f-112233445566";

    fn get(port: u16, path: &str, token: Option<&str>) -> (u16, Value, Option<String>) {
        let mut req = ureq::get(&format!("http://127.0.0.1:{port}{path}"));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{path}: {e}"),
        };
        let status = resp.status();
        let www = resp.header("WWW-Authenticate").map(str::to_string);
        (status, resp.into_json().unwrap_or(Value::Null), www)
    }

    #[test]
    fn routes_auth_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        std::fs::create_dir_all(&project).unwrap();
        let rows = [
            json!({"type": "user", "uuid": "u-1", "cwd": "/w",
                   "message": {"role": "user", "content": "hello node"}}),
            json!({"type": "assistant", "uuid": "a-1",
                   "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}}),
        ];
        let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(project.join(format!("{THREAD}.jsonl")), text).unwrap();

        let Node {
            rt,
            port,
            stop_tx,
            server,
        } = Node::start(dir.path());

        let (s, body, _) = get(port, "/health", None);
        assert_eq!(
            (s, body),
            (200, json!({"status": "ok", "nodeId": "laptop"}))
        );

        let (s, body, www) = get(port, "/v1/node/claude/threads", None);
        assert_eq!(
            (s, body["error"]["code"].as_str()),
            (401, Some("unauthorized"))
        );
        assert_eq!(www.as_deref(), Some("Bearer"));
        let (s, _, _) = get(port, "/v1/node/claude/threads", Some("wrong"));
        assert_eq!(s, 401);

        let (s, body, _) = get(port, "/v1/node/claude/threads?limit=10", Some("nt"));
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["items"][0]["threadId"], json!(THREAD));
        assert_eq!(body["items"][0]["catalogId"], json!("claude"));
        assert_eq!(body["items"][0]["title"], json!("hello node"));
        assert_eq!(body["items"][0]["cwd"], json!("/w"));
        assert!(body.get("nextCursor").is_none());

        let items_path = format!("/v1/node/claude/threads/{THREAD}/items");
        let (s, body, _) = get(port, &items_path, Some("nt"));
        assert_eq!(s, 200, "{body}");
        let uuids: Vec<&str> = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["uuid"].as_str().unwrap())
            .collect();
        assert_eq!(uuids, ["a-1", "u-1"]);
        let (s, body, _) = get(port, &format!("{items_path}?limit=1"), Some("nt"));
        assert_eq!((s, body["items"].as_array().map(Vec::len)), (200, Some(1)));
        for bad in ["0", "51", "x"] {
            let (s, body, _) = get(port, &format!("{items_path}?limit={bad}"), Some("nt"));
            assert_eq!(
                (s, body["error"]["code"].as_str()),
                (400, Some("invalid_argument"))
            );
        }
        let (s, body, _) = get(
            port,
            "/v1/node/claude/threads/0b9f0c2e-1d3a-4c5b-8e7f-000000000000/items",
            Some("nt"),
        );
        assert_eq!(
            (s, body["error"]["code"].as_str()),
            (404, Some("thread_not_found"))
        );
        let (s, body, _) = get(port, "/v1/node/claude/threads/a%2Fb/items", Some("nt"));
        assert_eq!(
            (s, body["error"]["code"].as_str()),
            (404, Some("thread_not_found"))
        );
        let (s, body, _) = get(port, "/v1/node/claude/threads?cursor=zz", Some("nt"));
        assert_eq!(
            (s, body["error"]["code"].as_str()),
            (400, Some("invalid_argument"))
        );
        let (s, body, _) = get(port, "/v1/nope", Some("nt"));
        assert_eq!(
            (s, body["error"]["code"].as_str()),
            (404, Some("not_found"))
        );

        let _ = stop_tx.send(());
        rt.block_on(server).unwrap().unwrap();
    }

    /// `aware node serve` closes like the gateway: a 401 answered before an 8 MiB body is read
    /// reaches a client that writes 2 MiB of it before reading, every time (a close with the
    /// body unread would reset the connection and fail that write).
    #[test]
    fn an_early_refusal_with_a_large_body_arrives_whole() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let Node {
            rt,
            port,
            stop_tx,
            server,
        } = Node::start(dir.path());
        let head = format!(
            "POST /v1/node/claude/threads HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n",
            8 << 20
        );
        let request = [head.into_bytes(), vec![b' '; 2 << 20]].concat();
        for round in 0..50 {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream
                .write_all(&request)
                .unwrap_or_else(|e| panic!("round {round}: the request could not be written: {e}"));
            let mut answer = String::new();
            stream
                .read_to_string(&mut answer)
                .unwrap_or_else(|e| panic!("round {round}: the answer could not be read: {e}"));
            assert!(
                answer.starts_with("HTTP/1.1 401 ") && answer.ends_with('}'),
                "round {round}: {answer:?}"
            );
        }
        let _ = stop_tx.send(());
        rt.block_on(server).unwrap().unwrap();
    }
}
