//! The generated input schemas say what docs/api.md §3 says: for every tool, the parameter
//! table's names, types, required column, defaults and integer ranges. A field added, renamed
//! or re-typed on one side only fails here.

use aware_wire::Tool;
use serde_json::Value;

/// The rows of the parameter table under `### 3.x \`name\``: (name, type, required, accepted).
fn table(api: &str, tool: &str) -> Vec<(String, String, String, String)> {
    let heading = format!("`{tool}`");
    let mut lines = api
        .lines()
        .skip_while(|l| !(l.starts_with("### 3.") && l.ends_with(&heading)));
    assert!(
        lines.next().is_some(),
        "docs/api.md has no section for {tool}"
    );
    lines
        .skip_while(|l| !l.starts_with("| Parameter"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<String> = l
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect();
            assert_eq!(cells.len(), 4, "row of {tool}: {l}");
            let name = cells[0].trim_matches('`').to_string();
            (name, cells[1].clone(), cells[2].clone(), cells[3].clone())
        })
        .collect()
}

/// `lo..=hi` or `≥ lo` in the accepted-values text.
fn range(accepted: &str) -> (Option<i64>, Option<i64>) {
    let num = |s: &str| -> Option<i64> {
        let d: String = s.chars().filter(|c| c.is_ascii_digit()).collect();
        d.parse().ok()
    };
    if let Some(i) = accepted.find("..=") {
        let lo = accepted[..i]
            .rsplit(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(num);
        let hi = accepted[i + 3..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(num);
        return (lo, hi);
    }
    if let Some(i) = accepted.find("≥ ") {
        let lo = accepted[i + "≥ ".len()..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(num);
        return (lo, None);
    }
    (None, None)
}

#[test]
fn input_schemas_match_the_api_tables() {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md"))
        .expect("docs/api.md");
    for tool in Tool::ALL {
        let schema = tool.input_schema();
        let props = schema["properties"].as_object().expect("properties");
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let rows = table(&api, tool.name());
        let documented: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        let generated: Vec<&str> = props.keys().map(String::as_str).collect();
        assert_eq!(documented, generated, "{}: parameters differ", tool.name());
        for (name, ty, req, accepted) in &rows {
            let p = &props[name];
            let want_type = match ty.as_str() {
                "string" => "string",
                "integer" => "integer",
                "boolean" => "boolean",
                "array of strings" => "array",
                other => panic!("{}: unknown type {other:?} in docs", tool.name()),
            };
            assert_eq!(p["type"], want_type, "{}.{name}: type", tool.name());
            assert_eq!(
                required.contains(&name.as_str()),
                req == "yes",
                "{}.{name}: required is {req:?} in docs",
                tool.name()
            );
            if want_type == "integer" {
                let (lo, hi) = range(accepted);
                assert_eq!(p["minimum"].as_i64(), lo, "{}.{name}: minimum", tool.name());
                assert_eq!(p["maximum"].as_i64(), hi, "{}.{name}: maximum", tool.name());
            }
            let doc_default = accepted
                .to_lowercase()
                .split("default ")
                .nth(1)
                .map(|d| {
                    d.trim_end_matches(['.', ')'])
                        .split([',', ' ', '.'])
                        .next()
                        .unwrap_or("")
                })
                .map(|d| d.trim_matches('`').to_string());
            let schema_default = p.get("default").map(|d| d.to_string());
            assert_eq!(
                schema_default,
                doc_default,
                "{}.{name}: default",
                tool.name()
            );
        }
    }
}

#[test]
fn list_kinds_are_the_documented_kinds() {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md"))
        .expect("docs/api.md");
    let rows = table(&api, "sessions_list");
    let kinds_row = rows.iter().find(|r| r.0 == "kinds").expect("kinds row");
    let schema = Tool::SessionsList.input_schema();
    for k in schema["properties"]["kinds"]["items"]["enum"]
        .as_array()
        .expect("enum")
    {
        let k = k.as_str().expect("kind");
        assert!(
            kinds_row.3.contains(&format!("`{k}`")),
            "kind {k} not in docs"
        );
    }
}
