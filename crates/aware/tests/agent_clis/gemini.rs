//! `aware init gemini` + `aware hook --cli gemini` with the real Gemini CLI (decision D30), headless
//! (`gemini -p … --approval-mode yolo`) against the scripted model server's Gemini API: a manager
//! session KEY, set up by `aware init gemini`, watches a worker; a human steps into the worker
//! while the agent works (a side effect of the model server at a known step), and the test
//! asserts what the model was shown, request by request, and what the gateway holds afterwards.

use super::support::*;
use crate::common::*;
use aware_testkit::agent_cli::gemini::GEMINI_MODEL;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

const KEY: &str = "agent:main:main";
const WORKER: &str = "agent:main:worker";

/// A gateway and a Gemini CLI home set up by `aware init gemini`, KEY watching WORKER with
/// nothing pending.
struct Hub {
    s: Arc<Server>,
    home: AgentHome,
}

impl Hub {
    fn new() -> Self {
        let s = Arc::new(Server::start());
        let home = AgentHome::new();
        home.trust_gemini();
        init(&home, &s.base);
        s.create(WORKER);
        let w = s.watch(KEY, WORKER);
        assert!(w.status == 200 || w.status == 201, "watch: {}", w.body);
        s.drain(KEY);
        assert_eq!(pending_prompt(&s), "");
        Hub { s, home }
    }

    fn run(&self, model: &ModelServer, prompt: &str) -> CliRun {
        let run = self.home.gemini_print(model, prompt, &[]);
        run.assert_success("gemini -p", model);
        run
    }

    /// A side effect for a step: a human turn on WORKER; the notice KEY then has pending is
    /// stored in `seen`.
    fn human_steps_in(&self, seen: &Arc<Mutex<String>>) -> impl FnOnce(&Request) + Send + 'static {
        let (s, seen) = (self.s.clone(), seen.clone());
        move |_| *seen.lock().expect("notice slot") = human_turn_now(&s)
    }
}

