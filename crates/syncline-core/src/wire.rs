//! Electric's wire vocabulary: the exact bytes of every message clients receive, and the
//! names of the headers that describe them. The snapshot encoder (`syncline-pg`), the change
//! encoder and the HTTP layer (`syncline-server`) write messages only through these functions.
//!
//! A change message is
//! `{"key":K,"value":{…}[,"old_value":{…}],"headers":{"operation":"insert","relation":["s","t"]…}}`;
//! a key is `"schema"."table"/"v1"/"v2"` (`/` doubled inside values, `_` for NULL). A control
//! message is `{"headers":{"control":…}}`. Shape logs store each message with a leading `,`
//! ([`STORED_SEPARATOR`]), so any run of stored messages continues a JSON array.

use crate::snapshot::PgSnapshot;

/// Content type of every JSON response.
pub const JSON_CONTENT_TYPE: &str = "application/json; charset=utf-8";

/// Header names of Electric's protocol.
pub mod header {
    /// The shape's handle.
    pub const HANDLE: &str = "electric-handle";
    /// The offset to ask for next.
    pub const OFFSET: &str = "electric-offset";
    /// The shape's columns and types.
    pub const SCHEMA: &str = "electric-schema";
    /// Live requests' cache-busting cursor.
    pub const CURSOR: &str = "electric-cursor";
    /// Present (empty) when the response brings the client up to date.
    pub const UP_TO_DATE: &str = "electric-up-to-date";
    /// Whether the response carries data.
    pub const HAS_DATA: &str = "electric-has-data";
    /// Marks an error the client knows how to handle.
    pub const KNOWN_ERROR: &str = "electric-internal-known-error";
    /// Marks a subset snapshot response.
    pub const SNAPSHOT: &str = "electric-snapshot";
    /// The server's name and version.
    pub const SERVER: &str = "electric-server";
    /// Every header above a browser may read, plus `retry-after`.
    pub const EXPOSED: &str = "electric-cursor,electric-handle,electric-has-data,electric-offset,electric-schema,electric-up-to-date,electric-internal-known-error,retry-after";
}

/// What a change message does to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// The row is new to the shape.
    Insert,
    /// The row changed and stays in the shape.
    Update,
    /// The row left the shape.
    Delete,
}

impl Operation {
    /// The `operation` header's value.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Insert => "insert",
            Operation::Update => "update",
            Operation::Delete => "delete",
        }
    }
}

/// Which side of a key change a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChange {
    /// The delete of the old key: `key_change_to` names the new one.
    To,
    /// The insert of the new key: `key_change_from` names the old one.
    From,
}

/// Separator every stored message starts with.
pub const STORED_SEPARATOR: u8 = b',';

/// The start of a key: `"schema"."table"`.
pub fn key_prefix(schema: &str, table: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(schema.len() + table.len() + 5);
    key.push(b'"');
    key.extend_from_slice(schema.as_bytes());
    key.extend_from_slice(b"\".\"");
    key.extend_from_slice(table.as_bytes());
    key.push(b'"');
    key
}

/// Appends one key column's value to a key: `/"text"` with `/` doubled, or `/_` for NULL.
pub fn push_key_part(key: &mut Vec<u8>, value: Option<&[u8]>) {
    key.push(b'/');
    let Some(text) = value else {
        key.push(b'_');
        return;
    };
    key.push(b'"');
    for &b in text {
        if b == b'/' {
            key.push(b'/');
        }
        key.push(b);
    }
    key.push(b'"');
}

/// The `relation` header's value: `["schema","table"]`.
pub fn relation_json(schema: &str, table: &str) -> Vec<u8> {
    let mut out = vec![b'['];
    write_json_string(&mut out, schema.as_bytes());
    out.push(b',');
    write_json_string(&mut out, table.as_bytes());
    out.push(b']');
    out
}

/// `"name":`, the prefix of one field of a row object.
pub fn field_prefix(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 3);
    write_json_string(&mut out, name.as_bytes());
    out.push(b':');
    out
}

