//! Runners for the real agent CLIs (decision D30): Claude Code and Codex CLI, the versions pinned
//! in `clients/agent-clis/package-lock.json`, each run in a fresh `$HOME` against a
//! [`ModelServer`](crate::model_server::ModelServer) on loopback, offline.
//!
//! - [`installed_bin_dir`] finds `clients/agent-clis/node_modules/.bin`. When the pinned
//!   packages are not installed there it runs `npm ci` once (under a file lock, so parallel test
//!   processes install once); without `npm` it fails with the fix.
//! - [`claude_bin`] / [`codex_bin`]: the executable each runner starts: the pinned one, or the
//!   one `AWARE_CLAUDE_CODE_BIN` / `AWARE_CODEX_BIN` names (another release to check, installed
//!   elsewhere: `scripts/check-cli-release`); the version run is printed once per process.
//! - [`AgentHome`]: a temp dir with `home/` (the CLIs' `$HOME`), `project/` (their working
//!   directory) and `tmp/`; it trusts the project for each CLI as that CLI requires
//!   ([`AgentHome::trust_claude`], [`AgentHome::trust_codex`]).
//! - [`AgentHome::claude_print`] (`claude -p`) and [`AgentHome::codex_exec`] (`codex exec`) run
//!   one headless turn with a deadline: past it the CLI's process group is killed and the test
//!   fails saying so, with the CLI's output and the model server's log. Never a hang.
//! - [`Tmux`]: an interactive CLI under a pseudo-terminal of its own tmux server.
//!
//! Every run gets a clean environment (`PATH`, `HOME`, `TMPDIR`, `LANG` and what the runner
//! sets), so nothing of the developer's own Claude, Codex or aware setup (API keys,
//! `CLAUDE_*`, `AWARE_*`, `CODEX_HOME`) leaks into a test.

use crate::model_server::ModelServer;
use serde_json::{json, Value};
use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// The pinned packages and the binary each provides.
const PINNED: [(&str, &str); 2] = [
    ("@anthropic-ai/claude-code", "claude"),
    ("@openai/codex", "codex"),
];

/// The fake API key both CLIs are given (the model server accepts anything).
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

/// `clients/agent-clis` of this repository.
pub fn clis_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients/agent-clis")
        .canonicalize()
        .expect("clients/agent-clis exists in the repository")
}

/// `clients/agent-clis/node_modules/.bin`, with the pinned versions installed (by `npm ci` if
/// needed). Panics with the fix when they cannot be.
pub fn installed_bin_dir() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(install) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// The environment variables that name another executable of each CLI than the pinned one.
pub const CLAUDE_BIN_VAR: &str = "AWARE_CLAUDE_CODE_BIN";
pub const CODEX_BIN_VAR: &str = "AWARE_CODEX_BIN";

/// The Claude Code executable the runners start: `$AWARE_CLAUDE_CODE_BIN`, else the pinned one.
pub fn claude_bin() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    chosen(&BIN, CLAUDE_BIN_VAR, "claude")
}

/// The Codex CLI executable the runners start: `$AWARE_CODEX_BIN`, else the pinned one.
pub fn codex_bin() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    chosen(&BIN, CODEX_BIN_VAR, "codex")
}

fn chosen(
    cell: &'static OnceLock<Result<PathBuf, String>>,
    var: &str,
    name: &str,
) -> &'static Path {
    let found = cell.get_or_init(|| {
        let Some(given) = std::env::var_os(var).filter(|v| !v.is_empty()) else {
            return Ok(installed_bin_dir().join(name));
        };
        // The override replaces the pinned CLI for every test of this process: say which ran,
        // so a report of "the tests pass" names the release they passed on.
        let path = PathBuf::from(given);
        let version = version_of(&path).map_err(|e| format!("{var}={}: {e}", path.display()))?;
        eprintln!(
            "aware-testkit: {name} from {var}={}: {version}",
            path.display()
        );
        Ok(path)
    });
    match found {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// `BIN --version`, trimmed; an error when it does not run and say so within a minute.
fn version_of(bin: &Path) -> Result<String, String> {
    let out = tempfile::NamedTempFile::new().map_err(|e| format!("temp file: {e}"))?;
    let file = out.reopen().map_err(|e| format!("temp file: {e}"))?;
    let mut cmd = Command::new(bin);
    cmd.arg("--version")
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(Stdio::null());
    let status = run_with_deadline(cmd, Duration::from_secs(60))?;
    let text = std::fs::read_to_string(out.path()).map_err(|e| format!("its output: {e}"))?;
    if !status.success() || text.trim().is_empty() {
        return Err(format!("`--version` failed ({status}): {}", text.trim()));
    }
    Ok(text.trim().to_string())
}

/// The version of each pinned package as `package.json` asks for it, and whether
/// `node_modules` has exactly that.
fn install_state(dir: &Path) -> Result<bool, String> {
    let manifest: Value = read_json(&dir.join("package.json"))?;
    for (package, bin) in PINNED {
        let want = manifest["dependencies"][package]
            .as_str()
            .ok_or_else(|| format!("{package} is not pinned in {}", dir.display()))?;
        let installed = dir.join("node_modules").join(package).join("package.json");
        let have = match read_json(&installed) {
            Ok(v) => v["version"].as_str().map(str::to_string),
            Err(_) => None,
        };
        if have.as_deref() != Some(want) || !dir.join("node_modules/.bin").join(bin).exists() {
            return Ok(false);
        }
    }
    Ok(true)
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))
}

