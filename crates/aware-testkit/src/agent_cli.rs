//! Runners for the real agent CLIs (decision D30): Claude Code, Codex CLI and Gemini CLI
//! ([`gemini`]), the versions pinned in `clients/agent-clis/package-lock.json`, each run in a
//! fresh `$HOME` against a [`ModelServer`](crate::model_server::ModelServer) on loopback,
//! offline.
//!
//! - [`installed_bin_dir`] finds `clients/agent-clis/node_modules/.bin`. When the pinned
//!   packages are not installed there it runs `npm ci` once (under a file lock, so parallel test
//!   processes install once); without `npm` it fails with the fix.
//! - [`claude_bin`] / [`codex_bin`] / [`gemini_bin`]: the executable each runner starts: the
//!   pinned one, or the one `AWARE_CLAUDE_CODE_BIN` / `AWARE_CODEX_BIN` / `AWARE_GEMINI_BIN` names (another release to check, installed
//!   elsewhere: `scripts/check-cli-release`); the version run is printed once per process.
//! - [`AgentHome`]: a temp dir with `home/` (the CLIs' `$HOME`), `project/` (their working
//!   directory) and `tmp/`; it trusts the project for each CLI as that CLI requires
//!   ([`AgentHome::trust_claude`], [`AgentHome::trust_codex`], [`AgentHome::trust_gemini`]).
//! - [`AgentHome::claude_print`] (`claude -p`), [`AgentHome::codex_exec`] (`codex exec`) and
//!   [`AgentHome::gemini_print`] (`gemini -p`) run one headless turn with a deadline: past it
//!   the CLI's process group is killed and the test fails saying so, with the CLI's output and
//!   the model server's log. Never a hang.
//! - [`Tmux`]: an interactive CLI under a pseudo-terminal of its own tmux server.
//!
//! Every run gets a clean environment (`PATH`, `HOME`, `TMPDIR`, `LANG` and what the runner
//! sets), so nothing of the developer's own Claude, Codex, Gemini or aware setup (API keys,
//! `CLAUDE_*`, `AWARE_*`, `CODEX_HOME`, `GEMINI_*`) leaks into a test.

pub mod gemini;

mod install;

use crate::model_server::ModelServer;
use install::run_with_deadline;
pub use install::{
    claude_bin, clis_dir, codex_bin, gemini_bin, installed_bin_dir, CLAUDE_BIN_VAR, CODEX_BIN_VAR,
    GEMINI_BIN_VAR,
};
use serde_json::{json, Value};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The fake API key every CLI is given (the model server accepts anything).
pub const API_KEY: &str = "sk-ant-test-aware-0000000000000000";

