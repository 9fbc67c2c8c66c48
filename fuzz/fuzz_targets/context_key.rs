//! The strict context-key codec (`notice::decode_context_key` / `encode_context_key`) and the
//! system-event line rules that keep `session-state:` keys for notices.
//!
//! Invariants: decoding never panics; whatever decodes re-encodes to exactly the input (the codec
//! is strict: one spelling per target); `decode(encode(k)) == k` for every non-empty string and
//! every valid session key; an empty target never decodes; a system event's context key is never
//! a notice key.
#![no_main]

use aware_core::notice::{
    decode_context_key, encode_context_key, SystemEventLine, CONTEXT_KEY_PREFIX,
};
use aware_core::SessionKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Raw bytes behind the prefix: the decoder must refuse them without panicking unless they
    // are lowercase hex of UTF-8.
    let mut raw = CONTEXT_KEY_PREFIX.as_bytes().to_vec();
    raw.extend_from_slice(data);
    if let Ok(candidate) = std::str::from_utf8(&raw) {
        check_decoded(candidate);
    }
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    check_decoded(input);

    // Round trip of the input taken as a target key.
    let encoded = encode_context_key(input);
    assert!(encoded.starts_with(CONTEXT_KEY_PREFIX));
    if input.is_empty() {
        assert_eq!(decode_context_key(&encoded), None);
    } else {
        assert_eq!(decode_context_key(&encoded).as_deref(), Some(input));
    }
    if let Ok(key) = SessionKey::parse(input) {
        let encoded = encode_context_key(key.as_str());
        assert_eq!(decode_context_key(&encoded).as_deref(), Some(key.as_str()));
    }

    // A system event line: text before the first NUL, context key after it.
    let (text, context_key) = match input.split_once('\0') {
        Some((t, k)) => (t, Some(k)),
        None => (input, None),
    };
    if let Ok(line) = SystemEventLine::new(text, context_key) {
        assert!(!line.text.is_empty());
        assert_eq!(line.text, line.text.trim());
        if let Some(k) = &line.context_key {
            assert!(!k.is_empty());
            assert!(!k.starts_with(CONTEXT_KEY_PREFIX));
            assert_eq!(
                decode_context_key(k),
                None,
                "a system event key is never a notice key"
            );
        }
    }
});

fn check_decoded(candidate: &str) {
    if let Some(target) = decode_context_key(candidate) {
        assert!(!target.is_empty());
        assert_eq!(
            encode_context_key(&target),
            candidate,
            "strict codec: one spelling"
        );
    }
}
