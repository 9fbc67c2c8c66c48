//! Gemini CLI (the version pinned in `clients/agent-clis`), headless and offline against a
//! [`ModelServer`]: `gemini -p PROMPT --approval-mode yolo -m gemini-2.5-flash` with
//! `GOOGLE_GEMINI_BASE_URL` pointing at the model server (checked against Gemini CLI 0.61.0).

use super::{gemini_bin, AgentHome, CliRun, API_KEY};
use crate::model_server::ModelServer;
use serde_json::json;

/// The model every run asks for (`auto` would first ask a classifier model for JSON).
pub const GEMINI_MODEL: &str = "gemini-2.5-flash";

impl AgentHome {
    /// `$HOME/.gemini/settings.json` for an offline run (API-key auth, else it exits 41; no
    /// usage statistics, telemetry or update check) and the project's folder trusted in
    /// `$HOME/.gemini/trustedFolders.json` (else a headless run is refused and the project's
    /// hooks and MCP servers are not loaded). Overwrites both.
    pub fn trust_gemini(&self) {
        let dir = self.home.join(".gemini");
        std::fs::create_dir_all(&dir).expect("$HOME/.gemini");
        let settings = json!({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        });
        std::fs::write(dir.join("settings.json"), settings.to_string())
            .expect("write $HOME/.gemini/settings.json");
        let folders = json!({ self.project.to_string_lossy(): "TRUST_FOLDER" });
        std::fs::write(dir.join("trustedFolders.json"), folders.to_string())
            .expect("write $HOME/.gemini/trustedFolders.json");
    }

    /// The environment that points Gemini CLI at `model`, offline.
    pub fn gemini_env(&self, model: &ModelServer) -> Vec<(String, String)> {
        let mut env = self.env();
        env.extend([
            ("GOOGLE_GEMINI_BASE_URL".into(), model.base_url()),
            ("GEMINI_API_KEY".into(), API_KEY.into()),
            // Without it Gemini CLI starts itself again in a child process.
            ("GEMINI_CLI_NO_RELAUNCH".into(), "true".into()),
        ]);
        env
    }

    /// `gemini -p PROMPT --approval-mode yolo -m gemini-2.5-flash ARGS…` against `model`;
    /// panics on the deadline.
    pub fn gemini_print(&self, model: &ModelServer, prompt: &str, args: &[&str]) -> CliRun {
        let mut cmd = self.command(gemini_bin());
        cmd.env_clear()
            .envs(self.gemini_env(model))
            .args(["-p", prompt, "--approval-mode", "yolo", "-m", GEMINI_MODEL])
            .args(args);
        self.run("gemini -p", cmd, model)
    }
}