/// How long one CLI run may take before it is killed: `AWARE_AGENT_CLI_DEADLINE_SECS`, else
/// 120 s (a run takes 1–5 s here; the margin is for a loaded 2-core CI machine).
pub fn run_deadline() -> Duration {
    let secs = std::env::var("AWARE_AGENT_CLI_DEADLINE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    Duration::from_secs(secs)
}

/// What one CLI run left.
#[derive(Debug)]
pub struct CliRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    /// Panics unless the run exited 0, with its output and the model server's log.
    pub fn assert_success(&self, what: &str, model: &ModelServer) {
        assert!(
            self.status.success(),
            "{what} exited with {}\nstdout:\n{}\nstderr:\n{}\nmodel requests:{}",
            self.status,
            self.stdout,
            self.stderr,
            model.summary()
        );
    }
    /// The stdout parsed as JSON (`claude -p --output-format json`).
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "the CLI's stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// A fresh `$HOME`, project directory and temp directory for one CLI session.
pub struct AgentHome {
    _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub tmp: PathBuf,
    runs: std::cell::Cell<usize>,
}

impl Default for AgentHome {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentHome {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir for an agent home");
        // Canonical: both CLIs key their trust and their transcript folders by the real path.
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let (home, project, tmp) = (root.join("home"), root.join("project"), root.join("tmp"));
        for d in [&home, &project, &tmp] {
            std::fs::create_dir_all(d).expect("agent home directories");
        }
        AgentHome {
            _dir: dir,
            home,
            project,
            tmp,
            runs: std::cell::Cell::new(0),
        }
    }

    /// `$HOME/.claude.json` as Claude Code needs it in a fresh home: the project's folder
    /// trusted (else it ignores `.claude/settings.json` and `.mcp.json`), onboarding done and
    /// the API key approved (else interactive runs stop at first-run screens), the project's
    /// MCP servers enabled without asking.
    pub fn trust_claude(&self) {
        let key_tail = &API_KEY[API_KEY.len() - 20..];
        let project = self.project.to_string_lossy().to_string();
        let config = json!({
            "hasCompletedOnboarding": true,
            "numStartups": 1,
            "customApiKeyResponses": {"approved": [key_tail], "rejected": []},
            "projects": {
                project: {
                    "hasTrustDialogAccepted": true,
                    "hasCompletedProjectOnboarding": true,
                    "enableAllProjectMcpServers": true,
                    "allowedTools": []
                }
            }
        });
        std::fs::write(self.home.join(".claude.json"), config.to_string())
            .expect("write $HOME/.claude.json");
    }

    /// `$HOME/.codex/config.toml` trusts the project (else Codex ignores its `.codex/`).
    /// Appends, so trust entries written before (by `aware init codex`) stay.
    pub fn trust_codex(&self) {
        let dir = self.home.join(".codex");
        std::fs::create_dir_all(&dir).expect("$HOME/.codex");
        let path = dir.join("config.toml");
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        let table = format!("[projects.{:?}]", self.project.to_string_lossy());
        if !text.contains(&table) {
            text.push_str(&format!("\n{table}\ntrust_level = \"trusted\"\n"));
            std::fs::write(&path, text).expect("write $HOME/.codex/config.toml");
        }
    }

    /// The clean environment of every CLI run (and of the commands a test runs as the user,
    /// such as `aware init` that must see this `$HOME`).
    pub fn env(&self) -> Vec<(String, String)> {
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_string());
        vec![
            ("PATH".into(), path),
            ("HOME".into(), self.home.to_string_lossy().into()),
            ("TMPDIR".into(), self.tmp.to_string_lossy().into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("USER".into(), "aware-test".into()),
        ]
    }

    /// A command in this home's clean environment, in the project directory.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .envs(self.env())
            .current_dir(&self.project)
            .stdin(Stdio::null());
        cmd
    }

    /// The environment that points Claude Code at `model`, offline.
    pub fn claude_env(&self, model: &ModelServer) -> Vec<(String, String)> {
        let mut env = self.env();
        env.extend([
            ("ANTHROPIC_BASE_URL".into(), model.base_url()),
            ("ANTHROPIC_API_KEY".into(), API_KEY.into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
        ]);
        env
    }

    /// `claude -p PROMPT --output-format json ARGS…` against `model`; panics on the deadline.
    pub fn claude_print(&self, model: &ModelServer, prompt: &str, args: &[&str]) -> CliRun {
        let mut cmd = self.command(claude_bin());
        cmd.env_clear()
            .envs(self.claude_env(model))
            .args(["-p", prompt, "--output-format", "json"])
            .args(args);
        self.run("claude -p", cmd, model)
    }

    /// The `-c` settings that point Codex at `model`, offline (without `analytics.enabled` and
    /// `--disable plugins` it tries to reach outside hosts).
    pub fn codex_offline_args(model: &ModelServer) -> Vec<String> {
        vec![
            "-c".into(),
            "model_provider=aware_test".into(),
            "-c".into(),
            format!(
                "model_providers.aware_test={{name=\"aware-test\",base_url=\"{}/v1\",\
                 wire_api=\"responses\",env_key=\"AWARE_TEST_MODEL_KEY\"}}",
                model.base_url()
            ),
            "-c".into(),
            "model=gpt-5".into(),
            "-c".into(),
            "analytics.enabled=false".into(),
            "--disable".into(),
            "plugins".into(),
        ]
    }

    /// `codex exec … PROMPT` (with `ARGS` before the prompt) against `model`; panics on the
    /// deadline.
    pub fn codex_exec(&self, model: &ModelServer, prompt: &str, args: &[&str]) -> CliRun {
        let mut all: Vec<String> = [
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        all.extend(Self::codex_offline_args(model));
        all.extend(args.iter().map(|s| s.to_string()));
        all.push(prompt.to_string());
        self.codex(model, &all)
    }

    /// `codex ARGS…` with the model key in its environment (the offline settings are the
    /// caller's: [`AgentHome::codex_offline_args`]); panics on the deadline.
    pub fn codex(&self, model: &ModelServer, args: &[String]) -> CliRun {
        let mut cmd = self.command(codex_bin());
        cmd.env("AWARE_TEST_MODEL_KEY", API_KEY).args(args);
        self.run("codex", cmd, model)
    }

    fn run(&self, what: &str, mut cmd: Command, model: &ModelServer) -> CliRun {
        let n = self.runs.get();
        self.runs.set(n + 1);
        let out_path = self.tmp.join(format!("run-{n}.stdout"));
        let err_path = self.tmp.join(format!("run-{n}.stderr"));
        let out = File::create(&out_path).expect("stdout file");
        let err = File::create(&err_path).expect("stderr file");
        cmd.stdout(out).stderr(err);
        let deadline = run_deadline();
        let result = run_with_deadline(cmd, deadline);
        let read = |p: &Path| {
            let mut s = String::new();
            let _ = File::open(p).and_then(|mut f| f.read_to_string(&mut s));
            s
        };
        let (stdout, stderr) = (read(&out_path), read(&err_path));
        match result {
            Ok(status) => CliRun {
                status,
                stdout,
                stderr,
            },
            Err(e) => panic!(
                "{what}: {e} (deadline AWARE_AGENT_CLI_DEADLINE_SECS, now {}s)\nstdout:\n{stdout}\n\
                 stderr:\n{stderr}\nmodel requests:{}",
                deadline.as_secs(),
                model.summary()
            ),
        }
    }

    /// Claude Code's transcripts of this home (`$HOME/.claude/projects/<dir>/<uuid>.jsonl`,
    /// subagents' files left out).
    pub fn claude_transcripts(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let root = self.home.join(".claude/projects");
        for project in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(project.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let p = f.path();
                if p.extension().is_some_and(|e| e == "jsonl") {
                    found.push(p);
                }
            }
        }
        found.sort();
        found
    }

    /// Codex's rollouts of this home (`$HOME/.codex/sessions/YYYY/MM/DD/rollout-….jsonl`).
    pub fn codex_rollouts(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "jsonl") {
                    out.push(p);
                }
            }
        }
        let mut found = Vec::new();
        walk(&self.home.join(".codex/sessions"), &mut found);
        found.sort();
        found
    }
}

