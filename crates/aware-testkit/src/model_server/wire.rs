//! The wire formats the scripted model speaks: which API and lane a request is, and the
//! streamed answers (Anthropic Messages SSE, OpenAI Responses SSE; Gemini's in `gemini.rs`).

use super::call::{Call, CallKind, Lane, MODEL};
use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

#[derive(Clone, Copy)]
pub(super) enum Api {
    Messages,
    Responses,
    /// Gemini CLI's `generateContent` / `streamGenerateContent` (`gemini.rs`).
    Gemini,
}

/// Sorts a request into its lane by what the CLI put in it.
pub(super) fn classify(api: Api, body: &Value) -> Lane {
    let last_user_text = last_user_text(api, body);
    // Claude Code's /compact: "…an <analysis> block followed by a <summary> block…"; Codex:
    // "You are performing a CONTEXT CHECKPOINT COMPACTION".
    if last_user_text.contains("CONTEXT CHECKPOINT COMPACTION")
        || (last_user_text.contains("<summary>")
            && last_user_text.contains("Do NOT call any tools"))
    {
        return Lane::Compaction;
    }
    let has_tools = match api {
        Api::Gemini => super::gemini::has_tools(body),
        _ => body["tools"].as_array().is_some_and(|t| !t.is_empty()),
    };
    if !has_tools {
        return Lane::Side;
    }
    let subagent = match api {
        Api::Messages => body["system"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("cc_is_subagent=true"),
        // Codex marks a spawned agent's requests (also in the `x-openai-subagent` header).
        Api::Responses => body["client_metadata"]["x-openai-subagent"].is_string(),
        Api::Gemini => false,
    };
    if subagent {
        Lane::Subagent
    } else {
        Lane::Main
    }
}

/// The text of the last user message (all its text parts).
pub(super) fn last_user_text(api: Api, body: &Value) -> String {
    let list = match api {
        Api::Messages => &body["messages"],
        Api::Responses => &body["input"],
        Api::Gemini => return super::gemini::last_user_text(body),
    };
    let Some(last) = list
        .as_array()
        .and_then(|l| l.iter().rev().find(|m| m["role"] == "user"))
    else {
        return String::new();
    };
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

pub(super) fn plain(status: StatusCode, content_type: &str, body: String) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

pub(super) fn event(out: &mut String, name: &str, data: Value) {
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

/// An Anthropic Messages stream: `message_start`, one content block per text and tool call
/// (`content_block_start`/`_delta`/`_stop`), `message_delta` with the stop reason,
/// `message_stop`.
pub(super) fn messages_sse(
    index: usize,
    text: Option<&str>,
    calls: &[Call],
    tokens: u64,
) -> String {
    let mut out = String::new();
    event(
        &mut out,
        "message_start",
        json!({"type":"message_start","message":{"id":format!("msg_{index}"),"type":"message",
            "role":"assistant","model":MODEL,"content":[],"stop_reason":null,"stop_sequence":null,
            "usage":{"input_tokens":tokens,"output_tokens":1}}}),
    );
    let mut block = 0;
    if let Some(t) = text {
        event(
            &mut out,
            "content_block_start",
            json!({"type":"content_block_start","index":block,"content_block":{"type":"text","text":""}}),
        );
        event(
            &mut out,
            "content_block_delta",
            json!({"type":"content_block_delta","index":block,"delta":{"type":"text_delta","text":t}}),
        );
        event(
            &mut out,
            "content_block_stop",
            json!({"type":"content_block_stop","index":block}),
        );
        block += 1;
    }
    for call in calls {
        let (name, input) = match &call.kind {
            CallKind::Shell(cmd) => (
                "Bash".to_string(),
                json!({"command": cmd, "description": "Run a command"}),
            ),
            CallKind::Tool { name, input } => (name.clone(), input.clone()),
        };
        event(
            &mut out,
            "content_block_start",
            json!({"type":"content_block_start","index":block,
                "content_block":{"type":"tool_use","id":call.id,"name":name,"input":{}}}),
        );
        event(
            &mut out,
            "content_block_delta",
            json!({"type":"content_block_delta","index":block,
                "delta":{"type":"input_json_delta","partial_json":input.to_string()}}),
        );
        event(
            &mut out,
            "content_block_stop",
            json!({"type":"content_block_stop","index":block}),
        );
        block += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    event(
        &mut out,
        "message_delta",
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},
            "usage":{"output_tokens":5}}),
    );
    event(&mut out, "message_stop", json!({"type":"message_stop"}));
    out
}

/// A Responses stream: `response.created`, one `response.output_item.added`/`.done` pair per
/// message and function call, `response.completed` with the usage.
pub(super) fn responses_sse(
    index: usize,
    text: Option<&str>,
    calls: &[Call],
    tokens: u64,
) -> String {
    let mut out = String::new();
    let id = format!("resp_{index}");
    event(
        &mut out,
        "response.created",
        json!({"type":"response.created","response":{"id":id}}),
    );
    let mut items = Vec::new();
    if let Some(t) = text {
        items.push(
            json!({"type":"message","role":"assistant","id":format!("msg_{index}"),
            "content":[{"type":"output_text","text":t}]}),
        );
    }
    for call in calls {
        let (name, arguments) = match &call.kind {
            CallKind::Shell(cmd) => ("exec_command".to_string(), json!({"cmd": cmd})),
            CallKind::Tool { name, input } => (name.clone(), input.clone()),
        };
        let mut item = json!({"type":"function_call","id":format!("fc_{}", call.id),
            "call_id":call.id,"name":name,"arguments":arguments.to_string()});
        // Codex offers an MCP server's tools as a namespace (`mcp__aware` with
        // `session_status`, …) and refuses the joined name, so `mcp__S__T` is sent as name T in
        // namespace `mcp__S`.
        if let Some((server, tool)) = name
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
        {
            item["namespace"] = json!(format!("mcp__{server}"));
            item["name"] = json!(tool);
        } else if let Some((namespace, tool)) = name.split_once('.') {
            // Codex's own namespaced tools: `multi_agent_v1.spawn_agent`.
            item["namespace"] = json!(namespace);
            item["name"] = json!(tool);
        }
        items.push(item);
    }
    for (i, item) in items.iter().enumerate() {
        event(
            &mut out,
            "response.output_item.added",
            json!({"type":"response.output_item.added","output_index":i,"item":item}),
        );
        if item["type"] == "message" {
            event(
                &mut out,
                "response.output_text.delta",
                json!({"type":"response.output_text.delta","output_index":i,
                    "item_id":item["id"],"content_index":0,"delta":text.unwrap_or("")}),
            );
        }
        event(
            &mut out,
            "response.output_item.done",
            json!({"type":"response.output_item.done","output_index":i,"item":item}),
        );
    }
    event(
        &mut out,
        "response.completed",
        json!({"type":"response.completed","response":{"id":id,"usage":{
            "input_tokens":tokens,"input_tokens_details":null,"output_tokens":5,
            "output_tokens_details":null,"total_tokens":tokens + 5}}}),
    );
    out
}
