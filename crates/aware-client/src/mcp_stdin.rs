//! `aware mcp`'s reading of stdin before rmcp sees it (03 §7): the line framing ([`next_line`],
//! bounded to [`MAX_LINE`] bytes held) and the JSON-RPC 2.0 check ([`check_message`]) that
//! answers a line rmcp would drop silently. Pure: the stdio plumbing stays in the binary's
//! `mcp.rs`. Here, in a library, so the `mcp_stdin` fuzz target can call it.

use serde_json::Value;

/// The longest line read from stdin: above the gateway's body limit (a tool call's arguments
/// may reach the MCP server's `MAX_BODY` and are refused by the gateway with its own message), far below what
/// would strain memory. A longer line is skipped to its newline without being held.
pub const MAX_LINE: usize = 4 << 20;

/// One line of stdin.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// Its bytes, without the newline.
    Bytes(Vec<u8>),
    /// Longer than the limit: this many bytes were read and dropped.
    TooLong(usize),
}

/// Reads one line of at most `max` bytes, never holding more than `max` bytes of it (a client
/// that sends 200 MiB without a newline does not make the server buffer 200 MiB). `None` at the
/// end of the input; a last line without a newline counts as a line.
pub async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<Line>> {
    use tokio::io::AsyncBufReadExt;
    let (mut out, mut seen, mut any) = (Vec::new(), 0usize, false);
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(any.then(|| finish(out, seen, max)));
        }
        any = true;
        let (chunk, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        seen = seen.saturating_add(chunk.len());
        if seen <= max {
            out.extend_from_slice(chunk);
        } else {
            out = Vec::new();
        }
        r.consume(used);
        if done {
            return Ok(Some(finish(out, seen, max)));
        }
    }
}

fn finish(out: Vec<u8>, seen: usize, max: usize) -> Line {
    if seen > max {
        Line::TooLong(seen)
    } else {
        Line::Bytes(out)
    }
}

/// `Err(answer)` for a line that is not JSON or not a JSON-RPC 2.0 message.
pub fn check_message(line: &str) -> Result<(), Value> {
    let err = |id: Value, code: i64, message: String| serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let v: Value = serde_json::from_str(line)
        .map_err(|e| err(Value::Null, -32700, format!("Parse error: {e}")))?;
    let ok = |m: &Value| {
        m.get("jsonrpc") == Some(&Value::from("2.0"))
            && (m.get("method").is_some_and(Value::is_string)
                || m.get("result").is_some()
                || m.get("error").is_some())
    };
    let valid = match &v {
        Value::Object(_) => ok(&v),
        // Batches were removed from MCP in 2025-06-18; rmcp still reads them.
        Value::Array(items) => !items.is_empty() && items.iter().all(ok),
        _ => false,
    };
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    if valid {
        // rmcp answers params it cannot decode with -32601 (method not found); for the one
        // method whose params carry user input, the right code is -32602.
        if v["method"] == "tools/call" {
            let p = &v["params"];
            let bad = if !p.is_object() {
                Some("params must be an object with name and arguments")
            } else if !p["name"].is_string() {
                Some("params.name must be a string naming the tool")
            } else if !(p["arguments"].is_null() || p["arguments"].is_object()) {
                Some("params.arguments must be an object")
            } else {
                None
            };
            if let Some(m) = bad {
                return Err(err(id, -32602, format!("Invalid params: {m}")));
            }
        }
        return Ok(());
    }
    Err(err(
        id,
        -32600,
        "Invalid Request: expected a JSON-RPC 2.0 message with \"jsonrpc\": \"2.0\" and a method"
            .into(),
    ))
}