/// `aware init gemini --project P --url URL --session KEY`, run as the user of this home.
fn init(home: &AgentHome, url: &str) {
    let out = home
        .command(bin())
        .args(["init", "gemini", "--project"])
        .arg(&home.project)
        .args(["--url", url, "--session", KEY])
        .output()
        .expect("run aware init gemini");
    assert!(
        out.status.success(),
        "aware init gemini failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A human turn on WORKER; returns the notice KEY then has pending (peeked).
fn human_turn_now(s: &Server) -> String {
    let r = s.post(
        &format!("/v1/sessions/{}/turns", seg(WORKER)),
        json!({"role": "user", "text": "use the staging database", "channel": "slack"}),
    );
    assert_eq!(r.status, 201, "human turn: {}", r.body);
    pending_prompt(s)
}

fn pending_prompt(s: &Server) -> String {
    s.pending(KEY)["prompt"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn notice(seen: &Arc<Mutex<String>>) -> String {
    let n = seen.lock().expect("notice slot").clone();
    assert!(
        n.contains(&format!("Session \"{WORKER}\" changed (other actor)")),
        "the side effect never ran, or saw no notice: {n:?}"
    );
    n
}

/// Gemini CLI escapes `<` and `>` of a hook's context (`&lt;`, `&gt;`) and wraps it in
/// `<hook_context>`; the notices have neither, so they are shown verbatim.
fn shown(model: &ModelServer, text: &str) -> Vec<usize> {
    model
        .lane(Lane::Main)
        .iter()
        .map(|r| r.count(text))
        .collect()
}

fn assert_shown(model: &ModelServer, text: &str, want: &[usize]) {
    let got = shown(model, text);
    assert_eq!(
        got,
        want,
        "{text:?} shown {got:?} times per request; where: {:?}\nrequests:{}",
        model
            .lane(Lane::Main)
            .iter()
            .map(|r| r.places(text))
            .collect::<Vec<_>>(),
        model.summary()
    );
}

fn assert_nothing_pending(s: &Server) {
    let p = s.pending(KEY);
    assert_eq!(p["notices"], json!([]), "{p}");
}

/// User turns of KEY, oldest first, with their channel.
fn prompts_of_key(s: &Server) -> Vec<(String, String)> {
    s.get(&format!("/v1/sessions/{}/turns", seg(KEY))).body["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .filter(|t| t["role"] == "user")
        .map(|t| {
            (
                t["text"].as_str().unwrap_or_default().to_string(),
                t["channel"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn gemini_cli_hears_a_change_right_after_its_tool_call_once() {
    let hub = Hub::new();
    let seen = Arc::new(Mutex::new(String::new()));
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working").before(hub.human_steps_in(&seen)),
        Step::text("All done."),
    ]));
    hub.run(&model, "do the task");
    let n = notice(&seen);
    // In the request right after the tool call (appended to the tool's result), once.
    assert_shown(&model, &n, &[0, 1]);
    assert_shown(
        &model,
        "human_direct_message by human via slack: \"use the staging database\"",
        &[0, 1],
    );
    let last = model.lane(Lane::Main).last().cloned().expect("requests");
    assert!(
        last.places(&n).iter().any(|p| p.contains("hook_context")),
        "the notice arrives as the AfterTool hook's context: {:?}",
        last.places(&n)
    );
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
    // The prompt typed into Gemini CLI is the session's human turn, channel gemini-cli.
    assert_eq!(
        prompts_of_key(&hub.s),
        [("do the task".to_string(), "gemini-cli".to_string())]
    );
    // Gemini CLI fires PreCompress before every compression check, also when it compresses
    // nothing (as here): no compaction is recorded for it.
    let events = hub.s.status(WORKER, KEY, 0);
    assert!(
        !events["stateChanges"]["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["kind"] == "compacted"),
        "{events}"
    );
}

#[test]
fn gemini_cli_is_sent_back_once_when_a_change_lands_before_it_stops() {
    let hub = Hub::new();
    let seen = Arc::new(Mutex::new(String::new()));
    // The change lands while the model writes its final answer: only the AfterAgent gate can
    // deliver it.
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working"),
        Step::text("All done.").before(hub.human_steps_in(&seen)),
        Step::text("Reconciled, done."),
    ]));
    let run = hub.run(&model, "do the task");
    let n = notice(&seen);
    // Sent back once with the notice as a new prompt; the continuation's AfterAgent has
    // stop_hook_active and is let go.
    assert_shown(&model, &n, &[0, 0, 1]);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert!(run.stdout.contains("Reconciled, done."), "{}", run.stdout);
    assert_nothing_pending(&hub.s);
    // The gate's reason, run through BeforeAgent as a prompt, is no human turn.
    assert_eq!(
        prompts_of_key(&hub.s),
        [("do the task".to_string(), "gemini-cli".to_string())]
    );
}

/// `aware init gemini` wrote what Gemini CLI reads: the hook on each event it acts on and the
/// MCP server, and the trust key Gemini computes for that hook (`name:command`); a run then
/// shows no untrusted-hook warning.
#[test]
fn gemini_cli_runs_the_hook_init_trusted_without_a_warning() {
    let hub = Hub::new();
    let model = ModelServer::start(Script::new(vec![Step::text("Hello.")]));
    let run = hub.run(&model, "say hello");
    assert!(
        !run.stderr
            .contains("project-level hooks have been detected"),
        "{}",
        run.stderr
    );
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(hub.home.project.join(".gemini/settings.json")).unwrap(),
    )
    .unwrap();
    assert!(settings["mcpServers"]["aware"]["command"]
        .as_str()
        .is_some_and(|c| c.starts_with('/')));
    assert_eq!(
        prompts_of_key(&hub.s),
        [("say hello".to_string(), "gemini-cli".to_string())]
    );
}

/// With every hook and the MCP server pointed at a port nothing listens on, Gemini CLI runs its
/// turn normally: each hook fails fast with its one warning line, and the model is shown no
/// notice.
#[test]
fn gemini_cli_runs_normally_when_the_gateway_is_down() {
    let hub = Hub::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dead = format!("http://127.0.0.1:{port}");
    init(&hub.home, &dead);
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working"),
        Step::text("All done."),
    ]));
    let run = hub.run(&model, "do the task");
    assert_shown(&model, "System: [", &[0, 0]);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert!(run.stdout.contains("All done."), "{}", run.stdout);
    assert!(
        run.stderr.contains("aware hook: warning:") || run.stdout.contains("aware hook: warning:"),
        "the hook's warning is shown:\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
}

/// The `functionResponse` Gemini CLI sent for call `name` in a request, as JSON.
fn function_response(request: &Request, name: &str) -> Value {
    for content in request.items() {
        for part in content["parts"].as_array().into_iter().flatten() {
            if part["functionResponse"]["name"] == name {
                return part["functionResponse"].clone();
            }
        }
    }
    panic!(
        "no functionResponse of {name} in request #{}",
        request.index
    )
}

/// The model calls `session_status` through the MCP server `aware init gemini` wrote (Gemini
/// names it `mcp_aware_session_status`) and reads the exact delta.
#[test]
fn gemini_cli_calls_session_status_through_mcp_and_gets_the_delta() {
    let hub = Hub::new();
    // The human stepped in before the run: the notice names the cursor to read from.
    let n = human_turn_now(&hub.s);
    let since: i64 = n
        .lines()
        .next()
        .and_then(|l| l.rsplit("changesSince ").next())
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
    let offered = main[0].body["tools"].to_string();
    assert!(offered.contains("mcp_aware_session_status"), "{offered}");
    // The notice reached the first request already (SessionStart / BeforeAgent).
    assert_eq!(main[0].count(&n), 1, "{}", model.summary());
    // The model reads the tool's text content (Gemini CLI shows no structuredContent), which
    // is the session's status text with the exact delta, wrapped as untrusted context.
    let got = function_response(&main[1], "mcp_aware_session_status");
    let want = hub.s.status(KEY, WORKER, since);
    let text = want["statusText"].as_str().expect("statusText");
    assert!(text.contains("human_direct_message"), "{want}");
    assert_eq!(
        got["response"]["output"],
        format!("<untrusted_context>\n{text}\n</untrusted_context>"),
        "{got}"
    );
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

/// Three parallel tool calls run AfterTool three times; the notice is shown once.
#[test]
fn gemini_cli_parallel_tool_calls_show_a_notice_once() {
    let hub = Hub::new();
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
    assert_shown(&model, &n, &[0, 1]);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

const SENDER: &str = "agent:main:other";
const MESSAGE: &str = "please rebase on main";

/// A message sent to KEY mid-run reaches the model after its tool call, once, naming its
/// sender; the text the turn ends with (`prompt_response`) is the sender's reply.
#[test]
fn gemini_cli_gets_a_message_after_its_tool_call_once_and_its_answer_reaches_the_sender() {
    let hub = Hub::new();
    hub.s.create(SENDER);
    let waiter = Arc::new(Mutex::new(None));
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working").before({
            let (s, waiter) = (hub.s.clone(), waiter.clone());
            move |_| {
                let s2 = s.clone();
                let sent = std::thread::spawn(move || {
                    s2.tool(
                        SENDER,
                        "sessions_send",
                        json!({"sessionKey": KEY, "message": MESSAGE, "timeoutSeconds": 120}),
                    )
                });
                // The hand-over line is queued before the tool's AfterTool hook runs: the
                // send is recorded before it starts waiting for the reply.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while !pending_prompt(&s).contains(MESSAGE) {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the message was never queued for KEY"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                *waiter.lock().expect("waiter slot") = Some(sent);
            }
        }),
        Step::text("Rebased on main."),
    ]));
    hub.run(&model, "do the task");
    let line =
        format!("Message from session \"{SENDER}\" (another agent, by sessions_send): {MESSAGE}");
    assert_shown(&model, &line, &[0, 1]);
    let sent = waiter
        .lock()
        .expect("waiter slot")
        .take()
        .expect("the message was sent");
    let r = sent.join().expect("the send");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "ok", "{}", r.body);
    assert_eq!(r.body["reply"], "Rebased on main.", "{}", r.body);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_nothing_pending(&hub.s);
}

