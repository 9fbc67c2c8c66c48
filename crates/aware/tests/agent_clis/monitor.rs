//! The transcripts and rollouts the real CLIs write today, fed to the upstream monitor: the
//! Claude Code session and the Codex rollout are adopted through the gateway (as the upstream
//! tests do with vendored rows), the CLI then takes one more typed prompt, and the monitor must
//! count exactly that one prompt as a human stepping in — whatever new row types these versions
//! write around it.

use super::support::*;
use crate::common::*;
use serde_json::{json, Value};

/// A gateway with the monitor on, reading this home's Claude root and Codex home; X exists.
fn monitor_server(home: &AgentHome) -> Server {
    let claude = home.home.join(".claude/projects");
    let codex = home.home.join(".codex");
    std::fs::create_dir_all(&claude).expect("claude root");
    std::fs::create_dir_all(&codex).expect("codex home");
    let config = format!(
        "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n[monitor]\n\
         enabled = true\n[claude]\nroot = {:?}\n[codex]\nhome = {:?}\n",
        claude.to_string_lossy(),
        codex.to_string_lossy()
    );
    let s = Server::with_config(&config);
    s.create(X);
    s
}

/// Monitor tick `n` (the monitor runs at T0 + 15 s and every 60 s after, when the test clock
/// passes those times).
fn tick(s: &mut Server, n: i64) {
    s.set_clock(T0 + 15_000 + (n - 1) * 60_000);
}

fn adopt(s: &Server, catalog: &str, thread: &str) -> String {
    let r = s.post(
        "/v1/catalog/continue",
        json!({"catalogId": catalog, "hostId": "gateway:local", "threadId": thread}),
    );
    assert_eq!(r.status, 200, "adopt {catalog} {thread}: {}", r.body);
    let key = r.body["sessionKey"]
        .as_str()
        .expect("sessionKey")
        .to_string();
    let w = s.watch(X, &key);
    assert!(w.status == 200 || w.status == 201, "{}", w.body);
    key
}

fn hdms(s: &Server, key: &str) -> Vec<Value> {
    s.status(X, key, 0)["stateChanges"]["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "human_direct_message")
        .cloned()
        .collect()
}

fn turn_texts(s: &Server, key: &str) -> Vec<String> {
    let t = s.get(&format!("/v1/sessions/{}/turns", seg(key)));
    t.body["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_real_claude_code_transcript_counts_the_typed_prompt_exactly() {
    let home = AgentHome::new();
    home.trust_claude();
    let model = ModelServer::start(Script::new(vec![
        Step::shell("toolu_1", "echo hi").with_text("Looking."),
        Step::text("First answer."),
        Step::text("Second answer."),
    ]));
    let first = home.claude_print(
        &model,
        "what is in this project?",
        &["--allowedTools", "Bash(echo:*)"],
    );
    first.assert_success("claude -p", &model);
    let session = first.json()["session_id"]
        .as_str()
        .expect("session_id")
        .to_string();
    let mut s = monitor_server(&home);
    let key = adopt(&s, "claude", &session);
    // Adoption imports the history: the typed prompt and the answers, no machine rows.
    let texts = turn_texts(&s, &key);
    assert_eq!(
        texts
            .iter()
            .filter(|t| *t == "what is in this project?")
            .count(),
        1,
        "{texts:?}"
    );
    tick(&mut s, 1);
    assert!(hdms(&s, &key).is_empty(), "nothing new since adoption");

    let second = home.claude_print(&model, "now add a test", &["--resume", &session]);
    second.assert_success("claude -p --resume", &model);
    tick(&mut s, 2);
    let found = hdms(&s, &key);
    assert_eq!(found.len(), 1, "one typed prompt: {found:?}");
    assert_eq!(found[0]["actorType"], "human", "{}", found[0]);
    assert_eq!(s.notice_texts(X).len(), 1, "{}", s.pending(X));
    tick(&mut s, 3);
    assert_eq!(hdms(&s, &key).len(), 1, "tick 3 adds nothing");
}

#[test]
fn a_real_codex_rollout_counts_the_typed_prompt_exactly() {
    let home = AgentHome::new();
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo hi"),
        Step::text("First answer."),
        Step::text("Second answer."),
    ]));
    home.codex_exec(&model, "what is in this project?", &[])
        .assert_success("codex exec", &model);
    let rollouts = home.codex_rollouts();
    assert_eq!(rollouts.len(), 1, "{rollouts:?}");
    let meta: Value = std::fs::read_to_string(&rollouts[0])
        .ok()
        .and_then(|t| t.lines().next().and_then(|l| serde_json::from_str(l).ok()))
        .expect("the rollout's first row is JSON");
    let thread = meta["payload"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no thread id in the session_meta row: {meta}"))
        .to_string();
    let mut s = monitor_server(&home);
    let key = adopt(&s, "codex", &thread);
    let texts = turn_texts(&s, &key);
    assert_eq!(
        texts
            .iter()
            .filter(|t| *t == "what is in this project?")
            .count(),
        1,
        "{texts:?}"
    );
    tick(&mut s, 1);
    assert!(hdms(&s, &key).is_empty(), "nothing new since adoption");

    // `codex exec resume ID PROMPT` appends the next turn to the same rollout.
    let mut args: Vec<String> = vec![
        "exec".into(),
        "resume".into(),
        "--skip-git-repo-check".into(),
        "--dangerously-bypass-approvals-and-sandbox".into(),
    ];
    args.extend(AgentHome::codex_offline_args(&model));
    args.push(thread.clone());
    args.push("now add a test".into());
    let second = home.codex(&model, &args);
    second.assert_success("codex exec resume", &model);
    assert_eq!(
        home.codex_rollouts(),
        rollouts,
        "resumed in the same rollout"
    );
    tick(&mut s, 2);
    let found = hdms(&s, &key);
    assert_eq!(found.len(), 1, "one typed prompt: {found:?}");
    assert_eq!(
        found[0]["summary"], "human message via codex",
        "{}",
        found[0]
    );
    assert_eq!(s.notice_texts(X).len(), 1, "{}", s.pending(X));
    tick(&mut s, 3);
    assert_eq!(hdms(&s, &key).len(), 1, "tick 3 adds nothing");
}
