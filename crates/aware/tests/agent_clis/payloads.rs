//! The hook payloads of the pinned CLIs, captured with a hook on every event that dumps its
//! stdin: the fields `aware hook` reads must be there, under these names. A CLI upgrade that
//! renames one fails here first, with the payload in the message.

use super::support::*;
use serde_json::{json, Value};

fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    let f = &v[name];
    assert!(!f.is_null(), "no `{name}` in {v}");
    f
}

/// One payload of `event`, asserting there is exactly one.
fn one<'a>(all: &'a [Value], event: &str) -> &'a Value {
    let found = of_event(all, event);
    assert_eq!(
        found.len(),
        1,
        "{event}: {} payloads; all events: {:?}",
        found.len(),
        all.iter()
            .map(|v| v["hook_event_name"].clone())
            .collect::<Vec<_>>()
    );
    found[0]
}

/// One PostToolBatch per response with tool calls (one call each here), naming its calls:
/// `tools`, sorted.
fn one_batch_per_tool_call_response(all: &[Value], tools: &[&str]) {
    let batches = of_event(all, "PostToolBatch");
    let mut batch_tools: Vec<String> = batches
        .iter()
        .flat_map(|v| {
            field(v, "tool_calls")
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| {
            field(&c, "tool_use_id");
            c["tool_name"].as_str().unwrap_or("").to_string()
        })
        .collect();
    batch_tools.sort_unstable();
    assert_eq!(batch_tools, tools, "{batches:?}");
    assert_eq!(batches.len(), tools.len(), "{batches:?}");
}

#[test]
fn claude_code_hook_payloads_carry_what_the_hook_reads() {
    let home = AgentHome::new();
    home.trust_claude();
    let (hook, dir) = dump_hook(&home);
    claude_hooks(&home, CLAUDE_EVENTS, &hook);
    // A tool call, a native subagent in the foreground, a final answer; then /compact.
    let model = ModelServer::start(
        Script::new(vec![
            Step::shell("toolu_1", "echo hi").with_text("Let me look."),
            Step::tool(
                "toolu_2",
                "Agent",
                json!({"description": "look around", "prompt": "Say what you see.",
                    "subagent_type": "general-purpose", "run_in_background": false}),
            ),
            Step::text("All done."),
        ])
        .with_subagent(vec![Step::text("I see a project.")]),
    );
    let run = home.claude_print(&model, "do the task", &["--allowedTools", "Bash(echo:*)"]);
    run.assert_success("claude -p", &model);
    assert_eq!(run.json()["result"], "All done.", "{}", run.stdout);
    let session = run.json()["session_id"]
        .as_str()
        .expect("session_id")
        .to_string();
    let compact = home.claude_print(&model, "/compact", &["--resume", &session]);
    compact.assert_success("claude -p /compact", &model);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_eq!(model.lane(Lane::Compaction).len(), 1, "{}", model.summary());

    let all = dumps(&dir);
    for v in &all {
        assert_eq!(v["session_id"], session.as_str(), "{v}");
        assert!(v["transcript_path"].is_string(), "{v}");
        assert!(v["cwd"].is_string(), "{v}");
    }
    let starts = of_event(&all, "SessionStart");
    let sources: Vec<&str> = starts
        .iter()
        .map(|v| field(v, "source").as_str().unwrap_or(""))
        .collect();
    for want in ["startup", "resume", "compact"] {
        assert!(sources.contains(&want), "SessionStart sources {sources:?}");
    }
    assert_eq!(
        field(one(&all, "UserPromptSubmit"), "prompt"),
        "do the task"
    );
    let post: Vec<&Value> = of_event(&all, "PostToolUse");
    let mut tools: Vec<&str> = post
        .iter()
        .map(|v| field(v, "tool_name").as_str().unwrap_or(""))
        .collect();
    tools.sort_unstable();
    assert_eq!(tools, ["Agent", "Bash"], "{post:?}");
    for v in &post {
        field(v, "tool_use_id");
        field(v, "tool_response");
    }
    one_batch_per_tool_call_response(&all, &["Agent", "Bash"]);
    let stop = one(&all, "Stop");
    assert_eq!(field(stop, "stop_hook_active"), false);
    assert_eq!(field(stop, "last_assistant_message"), "All done.");
    let sub_start = one(&all, "SubagentStart");
    let agent_id = field(sub_start, "agent_id").clone();
    assert_eq!(field(sub_start, "agent_type"), "general-purpose");
    // The native subagent's stop, and the compaction's forked agent's stop: that one has an
    // empty agent_type and no SubagentStart.
    let sub_stops = of_event(&all, "SubagentStop");
    assert_eq!(sub_stops.len(), 2, "{sub_stops:?}");
    let native: Vec<&&Value> = sub_stops
        .iter()
        .filter(|v| v["agent_id"] == agent_id)
        .collect();
    assert_eq!(native.len(), 1, "{sub_stops:?}");
    assert_eq!(field(native[0], "agent_type"), "general-purpose");
    assert_eq!(field(native[0], "stop_hook_active"), false);
    assert_eq!(
        field(native[0], "last_assistant_message"),
        "I see a project."
    );
    field(native[0], "agent_transcript_path");
    let fork: Vec<&&Value> = sub_stops
        .iter()
        .filter(|v| v["agent_id"] != agent_id)
        .collect();
    assert_eq!(fork[0]["agent_type"], "", "{fork:?}");
    assert_eq!(field(one(&all, "PreCompact"), "trigger"), "manual");
    assert_eq!(field(one(&all, "PostCompact"), "trigger"), "manual");
    assert_eq!(of_event(&all, "SessionEnd").len(), 2, "one per run");

    let named: Vec<(String, &Value)> = all.iter().map(|v| (claude_payload_name(v), v)).collect();
    save_payloads("claude-code", &named);
}

/// The file name a captured Claude Code payload is saved under: its event, told apart where
/// one run has several.
fn claude_payload_name(v: &Value) -> String {
    let event = v["hook_event_name"].as_str().unwrap_or("unknown");
    match event {
        "SessionStart" => format!("SessionStart-{}", v["source"].as_str().unwrap_or("")),
        "SubagentStop" if v["agent_type"] == "" => "SubagentStop-compaction-fork".to_string(),
        "PostToolUse" => format!("PostToolUse-{}", v["tool_name"].as_str().unwrap_or("")),
        "PostToolBatch" => format!(
            "PostToolBatch-{}",
            v["tool_calls"][0]["tool_name"].as_str().unwrap_or("")
        ),
        _ => event.to_string(),
    }
}

#[test]
fn codex_hook_payloads_carry_what_the_hook_reads_and_compaction_runs_headless() {
    let home = AgentHome::new();
    let (hook, dir) = dump_hook(&home);
    codex_hooks(&home, CODEX_EVENTS, &hook, None);
    // Usage above the auto-compaction limit makes Codex compact after the tool call.
    let model = ModelServer::start(
        Script::new(vec![
            Step::shell("call_1", "echo hi"),
            Step::text("All done."),
        ])
        .with_usage_tokens(50_000),
    );
    let run = home.codex_exec(
        &model,
        "do the task",
        &["-c", "model_auto_compact_token_limit=1000"],
    );
    run.assert_success("codex exec", &model);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_eq!(model.lane(Lane::Compaction).len(), 1, "{}", model.summary());

    let all = dumps(&dir);
    let session = field(one(&all, "UserPromptSubmit"), "session_id").clone();
    for v in &all {
        assert_eq!(v["session_id"], session, "{v}");
        assert!(v["transcript_path"].is_string(), "{v}");
    }
    assert_eq!(
        field(one(&all, "UserPromptSubmit"), "prompt"),
        "do the task"
    );
    let post = one(&all, "PostToolUse");
    assert_eq!(field(post, "tool_name"), "Bash");
    assert_eq!(field(post, "tool_use_id"), "call_1");
    assert_eq!(field(post, "tool_input")["command"], "echo hi");
    let stop = one(&all, "Stop");
    assert_eq!(field(stop, "stop_hook_active"), false);
    assert_eq!(field(stop, "last_assistant_message"), "All done.");
    assert_eq!(field(one(&all, "PreCompact"), "trigger"), "auto");
    assert_eq!(field(one(&all, "PostCompact"), "trigger"), "auto");
    let mut sources: Vec<&str> = of_event(&all, "SessionStart")
        .iter()
        .map(|v| field(v, "source").as_str().unwrap_or(""))
        .collect();
    sources.sort_unstable();
    assert_eq!(sources, ["compact", "startup"]);
    // Each hook Codex ran is named on stderr.
    for e in ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"] {
        assert!(
            run.stderr.contains(&format!("hook: {e} Completed")),
            "{e}: {}",
            run.stderr
        );
    }

    let named: Vec<(String, &Value)> = all
        .iter()
        .map(|v| {
            let event = v["hook_event_name"].as_str().unwrap_or("unknown");
            let name = if event == "SessionStart" {
                format!("SessionStart-{}", v["source"].as_str().unwrap_or(""))
            } else {
                event.to_string()
            };
            (name, v)
        })
        .collect();
    save_payloads("codex", &named);
}

