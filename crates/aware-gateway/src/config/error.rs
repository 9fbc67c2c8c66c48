//! The one error of configuration, and the token-file reader every secret setting shares.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

pub(super) fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// Reads a token from a file: the whole content less one trailing newline, so `echo t > f`
/// works while a token that really ends in spaces stays as written.
pub fn read_token_file(what: &str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("{what}: cannot read {}: {e}", path.display())))?;
    let t = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    Ok(t.to_string())
}
