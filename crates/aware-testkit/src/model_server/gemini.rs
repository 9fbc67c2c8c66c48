//! The Gemini API dialect Gemini CLI calls with `GOOGLE_GEMINI_BASE_URL` (checked against
//! Gemini CLI 0.61.0): `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` for the
//! agent's turns (SSE, each `data:` a `GenerateContentResponse` chunk) and
//! `POST /v1beta/models/{model}:generateContent` for utility calls (one JSON answer).
//!
//! A request's conversation is `contents` (`role` `user` or `model`, `parts` of `text`,
//! `functionCall` or `functionResponse`); its tools are `tools[].functionDeclarations`.

use super::call::{Call, CallKind};
use axum::body::Body;
use axum::http::header::{HeaderValue, CONTENT_TYPE};
use axum::response::Response;
use serde_json::{json, Value};

/// Whether the path is the Gemini API's.
pub(super) fn is_gemini(path: &str) -> bool {
    path.starts_with("/v1beta/models/")
}

/// The text of the last user content (all its text parts).
pub(super) fn last_user_text(body: &Value) -> String {
    let Some(last) = body["contents"]
        .as_array()
        .and_then(|l| l.iter().rev().find(|m| m["role"] == "user"))
    else {
        return String::new();
    };
    last["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the request offers the model any function.
pub(super) fn has_tools(body: &Value) -> bool {
    body["tools"].as_array().into_iter().flatten().any(|t| {
        t["functionDeclarations"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    })
}

/// The answer: a stream of one chunk for `:streamGenerateContent`, the same object as JSON for
/// `:generateContent`. A shell call is Gemini CLI's `run_shell_command` (`{"command"}`); a
/// tool named `mcp__SERVER__TOOL` (Claude Code's spelling) is sent as `mcp_SERVER_TOOL`, the
/// name Gemini CLI gives an MCP server's tool.
pub(super) fn answer(path: &str, text: Option<&str>, calls: &[Call], tokens: u64) -> Response {
    let mut parts = Vec::new();
    if let Some(t) = text {
        parts.push(json!({"text": t}));
    }
    for call in calls {
        let (name, args) = match &call.kind {
            CallKind::Shell(cmd) => ("run_shell_command".to_string(), json!({"command": cmd})),
            CallKind::Tool { name, input } => {
                let name = match name.strip_prefix("mcp__").and_then(|r| r.split_once("__")) {
                    Some((server, tool)) => format!("mcp_{server}_{tool}"),
                    None => name.clone(),
                };
                (name, input.clone())
            }
        };
        parts.push(json!({"functionCall": {"id": call.id, "name": name, "args": args}}));
    }
    let chunk = json!({
        "candidates": [{"content": {"role": "model", "parts": parts},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": tokens, "candidatesTokenCount": 5,
                          "totalTokenCount": tokens + 5},
        "modelVersion": "gemini-2.5-flash",
    });
    let (body, content_type) = if path.contains(":streamGenerateContent") {
        (format!("data: {chunk}\n\n"), "text/event-stream")
    } else {
        (chunk.to_string(), "application/json")
    };
    let mut r = Response::new(Body::from(body));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
