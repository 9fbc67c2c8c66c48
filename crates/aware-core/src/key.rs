//! Session keys and agent ids, and their canonical form (spec 03 §3.1).
//!
//! Every comparison in aware (cursors, self-suppression, dedupe keys) is done on canonical keys
//! byte for byte, so parsing is the only place where spelling is forgiven.

use std::fmt;

/// Longest key accepted, in UTF-8 bytes, after trimming.
pub const MAX_KEY_BYTES: usize = 512;
/// The pattern agent ids must match, quoted in error messages.
pub const AGENT_ID_PATTERN: &str = "[a-z0-9][a-z0-9_-]{0,63}";

/// Why a session key or agent id was refused. Each message names the broken rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error("session key must not be empty or only whitespace")]
    Empty,
    #[error("session key must be at most {MAX_KEY_BYTES} bytes of UTF-8 (got {bytes} bytes)")]
    TooLong { bytes: usize },
    #[error("session key must not contain control characters")]
    ControlCharacter,
    #[error("session key must not contain bidirectional or zero-width formatting characters (U+200B-200F, U+202A-202E, U+2060, U+2066-2069, U+061C, U+FEFF)")]
    InvisibleCharacter,
    #[error("agent-qualified session key must read agent:<agentId>:<rest> with a non-empty rest")]
    MalformedQualified,
    #[error("a new session key must not contain a double quote (\"), a backslash (\\) or a Unicode line or paragraph separator (U+2028, U+2029): notices quote the key on one line")]
    QuoteOrLineSeparator,
    #[error("agent id {id:?} must match {AGENT_ID_PATTERN}")]
    InvalidAgentId { id: String },
}

/// Does `s` hold a bidirectional control or a zero-width character? Such characters make two
/// different keys (or labels) look the same on screen, or reorder what a reader sees.
pub fn has_invisible_format(s: &str) -> bool {
    s.chars().any(|c| {
        matches!(c,
            '\u{200B}'..='\u{200F}' // zero-width space/joiners, LRM, RLM
            | '\u{202A}'..='\u{202E}' // embeddings and overrides
            | '\u{2060}' // word joiner
            | '\u{2066}'..='\u{2069}' // isolates
            | '\u{061C}' // Arabic letter mark
            | '\u{FEFF}') // zero-width no-break space
    })
}

/// Does `s` hold a character that could end the quoted key of a notice line or start a new line
/// in a reader that splits on every Unicode line break: `"`, `\\`, U+2028, U+2029. (Control
/// characters, U+0085 among them, are refused in every key already.)
pub fn has_notice_breaking_char(s: &str) -> bool {
    s.chars()
        .any(|c| matches!(c, '"' | '\\' | '\u{2028}' | '\u{2029}'))
}

/// An agent id: matches `[a-z0-9][a-z0-9_-]{0,63}`, stored lower-case.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(String);

