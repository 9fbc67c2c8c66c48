//! `aware init` + `aware hook` + `aware mcp` with the real CLIs (decision D30): a manager session
//! KEY, set up by `aware init claude-code` / `aware init codex` in the CLI's project, watches a
//! worker session; a human steps into the worker while the agent works, and the test asserts
//! what the model was shown, request by request, and what the gateway holds afterwards.
//!
//! The change is made by a side effect of the model server at the step where it happens (say,
//! when the model asks for a tool call), so it lands at a known point of the run with no timing
//! involved. The notice the model must see is peeked (`GET …/pending`) right after the change,
//! before any hook can drain it, and searched for verbatim.

use super::support::*;
use crate::common::*;
use serde_json::{json, Value};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The manager session `aware init` sets up for the CLI.
pub(super) const KEY: &str = "agent:main:main";
/// The session it watches, where the human steps in.
pub(super) const WORKER: &str = "agent:main:worker";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cli {
    Claude,
    Codex,
}

/// A gateway, a CLI home set up by `aware init`, and KEY watching WORKER with nothing pending.
pub(super) struct Hub {
    pub(super) s: Arc<Server>,
    pub(super) home: AgentHome,
    cli: Cli,
}

impl Hub {
    /// `no_wake`: the waiting Stop hook left out (`--no-wake`), for headless runs that test
    /// something else.
    pub(super) fn new(cli: Cli, no_wake: bool) -> Self {
        Self::on(cli, no_wake, Server::start())
    }

    /// [`Hub::new`] on a gateway the test started.
    pub(super) fn on(cli: Cli, no_wake: bool, server: Server) -> Self {
        let init_args: &[&str] = if no_wake { &["--no-wake"] } else { &[] };
        let s = Arc::new(server);
        let home = AgentHome::new();
        match cli {
            Cli::Claude => home.trust_claude(),
            Cli::Codex => home.trust_codex(),
        }
        let hub = Hub { s, home, cli };
        let out = hub.init(&hub.s.base, init_args);
        assert!(
            out.status.success(),
            "aware init {cli:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if cli == Cli::Codex {
            // Project trust, if init did not write it (appends only when missing).
            hub.home.trust_codex();
        }
        hub.s.create(WORKER);
        let w = hub.s.watch(KEY, WORKER);
        assert!(w.status == 200 || w.status == 201, "watch: {}", w.body);
        // Start from nothing pending (system events of the set-up included).
        hub.s.drain(KEY);
        assert_eq!(pending_prompt(&hub.s), "", "{}", hub.s.pending(KEY));
        hub
    }

    /// `aware init claude-code|codex --project P --url URL --session KEY ARGS…`, run as the
    /// user of this home (so Codex's trust entries go to this `$HOME`).
    fn init(&self, url: &str, args: &[&str]) -> Output {
        let which = match self.cli {
            Cli::Claude => "claude-code",
            Cli::Codex => "codex",
        };
        self.home
            .command(bin())
            .args(["init", which, "--project"])
            .arg(&self.home.project)
            .args(["--url", url, "--session", KEY])
            .args(args)
            .output()
            .expect("run aware init")
    }

    /// One headless turn of the CLI on `prompt`.
    fn run(&self, model: &ModelServer, prompt: &str) -> CliRun {
        let run = match self.cli {
            Cli::Claude => self.home.claude_print(
                model,
                prompt,
                &["--allowedTools", "Bash(echo:*)", "mcp__aware"],
            ),
            Cli::Codex => self.home.codex_exec(model, prompt, &[]),
        };
        run.assert_success(&format!("{:?}", self.cli), model);
        run
    }

    /// A side effect for a step: [`human_turn_now`], its notice stored in `seen`.
    fn human_steps_in(&self, seen: &Arc<Mutex<String>>) -> impl FnOnce(&Request) + Send + 'static {
        let (s, seen) = (self.s.clone(), seen.clone());
        move |_| *seen.lock().expect("notice slot") = human_turn_now(&s)
    }
}

/// A human turn on WORKER (201), nothing more.
pub(super) fn post_human_turn(s: &Server) {
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(WORKER)),
        json!({"role": "user", "text": "use the staging database", "channel": "slack"}),
    );
    assert_eq!(r.status, 201, "human turn: {}", r.body);
}

/// A human turn on WORKER; returns the notice KEY now has pending (its drain prompt, peeked).
fn human_turn_now(s: &Server) -> String {
    post_human_turn(s);
    let prompt = pending_prompt(s);
    assert!(
        prompt.contains(&format!("Session \"{WORKER}\" changed (other actor)")),
        "{prompt}"
    );
    prompt
}

