//! The CLI reference (docs/cli.md) generated from the clap definitions, so it cannot drift:
//! a test compares the committed file with `aware help-markdown`.

use clap::{Arg, Command};
use std::fmt::Write;

pub fn markdown(root: &Command) -> String {
    let mut s = String::new();
    s.push_str("# CLI reference\n\n");
    s.push_str(
        "Generated from the binary by `aware help-markdown`; do not edit by hand \
         (`cargo run -- help-markdown > docs/cli.md`).\n\n",
    );
    s.push_str(
        "Exit statuses of the client commands: 0 success; 1 the gateway answered an error \
         (printed as `error: <code>: <message>`); 2 usage or configuration error; 3 gateway \
         unreachable or no answer within the request timeout. See \
         [exit-statuses.md](exit-statuses.md) for every command.\n\n",
    );
    let mut root = root.clone();
    root.build();
    command(&mut s, &root, "aware", 2);
    s.trim_end().to_string() + "\n"
}

fn command(s: &mut String, cmd: &Command, path: &str, depth: usize) {
    if cmd.is_hide_set() {
        return;
    }
    let _ = writeln!(s, "{} `{path}`\n", "#".repeat(depth.min(4)));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(s, "{about}\n");
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").replace('\n', " ");
    let _ = writeln!(s, "```text\n{usage}\n```\n");
    let positionals: Vec<&Arg> = cmd.get_positionals().filter(|a| !a.is_hide_set()).collect();
    let options: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !positionals.is_empty() || !options.is_empty() {
        s.push_str("| Argument | Meaning |\n|---|---|\n");
        for a in positionals {
            let name = a
                .get_value_names()
                .map(|v| {
                    v.iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
            let _ = writeln!(s, "| `{name}` | {} |", help(a));
        }
        for a in options {
            let mut flag = String::new();
            if let Some(l) = a.get_long() {
                flag.push_str(&format!("--{l}"));
            }
            if a.get_action().takes_values() {
                let v = a
                    .get_value_names()
                    .and_then(|v| v.first().map(|n| n.to_string()))
                    .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
                flag.push_str(&format!(" {v}"));
            }
            let _ = writeln!(s, "| `{flag}` | {} |", help(a));
        }
        s.push('\n');
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        command(s, sub, &format!("{path} {}", sub.get_name()), depth + 1);
    }
}

fn help(a: &Arg) -> String {
    let mut h = a
        .get_help()
        .map(|h| h.to_string())
        .unwrap_or_default()
        .replace('\n', " ")
        .replace('|', "\\|");
    if !h.is_empty() && !h.ends_with(['.', ']', ')']) {
        h.push('.');
    }
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() {
        let _ = write!(h, " One of {}.", values.join(", "));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && a.get_action().takes_values() {
        let _ = write!(h, " Default: `{}`.", defaults.join(","));
    }
    if let Some(env) = a.get_env() {
        let _ = write!(h, " Env: `{}`.", env.to_string_lossy());
    }
    h.trim().to_string()
}
