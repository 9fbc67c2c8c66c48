//! A JSON string writer that skips clean text eight bytes at a time, for the one long string of
//! a hot answer: `session_status`'s `statusText` (about 10 KB with a 50-event page, the page
//! itself pretty-printed inside it). serde_json checks every byte against its escape table; in
//! the gateway's thread that loop was a fifth of the answer's time (docs/performance.md,
//! "`aware-bench http` workload 1"). The output is byte for byte serde_json's (the tests below
//! hold it to `serde_json::to_string` on arbitrary strings).

const LOW: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether any byte of `x` is below 0x20, a `"` or a `\`. Exact in this direction (the SWAR
/// tests have no false negatives); a false positive only sends the chunk down the slow path.
fn needs_escape(x: u64) -> bool {
    let below_space = x.wrapping_sub(LOW * 0x20) & !x;
    let quote = x ^ (LOW * u64::from(b'"'));
    let backslash = x ^ (LOW * u64::from(b'\\'));
    let quote = quote.wrapping_sub(LOW) & !quote;
    let backslash = backslash.wrapping_sub(LOW) & !backslash;
    (below_space | quote | backslash) & HIGH != 0
}

/// Appends `s` to `out` as a JSON string, quotes included, escaped exactly as serde_json does:
/// `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control bytes as `\u00xx`; everything else,
/// DEL and non-ASCII included, as it is.
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // `start` is the first byte not yet copied; clean runs are copied in one go.
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(chunk) = bytes.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            if !needs_escape(u64::from_le_bytes(word)) {
                i += 8;
                continue;
            }
        }
        let end = (i + 8).min(bytes.len());
        while i < end {
            let b = bytes[i];
            let escaped: Option<&[u8]> = match b {
                b'"' => Some(b"\\\""),
                b'\\' => Some(b"\\\\"),
                b'\n' => Some(b"\\n"),
                b'\r' => Some(b"\\r"),
                b'\t' => Some(b"\\t"),
                0x08 => Some(b"\\b"),
                0x0c => Some(b"\\f"),
                0..=0x1f => None,
                _ => {
                    i += 1;
                    continue;
                }
            };
            out.extend_from_slice(&bytes[start..i]);
            match escaped {
                Some(e) => out.extend_from_slice(e),
                None => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
            }
            i += 1;
            start = i;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::write_json_str;
    use proptest::prelude::*;

    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        write_json_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_escape_and_its_neighbours() {
        let all: String = (0u8..0x80).map(char::from).collect();
        for s in [
            "",
            "plain",
            "exactly8",
            "\"quoted\" and \\back\\slashed",
            "tab\there\nnew line\r\u{8}\u{c}\u{1}\u{1f}\u{7f}",
            "é ü 漢字 🎉 \u{2028}",
            &all,
            &"x".repeat(17),
            &format!("{}\"", "a".repeat(15)),
        ] {
            assert_eq!(ours(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    proptest! {
        #[test]
        fn the_same_bytes_as_serde_json(s in "\\PC*|[\\x00-\\x7f]{0,64}") {
            prop_assert_eq!(ours(&s), serde_json::to_string(&s).unwrap());
        }

        #[test]
        fn the_same_bytes_on_any_unicode(s in any::<String>()) {
            prop_assert_eq!(ours(&s), serde_json::to_string(&s).unwrap());
        }
    }
}
