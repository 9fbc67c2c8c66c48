//! Notice text, the strict context-key codec, system-event line rules and prompt rendering
//! (spec 02 §8).

use crate::time::rfc3339_millis;

pub const CONTEXT_KEY_PREFIX: &str = "session-state:";
pub const MAX_SYSTEM_EVENT_CHARS: usize = 4000;
pub const MAX_CONTEXT_KEY_CHARS: usize = 256;
/// Entries a session's system-event FIFO keeps (the newest).
pub const FIFO_CAP: usize = 20;

/// The byte-stable notice line. `target` is inserted raw.
pub fn notice_text(target: &str, last_seen: i64) -> String {
    format!(
        "Session \"{target}\" changed (other actor). Reconcile before acting: session_status \
         sessionKey \"{target}\" changesSince {last_seen}."
    )
}

/// `session-state:` + lowercase hex of the target key's UTF-8 bytes.
pub fn encode_context_key(target: &str) -> String {
    format!(
        "{CONTEXT_KEY_PREFIX}{}",
        crate::hex::lower(target.as_bytes())
    )
}

/// Strict decode: exact prefix, non-empty even-length lowercase hex, valid UTF-8. A leading
/// U+FEFF is kept. Anything else is `None`, and a key that decodes to nothing acks nothing.
pub fn decode_context_key(key: &str) -> Option<String> {
    let hex = key.strip_prefix(CONTEXT_KEY_PREFIX)?;
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes = hex
        .as_bytes()
        .chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// The "session created" line's context key (03 §4.1).
pub fn session_created_context_key(key: &str) -> String {
    format!("session-created:{}", crate::hex::lower(key.as_bytes()))
}

/// Why a system event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SystemEventError {
    #[error("text must not be empty after trimming")]
    EmptyText,
    #[error("text must be at most {MAX_SYSTEM_EVENT_CHARS} characters (got {chars})")]
    TextTooLong { chars: usize },
    #[error("{0} must not contain U+0000 (NUL)")]
    Nul(&'static str),
    #[error("contextKey must be at most {MAX_CONTEXT_KEY_CHARS} characters")]
    ContextKeyTooLong,
    #[error("contextKey must not start with \"session-state:\" (reserved for notices)")]
    ReservedContextKey,
}

/// A validated system-event line: trimmed text, trimmed lower-case context key (empty → none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemEventLine {
    pub text: String,
    pub context_key: Option<String>,
}

impl SystemEventLine {
    pub fn new(text: &str, context_key: Option<&str>) -> Result<Self, SystemEventError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SystemEventError::EmptyText);
        }
        let chars = text.chars().count();
        if chars > MAX_SYSTEM_EVENT_CHARS {
            return Err(SystemEventError::TextTooLong { chars });
        }
        // PostgreSQL's text type cannot hold U+0000; refused on every backend alike.
        if text.contains('\0') {
            return Err(SystemEventError::Nul("text"));
        }
        if context_key.is_some_and(|k| k.contains('\0')) {
            return Err(SystemEventError::Nul("contextKey"));
        }
        let context_key = match context_key.map(|k| k.trim().to_lowercase()) {
            Some(k) if k.is_empty() => None,
            Some(k) if k.chars().count() > MAX_CONTEXT_KEY_CHARS => {
                return Err(SystemEventError::ContextKeyTooLong)
            }
            Some(k) if k.starts_with(CONTEXT_KEY_PREFIX) => {
                return Err(SystemEventError::ReservedContextKey)
            }
            other => other,
        };
        Ok(SystemEventLine {
            text: text.to_string(),
            context_key,
        })
    }
}

/// One line of a drain prompt: system events first, then notices, each with its time.
pub fn render_prompt<'a>(items: impl IntoIterator<Item = (i64, &'a str)>) -> String {
    let mut lines: Vec<String> = Vec::new();
    for (at, text) in items {
        let mut parts = text.split('\n');
        let first = parts.next().unwrap_or_default();
        lines.push(format!("System: [{}] {first}", rfc3339_millis(at)));
        lines.extend(parts.map(|more| format!("System: {more}")));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "agent:main:subagent:c1";

    #[test]
    fn s041_exact_notice_text() {
        let t = notice_text(C, 1);
        assert_eq!(
            t,
            "Session \"agent:main:subagent:c1\" changed (other actor). Reconcile before acting: \
             session_status sessionKey \"agent:main:subagent:c1\" changesSince 1."
        );
        assert_eq!(t.len(), 147);
        assert_eq!(
            encode_context_key(C),
            "session-state:6167656e743a6d61696e3a7375626167656e743a6331"
        );
    }

    #[test]
    fn s042_context_key_codec() {
        assert_eq!(encode_context_key("ab"), "session-state:6162");
        let k = "agent:main:slack:channel:C01234567";
        assert_eq!(
            decode_context_key(&encode_context_key(k)).as_deref(),
            Some(k)
        );
        assert_eq!(encode_context_key("\u{FEFF}x"), "session-state:efbbbf78");
        assert_eq!(
            decode_context_key("session-state:efbbbf78").as_deref(),
            Some("\u{FEFF}x")
        );
        for bad in [
            "session-state:ff",
            "session-state:",
            "session-state:abc",
            "session-state:zz",
            "session-state:6A62",
            "other:6162",
            "Session-State:6162",
        ] {
            assert_eq!(decode_context_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn s056_prompt_rendering() {
        let t0 = 1_767_225_600_000;
        assert_eq!(
            render_prompt([(t0, "a\nb")]),
            "System: [2026-01-01T00:00:00.000Z] a\nSystem: b"
        );
        assert_eq!(render_prompt(std::iter::empty()), "");
    }

    #[test]
    fn s055_system_event_rules() {
        assert_eq!(
            SystemEventLine::new("   ", None),
            Err(SystemEventError::EmptyText)
        );
        assert!(SystemEventLine::new(&"x".repeat(4001), None).is_err());
        assert!(SystemEventLine::new(&"x".repeat(4000), None).is_ok());
        assert_eq!(
            SystemEventLine::new("x", Some("session-state:6162")),
            Err(SystemEventError::ReservedContextKey)
        );
        let l = SystemEventLine::new(" ping ", Some("CRON:A ")).unwrap();
        assert_eq!(
            (l.text.as_str(), l.context_key.as_deref()),
            ("ping", Some("cron:a"))
        );
    }
}
