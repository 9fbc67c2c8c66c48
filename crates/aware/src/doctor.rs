//! `aware doctor`: checks what a new setup gets wrong, each failure with the fix.
//! Exit status 0 when every check passed, 1 otherwise.

use crate::client::{out, seg, Client, Failure};
use crate::context::{self, Conn};
use crate::doctor_gemini::Finding;
use crate::init::codex::{codex_home, trust_hash, EVENTS as CODEX_EVENTS};
use crate::init::setup::is_aware_hook;
use crate::style::{paint, Colour, Stream};
use anyhow::Result;
use serde_json::Value;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// Project whose Claude Code (.claude/settings.json, .mcp.json), Codex (.codex/) and Gemini
    /// CLI (.gemini/settings.json) configs are checked [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Claude Code projects directory to check [default: ~/.claude/projects].
    #[arg(long, value_name = "DIR")]
    pub claude_root: Option<PathBuf>,
}

struct Report {
    failed: usize,
}

/// The status word, padded to the column, coloured on a terminal.
fn word(colour: Colour, w: &str) -> String {
    let padded = format!("{w:<6}");
    // Pad first so an escape sequence never shifts the column.
    paint(Stream::Stdout, colour, w) + &padded[w.len()..]
}

impl Report {
    fn ok(&mut self, what: &str) {
        out(&format!("{}{what}", word(Colour::Green, "ok")));
    }
    fn fail(&mut self, what: &str, fix: &str) {
        self.failed += 1;
        out(&format!(
            "{}{what}\n      fix: {fix}",
            word(Colour::Red, "FAIL")
        ));
    }
    fn warn(&mut self, what: &str, fix: &str) {
        out(&format!(
            "{}{what}\n      fix: {fix}",
            word(Colour::Yellow, "warn")
        ));
    }
}

pub fn run(args: DoctorArgs, outer: &Conn) -> Result<()> {
    let mut r = Report { failed: 0 };
    let settings = context::resolve(args.conn.or(outer), None)
        .and_then(|r| Ok((Client::new(r.clone(), false)?, r)));
    let (c, resolved) = match settings {
        Ok(x) => x,
        Err(f) => {
            r.fail(
                &format!("client settings: {}", f.message()),
                "correct the flag, variable or client.toml",
            );
            std::process::exit(1);
        }
    };
    if let Ok(path) = context::client_file_path() {
        if path.exists() {
            r.ok(&format!("client context {} read", path.display()));
        }
    }
    let reachable = gateway(&mut r, &c);
    if reachable {
        token(&mut r, &c);
    }
    let project = args
        .project
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("."));
    let mut sessions: Vec<String> = Vec::new();
    claude_settings(&mut r, &project, &mut sessions);
    mcp_json(&mut r, &project, &mut sessions);
    codex(&mut r, &project, &mut sessions);
    for f in crate::doctor_gemini::check(&project) {
        match f {
            Finding::Ok(what) => r.ok(&what),
            Finding::Fail(what, fix) => r.fail(&what, &fix),
            Finding::Warn(what, fix) => r.warn(&what, &fix),
            Finding::Program(what, prog) => check_program(&mut r, &what, &prog),
            Finding::Session(s) => sessions.push(s),
        }
    }
    sessions.sort();
    sessions.dedup();
    if sessions.len() > 1 {
        r.warn(
            &format!(
                "the hook and the MCP server use different sessions: {}",
                sessions.join(", ")
            ),
            "give both the same --session so each notice reaches the model once",
        );
    }
    if let Some(s) = resolved.session.clone() {
        sessions.push(s);
    }
    sessions.dedup();
    if reachable {
        sessions_exist(&mut r, &c, &resolved, &sessions);
    }
    claude_root(&mut r, args.claude_root);
    if r.failed > 0 {
        out(&format!("{} check(s) failed", r.failed));
        std::process::exit(1);
    }
    out("all checks passed");
    Ok(())
}