impl AgentId {
    /// Lower-cases, then checks the pattern. Input is not trimmed: ids come from structured fields.
    pub fn parse(input: &str) -> Result<Self, KeyError> {
        let lowered = input.to_ascii_lowercase();
        if is_valid_agent_id(&lowered) {
            Ok(AgentId(lowered))
        } else {
            Err(KeyError::InvalidAgentId {
                id: input.to_string(),
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_valid_agent_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    if bytes.is_empty() || bytes.len() > 64 {
        return false;
    }
    let first_ok = bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit();
    first_ok
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// A canonical session key. Construct with [`SessionKey::parse`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionKey {
    canonical: String,
    /// Byte length of `agent:<id>:` when agent-qualified; 0 for bare keys.
    qualified_prefix: usize,
}

impl SessionKey {
    /// Trims Unicode whitespace, checks length and control characters, and canonicalises an
    /// `agent:<id>:<rest>` key by lower-casing the prefix and the agent id (never `rest`).
    pub fn parse(input: &str) -> Result<Self, KeyError> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(KeyError::Empty);
        }
        if trimmed.len() > MAX_KEY_BYTES {
            return Err(KeyError::TooLong {
                bytes: trimmed.len(),
            });
        }
        if trimmed.chars().any(char::is_control) {
            return Err(KeyError::ControlCharacter);
        }
        if has_invisible_format(trimmed) {
            return Err(KeyError::InvisibleCharacter);
        }
        let is_qualified = trimmed
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case("agent:"));
        if !is_qualified {
            return Ok(SessionKey {
                canonical: trimmed.to_string(),
                qualified_prefix: 0,
            });
        }
        let after = &trimmed[6..];
        let Some(colon) = after.find(':') else {
            return Err(KeyError::MalformedQualified);
        };
        let (raw_agent, rest) = (&after[..colon], &after[colon + 1..]);
        if rest.is_empty() {
            return Err(KeyError::MalformedQualified);
        }
        let agent = AgentId::parse(raw_agent)?;
        let canonical = format!("agent:{}:{}", agent.as_str(), rest);
        Ok(SessionKey {
            qualified_prefix: 6 + agent.as_str().len() + 1,
            canonical,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    /// The stricter rule for a key a session is *created* under. A key with a quote, a backslash
    /// or a line separator let an agent forge a line in the hub's own voice inside a watcher's
    /// notice (the notice quotes the key). Such keys stay addressable when already stored (so
    /// they can be read and deleted, and their notices are escaped by
    /// [`crate::notice::quote_key`]), but no new session gets one.
    pub fn check_new(&self) -> Result<(), KeyError> {
        if has_notice_breaking_char(&self.canonical) {
            return Err(KeyError::QuoteOrLineSeparator);
        }
        Ok(())
    }

    pub fn is_agent_qualified(&self) -> bool {
        self.qualified_prefix > 0
    }

    /// The agent named in an agent-qualified key.
    pub fn qualified_agent(&self) -> Option<AgentId> {
        if self.qualified_prefix == 0 {
            return None;
        }
        Some(AgentId(
            self.canonical[6..self.qualified_prefix - 1].to_string(),
        ))
    }

    /// Everything after `agent:<id>:` (the whole key when bare).
    pub fn rest(&self) -> &str {
        &self.canonical[self.qualified_prefix..]
    }

    /// An agent-qualified key whose rest starts with `subagent:` (case-insensitive).
    pub fn is_subagent(&self) -> bool {
        self.is_agent_qualified()
            && self
                .rest()
                .get(..9)
                .is_some_and(|p| p.eq_ignore_ascii_case("subagent:"))
    }

    /// `agent:<agent>:<rest>`; both parts are already valid so this cannot fail.
    pub fn qualified(agent: &AgentId, rest: &str) -> Result<Self, KeyError> {
        Self::parse(&format!("agent:{}:{}", agent.as_str(), rest))
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

/// A session reference: key plus owning agent. For agent-qualified keys the agent is the one in
/// the key; a bare key needs an explicit agent.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionRef {
    pub key: SessionKey,
    pub agent: AgentId,
}

impl SessionRef {
    /// Pairs a key with its agent: the key's own agent when qualified (a different `agent` is
    /// refused), else `agent`.
    pub fn resolve(key: SessionKey, agent: &AgentId) -> Result<Self, RefError> {
        match key.qualified_agent() {
            Some(own) if &own != agent => Err(RefError::AgentMismatch {
                key: key.as_str().to_string(),
                agent: agent.as_str().to_string(),
            }),
            Some(own) => Ok(SessionRef { key, agent: own }),
            None => Ok(SessionRef {
                key,
                agent: agent.clone(),
            }),
        }
    }

    /// For an agent-qualified key, its own agent; for a bare key, `fallback`.
    pub fn with_default(key: SessionKey, fallback: &AgentId) -> Self {
        let agent = key.qualified_agent().unwrap_or_else(|| fallback.clone());
        SessionRef { key, agent }
    }
}

impl fmt::Display for SessionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (agent {})", self.key, self.agent)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("agentId {agent:?} does not match the agent of session key {key:?}")]
    AgentMismatch { key: String, agent: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_and_zero_width_characters_are_refused() {
        for bad in [
            "agent:main:a\u{202E}b",
            "agent:main:\u{200B}x",
            "a\u{200D}b",
            "x\u{2066}y",
            "x\u{2069}",
            "\u{061C}k",
            "k\u{FEFF}k",
            "agent:main:a\u{200E}",
            "a\u{2060}b",
        ] {
            assert_eq!(
                SessionKey::parse(bad),
                Err(KeyError::InvisibleCharacter),
                "{bad:?}"
            );
        }
        // Other non-ASCII text stays allowed.
        assert!(SessionKey::parse("agent:main:café-日本").is_ok());
        assert!(!has_invisible_format("plain"));
    }

    #[test]
    fn s001_canonical_keys() {
        let k = SessionKey::parse("  Agent:MAIN:Work  ").unwrap();
        assert_eq!(k.as_str(), "agent:main:Work");
        assert_eq!(k.qualified_agent().unwrap().as_str(), "main");
        assert_ne!(k, SessionKey::parse("agent:main:work").unwrap());
    }

    #[test]
    fn s002_key_limits() {
        let ok = format!("agent:main:{}", "a".repeat(501));
        assert_eq!(ok.len(), 512);
        assert!(SessionKey::parse(&ok).is_ok());
        let long = format!("agent:main:{}", "a".repeat(502));
        let err = SessionKey::parse(&long).unwrap_err();
        assert!(err.to_string().contains("512 bytes"), "{err}");
        assert_eq!(
            SessionKey::parse("agent:main:a\nb"),
            Err(KeyError::ControlCharacter)
        );
        assert_eq!(SessionKey::parse("   "), Err(KeyError::Empty));
    }

    #[test]
    fn s003_malformed_agent_qualified_keys() {
        let e = SessionKey::parse("agent:bad/id:x").unwrap_err();
        assert!(e.to_string().contains(AGENT_ID_PATTERN), "{e}");
        for bad in ["agent:main", "agent::x", "AGENT:main:"] {
            assert!(SessionKey::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn subagent_detection_and_bare_keys() {
        assert!(SessionKey::parse("agent:main:SubAgent:z")
            .unwrap()
            .is_subagent());
        assert!(!SessionKey::parse("agent:main:main").unwrap().is_subagent());
        let g = SessionKey::parse("global").unwrap();
        assert!(!g.is_agent_qualified());
        assert_eq!(g.rest(), "global");
        assert!(SessionKey::parse("agentx:y")
            .unwrap()
            .qualified_agent()
            .is_none());
    }

    #[test]
    fn agent_ids() {
        assert_eq!(AgentId::parse("OPS").unwrap().as_str(), "ops");
        assert!(AgentId::parse("-x").is_err());
        assert!(AgentId::parse(&"a".repeat(65)).is_err());
        assert!(AgentId::parse(&"a".repeat(64)).is_ok());
    }
}
