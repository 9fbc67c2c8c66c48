//! `SessionKey::parse` and `AgentId::parse` on arbitrary UTF-8.
//!
//! Invariants: parsing never panics; the canonical form is trimmed, at most `MAX_KEY_BYTES`, has
//! no control characters and re-parses to itself (same key, same agent, same rest); an
//! agent-qualified key names a valid agent id and rebuilds from `(agent, rest)`, whatever the
//! case of its `agent:` prefix and agent id; a bare key has no agent and is its own rest.
#![no_main]

use aware_core::key::MAX_KEY_BYTES;
use aware_core::{AgentId, SessionKey, SessionRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    check_agent_id(input);
    let Ok(key) = SessionKey::parse(input) else {
        return;
    };
    let canonical = key.as_str();
    assert!(!canonical.is_empty());
    assert!(canonical.len() <= MAX_KEY_BYTES, "{canonical:?}");
    assert_eq!(canonical, canonical.trim(), "canonical form is trimmed");
    assert!(!canonical.chars().any(char::is_control));
    assert_eq!(key.to_string(), canonical);

    let again = SessionKey::parse(canonical).expect("the canonical form re-parses");
    assert_eq!(again, key, "the canonical form re-parses to itself");
    assert_eq!(again.as_str(), canonical);
    assert_eq!(again.rest(), key.rest());
    assert_eq!(again.is_subagent(), key.is_subagent());

    match key.qualified_agent() {
        Some(agent) => {
            assert!(key.is_agent_qualified());
            // A valid agent id, already canonical (lower-case).
            assert_eq!(AgentId::parse(agent.as_str()).as_ref(), Ok(&agent));
            assert!(!key.rest().is_empty());
            assert_eq!(canonical, format!("agent:{agent}:{}", key.rest()));
            assert_eq!(SessionKey::qualified(&agent, key.rest()).as_ref(), Ok(&key));
            // The prefix and the agent id are case-insensitive; the rest is not touched.
            let shouted = format!("AGENT:{}:{}", agent.as_str().to_uppercase(), key.rest());
            assert_eq!(SessionKey::parse(&shouted).as_ref(), Ok(&key));
            // A reference pairs the key with its own agent, and refuses any other.
            let r = SessionRef::resolve(key.clone(), &agent).expect("own agent resolves");
            assert_eq!(r.agent, agent);
            let other = AgentId::parse(if agent.as_str() == "x" { "y" } else { "x" }).unwrap();
            assert!(SessionRef::resolve(key.clone(), &other).is_err());
            assert_eq!(SessionRef::with_default(key.clone(), &other).agent, agent);
        }
        None => {
            assert!(!key.is_agent_qualified());
            assert!(!key.is_subagent());
            assert_eq!(key.rest(), canonical);
            let fallback = AgentId::parse("main").unwrap();
            let r = SessionRef::resolve(key.clone(), &fallback).expect("bare keys take any agent");
            assert_eq!(r.agent, fallback);
        }
    }
});

fn check_agent_id(input: &str) {
    if let Ok(id) = AgentId::parse(input) {
        let s = id.as_str();
        assert!((1..=64).contains(&s.len()));
        assert!(s
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
        assert!(s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'));
        assert_eq!(s, input.to_ascii_lowercase());
        assert_eq!(AgentId::parse(s).as_ref(), Ok(&id));
    }
}