/// The drain prompt KEY has pending, as a peek (`""` when nothing is).
pub(super) fn pending_prompt(s: &Server) -> String {
    s.pending(KEY)["prompt"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn notice(seen: &Arc<Mutex<String>>) -> String {
    let n = seen.lock().expect("notice slot").clone();
    assert!(!n.is_empty(), "the side effect never ran");
    n
}

/// The main-lane requests, with the count of `notice` in each: what the model was shown. A
/// tool result the CLI shows as JSON text (an MCP tool's structured content) holds the notice
/// JSON-escaped, so both forms count.
fn shown(model: &ModelServer, notice: &str) -> Vec<usize> {
    let escaped = escaped(notice);
    model
        .lane(Lane::Main)
        .iter()
        .map(|r| {
            r.count(notice)
                + if escaped != notice {
                    r.count(&escaped)
                } else {
                    0
                }
        })
        .collect()
}

/// `text` as it reads inside a JSON string (without the quotes).
fn escaped(text: &str) -> String {
    let quoted = Value::String(text.to_string()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

/// Asserts how often the model was shown `notice`, request by request (main lane); on a
/// mismatch the message says where it was shown.
pub(super) fn assert_shown(model: &ModelServer, notice: &str, want: &[usize]) {
    let got = shown(model, notice);
    if got != want {
        let places: Vec<String> = model
            .lane(Lane::Main)
            .iter()
            .flat_map(|r| {
                let mut places = r.places(notice);
                places.extend(r.places(&escaped(notice)));
                places
                    .into_iter()
                    .map(move |p| format!("#{}: …{p}…", r.index))
            })
            .collect();
        panic!(
            "the notice was shown {got:?} times per request, want {want:?}\nnotice: {notice}\n\
             shown at:\n{}\nrequests:{}",
            places.join("\n"),
            model.summary()
        );
    }
}

/// Nothing left for KEY: the notice was handed over and acknowledged.
pub(super) fn assert_nothing_pending(s: &Server) {
    let p = s.pending(KEY);
    assert_eq!(p["notices"], json!([]), "{p}");
    assert_eq!(pending_prompt(s), "", "{p}");
}

fn mid_run_delivery(cli: Cli) {
    let hub = Hub::new(cli, true);
    let seen = Arc::new(Mutex::new(String::new()));
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working").before(hub.human_steps_in(&seen)),
        Step::text("All done."),
    ]));
    hub.run(&model, "do the task");
    let n = notice(&seen);
    // Shown in the request right after the tool call, once; not before. Later requests repeat
    // the conversation, so "once across the run" is "once in the last request".
    assert_shown(&model, &n, &[0, 1]);
    // In the same read, after the notice: who changed what, with the human's words.
    assert_shown(
        &model,
        "human_direct_message by human via slack: \"use the staging database\"",
        &[0, 1],
    );
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

#[test]
fn claude_code_hears_a_change_right_after_its_tool_call_once() {
    mid_run_delivery(Cli::Claude);
}

#[test]
fn codex_hears_a_change_right_after_its_tool_call_once() {
    mid_run_delivery(Cli::Codex);
}

fn stop_gate(cli: Cli) {
    let hub = Hub::new(cli, true);
    let seen = Arc::new(Mutex::new(String::new()));
    // The change lands while the model writes its final answer: after the last tool call, so
    // only the stop gate can deliver it.
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working"),
        Step::text("All done.").before(hub.human_steps_in(&seen)),
        Step::text("Reconciled, done."),
    ]));
    let run = hub.run(&model, "do the task");
    let n = notice(&seen);
    // Sent back once with the notice as the reason, then allowed to stop. Claude Code 2.1.332
    // (as 2.1.328) renders one Stop block twice in its next request: a user message "Stop hook
    // feedback:\n<reason>" and a system message "Stop hook blocking error from command:
    // \"<cmd>\": <reason>" (seen with a plain script hook too); Codex once, as
    // `<hook_prompt …><reason></hook_prompt>`.
    match cli {
        Cli::Claude => {
            assert_shown(&model, &n, &[0, 0, 2]);
            let last = &model.lane(Lane::Main)[2];
            assert_eq!(
                last.count(&format!("Stop hook feedback:\n{n}")),
                1,
                "{:?}",
                last.places(&n)
            );
            assert_eq!(last.count("Stop hook feedback:"), 1, "one block");
        }
        Cli::Codex => assert_shown(&model, &n, &[0, 0, 1]),
    }
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    if cli == Cli::Claude {
        assert_eq!(run.json()["result"], "Reconciled, done.", "{}", run.stdout);
    }
    assert_nothing_pending(&hub.s);
}

#[test]
fn claude_code_is_sent_back_once_when_a_change_lands_before_it_stops() {
    stop_gate(Cli::Claude);
}

#[test]
fn codex_is_sent_back_once_when_a_change_lands_before_it_stops() {
    stop_gate(Cli::Codex);
}