/// The trust rule `aware init codex` must follow: a hook whose `trusted_hash` does not match
/// is skipped without a word, and the others still run.
#[test]
fn codex_skips_a_hook_whose_trust_hash_does_not_match() {
    let home = AgentHome::new();
    let (hook, dir) = dump_hook(&home);
    codex_hooks(
        &home,
        &["UserPromptSubmit", "PostToolUse", "Stop"],
        &hook,
        Some("PostToolUse"),
    );
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo hi"),
        Step::text("All done."),
    ]));
    let run = home.codex_exec(&model, "do the task", &[]);
    run.assert_success("codex exec", &model);
    let all = dumps(&dir);
    assert_eq!(of_event(&all, "UserPromptSubmit").len(), 1, "{all:?}");
    assert_eq!(of_event(&all, "Stop").len(), 1, "{all:?}");
    assert!(of_event(&all, "PostToolUse").is_empty(), "{all:?}");
    // The tool did run: its output reached the model.
    assert!(
        model.lane(Lane::Main)[1].contains("hi\n"),
        "{}",
        model.summary()
    );
}

/// The worked example of the trust hash in docs/codex.md and /tmp/agent-cli-facts.md.
#[test]
fn codex_trust_hash_worked_example() {
    assert_eq!(
        codex_trust_hash(
            "PostToolUse",
            None,
            "/usr/local/bin/aware hook --session agent:main:main",
            600
        ),
        "sha256:e09e2aab6329d2e008db8814b85b0e3a135e48634593656b62f52cdc933db405"
    );
}

