//! The one reader of the gateway's server-sent event streams (`GET /v1/wakes`, the console's
//! events): lines in, one [`Event`] per blank-line-terminated block out, as the SSE format
//! defines it. `drain --follow`, the waiting hook and the test kit all read through it.

use std::io::{BufRead, BufReader, Read};

/// One dispatched event: its `event:` name (`message` when the block named none) and its
/// `data:` lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub data: String,
}

/// What a stream yields: events, and its comment lines (the gateway's keep-alives), which are
/// no event but show the stream lives: a reader with something to re-check (is my agent
/// still running?) does it on each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Event(Event),
    Comment(String),
}

impl Frame {
    /// The event, if this frame is one.
    pub fn event(self) -> Option<Event> {
        match self {
            Frame::Event(e) => Some(e),
            Frame::Comment(_) => None,
        }
    }
}

/// The frames of a stream, in order, until it ends or fails (a read error ends the iteration:
/// the caller reconnects either way).
pub fn frames<R: Read>(reader: R) -> Frames<BufReader<R>> {
    Frames {
        lines: BufReader::new(reader),
        line: String::new(),
        name: None,
        data: None,
    }
}

/// The events alone ([`frames`] without the comments).
pub fn events<R: Read>(reader: R) -> impl Iterator<Item = Event> {
    frames(reader).filter_map(Frame::event)
}

pub struct Frames<B> {
    lines: B,
    line: String,
    /// The block being read: kept across calls, so a comment inside a block does not cut it.
    name: Option<String>,
    data: Option<String>,
}

impl<B: BufRead> Iterator for Frames<B> {
    type Item = Frame;

    fn next(&mut self) -> Option<Frame> {
        loop {
            self.line.clear();
            match self.lines.read_line(&mut self.line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let line = self.line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                // A block with neither field (e.g. only comments) dispatches nothing.
                if self.name.is_some() || self.data.is_some() {
                    return Some(Frame::Event(Event {
                        name: self.name.take().unwrap_or_else(|| "message".into()),
                        data: self.data.take().unwrap_or_default(),
                    }));
                }
                continue;
            }
            if let Some(c) = line.strip_prefix(':') {
                return Some(Frame::Comment(c.trim_start().to_string()));
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "event" => self.name = Some(value.to_string()),
                "data" => match self.data.as_mut() {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(value);
                    }
                    None => self.data = Some(value.to_string()),
                },
                // `id` and `retry` are not used by any reader here.
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_become_events_and_comments_do_not() {
        let stream = ": keep-alive\n\nevent: wake\ndata: {\"a\":1}\n\nevent: lagged\ndata: {}\n\ndata: x\ndata: y\n\nevent: cut";
        let got: Vec<Event> = events(stream.as_bytes()).collect();
        assert_eq!(
            got,
            vec![
                Event {
                    name: "wake".into(),
                    data: "{\"a\":1}".into()
                },
                Event {
                    name: "lagged".into(),
                    data: "{}".into()
                },
                Event {
                    name: "message".into(),
                    data: "x\ny".into()
                },
            ]
        );
    }

    #[test]
    fn comments_are_frames_of_their_own() {
        let got: Vec<Frame> =
            frames(": keep-alive\nevent: wake\n: mid-block\ndata: 1\n\n".as_bytes()).collect();
        assert_eq!(
            got,
            vec![
                Frame::Comment("keep-alive".into()),
                Frame::Comment("mid-block".into()),
                Frame::Event(Event {
                    name: "wake".into(),
                    data: "1".into()
                }),
            ]
        );
    }

    #[test]
    fn crlf_lines_and_a_field_without_a_space() {
        let got: Vec<Event> = events("event:wake\r\ndata:1\r\n\r\n".as_bytes()).collect();
        assert_eq!(
            got,
            vec![Event {
                name: "wake".into(),
                data: "1".into()
            }]
        );
    }
}