fn install() -> Result<PathBuf, String> {
    let dir = clis_dir();
    let bin = dir.join("node_modules/.bin");
    if install_state(&dir)? {
        return Ok(bin);
    }
    let fix = format!(
        "the real-CLI tests need the pinned agent CLIs: install Node.js and npm \
         (Debian: apt-get install nodejs npm), then run `npm ci` in {}",
        dir.display()
    );
    match Command::new("npm").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => return Err(format!("`npm --version` failed ({}): {fix}", o.status)),
        Err(e) => return Err(format!("npm not found ({e}): {fix}")),
    }
    // One `npm ci` for all test processes: the others wait on the lock, then see it done.
    let lock_path = dir.join(".npm-ci.lock");
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    // Released when `lock` is closed.
    if let Err(e) = rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive) {
        return Err(format!("lock {}: {e}", lock_path.display()));
    }
    if install_state(&dir)? {
        return Ok(bin);
    }
    eprintln!("aware-testkit: running `npm ci` in {}", dir.display());
    let out = dir.join(".npm-ci.log");
    let log = File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut cmd = Command::new("npm");
    cmd.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    let status = run_with_deadline(cmd, Duration::from_secs(900))
        .map_err(|e| format!("npm ci in {}: {e}: {fix}", dir.display()))?;
    if !status.success() {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        return Err(format!(
            "npm ci in {} failed ({status}):\n{text}\n{fix}",
            dir.display()
        ));
    }
    if !install_state(&dir)? {
        return Err(format!(
            "npm ci in {} did not install the pinned versions: {fix}",
            dir.display()
        ));
    }
    drop(lock);
    Ok(bin)
}

/// Runs `cmd` in a process group of its own; past `deadline` the whole group (the CLI, its
/// hooks, its tools) is killed and the answer is an `Err`.
fn run_with_deadline(mut cmd: Command, deadline: Duration) -> Result<ExitStatus, String> {
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|e| format!("start: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(deadline) {
        Ok(Ok(status)) => {
            let _ = waiter.join();
            Ok(status)
        }
        Ok(Err(e)) => Err(format!("wait: {e}")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = waiter.join();
            Err(format!(
                "still running after {deadline:?}; its process group was killed"
            ))
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A run past its deadline is killed with its whole process group (a grandchild too) and
    /// reported, never waited for.
    #[test]
    fn a_run_past_its_deadline_is_killed_with_its_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("grandchild.pid");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("sleep 600 & echo $! > {:?}; wait", pid_file))
            .stdin(Stdio::null());
        // 3 s: ample for `sh` to start the grandchild and write its pid on a loaded machine.
        let err = run_with_deadline(cmd, Duration::from_secs(3)).expect_err("killed");
        assert!(err.contains("process group was killed"), "{err}");
        let pid = std::fs::read_to_string(&pid_file).expect("the grandchild's pid");
        // The grandchild got SIGKILL with the group: gone, or a zombie until init reaps it.
        let alive = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(&pid) {
            assert!(Instant::now() < deadline, "the grandchild {pid} survived");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_run_within_its_deadline_gives_its_status() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        let status = run_with_deadline(cmd, Duration::from_secs(60)).expect("ran");
        assert_eq!(status.code(), Some(3));
    }
}