/// A column value: its text as a JSON string, or `null`.
pub fn write_value(out: &mut Vec<u8>, text: Option<&[u8]>) {
    match text {
        Some(text) => write_json_string(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// `{"key":<key>,"value":` — a change message up to its row object.
pub fn write_message_start(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"{\"key\":");
    write_json_string(out, key);
    out.extend_from_slice(b",\"value\":");
}

/// `,"old_value":` — what precedes the old values of an update's changed columns.
pub const OLD_VALUE_FIELD: &[u8] = b",\"old_value\":";

/// `,"headers":{"operation":…,"relation":…` — the headers every change message has, left open
/// for more.
pub fn write_headers_start(out: &mut Vec<u8>, operation: Operation, relation_json: &[u8]) {
    out.extend_from_slice(b",\"headers\":{\"operation\":\"");
    out.extend_from_slice(operation.name().as_bytes());
    out.extend_from_slice(b"\",\"relation\":");
    out.extend_from_slice(relation_json);
}

/// `,"key_change_to":K` or `,"key_change_from":K`.
pub fn write_key_change(out: &mut Vec<u8>, side: KeyChange, other_key: &[u8]) {
    out.extend_from_slice(match side {
        KeyChange::To => b",\"key_change_to\":",
        KeyChange::From => b",\"key_change_from\":",
    });
    write_json_string(out, other_key);
}

/// `,"txids":[xid],"lsn":"L","op_position":N` — where a replicated change sits.
pub fn write_txn_headers(out: &mut Vec<u8>, xid: u32, lsn: u64, op_position: u64) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(b",\"txids\":[");
    out.extend_from_slice(digits.format(xid).as_bytes());
    out.extend_from_slice(b"],\"lsn\":\"");
    out.extend_from_slice(digits.format(lsn).as_bytes());
    out.extend_from_slice(b"\",\"op_position\":");
    out.extend_from_slice(digits.format(op_position).as_bytes());
}

/// `,"snapshot_mark":N` — the header of a subset snapshot's rows.
pub fn write_snapshot_mark(out: &mut Vec<u8>, mark: u32) {
    out.extend_from_slice(b",\"snapshot_mark\":");
    out.extend_from_slice(itoa::Buffer::new().format(mark).as_bytes());
}

/// `,"tags":[…]` and, when given, `,"removed_tags":[…]` — which subquery conditions a row of a
/// subquery shape answers to (one `/`-joined slot string per disjunct of the where clause).
pub fn write_tags(out: &mut Vec<u8>, tags: &[String], removed: Option<&[String]>) {
    write_string_array_field(out, b",\"tags\":", tags);
    if let Some(removed) = removed {
        write_string_array_field(out, b",\"removed_tags\":", removed);
    }
}

/// `,"active_conditions":[true,false,…]` — each position's truth for the row as written.
pub fn write_active_conditions(out: &mut Vec<u8>, conditions: &[bool]) {
    out.extend_from_slice(b",\"active_conditions\":[");
    for (i, c) in conditions.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(if *c { b"true" } else { b"false" });
    }
    out.push(b']');
}

/// `,"is_move_in":true` — the header of a row a move-in brought.
pub const IS_MOVE_IN_FIELD: &[u8] = b",\"is_move_in\":true";

fn write_string_array_field(out: &mut Vec<u8>, field: &[u8], items: &[String]) {
    out.extend_from_slice(field);
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_string(out, item.as_bytes());
    }
    out.push(b']');
}

/// Whether a move brings rows into a subquery shape or takes them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveKind {
    /// `move-in`: rows whose slot matches a pattern now satisfy that position.
    In,
    /// `move-out`: rows whose slot matches a pattern no longer satisfy that position.
    Out,
}

/// A `move-in` or `move-out` control message:
/// `{"headers":{"event":"move-out","patterns":[{"pos":0,"value":"…"}],"txids":[7712]}}`.
/// `patterns` are (position, slot hash) pairs; `txids` ascending.
pub fn move_event(kind: MoveKind, patterns: &[(usize, String)], txids: &[u32]) -> Vec<u8> {
    let mut digits = itoa::Buffer::new();
    let mut out = br#"{"headers":{"event":""#.to_vec();
    out.extend_from_slice(match kind {
        MoveKind::In => b"move-in",
        MoveKind::Out => b"move-out",
    });
    out.extend_from_slice(b"\",\"patterns\":[");
    for (i, (pos, value)) in patterns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"pos\":");
        out.extend_from_slice(digits.format(*pos).as_bytes());
        out.extend_from_slice(b",\"value\":");
        write_json_string(&mut out, value.as_bytes());
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"txids\":[");
    for (i, xid) in txids.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(digits.format(*xid).as_bytes());
    }
    out.extend_from_slice(b"]}}");
    out
}

/// Closes the headers and the message; `last` marks the shape's last message of its
/// transaction (`,"last":true`).
pub fn close_headers(out: &mut Vec<u8>, last: bool) {
    if last {
        out.extend_from_slice(b",\"last\":true");
    }
    out.extend_from_slice(b"}}");
}

/// The `snapshot-end` control message.
pub fn snapshot_end(visibility: &PgSnapshot) -> Vec<u8> {
    let mut out = br#"{"headers":{"control":"snapshot-end","xmin":""#.to_vec();
    write_visibility_fields(&mut out, visibility);
    out.extend_from_slice(b"}}");
    out
}