/// A script that spawns a Codex subagent and waits for it: `multi_agent_v1.spawn_agent`, then
/// `wait_agent` on the id the spawn returned, then a final answer; the subagent answers once.
pub fn codex_spawn_and_wait(subagent_says: &str) -> Script {
    Script::new(vec![
        Step::tool(
            "call_spawn",
            "multi_agent_v1.spawn_agent",
            json!({"message": "Say what you see."}),
        ),
        Step::from_request(|r| {
            let out = tool_output(r, "call_spawn");
            let v: Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("spawn_agent output is not JSON ({e}): {out}"));
            let id = v["agent_id"].as_str().unwrap_or_default().to_string();
            Step::tool(
                "call_wait",
                "multi_agent_v1.wait_agent",
                json!({"targets": [id], "timeout_ms": 60000}),
            )
        }),
        Step::text("All done."),
    ])
    .with_subagent(vec![Step::text(subagent_says)])
}

#[test]
fn codex_subagent_hook_payloads() {
    let home = AgentHome::new();
    let (hook, dir) = dump_hook(&home);
    codex_hooks(&home, CODEX_EVENTS, &hook, None);
    let model = ModelServer::start(codex_spawn_and_wait("I see a project."));
    home.codex_exec(&model, "delegate a survey", &[])
        .assert_success("codex exec", &model);
    assert_eq!(model.lane(Lane::Subagent).len(), 1, "{}", model.summary());
    let all = dumps(&dir);
    let parent = field(
        of_event(&all, "SessionStart")
            .first()
            .copied()
            .expect("SessionStart"),
        "session_id",
    )
    .clone();
    let start = one(&all, "SubagentStart");
    let agent_id = field(start, "agent_id").clone();
    assert_eq!(field(start, "agent_type"), "default");
    assert_eq!(start["session_id"], parent, "the parent's session id");
    let stop = one(&all, "SubagentStop");
    assert_eq!(field(stop, "agent_id"), &agent_id);
    assert_eq!(field(stop, "stop_hook_active"), false);
    assert_eq!(field(stop, "last_assistant_message"), "I see a project.");
    field(stop, "agent_transcript_path");
    // The subagent's first prompt is a UserPromptSubmit too, told apart only by its agent_id.
    let prompts = of_event(&all, "UserPromptSubmit");
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    let sub_prompt: Vec<&&Value> = prompts
        .iter()
        .filter(|v| v["agent_id"] == agent_id)
        .collect();
    assert_eq!(sub_prompt.len(), 1, "{prompts:?}");
    assert_eq!(field(sub_prompt[0], "prompt"), "Say what you see.");
    assert_eq!(
        sub_prompt[0]["session_id"], parent,
        "the parent's session id"
    );
    save_payloads(
        "codex",
        &[
            ("SubagentStart".to_string(), start),
            ("SubagentStop".to_string(), stop),
            ("UserPromptSubmit-subagent".to_string(), *sub_prompt[0]),
        ],
    );
}