fn parallel_calls(cli: Cli) {
    let hub = Hub::new(cli, true);
    let seen = Arc::new(Mutex::new(String::new()));
    let model = ModelServer::start(Script::new(vec![
        Step::calls(vec![
            Call::shell("call_a", "echo one"),
            Call::shell("call_b", "echo two"),
            Call::shell("call_c", "echo three"),
        ])
        .before(hub.human_steps_in(&seen)),
        Step::text("All done."),
    ]));
    hub.run(&model, "do three things");
    let n = notice(&seen);
    // Three PostToolUse hooks, one notice: shown once.
    assert_shown(&model, &n, &[0, 1]);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

#[test]
fn claude_code_parallel_tool_calls_show_a_notice_once() {
    parallel_calls(Cli::Claude);
}

#[test]
fn codex_parallel_tool_calls_show_a_notice_once() {
    parallel_calls(Cli::Codex);
}

/// Where `aware init claude-code` put the mid-run hand-over: `PostToolBatch` (now), or
/// `PostToolUse` (an install from before; the test moves init's entry there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MidRun {
    Batch,
    PerTool,
}

/// Two parallel tool calls in one response; a human steps in when the model asks for them.
/// The notice must reach the very next model request, once; `want_drains` is how many drains
/// the hooks made between the two requests: one per hook run. Drains are counted by the
/// gateway's `/metrics` when the answer's head is written, so before the hook can read it,
/// exit and let Claude Code send its next request.
fn claude_code_batch(mid_run: MidRun, want_drains: f64) {
    let hub = Hub::new(Cli::Claude, true);
    let settings_path = hub.home.project.join(".claude/settings.json");
    let mut settings: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings_path).expect("settings.json"))
            .expect("settings.json is JSON");
    let batch = settings["hooks"]["PostToolBatch"].clone();
    assert!(
        batch[0]["hooks"][0]["command"]
            .as_str()
            .is_some_and(|c| c.contains(" hook ")),
        "init installs the hook on PostToolBatch: {settings}"
    );
    assert!(
        settings["hooks"].get("PostToolUse").is_none(),
        "and not on PostToolUse: {settings}"
    );
    if mid_run == MidRun::PerTool {
        let hooks = settings["hooks"].as_object_mut().expect("hooks");
        hooks.remove("PostToolBatch");
        hooks.insert("PostToolUse".into(), batch);
        std::fs::write(&settings_path, settings.to_string()).expect("write settings.json");
    }
    let seen = Arc::new(Mutex::new(String::new()));
    let drains = Arc::new(Mutex::new(Vec::new()));
    let count = |drains: &Arc<Mutex<Vec<f64>>>| {
        let (base, token, drains) = (hub.s.base.clone(), hub.s.token.clone(), drains.clone());
        move |_: &Request| {
            let n = drains_at(&base, token.as_deref());
            drains.lock().expect("drain counts").push(n);
        }
    };
    let (step_in, count_first) = (hub.human_steps_in(&seen), count(&drains));
    let model = ModelServer::start(Script::new(vec![
        Step::calls(vec![
            Call::shell("call_a", "echo one"),
            Call::shell("call_b", "echo two"),
        ])
        .before(move |r| {
            count_first(r);
            step_in(r);
        }),
        Step::text("All done.").before(count(&drains)),
    ]));
    hub.run(&model, "do two things");
    let n = notice(&seen);
    assert_shown(&model, &n, &[0, 1]);
    let counts = drains.lock().expect("drain counts").clone();
    assert_eq!(
        counts.len(),
        2,
        "both steps ran: {counts:?}{}",
        model.summary()
    );
    assert_eq!(
        counts[1] - counts[0],
        want_drains,
        "drains by the hooks of one batch of two parallel tool calls ({mid_run:?}): {counts:?}"
    );
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

#[test]
fn claude_code_runs_the_hook_once_per_batch_of_parallel_tool_calls() {
    claude_code_batch(MidRun::Batch, 1.0);
}

/// An install from before PostToolBatch keeps working: one hook run per tool call, and the
/// notice is still shown once.
#[test]
fn claude_code_install_on_post_tool_use_still_shows_a_notice_once() {
    claude_code_batch(MidRun::PerTool, 2.0);
}