/// `XMIN","xmax":"XMAX","xip_list":[…]` after an opened `"xmin":"`.
fn write_visibility_fields(out: &mut Vec<u8>, visibility: &PgSnapshot) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(digits.format(visibility.xmin).as_bytes());
    out.extend_from_slice(b"\",\"xmax\":\"");
    out.extend_from_slice(digits.format(visibility.xmax).as_bytes());
    out.extend_from_slice(b"\",\"xip_list\":[");
    for (i, xid) in visibility.xip.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(digits.format(*xid).as_bytes());
        out.push(b'"');
    }
    out.push(b']');
}

/// The `up-to-date` control message.
pub fn up_to_date(global_last_seen_lsn: u64) -> Vec<u8> {
    let mut out = br#"{"headers":{"control":"up-to-date","global_last_seen_lsn":""#.to_vec();
    out.extend_from_slice(itoa::Buffer::new().format(global_last_seen_lsn).as_bytes());
    out.extend_from_slice(b"\"}}");
    out
}

/// The body of a 409: `must-refetch`.
pub const MUST_REFETCH_BODY: &str = r#"[{"headers":{"control":"must-refetch"}}]"#;

/// The start of a subset snapshot's body, up to its first row:
/// `{"metadata":{"xmin":…,"xmax":…,"xip_list":[…],"database_lsn":…,"snapshot_mark":N},"data":[`.
pub fn subset_start(visibility: &PgSnapshot, database_lsn: u64, mark: u32) -> Vec<u8> {
    let mut out = br#"{"metadata":{"xmin":""#.to_vec();
    write_visibility_fields(&mut out, visibility);
    out.extend_from_slice(b",\"database_lsn\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(database_lsn).as_bytes());
    out.push(b'"');
    write_snapshot_mark(&mut out, mark);
    out.extend_from_slice(b"},\"data\":[");
    out
}

/// The end of a subset snapshot's body.
pub const SUBSET_END: &[u8] = b"]}";

/// The end of a response array after stored messages (or none), with an optional control
/// message last: `[` + stored messages without their first separator + this.
pub fn array_end(has_messages: bool, control: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(control.map_or(1, |c| c.len() + 2));
    if let Some(control) = control {
        if has_messages {
            out.push(b',');
        }
        out.extend_from_slice(control);
    }
    out.push(b']');
    out
}

/// One server-sent event carrying a message: `data: <json>\n\n`.
pub fn write_sse_event(out: &mut Vec<u8>, message: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(message);
    out.extend_from_slice(b"\n\n");
}

/// The comment that keeps an idle event stream open.
pub const SSE_KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// Appends `text` as a JSON string, escaping as Postgres's `to_json` does.
pub fn write_json_string(out: &mut Vec<u8>, text: &[u8]) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    let mut rest = text;
    while let Some(i) = first_to_escape(rest) {
        out.extend_from_slice(&rest[..i]);
        let b = rest[i];
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]),
        }
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Index of the first byte JSON must escape (control, `"`, `\\`), eight bytes at a time.
fn first_to_escape(text: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut chunks = text.chunks_exact(8);
    for (n, chunk) in chunks.by_ref().enumerate() {
        let x = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        // Bytes below 0x20 (ignoring bytes >= 0x80, which are never escaped), quotes, backslashes.
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGHS;
        if control
            | has_zero(x ^ (ONES * u64::from(b'"')))
            | has_zero(x ^ (ONES * u64::from(b'\\')))
            != 0
        {
            if let Some(i) = chunk.iter().position(|&b| needs_escape(b)) {
                return Some(n * 8 + i);
            }
        }
    }
    let tail = chunks.remainder();
    tail.iter()
        .position(|&b| needs_escape(b))
        .map(|i| text.len() - tail.len() + i)
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    fn json(value: &[u8]) -> String {
        let mut out = Vec::new();
        write_json_string(&mut out, value);
        text(out)
    }

    #[test]
    fn move_events_and_subquery_headers_are_electrics_bytes() {
        assert_eq!(
            text(move_event(MoveKind::Out, &[(0, "9e1c".into())], &[7712])),
            r#"{"headers":{"event":"move-out","patterns":[{"pos":0,"value":"9e1c"}],"txids":[7712]}}"#
        );
        assert_eq!(
            text(move_event(
                MoveKind::In,
                &[(1, "a".into()), (2, "b".into())],
                &[]
            )),
            r#"{"headers":{"event":"move-in","patterns":[{"pos":1,"value":"a"},{"pos":2,"value":"b"}],"txids":[]}}"#
        );
        let mut out = Vec::new();
        write_tags(&mut out, &["h/".into(), "/1".into()], Some(&[]));
        write_active_conditions(&mut out, &[true, false]);
        out.extend_from_slice(IS_MOVE_IN_FIELD);
        assert_eq!(
            text(out),
            r#","tags":["h/","/1"],"removed_tags":[],"active_conditions":[true,false],"is_move_in":true"#
        );
    }

    #[test]
    fn escapes_like_postgres_to_json() {
        assert_eq!(json(b""), r#""""#);
        assert_eq!(
            json(b"plain text, long enough for chunks"),
            r#""plain text, long enough for chunks""#
        );
        assert_eq!(
            json(b"a\"b\\c\nd\x01\x1f\x08\x0c\t\r"),
            r#""a\"b\\c\nd\u0001\u001f\b\f\t\r""#
        );
        assert_eq!(json("ünï \u{7f} ✓".as_bytes()), "\"ünï \u{7f} ✓\"");
    }

    #[test]
    fn escapes_agree_with_a_json_parser_at_every_position() {
        for len in 0..20 {
            for pos in 0..len {
                for special in [b'"', b'\\', b'\n', 0x01, 0x1f, 0x7f, 0x80, b' '] {
                    let mut raw = vec![b'x'; len];
                    raw[pos] = special;
                    let raw = String::from_utf8_lossy(&raw).into_owned();
                    let encoded = json(raw.as_bytes());
                    assert_eq!(unescape(&encoded), raw, "{encoded}");
                }
            }
        }
    }

    /// A minimal JSON string decoder, independent of the encoder under test.
    fn unescape(encoded: &str) -> String {
        let inner = &encoded[1..encoded.len() - 1];
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next().unwrap() {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                }
                other => out.push(other),
            }
        }
        out
    }

    #[test]
    fn keys() {
        let mut key = key_prefix("public", "it\"ems");
        push_key_part(&mut key, Some(b"a/b"));
        push_key_part(&mut key, None);
        assert_eq!(text(key), r#""public"."it"ems"/"a//b"/_"#);
    }

    #[test]
    fn change_message_pieces() {
        let mut out = Vec::new();
        write_message_start(&mut out, br#""public"."t"/"1""#);
        out.extend_from_slice(b"{");
        out.extend_from_slice(&field_prefix("id"));
        write_value(&mut out, Some(b"1"));
        out.push(b',');
        out.extend_from_slice(&field_prefix("note"));
        write_value(&mut out, None);
        out.extend_from_slice(b"}");
        write_headers_start(&mut out, Operation::Delete, &relation_json("public", "t"));
        write_key_change(&mut out, KeyChange::To, br#""public"."t"/"2""#);
        write_txn_headers(&mut out, 771, 24_011_432, 4);
        close_headers(&mut out, true);
        assert_eq!(
            text(out),
            r#"{"key":"\"public\".\"t\"/\"1\"","value":{"id":"1","note":null},"headers":{"operation":"delete","relation":["public","t"],"key_change_to":"\"public\".\"t\"/\"2\"","txids":[771],"lsn":"24011432","op_position":4,"last":true}}"#
        );
    }

    #[test]
    fn control_messages() {
        let visibility = PgSnapshot {
            xmin: 100,
            xmax: 105,
            xip: vec![101, 103],
        };
        assert_eq!(
            text(snapshot_end(&visibility)),
            r#"{"headers":{"control":"snapshot-end","xmin":"100","xmax":"105","xip_list":["101","103"]}}"#
        );
        assert_eq!(
            text(up_to_date(24_011_432)),
            r#"{"headers":{"control":"up-to-date","global_last_seen_lsn":"24011432"}}"#
        );
        assert_eq!(
            MUST_REFETCH_BODY,
            r#"[{"headers":{"control":"must-refetch"}}]"#
        );
        let empty = PgSnapshot {
            xmin: 7,
            xmax: 7,
            xip: vec![],
        };
        assert_eq!(
            text(subset_start(&empty, 2_048, 77)),
            r#"{"metadata":{"xmin":"7","xmax":"7","xip_list":[],"database_lsn":"2048","snapshot_mark":77},"data":["#
        );
    }

    #[test]
    fn framing() {
        assert_eq!(text(array_end(false, None)), "]");
        assert_eq!(text(array_end(true, Some(b"{}"))), ",{}]");
        assert_eq!(text(array_end(false, Some(b"{}"))), "{}]");
        let mut out = Vec::new();
        write_sse_event(&mut out, b"{\"a\":1}");
        assert_eq!(text(out), "data: {\"a\":1}\n\n");
    }
}
