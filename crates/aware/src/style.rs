//! Colour for people at a terminal: on only when the stream is a terminal, `NO_COLOR` is unset
//! (no-color.org) and `TERM` is not `dumb`; `CLICOLOR_FORCE=1` turns it on for a pipe (a pager,
//! the tests). Everything a script reads (pipes, files, `--json`) stays plain.

use std::io::IsTerminal;

/// Which stream a text goes to: each is a terminal or not on its own.
#[derive(Clone, Copy)]
pub enum Stream {
    Stdout,
    Stderr,
}

fn var_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Whether text for `stream` may carry colour.
pub fn enabled(stream: Stream) -> bool {
    if var_set("NO_COLOR") {
        return false;
    }
    if std::env::var_os("CLICOLOR_FORCE").is_some_and(|v| !v.is_empty() && v != "0") {
        return true;
    }
    if std::env::var_os("TERM").is_some_and(|t| t == "dumb") {
        return false;
    }
    match stream {
        Stream::Stdout => std::io::stdout().is_terminal(),
        Stream::Stderr => std::io::stderr().is_terminal(),
    }
}

/// The colours used: green for a pass, yellow for a warning, red for a failure.
#[derive(Clone, Copy)]
pub enum Colour {
    Green,
    Yellow,
    Red,
}

/// `text` in `colour` (bold) when `stream` takes colour, else `text` unchanged.
pub fn paint(stream: Stream, colour: Colour, text: &str) -> String {
    if !enabled(stream) {
        return text.to_string();
    }
    let code = match colour {
        Colour::Green => "32",
        Colour::Yellow => "33",
        Colour::Red => "31",
    };
    format!("\x1b[1;{code}m{text}\x1b[0m")
}
