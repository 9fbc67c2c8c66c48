//! The six agent tools (03 §6): `POST /v1/tools/{name}` and the dispatch of a call to its tool
//! by an exhaustive match on [`Tool`]. Names, schemas and answer types are `aware_wire`'s; the
//! field-by-field parser of the arguments (with the API's error messages) is here.

mod act;
mod args;
mod read;

use crate::http::body::Obj;
use crate::http::error::{ApiError, ApiResult};
use crate::http::request::{must_exist, Req};
use crate::wire;
use aware_core::SessionRef;
use aware_wire::Tool;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

/// Names, descriptions and JSON input schemas (the same for HTTP and MCP), generated from the
/// argument types of `aware_wire` (decision D49) once per process: they never change while it
/// runs, and generating them is the costly part of `GET /v1/tools`.
pub fn list() -> Value {
    static LIST: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    LIST.get_or_init(Tool::list).clone()
}

/// A tool call. The caller's existence is not checked yet: `session_status` checks it in its
/// one blocking call, every other tool before its own work; the dispatcher checks it again when
/// the call fails.
pub(crate) async fn call(
    req: &Req,
    name: &str,
    caller: Option<&SessionRef>,
) -> ApiResult<Response> {
    let Some(tool) = Tool::parse(name) else {
        return Err(ApiError::not_found(
            "unknown_tool",
            format!("unknown tool {name:?}; tools are {}", Tool::names()),
        ));
    };
    let caller = caller.cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_caller",
            "tool calls need the X-Aware-Session header naming the calling session",
        )
    })?;
    let mut b = Obj::parse(&req.body, true)?;
    let engine = req.state.engine()?;
    if tool != Tool::SessionStatus {
        must_exist(req, "caller session", &caller).await?;
    }
    let (e, c, b) = (&engine, &caller, &mut b);
    match tool {
        Tool::SessionStatus => read::session_status(req, e, c, b).await,
        Tool::SessionsList => wire::ok(read::sessions_list(req, e, c, b).await?),
        Tool::SessionsHistory => wire::ok(read::sessions_history(req, e, c, b).await?),
        Tool::SessionsSpawn => wire::ok(act::sessions_spawn(req, e, c, b).await?),
        Tool::SessionsUnwatch => wire::ok(act::sessions_unwatch(req, e, c, b).await?),
        Tool::SessionsSend => wire::ok(act::sessions_send(req, e, c, b).await?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_names_are_the_tools_in_order() {
        let listed: Vec<String> = list()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        let names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(listed, names);
    }
}
