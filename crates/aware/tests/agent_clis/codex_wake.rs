//! An idle interactive Codex session (the TUI under tmux), set up by `aware init codex`, is
//! woken by the waiting Stop hook: a change to a session it watches, or a message sent to it,
//! starts a turn through `codex queue` within 30 s, the model is shown it once, the queued
//! prompt is no human turn, and nothing stays pending.

use super::aware_hooks::*;
use super::support::*;
use crate::common::*;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a wake may take, from the change to the woken request.
const WAKE_WITHIN: Duration = Duration::from_secs(30);
/// The prompt typed at start.
const TYPED: &str = "get ready";

/// How the TUI runs the agent. Codex 0.169.0 runs it in the TUI's own process when the model
/// settings come as `-c`/`--disable` flags, and in its shared app-server daemon (started on
/// first use, outliving the TUI) when they are in `config.toml`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    InProcess,
    Daemon,
}

/// The running TUI (and in [`Mode::Daemon`] the daemon, stopped on drop).
struct Tui {
    tmux: Tmux,
    daemon: Option<Daemon>,
}

/// Codex's app-server daemon of one test home: stopped (`codex app-server daemon stop`) on
/// drop, and its updater (which `stop` leaves running) killed by the pid it recorded, checked
/// to be a program of this home.
struct Daemon {
    home: std::path::PathBuf,
    env: Vec<(String, String)>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = std::process::Command::new(installed_bin_dir().join("codex"))
            .args(["app-server", "daemon", "stop"])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let dir = self.home.join(".codex/app-server-daemon");
        for file in ["daemon.pid", "daemon-updater.pid"] {
            let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
                continue;
            };
            let pid = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["pid"].as_u64());
            let Some(pid) = pid else { continue };
            let ours = std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.starts_with(&self.home));
            if ours {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// The Codex TUI on `TYPED`, in `hub`'s home, against `model`.
fn start_tui(hub: &Hub, model: &ModelServer, mode: Mode) -> Tui {
    let mut argv = vec![installed_bin_dir()
        .join("codex")
        .to_string_lossy()
        .into_owned()];
    let mut env = hub.home.env();
    env.push(("AWARE_TEST_MODEL_KEY".into(), API_KEY.into()));
    let daemon = match mode {
        Mode::InProcess => {
            argv.extend(AgentHome::codex_offline_args(model));
            None
        }
        Mode::Daemon => {
            // The settings of codex_offline_args, as config.toml keys (top-level keys first).
            let path = hub.home.home.join(".codex/config.toml");
            let rest = std::fs::read_to_string(&path).unwrap_or_default();
            let settings = format!(
                "model_provider = \"aware_test\"\nmodel = \"gpt-5\"\n\n\
                 [analytics]\nenabled = false\n\n[features]\nplugins = false\n\n\
                 [model_providers.aware_test]\nname = \"aware-test\"\n\
                 base_url = \"{}/v1\"\nwire_api = \"responses\"\n\
                 env_key = \"AWARE_TEST_MODEL_KEY\"\n\n",
                model.base_url()
            );
            std::fs::write(&path, settings + &rest).unwrap();
            Some(Daemon {
                home: hub.home.home.clone(),
                env: env.clone(),
            })
        }
    };
    argv.push(TYPED.to_string());
    let tmux = Tmux::start(
        hub.home.tmp.join("tmux.sock"),
        &hub.home.project,
        &env,
        &argv,
    );
    Tui { tmux, daemon }
}

/// Codex's app-server daemon started exactly in [`Mode::Daemon`].
fn assert_mode(hub: &Hub, tui: &Tui) {
    let started = hub
        .home
        .home
        .join(".codex/app-server-daemon/daemon.pid")
        .exists();
    assert_eq!(
        started,
        tui.daemon.is_some(),
        "the app-server daemon started: {started}"
    );
}

fn main_requests(model: &ModelServer) -> usize {
    model.lane(Lane::Main).len()
}

/// KEY's human turns: only the typed prompt is one (the queued wake is not; a message sent
/// to KEY is a turn of its own, from the other agent).
fn assert_only_the_typed_prompt_is_a_human_turn(s: &Server) {
    let r = s.get(&format!("/v1/sessions/{}/turns", seg(KEY)));
    assert_eq!(r.status, 200, "{}", r.body);
    let users: Vec<&Value> = r.body["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] == "user" && t["provenance"]["kind"] == "human")
        .collect();
    assert_eq!(users.len(), 1, "{}", r.body);
    assert_eq!(users[0]["text"], TYPED, "{}", r.body);
}

/// The waiter's marks of queued prompts were all claimed by the prompt hook.
fn assert_no_mark_left(hub: &Hub) {
    let dir = hub.home.home.join(".local/state/aware/codex-queued");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "marks left in {}: {left:?}", dir.display());
}

fn woken_by_a_change(mode: Mode) {
    let hub = Hub::new(Cli::Codex, false);
    let drains_before = Arc::new(Mutex::new(None));
    let model = ModelServer::start(Script::new(vec![
        ready_step(&hub, &drains_before),
        Step::text("Reconciled."),
    ]));
    let tui = start_tui(&hub, &model, mode);
    wait_until_idle(&hub, &model, &drains_before);
    assert_mode(&hub, &tui);
    let changed = Instant::now();
    post_human_turn(&hub.s);
    model.wait_for("the woken request", WAKE_WITHIN, |r| {
        r.iter().filter(|x| x.lane == Lane::Main).count() >= 2
    });
    eprintln!("codex woke {:?} after the change", changed.elapsed());
    let notice = format!("Session \"{WORKER}\" changed (other actor)");
    assert_shown(&model, &notice, &[0, 1]);
    // The woken turn ends: its answer is on the screen, and its own waiter is back.
    tui.tmux
        .wait_for_screen("Reconciled.", Duration::from_secs(60));
    wait_for_wake_streams(&hub.s, 1.0, Duration::from_secs(60));
    assert_eq!(main_requests(&model), 2, "{}", model.summary());
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_only_the_typed_prompt_is_a_human_turn(&hub.s);
    assert_no_mark_left(&hub);
    assert_nothing_pending(&hub.s);
}

#[test]
fn codex_idle_session_is_woken_by_a_change() {
    woken_by_a_change(Mode::InProcess);
}

#[test]
fn codex_idle_session_under_the_app_server_daemon_is_woken_by_a_change() {
    woken_by_a_change(Mode::Daemon);
}

#[test]
fn codex_idle_session_is_woken_by_a_message_and_its_answer_reaches_the_sender() {
    let hub = Hub::new(Cli::Codex, false);
    hub.s.create(SENDER);
    let drains_before = Arc::new(Mutex::new(None));
    let model = ModelServer::start(Script::new(vec![
        ready_step(&hub, &drains_before),
        Step::text("Rebased on main."),
    ]));
    let _tui = start_tui(&hub, &model, Mode::InProcess);
    wait_until_idle(&hub, &model, &drains_before);
    let s2 = hub.s.clone();
    let sent = Instant::now();
    let waiter = std::thread::spawn(move || {
        s2.tool(
            SENDER,
            "sessions_send",
            json!({"sessionKey": KEY, "message": MESSAGE, "timeoutSeconds": 120}),
        )
    });
    model.wait_for("the woken request", WAKE_WITHIN, |r| {
        r.iter().filter(|x| x.lane == Lane::Main).count() >= 2
    });
    eprintln!("codex woke {:?} after the message", sent.elapsed());
    assert_shown(&model, &message_text(), &[0, 1]);
    let r = waiter.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "ok", "{}", r.body);
    assert_eq!(r.body["reply"], "Rebased on main.", "{}", r.body);
    assert_eq!(model.unscripted(), 0, "{}", model.summary());
    assert_only_the_typed_prompt_is_a_human_turn(&hub.s);
    assert_no_mark_left(&hub);
    assert_nothing_pending(&hub.s);
}
