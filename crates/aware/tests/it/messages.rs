//! Messages to a session an agent CLI runs (`aware_engine`'s `messages`), black box: handed
//! over by a drain exactly once with the sender named, answered by `…/replies` once, and left
//! to the host's own reading for a session a host runs.

use crate::common::*;
use serde_json::json;

const SENDER: &str = "agent:main:lead";
const CLI: &str = "agent:main:worker";
const HOSTED: &str = "agent:main:hosted";

fn hub() -> Server {
    let s = Server::start();
    s.create(SENDER);
    s.create(HOSTED);
    // As the hook (and `aware init`) create the session of a CLI.
    let r = s.post("/v1/sessions", json!({"key": CLI, "createdVia": "hook"}));
    assert_eq!(r.status, 201, "{}", r.body);
    s.drain(CLI);
    s
}

fn send(s: &Server, to: &str, text: &str) -> String {
    let r = s.tool(
        SENDER,
        "sessions_send",
        json!({"sessionKey": to, "message": text, "timeoutSeconds": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["runId"].as_str().unwrap().to_string()
}

fn replies(s: &Server, key: &str, text: &str) -> Vec<String> {
    let r = s.post(
        &format!("/v1/sessions/{}/replies", seg(key)),
        json!({ "text": text }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    serde_json::from_value(r.body["replied"].clone()).unwrap()
}

#[test]
fn a_message_to_a_cli_session_is_handed_over_once_with_its_sender() {
    let s = hub();
    send(&s, CLI, "please rebase on main");
    let d = s.drain(CLI);
    let prompt = d["prompt"].as_str().unwrap();
    assert!(
        prompt.contains(
            "Message from session \"agent:main:lead\" (another agent, by sessions_send): please \
             rebase on main\nSystem: The text you end this turn with is sent back to \
             \"agent:main:lead\" as your reply."
        ),
        "{prompt}"
    );
    assert_eq!(s.drain(CLI)["prompt"], "", "handed over twice");
    // A session its host runs reads the message turn itself: nothing is queued for it.
    send(&s, HOSTED, "hello");
    assert_eq!(s.drain(HOSTED)["prompt"], "");
}

#[test]
fn the_stop_text_answers_each_handed_over_message_once_and_ends_the_wait() {
    let s = std::sync::Arc::new(hub());
    let first = send(&s, CLI, "one");
    // Not handed over yet: a reply now answers nothing.
    assert_eq!(replies(&s, CLI, "too early"), Vec::<String>::new());
    s.drain(CLI);
    let s2 = s.clone();
    let waiter = std::thread::spawn(move || {
        s2.tool(
            SENDER,
            "sessions_send",
            json!({"sessionKey": CLI, "message": "two", "timeoutSeconds": 60}),
        )
    });
    // The waiting send is queued (peeked), then handed over.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !s.pending(CLI)["prompt"]
        .as_str()
        .unwrap_or("")
        .contains(": two")
    {
        assert!(std::time::Instant::now() < deadline, "never queued");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    s.drain(CLI);
    let answered = replies(&s, CLI, "done both");
    assert_eq!(answered.len(), 2, "{answered:?}");
    assert_eq!(answered[0], first);
    let r = waiter.join().unwrap();
    assert_eq!(r.body["status"], "ok", "{}", r.body);
    assert_eq!(r.body["reply"], "done both");
    // Answered once: a later stop answers nothing.
    assert_eq!(replies(&s, CLI, "again"), Vec::<String>::new());
    let r = s.tool(SENDER, "sessions_history", json!({"sessionKey": CLI}));
    let replies_recorded = r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!(replies_recorded, 2, "{}", r.body);
}

#[test]
fn replies_refuses_bad_bodies_and_missing_sessions() {
    let s = hub();
    let path = format!("/v1/sessions/{}/replies", seg(CLI));
    for (body, says) in [
        (json!({}), "text"),
        (json!({"text": 3}), "text"),
        (json!({"text": "x", "runId": "r"}), "runId"),
    ] {
        let r = s.post(&path, body.clone());
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert!(r.message().contains(says), "{body}: {}", r.body);
    }
    let r = s.post(
        &format!("/v1/sessions/{}/replies", seg("agent:main:none")),
        json!({"text": "x"}),
    );
    assert_eq!(r.code(), "session_not_found", "{}", r.body);
}

#[test]
fn an_agent_token_answers_only_its_own_agents_messages() {
    let secrets = tempfile::tempdir().unwrap();
    let ops = secrets.path().join("ops.token");
    std::fs::write(&ops, "ops-token-0123456789ab\n").unwrap();
    let s = Server::with_args(
        &format!(
            "{DEFAULT_CONFIG}[agents.ops]\ntoken_file = \"{}\"\n",
            ops.display()
        ),
        &["--token", "main-token-0123456789"],
    );
    let r = s.post("/v1/sessions", json!({"key": CLI, "createdVia": "hook"}));
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.request_with(
        "POST",
        &format!("/v1/sessions/{}/replies", seg(CLI)),
        &[("Authorization", "Bearer ops-token-0123456789ab".into())],
        Some(r#"{"text":"not yours"}"#),
    );
    assert_eq!(r.status, 403, "{}", r.body);
}
