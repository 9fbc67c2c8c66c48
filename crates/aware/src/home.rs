//! The user's home directory and the XDG directories under it, for the client's own files
//! (`client.toml`, the waiting hook's state, `~/.codex`).
//!
//! Never a relative path: with `HOME` unset these once fell back to `.`, so a command run inside
//! a cloned repository read the repository's `.config/aware/client.toml` (and the hook sent the
//! prompt and the token to the URL there). `HOME` unset is answered from the password database
//! (`std::env::home_dir` does `getpwuid_r` exactly then); a `HOME` that is empty or relative is
//! refused rather than guessed at.

use std::path::PathBuf;

/// Why no home directory could be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeError(String);

impl std::fmt::Display for HomeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HomeError {}

impl HomeError {
    pub fn new(msg: String) -> HomeError {
        HomeError(msg)
    }
}

/// `$HOME` when it is an absolute path; when it is unset, the home directory of the password
/// database; else an error saying what to set.
pub fn home_dir() -> Result<PathBuf, HomeError> {
    match std::env::var_os("HOME") {
        Some(h) if h.is_empty() => Err(HomeError(
            "HOME is set but empty; set it to your home directory".into(),
        )),
        Some(h) => {
            let p = PathBuf::from(h);
            if p.is_absolute() {
                Ok(p)
            } else {
                Err(HomeError(format!(
                    "HOME is a relative path ({}); set it to your home directory",
                    p.display()
                )))
            }
        }
        // With HOME unset, std asks the password database (getpwuid_r) and nothing else.
        None => match std::env::home_dir() {
            Some(p) if p.is_absolute() => Ok(p),
            _ => Err(HomeError(
                "HOME is not set and the password database names no home directory for this \
                 user; set HOME"
                    .into(),
            )),
        },
    }
}

/// `$<var>/aware` when the variable holds an absolute path (the XDG base directory spec says to
/// ignore a relative one), else `<home>/<under_home>/aware`.
pub fn xdg_dir(var: &str, under_home: &str) -> Result<PathBuf, HomeError> {
    if let Some(x) = std::env::var_os(var).map(PathBuf::from) {
        if x.is_absolute() {
            return Ok(x.join("aware"));
        }
    }
    Ok(home_dir()?.join(under_home).join("aware"))
}
