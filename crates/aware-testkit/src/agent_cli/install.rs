//! Which executable of each agent CLI the runners start: the pinned one, installed by `npm ci`
//! in `clients/agent-clis` when missing (under a file lock, so parallel test processes install
//! once), or another release named by `AWARE_CLAUDE_CODE_BIN` / `AWARE_CODEX_BIN` /
//! `AWARE_GEMINI_BIN` (what `scripts/check-cli-release` sets); and [`run_with_deadline`], the one way a process is run.

use serde_json::Value;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

/// The pinned packages and the binary each provides.
const PINNED: [(&str, &str); 3] = [
    ("@anthropic-ai/claude-code", "claude"),
    ("@openai/codex", "codex"),
    ("@google/gemini-cli", "gemini"),
];

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
pub const GEMINI_BIN_VAR: &str = "AWARE_GEMINI_BIN";

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

/// The Gemini CLI executable the runners start: `$AWARE_GEMINI_BIN`, else the pinned one.
pub fn gemini_bin() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    chosen(&BIN, GEMINI_BIN_VAR, "gemini")
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
pub(super) fn run_with_deadline(
    mut cmd: Command,
    deadline: Duration,
) -> Result<ExitStatus, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
