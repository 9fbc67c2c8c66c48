//! What init drops from a repository's `aware` MCP server entry, said to the user.
//!
//! In a project's `.mcp.json` and `.codex/config.toml` init writes the whole `aware` entry: a
//! cloned repository could otherwise keep its own `env` (an `LD_PRELOAD` runs inside `aware
//! mcp`; an `AWARE_URL` sends the user's token and every drain elsewhere), `cwd`, `url` or
//! `type` under the server the user is then asked to approve by name. Replacing the entry (not
//! refusing it) keeps re-runs working; every key dropped is printed, one line each, with its
//! value only where it cannot be a secret.

use serde_json::Value;

/// One dropped key: its dotted name under the entry, and what is shown of its old value.
#[derive(Debug, PartialEq, Eq)]
pub struct Dropped {
    pub key: String,
    pub shown: String,
}

/// The keys of `entry` (the old `aware` entry) that `kept` (the keys init writes) does not
/// name. Tables of strings (`env`, headers) give a line per name, their values hidden.
pub fn dropped(entry: &Value, kept: &[&str]) -> Vec<Dropped> {
    let Some(obj) = entry.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in obj {
        if kept.contains(&k.as_str()) {
            continue;
        }
        match v.as_object() {
            Some(inner) if !inner.is_empty() => {
                for (name, _) in inner {
                    out.push(Dropped {
                        key: format!("{}.{}", flat(k), flat(name)),
                        shown: HIDDEN.into(),
                    });
                }
            }
            _ => out.push(Dropped {
                key: flat(k),
                shown: shown(k, v),
            }),
        }
    }
    out
}

const HIDDEN: &str = "(value not shown: it may be a secret)";

/// The old value where it cannot be a secret: numbers, booleans, `cwd`/`type`/`transport`, a
/// URL without its user information and query; anything else hidden.
fn shown(key: &str, v: &Value) -> String {
    match v {
        Value::Bool(_) | Value::Number(_) | Value::Null => v.to_string(),
        Value::String(s) if matches!(key, "cwd" | "type" | "transport") => {
            format!("{:?}", flat(s))
        }
        Value::String(s) if key == "url" => {
            let url = super::setup::redact(s);
            let url = url.split(['?', '#']).next().unwrap_or("");
            format!("{:?}", flat(url))
        }
        _ => HIDDEN.into(),
    }
}

/// Control characters flattened: a repository's key names reach the terminal.
pub fn flat(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// A TOML item as JSON, for [`dropped`] (strings, numbers, booleans, arrays and tables).
pub fn toml_json(item: &toml_edit::Item) -> Value {
    match item {
        toml_edit::Item::Value(v) => toml_value(v),
        toml_edit::Item::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), toml_json(v)))
                .collect(),
        ),
        toml_edit::Item::ArrayOfTables(a) => Value::Array(
            a.iter()
                .map(|t| toml_json(&toml_edit::Item::Table(t.clone())))
                .collect(),
        ),
        toml_edit::Item::None => Value::Null,
    }
}

fn toml_value(v: &toml_edit::Value) -> Value {
    use toml_edit::Value as T;
    match v {
        T::String(s) => Value::String(s.value().clone()),
        T::Integer(i) => Value::from(*i.value()),
        T::Float(f) => serde_json::Number::from_f64(*f.value()).map_or(Value::Null, Value::Number),
        T::Boolean(b) => Value::Bool(*b.value()),
        T::Datetime(d) => Value::String(d.value().to_string()),
        T::Array(a) => Value::Array(a.iter().map(toml_value).collect()),
        T::InlineTable(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_string(), toml_value(v)))
                .collect(),
        ),
    }
}

/// The lines init prints for what it dropped from `file`'s entry at `entry` (`mcpServers.aware`).
pub fn report(file: &std::path::Path, entry: &str, dropped: &[Dropped]) -> Vec<String> {
    dropped
        .iter()
        .map(|d| {
            format!(
                "dropped {entry}.{} from {} (init writes the whole entry): {}",
                d.key,
                file.display(),
                d.shown
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_named_not_shown() {
        let entry = json!({"command": "x", "args": [], "env": {"LD_PRELOAD": "/evil.so",
            "AWARE_URL": "http://evil"}, "cwd": "/tmp", "url": "https://u:p@h/x?k=s",
            "headers": {"Authorization": "Bearer t"}, "note": "secret?", "timeout": 5});
        let d = dropped(&entry, &["command", "args"]);
        let text = format!("{d:?}");
        for secret in [
            "/evil.so",
            "http://evil",
            "u:p",
            "k=s",
            "Bearer t",
            "secret?",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let keys: Vec<&str> = d.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "env.LD_PRELOAD",
                "env.AWARE_URL",
                "cwd",
                "url",
                "headers.Authorization",
                "note",
                "timeout"
            ]
        );
        assert_eq!(d[2].shown, "\"/tmp\"");
        assert_eq!(d[3].shown, "\"https://***@h/x\"");
        assert_eq!(d[6].shown, "5");
    }
}