/// Claude Code 2.1.332's `PreSkillShellCommand` (the gate before a shell command a slash
/// command or skill embeds, run before the prompt's own hooks) with aware's hook on it: the
/// hook ignores it, so the command runs and the notice pending at the start is not taken
/// there (that event has no context to hand it to) but reaches the first request, once.
#[test]
fn claude_code_skill_shell_commands_run_with_the_hook_on_their_gate() {
    let hub = Hub::new(Cli::Claude, true);
    let settings_path = hub.home.project.join(".claude/settings.json");
    let mut settings: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings_path).expect("settings.json"))
            .expect("settings.json is JSON");
    let ours = settings["hooks"]["UserPromptSubmit"].clone();
    settings["hooks"]["PreSkillShellCommand"] = ours;
    std::fs::write(&settings_path, settings.to_string()).expect("write settings.json");
    let commands = hub.home.project.join(".claude/commands");
    std::fs::create_dir_all(&commands).expect(".claude/commands");
    std::fs::write(
        commands.join("greet.md"),
        "---\nallowed-tools: Bash(echo:*)\n---\nSay this: !`echo skill-output-42`\n",
    )
    .expect("write the slash command");
    let n = human_turn_now(&hub.s);
    let model = ModelServer::start(Script::new(vec![Step::text("Done.")]));
    hub.run(&model, "/greet");
    let main = model.lane(Lane::Main);
    assert!(
        main[0].contains("skill-output-42"),
        "the embedded command ran: {}",
        model.summary()
    );
    assert_shown(&model, &n, &[1]);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

/// The JSON object a CLI shows the model as an MCP tool's result. Both show the tool's
/// structured content as JSON text (not its text content blocks); Codex puts a
/// "Wall time: … Output:" header before it.
fn shown_json(output: &str) -> Value {
    let json_part = output.split_once("Output:\n").map_or(output, |x| x.1);
    serde_json::from_str(json_part.trim())
        .unwrap_or_else(|e| panic!("the tool result shown is not JSON ({e}): {output}"))
}

fn session_status_through_mcp(cli: Cli) {
    let hub = Hub::new(cli, true);
    // The human stepped in before the run: the notice names the cursor to read from.
    let n = human_turn_now(&hub.s);
    let since: i64 = n
        .rsplit("changesSince ")
        .next()
        .and_then(|t| t.trim_end_matches('.').trim().parse().ok())
        .unwrap_or_else(|| panic!("no changesSince in {n}"));
    let model = ModelServer::start(Script::new(vec![
        Step::tool(
            "call_status",
            "mcp__aware__session_status",
            json!({"sessionKey": WORKER, "changesSince": since}),
        ),
        Step::text("Reconciled."),
    ]));
    hub.run(&model, "check on the worker");
    let main = model.lane(Lane::Main);
    assert_eq!(main.len(), 2, "{}", model.summary());
    // The first request already carries the notice (SessionStart / UserPromptSubmit).
    assert_eq!(main[0].count(&n), 1, "{}", model.summary());
    let shown = shown_json(&tool_output(&main[1], "call_status"));
    // The exact delta: what the gateway answers for the same read.
    let want = hub.s.status(KEY, WORKER, since);
    let events = want["stateChanges"]["events"].as_array().expect("events");
    assert!(
        events.iter().any(|e| e["kind"] == "human_direct_message"),
        "the delta holds the human turn: {want}"
    );
    assert_eq!(
        shown["stateChanges"], want["stateChanges"],
        "shown: {shown}"
    );
    assert_eq!(shown["statusText"], want["statusText"], "shown: {shown}");
    assert_nothing_pending(&hub.s);
}

#[test]
fn claude_code_calls_session_status_through_mcp_and_gets_the_exact_delta() {
    session_status_through_mcp(Cli::Claude);
}

#[test]
fn codex_calls_session_status_through_mcp_and_gets_the_exact_delta() {
    session_status_through_mcp(Cli::Codex);
}

/// A change that lands while the model calls an aware MCP tool: `aware mcp` drains it after
/// the call; the model must still be shown it, once.
fn notice_during_mcp_call(cli: Cli) {
    let hub = Hub::new(cli, true);
    let seen = Arc::new(Mutex::new(String::new()));
    let model = ModelServer::start(Script::new(vec![
        Step::tool("call_list", "mcp__aware__sessions_list", json!({}))
            .before(hub.human_steps_in(&seen)),
        Step::text("All done."),
    ]));
    hub.run(&model, "list the sessions");
    let n = notice(&seen);
    assert_shown(&model, &n, &[0, 1]);
    assert_nothing_pending(&hub.s);
}

#[test]
fn claude_code_hears_a_change_drained_by_an_mcp_tool_call() {
    notice_during_mcp_call(Cli::Claude);
}

#[test]
fn codex_hears_a_change_drained_by_an_mcp_tool_call() {
    notice_during_mcp_call(Cli::Codex);
}