/// An interactive CLI under a pseudo-terminal: a tmux server of its own (its socket in the
/// test's temp dir, so only this server is ever killed), one window running the command.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// Starts `argv` with `env` in `cwd` in a detached 200×50 window. Panics with the fix when
    /// tmux is missing.
    pub fn start(socket: PathBuf, cwd: &Path, env: &[(String, String)], argv: &[String]) -> Self {
        match Command::new("tmux").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => panic!(
                "tmux is needed for the interactive agent CLI tests: apt-get install tmux \
                 (.ci/run installs it)"
            ),
        }
        let mut cmd = Command::new("tmux");
        cmd.arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "50",
            ])
            .arg("-c")
            .arg(cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("TERM", "xterm-256color");
        // tmux runs the command through a shell; `env -i` with the clean environment keeps
        // the tmux server's own environment out of the CLI's.
        let mut line = String::from("exec env -i");
        for (k, v) in env {
            line.push(' ');
            line.push_str(&shell_quote(&format!("{k}={v}")));
        }
        line.push_str(" TERM=xterm-256color");
        for a in argv {
            line.push(' ');
            line.push_str(&shell_quote(a));
        }
        cmd.arg(line);
        let status = cmd.status().expect("start tmux");
        assert!(status.success(), "tmux new-session failed: {status}");
        Tmux { socket }
    }

    /// The visible screen.
    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["capture-pane", "-p", "-t", "0"])
            .output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => format!("(capture-pane failed: {e})"),
        }
    }

    /// Types `keys` (tmux key names, e.g. "Enter") into the window.
    pub fn send_keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["send-keys", "-t", "0"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success(), "tmux send-keys failed");
    }

    /// Waits until the screen contains `text`, at most `timeout`: a bounded wait for something
    /// observable (the screen has no change notification, so it is read every 50 ms).
    pub fn wait_for_screen(&self, text: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen did not show {text:?} within {timeout:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
