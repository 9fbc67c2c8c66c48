//! `aware console`: where the web console is, and a browser opened on it when there is one.

use crate::client::{out, CliResult, Failure};
use crate::context::{self, Conn};
use crate::Common;

pub fn run(no_open: bool, common: Common, outer: &Conn) -> CliResult<()> {
    let r = context::resolve(common.conn.or(outer), common.timeout)?;
    let gw = crate::client::connect(r.clone())?;
    // The console is served by the gateway: say so plainly when it is not up, rather than
    // opening a browser on an error page.
    gw.request("GET", "/health")
        .json(None)
        .map_err(Failure::from)?;
    let url = format!("{}/ui/", r.url.trim_end_matches('/'));
    out(&url);
    if r.token.is_some() {
        out("(the page asks for the gateway's token once; it keeps it for this browser tab)");
    }
    if !no_open && has_display() {
        // Best effort: the URL is printed either way.
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        let _ = std::process::Command::new(opener)
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    Ok(())
}

/// A graphical session to open a browser in (a terminal over ssh has none).
fn has_display() -> bool {
    cfg!(target_os = "macos")
        || ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}