/// 1. The gateway answers `/health`. Answers whether it is reachable at all.
fn gateway(r: &mut Report, c: &Client) -> bool {
    let health = c.http.request("GET", "/health").operator().send(None);
    match health {
        Ok(_) => {
            r.ok(&format!("gateway answers at {}", c.url()));
            true
        }
        Err(e) if !e.is_unavailable() => {
            let code = e.status().map_or_else(|| e.to_string(), |s| s.to_string());
            r.fail(
                &format!("gateway at {} answers /health with {code}", c.url()),
                "it is starting or its store is unavailable; see the `aware serve` log",
            );
            true
        }
        Err(e) => {
            r.fail(
                Failure::from(e).message(),
                "start it with `aware serve` (or set --url / AWARE_URL / url in client.toml)",
            );
            false
        }
    }
}

/// 2. The gateway takes the token.
fn token(r: &mut Report, c: &Client) {
    // As the operator: this checks the token, and a caller session from client.toml that
    // does not exist yet is the session check's finding (step 4), not a token failure.
    let listed = c
        .http
        .request("GET", "/v1/sessions?limit=1")
        .operator()
        .json(None)
        .map_err(Failure::from);
    match listed {
        Ok(_) => r.ok(if c.http.token().is_some() {
            "token accepted"
        } else {
            "no token needed"
        }),
        Err(Failure::Server(m)) if m.starts_with("unauthorized") => r.fail(
            "the gateway refuses the token",
            "set --token, AWARE_TOKEN or token_file in client.toml to the gateway's token",
        ),
        Err(Failure::Server(m) | Failure::Unreachable(m) | Failure::Usage(m)) => r.fail(
            &format!("listing sessions failed: {m}"),
            "see the error above (the `aware serve` log has the gateway's side)",
        ),
    }
}

/// 3a. The project's Claude Code settings carry the hook on every event it acts on.
fn claude_settings(r: &mut Report, project: &std::path::Path, sessions: &mut Vec<String>) {
    let settings = project.join(".claude/settings.json");
    match read(&settings) {
        None => r.warn(
            &format!("no {}", settings.display()),
            "run `aware init claude-code` in the project",
        ),
        Some(Err(e)) => r.fail(&format!("{}: {e}", settings.display()), "fix the JSON"),
        Some(Ok(v)) => {
            let ours = |event: &str| -> Vec<String> {
                v["hooks"][event]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
                    .filter_map(|h| h["command"].as_str().map(str::to_string))
                    .filter(|c| is_aware_hook(c))
                    .collect()
            };
            let cmds = ours("UserPromptSubmit");
            match cmds.first() {
                None => r.fail(
                    &format!("{} has no aware UserPromptSubmit hook", settings.display()),
                    "run `aware init claude-code`",
                ),
                Some(cmd) => {
                    check_program(r, "hook", cmd.split_whitespace().next().unwrap_or(""));
                    if let Some(s) =
                        flag_value(cmd.split_whitespace().map(|w| w.trim_matches('\'')))
                    {
                        sessions.push(s);
                    }
                    // An install from before PostToolBatch hands over mid-run on PostToolUse
                    // (one drain per tool call, still exactly once): it works, so it counts.
                    let superseded = !ours(crate::init::claude::SUPERSEDED).is_empty();
                    let missing: Vec<&str> = crate::init::claude::EVENTS
                        .into_iter()
                        .filter(|e| ours(e).is_empty())
                        .filter(|e| !(*e == "PostToolBatch" && superseded))
                        .collect();
                    if missing.is_empty() && superseded && ours("PostToolBatch").is_empty() {
                        r.ok(
                            "the hook is on every event it acts on (mid-run on PostToolUse: \
                              `aware init claude-code` again makes it one run per tool batch)",
                        );
                    } else if missing.is_empty() {
                        r.ok("the hook is on every event it acts on");
                    } else {
                        r.warn(
                            &format!("the hook is not on {}: a running agent hears a change only at the next prompt", missing.join(", ")),
                            "run `aware init claude-code` again",
                        );
                    }
                    if !ours("Stop").iter().any(|c| c.contains("--wait")) {
                        r.warn(
                            "no waiting Stop hook: an idle session is not woken by a change",
                            "run `aware init claude-code` again (without --no-wake)",
                        );
                    }
                }
            }
        }
    }
}