/// Events of `key`'s stream as KEY sees them.
fn events(s: &Server, key: &str) -> Vec<Value> {
    s.status(KEY, key, 0)["stateChanges"]["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn claude_code_native_subagent_becomes_a_child_session_with_its_outcome() {
    let hub = Hub::new(Cli::Claude, true);
    let model = ModelServer::start(
        Script::new(vec![
            Step::tool(
                "call_agent",
                "Agent",
                json!({"description": "survey", "prompt": "Say what you see.",
                    "subagent_type": "general-purpose", "run_in_background": false}),
            ),
            Step::text("All done."),
        ])
        .with_subagent(vec![Step::text("I see a project.")]),
    );
    hub.run(&model, "delegate a survey");
    assert_eq!(model.lane(Lane::Subagent).len(), 1, "{}", model.summary());
    assert_one_child_with_its_run(&hub.s, &["delegate a survey"]);
}

/// The one child session of KEY, with `child_spawned` and `run_completed` (and no
/// `run_failed`) on its stream; KEY's typed prompts are exactly `typed` (the subagent's task
/// and Claude Code's `<task-notification>` are no human's).
fn assert_one_child_with_its_run(s: &Server, typed: &[&str]) {
    // Both checks are made before either fails, so one run reports every gap.
    let turns = s.get(&format!("/v1/sessions/{}/turns", seg(KEY)));
    let user_turns: Vec<&str> = turns.body["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["role"] == "user")
        .filter_map(|t| t["text"].as_str())
        .collect();
    let listed = s.tool(KEY, "sessions_list", json!({}));
    assert_eq!(listed.status, 200, "{}", listed.body);
    let children: Vec<Value> = listed.body["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|x| x["parentSessionKey"] == KEY)
        .cloned()
        .collect();
    assert!(
        user_turns == typed && children.len() == 1,
        "want KEY's user turns {typed:?} and one child session;\nuser turns: {user_turns:?}\n\
         sessions: {}",
        listed.body
    );
    let child = children[0]["key"]
        .as_str()
        .or(children[0]["sessionKey"].as_str())
        .expect("child key")
        .to_string();
    assert!(child.starts_with("agent:main:subagent:"), "{child}");
    let child_kinds = kinds(&events(s, &child));
    for kind in ["child_spawned", "run_completed"] {
        assert_eq!(
            child_kinds.iter().filter(|k| *k == kind).count(),
            1,
            "{kind}: {child_kinds:?}"
        );
    }
    assert!(
        !child_kinds.iter().any(|k| k == "run_failed"),
        "{child_kinds:?}"
    );
}

#[test]
fn claude_code_background_subagent_becomes_a_child_and_its_notification_is_no_human_turn() {
    let hub = Hub::new(Cli::Claude, true);
    // `Agent` without run_in_background runs in the background in 2.1.332 (as in 2.1.328); its
    // end comes back as a `<task-notification>` prompt (UserPromptSubmit), which the main model
    // answers. How many main requests that takes depends on whether the subagent ends before
    // the tool result is sent, so the script ends early and the unscripted answer ends the turn.
    let model = ModelServer::start(
        Script::new(vec![
            Step::tool(
                "call_agent",
                "Agent",
                json!({"description": "survey", "prompt": "Say what you see.",
                    "subagent_type": "general-purpose"}),
            ),
            Step::text("It saw a project. All done."),
        ])
        .with_subagent(vec![Step::text("I see a project.")]),
    );
    hub.run(&model, "delegate a survey");
    assert_eq!(model.lane(Lane::Subagent).len(), 1, "{}", model.summary());
    assert!(
        model
            .lane(Lane::Main)
            .iter()
            .any(|r| r.contains("<task-notification>")),
        "the main model heard of the subagent's end: {}",
        model.summary()
    );
    assert_one_child_with_its_run(&hub.s, &["delegate a survey"]);
}

#[test]
fn codex_subagent_becomes_a_child_session_with_its_outcome() {
    let hub = Hub::new(Cli::Codex, false);
    let model = ModelServer::start(super::payloads::codex_spawn_and_wait("I see a project."));
    hub.run(&model, "delegate a survey");
    assert_eq!(model.lane(Lane::Subagent).len(), 1, "{}", model.summary());
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_one_child_with_its_run(&hub.s, &["delegate a survey"]);
}

#[test]
fn claude_code_compact_records_one_compacted_event() {
    let hub = Hub::new(Cli::Claude, true);
    let model = ModelServer::start(Script::new(vec![Step::text("Hello.")]));
    let first = hub.run(&model, "hello");
    let session = first.json()["session_id"]
        .as_str()
        .expect("session_id")
        .to_string();
    hub.home
        .claude_print(&model, "/compact", &["--resume", &session])
        .assert_success("claude -p /compact", &model);
    assert_eq!(model.lane(Lane::Compaction).len(), 1, "{}", model.summary());
    let k = kinds(&events(&hub.s, KEY));
    // One compaction, one event (PreCompact and SessionStart source=compact both see it).
    assert_eq!(k.iter().filter(|x| *x == "compacted").count(), 1, "{k:?}");
}

#[test]
fn codex_compaction_records_one_compacted_event() {
    let hub = Hub::new(Cli::Codex, false);
    let model = ModelServer::start(
        Script::new(vec![
            Step::shell("call_1", "echo working"),
            Step::text("All done."),
        ])
        .with_usage_tokens(50_000),
    );
    let run = hub.home.codex_exec(
        &model,
        "do the task",
        &["-c", "model_auto_compact_token_limit=1000"],
    );
    run.assert_success("codex exec", &model);
    assert_eq!(model.lane(Lane::Compaction).len(), 1, "{}", model.summary());
    let k = kinds(&events(&hub.s, KEY));
    assert_eq!(k.iter().filter(|x| *x == "compacted").count(), 1, "{k:?}");
}

/// `aware init claude-code` installs the waiting Stop hook by default, and `claude -p` waits
/// for an async Stop hook to end before it exits (its exit 2 wakes nothing there). So in print
/// mode (the hook's environment says `CLAUDE_CODE_SESSION_ATTENDED=0`) the waiter has nothing
/// to wait for: it must never open the wake stream, which would hold the run until it gives
/// up. Observed on the gateway: no `GET /v1/wakes` was served, and none is open afterwards.
#[test]
fn claude_code_print_mode_is_not_held_by_the_waiting_hook() {
    let hub = Hub::new(Cli::Claude, false);
    let settings = std::fs::read_to_string(hub.home.project.join(".claude/settings.json"))
        .expect("settings.json");
    assert!(settings.contains("--wait"), "{settings}");
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working"),
        Step::text("All done."),
    ]));
    let run = hub.run(&model, "do the task");
    assert_eq!(run.json()["result"], "All done.", "{}", run.stdout);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    wait_for_wake_streams_at_most(&hub.s, 0.0, Duration::from_secs(30));
    let metrics = hub
        .s
        .get("/metrics")
        .body
        .as_str()
        .unwrap_or("")
        .to_string();
    let wake_streams: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("aware_http_requests_total{") && l.contains("route=\"/v1/wakes\"")
        })
        .collect();
    assert!(
        wake_streams.is_empty(),
        "a waiting hook opened the wake stream in print mode (and held `claude -p` until it \
         gave up): {wake_streams:?}"
    );
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn gateway_down(cli: Cli) {
    // Set up against the real gateway, then point every hook and the MCP server at a port
    // nothing listens on by running init again with that URL (it rewrites its own entries).
    let hub = Hub::new(cli, false);
    let dead = format!("http://127.0.0.1:{}", closed_port());
    let again = hub.init(&dead, &[]);
    let configs = match cli {
        Cli::Claude => std::fs::read_to_string(hub.home.project.join(".claude/settings.json")),
        Cli::Codex => std::fs::read_to_string(hub.home.project.join(".codex/hooks.json")),
    }
    .unwrap_or_default();
    assert!(
        configs.contains(&dead),
        "init with an unreachable --url still writes it (exit {}; stderr {}):\n{configs}",
        again.status,
        String::from_utf8_lossy(&again.stderr)
    );
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working"),
        Step::text("All done."),
    ]));
    // Each hook fails fast and silently to the model; the run ends normally (a hook that
    // waited would trip the runner's deadline and fail this test with the CLI's output).
    let run = hub.run(&model, "do the task");
    assert_shown(&model, "System: [", &[0, 0]);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    if cli == Cli::Claude {
        assert_eq!(run.json()["result"], "All done.", "{}", run.stdout);
    }
}

