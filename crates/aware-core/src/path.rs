//! The one percent-encoder of the workspace, for every path segment and query value sent to a
//! gateway or a paired node (the CLI, the MCP server, the hook, the node client, the test kit).

/// What is escaped in a path segment, a query value or a caller header: controls, non-ASCII (by
/// the encoder), `%`, and every character that ends or restructures a segment or a query (`/`,
/// `?`, `#`, `&`, `=`, `+`, space, …). `:` `-` `.` `_` `~` `@` stay readable, so a canonical key
/// such as `agent:main:main` is sent as written.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'&')
    .add(b'+')
    .add(b'/')
    .add(b';')
    .add(b'=')
    .add(b'?')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|')
    .add(b'[')
    .add(b']');

/// Percent-encodes one path segment or query value (a session key may hold `/`).
pub fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}