/// 3b. The project's .mcp.json runs `aware mcp` with a session.
fn mcp_json(r: &mut Report, project: &std::path::Path, sessions: &mut Vec<String>) {
    let mcp = project.join(".mcp.json");
    match read(&mcp) {
        None => r.warn(
            &format!("no {}", mcp.display()),
            "run `aware init claude-code` in the project",
        ),
        Some(Err(e)) => r.fail(&format!("{}: {e}", mcp.display()), "fix the JSON"),
        Some(Ok(v)) => match v["mcpServers"]["aware"].as_object() {
            None => r.fail(
                &format!("{} has no \"aware\" server", mcp.display()),
                "run `aware init claude-code`",
            ),
            Some(s) => {
                check_program(
                    r,
                    "MCP server",
                    s.get("command").and_then(Value::as_str).unwrap_or(""),
                );
                let args: Vec<String> = s
                    .get("args")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_string))
                    .collect();
                match flag_value(args.iter().map(String::as_str)) {
                    Some(k) => sessions.push(k),
                    None => r.fail(
                        "the MCP server has no --session",
                        "run `aware init claude-code` (aware mcp needs --session)",
                    ),
                }
            }
        },
    }
}

/// 4. Each session the configs name exists on the gateway.
fn sessions_exist(r: &mut Report, c: &Client, resolved: &context::Resolved, sessions: &[String]) {
    for s in sessions {
        match c.call("GET", &format!("/v1/sessions/{}", seg(s)), None) {
            Ok(_) => r.ok(&format!("session {s} exists")),
            Err(Failure::Server(m)) if m.starts_with("session_not_found") => r.warn(
                &format!("session {s} does not exist yet"),
                &format!(
                    "`aware create {s}` creates it (so do `aware init claude-code`, the hook \
                     and `aware mcp` on first use){}",
                    if resolved.session_from_file && resolved.session.as_deref() == Some(s) {
                        "; or remove `session` from client.toml"
                    } else {
                        ""
                    }
                ),
            ),
            Err(Failure::Server(m) | Failure::Unreachable(m) | Failure::Usage(m)) => {
                r.fail(&format!("session {s}: {m}"), "see the message")
            }
        }
    }
}

/// 5. The Claude projects directory exists.
fn claude_root(r: &mut Report, root: Option<PathBuf>) {
    let root = match root.map_or_else(
        || crate::home::home_dir().map(|h| h.join(".claude/projects")),
        Ok,
    ) {
        Ok(root) => root,
        Err(e) => {
            r.warn(&format!("Claude root: {e}"), "set HOME");
            return;
        }
    };
    if root.is_dir() {
        r.ok(&format!("Claude root {} exists", root.display()));
    } else {
        r.warn(
            &format!("Claude root {} does not exist", root.display()),
            "run Claude Code once, or set [claude] root in the gateway's config.toml (catalog and adoption read it)",
        );
    }
}

/// Codex: each hooks.json with aware hooks (the project's and `$CODEX_HOME`'s) has a trust
/// entry per aware handler (Codex skips an untrusted hook silently), and the project is trusted.
fn codex(r: &mut Report, project: &std::path::Path, sessions: &mut Vec<String>) {
    let home = match codex_home() {
        Ok(h) => h,
        Err(e) => {
            r.fail(&format!("Codex: {e}"), "set HOME or CODEX_HOME");
            return;
        }
    };
    let config_path = home.join("config.toml");
    let config: toml_edit::DocumentMut = match std::fs::read_to_string(&config_path) {
        Ok(t) => match t.parse() {
            Ok(d) => d,
            Err(e) => {
                r.fail(
                    &format!(
                        "{} is not valid TOML: {}",
                        config_path.display(),
                        e.to_string().trim()
                    ),
                    "fix the TOML",
                );
                return;
            }
        },
        Err(_) => toml_edit::DocumentMut::new(),
    };
    let project = project
        .canonicalize()
        .unwrap_or_else(|_| project.to_path_buf());
    for (path, in_project) in [
        (project.join(".codex/hooks.json"), true),
        (home.join("hooks.json"), false),
    ] {
        let Some(v) = read(&path) else { continue };
        let v = match v {
            Ok(v) => v,
            Err(e) => {
                r.fail(&format!("{}: {e}", path.display()), "fix the JSON");
                continue;
            }
        };
        let (found, untrusted) = aware_handlers(&v, &path, &config, sessions);
        if found == 0 {
            continue;
        }
        if !has_waiting_hook(&v) {
            r.warn(
                &format!(
                    "no waiting Stop hook in {}: an idle Codex session is not woken by a change",
                    path.display()
                ),
                "run `aware init codex` again (without --no-wake)",
            );
        }
        if untrusted.is_empty() {
            r.ok(&format!("Codex hooks in {} are trusted", path.display()));
        } else {
            r.fail(
                &format!(
                    "Codex skips the aware hooks of {} silently: no matching trust entry in {} for {}",
                    path.display(),
                    config_path.display(),
                    untrusted.join(", ")
                ),
                "run `aware init codex` again (it writes the trust entries)",
            );
        }
        if in_project {
            let trusted = config
                .get("projects")
                .and_then(|p| p.get(project.to_string_lossy().as_ref()))
                .and_then(|p| p.get("trust_level"))
                .and_then(|t| t.as_str())
                == Some("trusted");
            if !trusted {
                r.warn(
                    &format!(
                        "Codex reads {}/.codex/ only in a trusted project, and this one is not",
                        project.display()
                    ),
                    "trust the project in Codex, or run `aware init codex --trust-project`",
                );
            }
        }
    }
}