#[test]
fn claude_code_runs_normally_when_the_gateway_is_down() {
    gateway_down(Cli::Claude);
}

#[test]
fn codex_runs_normally_when_the_gateway_is_down() {
    gateway_down(Cli::Codex);
}

/// Waits until `/metrics` shows at least `n` open wake streams: the idle session's waiting
/// hook has subscribed. A bounded wait for an observable gauge (read every 50 ms).
pub(super) fn wait_for_wake_streams(s: &Server, n: f64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let open = s.metric("aware_wake_stream_subscribers").unwrap_or(0.0);
        if open >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no waiting hook subscribed to the wake stream within {timeout:?} ({open} open)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Drains answered 200 so far (`/metrics`).
pub(super) fn drains_at(base: &str, token: Option<&str>) -> f64 {
    let r = try_request(base, token, "GET", "/metrics", &[], None).expect("metrics");
    let line = "aware_http_requests_total{route=\"/v1/sessions/{key}/drain\",status=\"200\"}";
    r.body
        .as_str()
        .unwrap_or("")
        .lines()
        .find_map(|l| l.strip_prefix(line).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// Waits until `/metrics` shows at most `n` open wake streams (a waiter that ended is
/// unsubscribed once the gateway sees its connection close).
fn wait_for_wake_streams_at_most(s: &Server, n: f64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let open = s.metric("aware_wake_stream_subscribers").unwrap_or(0.0);
        if open <= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{open} wake streams still open after {timeout:?}: a waiting hook outlived its CLI"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A first step ("Ready.") that notes the drain count when it is answered.
pub(super) fn ready_step(hub: &Hub, at: &Arc<Mutex<Option<f64>>>) -> Step {
    let (base, token, at) = (hub.s.base.clone(), hub.s.token.clone(), at.clone());
    Step::text("Ready.")
        .before(move |_| *at.lock().unwrap() = Some(drains_at(&base, token.as_deref())))
}

/// Waits until the first answer is out and the session is idle: the synchronous Stop hook has
/// drained and the waiting hook is on the wake stream and has drained on connect (both with
/// nothing pending). `drains_before` is the drain count when the first answer was sent, which
/// is returned.
pub(super) fn wait_until_idle(
    hub: &Hub,
    model: &ModelServer,
    drains_before: &Mutex<Option<f64>>,
) -> f64 {
    model.wait_for("the first answer", Duration::from_secs(60), |r| {
        r.iter().filter(|x| x.lane == Lane::Main).count() == 1
    });
    wait_for_wake_streams(&hub.s, 1.0, Duration::from_secs(60));
    let before = drains_before
        .lock()
        .unwrap()
        .expect("the first answer was sent");
    let deadline = Instant::now() + Duration::from_secs(60);
    while drains_at(&hub.s.base, hub.s.token.as_deref()) < before + 2.0 {
        assert!(
            Instant::now() < deadline,
            "the Stop hook and the waiter's drain on connect did not both happen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    before
}

#[test]
fn claude_code_idle_session_is_woken_by_a_change() {
    let hub = Hub::new(Cli::Claude, false);
    // The drains answered before the first answer is sent: the Stop hooks have not run yet.
    // Once the turn ends, the synchronous Stop hook drains once (nothing pending: it lets the
    // turn end) while the waiting one subscribes and drains once on connect. The change must
    // come after all of that, or the synchronous hook, not the waiter, would deliver it (a
    // delivery all the same, but no wake).
    let drains_before_stop = Arc::new(Mutex::new(None));
    let model = ModelServer::start(Script::new(vec![
        ready_step(&hub, &drains_before_stop),
        Step::text("Reconciled."),
    ]));
    let mut argv = vec![claude_bin().to_string_lossy().into_owned()];
    argv.push("start".to_string());
    let _tmux = Tmux::start(
        hub.home.tmp.join("tmux.sock"),
        &hub.home.project,
        &hub.home.claude_env(&model),
        &argv,
    );
    // The turn ended, the synchronous Stop hook has drained and the waiting one is on the wake
    // stream, drained on connect: the session is idle.
    let before = wait_until_idle(&hub, &model, &drains_before_stop);
    // The waiting hook is woken by the turn's commit and drains at once, so a peek right after
    // the turn races it: when the peek wins, the model must be shown exactly that text; when
    // the waiter won, the drain counter says so and the model must be shown the notice's
    // first line, once. Either way the wake, not a human prompt, brought the second request.
    post_human_turn(&hub.s);
    let peeked = pending_prompt(&hub.s);
    let n = if peeked.is_empty() {
        // The request is counted once its answer is written, a moment after its commit.
        let deadline = Instant::now() + Duration::from_secs(60);
        while drains_at(&hub.s.base, hub.s.token.as_deref()) < before + 3.0 {
            assert!(
                Instant::now() < deadline,
                "nothing pending after the human turn, and no drain took it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        format!("Session \"{WORKER}\" changed (other actor)")
    } else {
        assert!(
            peeked.contains(&format!("Session \"{WORKER}\" changed (other actor)")),
            "{peeked}"
        );
        peeked
    };
    model.wait_for("the woken request", Duration::from_secs(60), |r| {
        r.iter().filter(|x| x.lane == Lane::Main).count() >= 2
    });
    assert_shown(&model, &n, &[0, 1]);
    assert_nothing_pending(&hub.s);
}

/// The session that sends messages to KEY.
pub(super) const SENDER: &str = "agent:main:other";
pub(super) const MESSAGE: &str = "please rebase on main";

/// A `sessions_send` from SENDER to KEY that waits for the reply, on its own thread; returns
/// once the message's hand-over line is queued for KEY (peeked), with that line and the wait.
fn send_waiting(s: &Arc<Server>) -> (String, std::thread::JoinHandle<Resp>) {
    let s2 = s.clone();
    let waiter = std::thread::spawn(move || {
        s2.tool(
            SENDER,
            "sessions_send",
            json!({"sessionKey": KEY, "message": MESSAGE, "timeoutSeconds": 120}),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = pending_prompt(s);
        if let Some(line) = p.lines().find(|l| l.contains(MESSAGE)) {
            let line = line.to_string();
            assert!(
                line.contains(&format!("Message from session \"{SENDER}\"")),
                "{line}"
            );
            return (line, waiter);
        }
        assert!(
            Instant::now() < deadline,
            "the message was never queued for KEY: {p}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The message's words and its sender, as the model reads them (the `System: [time]` prefix
/// left out: the woken request of an idle session may carry the line in a different wrapper).
pub(super) fn message_text() -> String {
    format!("Message from session \"{SENDER}\" (another agent, by sessions_send): {MESSAGE}")
}

fn message_mid_run(cli: Cli) {
    let hub = Hub::new(cli, true);
    hub.s.create(SENDER);
    let sent = Arc::new(Mutex::new(None));
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working").before({
            let (s, sent) = (hub.s.clone(), sent.clone());
            move |_| *sent.lock().unwrap() = Some(send_waiting(&s))
        }),
        Step::text("Rebased on main."),
    ]));
    hub.run(&model, "do the task");
    let (line, waiter) = sent.lock().unwrap().take().expect("the message was sent");
    assert!(line.starts_with("System: ["), "{line}");
    // Handed over right after the tool call, once, with its sender and how to answer.
    assert_shown(&model, &line, &[0, 1]);
    assert_shown(&model, &message_text(), &[0, 1]);
    // The text the agent stopped with ended the sender's wait.
    let r = waiter.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "ok", "{}", r.body);
    assert_eq!(r.body["reply"], "Rebased on main.", "{}", r.body);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

#[test]
fn claude_code_gets_a_message_after_its_tool_call_once_and_its_answer_reaches_the_sender() {
    message_mid_run(Cli::Claude);
}

#[test]
fn codex_gets_a_message_after_its_tool_call_once_and_its_answer_reaches_the_sender() {
    message_mid_run(Cli::Codex);
}

#[test]
fn claude_code_idle_session_is_woken_by_a_message_and_its_answer_reaches_the_sender() {
    let hub = Hub::new(Cli::Claude, false);
    hub.s.create(SENDER);
    // As in `claude_code_idle_session_is_woken_by_a_change`: the message goes out once the
    // synchronous Stop hook and the waiter's connect have drained, so the wake delivers it.
    let drains_before_stop = Arc::new(Mutex::new(None));
    let model = ModelServer::start(Script::new(vec![
        ready_step(&hub, &drains_before_stop),
        Step::text("Rebased on main."),
    ]));
    let mut argv = vec![claude_bin().to_string_lossy().into_owned()];
    argv.push("start".to_string());
    let _tmux = Tmux::start(
        hub.home.tmp.join("tmux.sock"),
        &hub.home.project,
        &hub.home.claude_env(&model),
        &argv,
    );
    wait_until_idle(&hub, &model, &drains_before_stop);
    // The message may be taken by the waiter before the peek sees it: send it on a thread
    // and wait for the woken request instead of peeking.
    let s2 = hub.s.clone();
    let waiter = std::thread::spawn(move || {
        s2.tool(
            SENDER,
            "sessions_send",
            json!({"sessionKey": KEY, "message": MESSAGE, "timeoutSeconds": 120}),
        )
    });
    model.wait_for("the woken request", Duration::from_secs(60), |r| {
        r.iter().filter(|x| x.lane == Lane::Main).count() >= 2
    });
    assert_shown(&model, &message_text(), &[0, 1]);
    let r = waiter.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "ok", "{}", r.body);
    assert_eq!(r.body["reply"], "Rebased on main.", "{}", r.body);
    assert_nothing_pending(&hub.s);
}

/// User turns of KEY, oldest first.
fn prompts_of_key(s: &Server) -> Vec<String> {
    s.get(&format!("/v1/sessions/{}/turns", seg(KEY))).body["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] == "user")
        .map(|t| t["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn claude_code_prompts_typed_while_the_gateway_is_down_reach_the_log_once_when_it_is_back() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server::with_args(DEFAULT_CONFIG, &["--bind", &format!("127.0.0.1:{port}")]);
    let mut hub = Hub::on(Cli::Claude, true, server);
    let model = ModelServer::start(Script::new(vec![
        Step::text("One."),
        Step::text("Two."),
        Step::text("Three."),
    ]));
    // The gateway goes down (its store and port are kept); two prompts are typed meanwhile.
    Arc::get_mut(&mut hub.s)
        .expect("the hub's server is not shared")
        .stop();
    hub.run(&model, "first while down");
    hub.run(&model, "second while down");
    let s = Arc::get_mut(&mut hub.s).expect("the hub's server is not shared");
    s.restart();
    assert_eq!(s.port, port);
    assert_eq!(prompts_of_key(&hub.s), Vec::<String>::new());
    // The next prompt's hook records what was kept first, in order, then its own.
    hub.run(&model, "after");
    assert_eq!(
        prompts_of_key(&hub.s),
        ["first while down", "second while down", "after"]
    );
}