/// The hook payloads of Gemini CLI (a hook on each event dumps its stdin): the event names and
/// the fields `aware hook --cli gemini` reads, one session id throughout, and `PreCompress`
/// fired although nothing was compressed (why the hook ignores it). `AWARE_HOOK_PAYLOADS_DIR`
/// keeps them.
#[test]
fn gemini_cli_hook_payloads_carry_the_fields_the_hook_reads() {
    let home = AgentHome::new();
    home.trust_gemini();
    let (script, dir) = dump_hook(&home);
    let mut hooks = serde_json::Map::new();
    for e in [
        "SessionStart",
        "BeforeAgent",
        "AfterTool",
        "AfterAgent",
        "PreCompress",
    ] {
        hooks.insert(
            e.to_string(),
            json!([{"hooks": [{"type": "command", "name": "dump",
                "command": format!("{} {e}", script.to_string_lossy())}]}]),
        );
    }
    std::fs::create_dir_all(home.project.join(".gemini")).expect(".gemini");
    std::fs::write(
        home.project.join(".gemini/settings.json"),
        json!({ "hooks": hooks }).to_string(),
    )
    .expect("write .gemini/settings.json");
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working"),
        Step::text("All done."),
    ]));
    home.gemini_print(&model, "do the task", &[])
        .assert_success("gemini -p", &model);
    let all = dumps(&dir);
    let one = |event: &str| -> Value {
        let found = of_event(&all, event);
        assert!(!found.is_empty(), "no {event} payload: {all:?}");
        found[0].clone()
    };
    let start = one("SessionStart");
    let sid = start["session_id"]
        .as_str()
        .expect("session_id")
        .to_string();
    assert!(!sid.is_empty());
    assert_eq!(start["source"], "startup", "{start}");
    let prompt = one("BeforeAgent");
    assert_eq!(prompt["prompt"], "do the task", "{prompt}");
    let tool = one("AfterTool");
    assert_eq!(tool["tool_name"], "run_shell_command", "{tool}");
    assert_eq!(tool["tool_input"]["command"], "echo working", "{tool}");
    let stop = one("AfterAgent");
    assert_eq!(stop["prompt_response"], "All done.", "{stop}");
    assert_eq!(stop["stop_hook_active"], false, "{stop}");
    let compress = one("PreCompress");
    assert_eq!(compress["trigger"], "auto", "{compress}");
    for p in &all {
        assert_eq!(p["session_id"], sid.as_str(), "{p}");
        assert!(p["transcript_path"].is_string(), "{p}");
    }
    save_payloads(
        "gemini",
        &[
            ("SessionStart".to_string(), &start),
            ("BeforeAgent".to_string(), &prompt),
            ("AfterTool".to_string(), &tool),
            ("AfterAgent".to_string(), &stop),
            ("PreCompress".to_string(), &compress),
        ],
    );
}