/// Does a Codex hooks.json run aware's waiting hook on Stop, asynchronously (a synchronous one
/// would hold every turn's end until it gave up)?
fn has_waiting_hook(v: &Value) -> bool {
    v["hooks"]["Stop"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["hooks"].as_array().into_iter().flatten())
        .any(|h| {
            h["async"] == true
                && h["command"].as_str().is_some_and(|c| {
                    is_aware_hook(c) && c.split_whitespace().any(|w| w == "--wait")
                })
        })
}

/// The aware handlers of one Codex hooks.json `v` at `path`: how many there are, and the events
/// of those without a matching trust entry in Codex's `config`. Each handler's `--session` joins
/// `sessions`.
fn aware_handlers(
    v: &Value,
    path: &std::path::Path,
    config: &toml_edit::DocumentMut,
    sessions: &mut Vec<String>,
) -> (usize, Vec<&'static str>) {
    let mut found = 0;
    let mut untrusted = Vec::new();
    for (event, label) in CODEX_EVENTS {
        for (g, group) in v["hooks"][event]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for (h, handler) in group["hooks"].as_array().into_iter().flatten().enumerate() {
                let Some(cmd) = handler["command"].as_str().filter(|c| is_aware_hook(c)) else {
                    continue;
                };
                found += 1;
                if let Some(s) = flag_value(cmd.split_whitespace().map(|w| w.trim_matches('\''))) {
                    sessions.push(s);
                }
                let timeout = handler["timeout"].as_u64().unwrap_or(600);
                let is_async = handler["async"].as_bool().unwrap_or(false);
                let key = format!("{}:{label}:{g}:{h}", path.display());
                let have = config
                    .get("hooks")
                    .and_then(|x| x.get("state"))
                    .and_then(|x| x.get(key.as_str()))
                    .and_then(|x| x.get("trusted_hash"))
                    .and_then(|x| x.as_str());
                if have != Some(trust_hash(label, cmd, timeout, is_async).as_str()) {
                    untrusted.push(event);
                }
            }
        }
    }
    (found, untrusted)
}

fn read(p: &std::path::Path) -> Option<Result<Value, String>> {
    let text = std::fs::read_to_string(p).ok()?;
    Some(serde_json::from_str(&text).map_err(|e| format!("not valid JSON: {e}")))
}

/// The value after `--session`.
fn flag_value<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<String> {
    while let Some(w) = words.next() {
        if w == "--session" {
            return words.next().map(str::to_string);
        }
        if let Some(v) = w.strip_prefix("--session=") {
            return Some(v.to_string());
        }
    }
    None
}

/// The configured program exists (an absolute path) or is found on PATH.
fn check_program(r: &mut Report, what: &str, prog: &str) {
    let prog = prog.trim_matches(|c| c == '\'' || c == '"');
    let found = if prog.contains('/') {
        std::path::Path::new(prog).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
    };
    if found {
        r.ok(&format!("{what} runs {prog}"));
    } else {
        r.fail(
            &format!("{what} runs {prog:?}, which is not there"),
            "install aware (`cargo install --path crates/aware --locked`) and run `aware init claude-code` again",
        );
    }
}