/// Tool calls inside Claude Code's native subagent: its PostToolUse and PostToolBatch carry the
/// subagent's `agent_id` (with the parent's `session_id`), which is how the hook knows they are
/// not the session's own and hands the manager's notices to neither.
#[test]
fn claude_code_subagent_tool_calls_carry_its_agent_id() {
    let home = AgentHome::new();
    home.trust_claude();
    let (hook, dir) = dump_hook(&home);
    claude_hooks(
        &home,
        &["SubagentStart", "PostToolUse", "PostToolBatch"],
        &hook,
    );
    let model = ModelServer::start(
        Script::new(vec![
            Step::tool(
                "toolu_agent",
                "Agent",
                json!({"description": "look around", "prompt": "Say what you see.",
                    "subagent_type": "general-purpose", "run_in_background": false}),
            ),
            Step::text("All done."),
        ])
        .with_subagent(vec![
            Step::shell("toolu_sub", "echo inside"),
            Step::text("I see a project."),
        ]),
    );
    let run = home.claude_print(&model, "delegate", &["--allowedTools", "Bash(echo:*)"]);
    run.assert_success("claude -p", &model);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    let all = dumps(&dir);
    let agent_id = field(one(&all, "SubagentStart"), "agent_id").clone();
    for event in ["PostToolUse", "PostToolBatch"] {
        let payloads = of_event(&all, event);
        let inside: Vec<&&Value> = payloads
            .iter()
            .filter(|v| v.to_string().contains("toolu_sub"))
            .collect();
        assert_eq!(inside.len(), 1, "{event}: {all:?}");
        assert_eq!(inside[0]["agent_id"], agent_id, "{event}: {}", inside[0]);
        let outside: Vec<&&Value> = payloads
            .iter()
            .filter(|v| v.to_string().contains("toolu_agent"))
            .collect();
        assert_eq!(outside.len(), 1, "{event}: {all:?}");
        assert!(outside[0].get("agent_id").is_none(), "{}", outside[0]);
    }
}

/// Which tool calls PostToolUse and PostToolBatch run for: a batch of an allowed call and a
/// refused one (`ls` outside `--allowedTools`), then a response with only a refused call.
/// PostToolUse runs for the allowed call only; PostToolBatch once per response, the refused
/// calls included, so a hand-over there also reaches a model whose calls were all refused.
#[test]
fn claude_code_tool_batches_include_refused_calls() {
    let home = AgentHome::new();
    home.trust_claude();
    let (hook, dir) = dump_hook(&home);
    claude_hooks(&home, &["PostToolUse", "PostToolBatch"], &hook);
    let model = ModelServer::start(Script::new(vec![
        Step::calls(vec![
            Call::shell("t_ok", "echo ok"),
            Call::shell("t_refused", "ls /"),
        ]),
        Step::shell("t_only_refused", "ls /tmp"),
        Step::text("All done."),
    ]));
    let run = home.claude_print(&model, "do it", &["--allowedTools", "Bash(echo:*)"]);
    run.assert_success("claude -p", &model);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    let all = dumps(&dir);
    let ids = |v: &Value| -> Vec<String> {
        let mut ids: Vec<String> = field(v, "tool_calls")
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["tool_use_id"].as_str().map(str::to_string))
            .collect();
        ids.sort_unstable();
        ids
    };
    let mut batches: Vec<Vec<String>> = of_event(&all, "PostToolBatch")
        .into_iter()
        .map(ids)
        .collect();
    batches.sort_unstable();
    assert_eq!(
        batches,
        [vec!["t_ok", "t_refused"], vec!["t_only_refused"]],
        "{all:?}"
    );
    let per_tool: Vec<&Value> = of_event(&all, "PostToolUse");
    assert_eq!(per_tool.len(), 1, "{per_tool:?}");
    assert_eq!(per_tool[0]["tool_use_id"], "t_ok");
}