/// Interactive Gemini CLI (its terminal UI under tmux), set up by `aware init gemini`: the
/// prompt typed into it is a human turn, and a change during its tool call reaches the very
/// next request, once.
#[test]
fn gemini_cli_interactive_session_hears_a_change_after_its_tool_call_once() {
    let hub = Hub::new();
    let seen = Arc::new(Mutex::new(String::new()));
    let model = ModelServer::start(Script::new(vec![
        Step::shell("call_1", "echo working").before(hub.human_steps_in(&seen)),
        Step::text("All done here."),
    ]));
    let argv = vec![
        gemini_bin().to_string_lossy().into_owned(),
        "--approval-mode".into(),
        "yolo".into(),
        "-m".into(),
        GEMINI_MODEL.into(),
    ];
    let tmux = Tmux::start(
        hub.home.tmp.join("tmux.sock"),
        &hub.home.project,
        &hub.home.gemini_env(&model),
        &argv,
    );
    tmux.wait_for_screen("Type your message", std::time::Duration::from_secs(60));
    tmux.send_keys(&["do the task"]);
    // Keys that arrive together read as a paste, whose Enter is a new line: the Enter goes
    // once the typed text is on the screen.
    tmux.wait_for_screen("do the task", std::time::Duration::from_secs(30));
    tmux.send_keys(&["Enter"]);
    model.wait_for(
        "the answer after the tool call",
        std::time::Duration::from_secs(60),
        |r| r.iter().filter(|x| x.lane == Lane::Main).count() >= 2,
    );
    tmux.wait_for_screen("All done here.", std::time::Duration::from_secs(60));
    let n = notice(&seen);
    assert_shown(&model, &n, &[0, 1]);
    assert_eq!(
        prompts_of_key(&hub.s),
        [("do the task".to_string(), "gemini-cli".to_string())]
    );
    assert_nothing_pending(&hub.s);
}

/// `aware init gemini --global` (the user's settings, for every project): the hook runs in a
/// trusted project that has no `.gemini/` of its own, and the typed prompt is a human turn.
#[test]
fn gemini_cli_runs_the_hook_a_global_setup_installed() {
    let s = Server::start();
    let home = AgentHome::new();
    home.trust_gemini();
    let out = home
        .command(bin())
        .args([
            "init",
            "gemini",
            "--global",
            "--url",
            &s.base,
            "--session",
            KEY,
        ])
        .output()
        .expect("run aware init gemini --global");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!home.project.join(".gemini").exists());
    let model = ModelServer::start(Script::new(vec![Step::text("Hello.")]));
    home.gemini_print(&model, "say hello", &[])
        .assert_success("gemini -p", &model);
    assert_eq!(
        prompts_of_key(&s),
        [("say hello".to_string(), "gemini-cli".to_string())]
    );
}
