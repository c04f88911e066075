//! Helpers shared by the integration tests: test messages and whole-log reads.
#![allow(dead_code)]

use syncline_storage::{LogOffset, Operation, Reader};

/// One test message, owning its bytes. Its JSON is one line: `<tx>_<op> <op> <key> <value>\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub offset: LogOffset,
    pub key: Vec<u8>,
    pub op: Operation,
    pub json: Vec<u8>,
}

impl Owned {
    pub fn new(offset: LogOffset, key: &str, op: Operation, value: &str) -> Self {
        let tag = match op {
            Operation::Insert => 'i',
            Operation::Update => 'u',
            Operation::Delete => 'd',
        };
        let json = format!("{offset} {tag} {key} {value}\n").into_bytes();
        Owned {
            offset,
            key: key.as_bytes().to_vec(),
            op,
            json,
        }
    }

    pub fn as_message(&self) -> syncline_storage::Message<'_> {
        syncline_storage::Message {
            offset: self.offset,
            key: &self.key,
            op: self.op,
            json: &self.json,
        }
    }
}

/// A parsed line of a read: offset text, op tag, key, value.
pub fn parse_line(line: &[u8]) -> (LogOffset, char, String, String) {
    let text = std::str::from_utf8(line).unwrap();
    let mut parts = text.splitn(4, ' ');
    let offset = parts.next().unwrap().parse().unwrap();
    let tag = parts.next().unwrap().chars().next().unwrap();
    let key = parts.next().unwrap().to_owned();
    let value = parts.next().unwrap().to_owned();
    (offset, tag, key, value)
}

/// Reads from `from` until up to date, checking every response; returns the message lines and
/// the number of responses.
pub fn read_all(reader: &mut Reader, from: Option<LogOffset>) -> (Vec<Vec<u8>>, usize) {
    let mut lines = Vec::new();
    let mut at = from;
    let mut responses = 0;
    loop {
        let r = reader.read(at).unwrap();
        responses += 1;
        assert!(responses < 1_000_000, "read loop does not end");
        if let Some(body) = &r.body {
            let bytes = body.read_to_vec().unwrap();
            assert!(bytes.ends_with(b"\n"), "a response ends at a message end");
            for line in bytes[..bytes.len() - 1].split(|&b| b == b'\n') {
                let (offset, ..) = parse_line(line);
                assert!(
                    at.is_none_or(|a| offset > a),
                    "message {offset} not after read offset {at:?}"
                );
                assert!(
                    r.end_offset.is_some_and(|e| offset <= e),
                    "message {offset} past response end"
                );
                lines.push(line.to_vec());
            }
        }
        if r.end_offset.is_some() && at.is_some() {
            assert!(r.end_offset >= at, "end offset went backwards");
        }
        if r.up_to_date {
            return (lines, responses);
        }
        assert!(r.chunk_closed);
        assert!(r.end_offset > at, "a closed-chunk response must advance");
        at = r.end_offset;
    }
}

/// The lines `msgs` should read back as.
pub fn lines_of(msgs: &[Owned]) -> Vec<Vec<u8>> {
    msgs.iter()
        .map(|m| m.json[..m.json.len() - 1].to_vec())
        .collect()
}

/// Transaction `t` (t ≥ 1) of the deterministic workload used by crash tests.
pub fn workload_txn(t: u64) -> Vec<Owned> {
    (0..t % 7 + 1)
        .map(|i| {
            let op = if i % 2 == 0 {
                Operation::Insert
            } else {
                Operation::Update
            };
            let key = format!("\"public\".\"t\"/\"{}\"", (t * 31 + i) % 50);
            Owned::new(
                LogOffset::new(t, 2 * i),
                &key,
                op,
                &format!("{t}-{i}-{}", "p".repeat(120)),
            )
        })
        .collect()
}

/// Checks that `lines` are exactly workload transactions `1..=n` and returns `n`.
pub fn committed_prefix(lines: &[Vec<u8>]) -> u64 {
    let mut rest = lines;
    let mut n = 0;
    while !rest.is_empty() {
        let expected = lines_of(&workload_txn(n + 1));
        assert!(
            rest.len() >= expected.len(),
            "transaction {} is cut short",
            n + 1
        );
        assert_eq!(
            &rest[..expected.len()],
            &expected[..],
            "transaction {} differs",
            n + 1
        );
        rest = &rest[expected.len()..];
        n += 1;
    }
    n
}

/// Rows by key, each a map of column to value: what a client builds from the log.
pub type State = std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// Encodes columns as a test message value: `c=v;c=v`.
pub fn encode_columns(cols: &std::collections::BTreeMap<String, String>) -> String {
    cols.iter()
        .map(|(c, v)| format!("{c}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

fn decode_columns(value: &str) -> std::collections::BTreeMap<String, String> {
    value
        .split(';')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (c, v) = p.split_once('=').unwrap();
            (c.to_owned(), v.to_owned())
        })
        .collect()
}

/// Applies message lines to a state: insert sets the row, update merges columns, delete removes.
pub fn apply(state: &mut State, lines: &[Vec<u8>]) {
    for line in lines {
        let (_, tag, key, value) = parse_line(line);
        match tag {
            'i' => {
                state.insert(key, decode_columns(&value));
            }
            'u' => state.entry(key).or_default().extend(decode_columns(&value)),
            'd' => {
                state.remove(&key);
            }
            other => panic!("unknown tag {other}"),
        }
    }
}

/// The merge compaction uses in tests: the newer update's columns over the older's, keeping
/// the newer message's offset, tag and key.
pub fn merge_updates(older: &[u8], newer: &[u8]) -> Vec<u8> {
    let (_, _, _, old_value) = parse_line(&older[..older.len() - 1]);
    let (offset, tag, key, new_value) = parse_line(&newer[..newer.len() - 1]);
    let mut cols = decode_columns(&old_value);
    cols.extend(decode_columns(&new_value));
    format!("{offset} {tag} {key} {}\n", encode_columns(&cols)).into_bytes()
}

/// Turns a random intent into a message that is valid against the keys `present` (insert when
/// the row is absent, else delete or update) and updates `present`.
pub fn resolve_intent(
    present: &mut std::collections::BTreeSet<String>,
    offset: LogOffset,
    (key, delete, cols): &(u8, bool, Vec<(u8, u8)>),
) -> Owned {
    let key = format!("k{key}");
    let op = match (present.contains(&key), delete) {
        (false, _) => Operation::Insert,
        (true, true) => Operation::Delete,
        (true, false) => Operation::Update,
    };
    match op {
        Operation::Insert => present.insert(key.clone()),
        Operation::Delete => present.remove(&key),
        Operation::Update => true,
    };
    let cols = cols
        .iter()
        .map(|(c, v)| (format!("c{c}"), format!("{v}")))
        .collect();
    Owned::new(offset, &key, op, &encode_columns(&cols))
}

/// Simulates a power cut on what `plan` tracked: of each file's unsynced bytes none, all, or a
/// pseudo-random part reached the disk (each a third of the time).
pub fn power_cut(plan: &syncline_storage::FaultPlan, hole: bool, mut seed: u64) {
    plan.simulate_power_loss(hole, |unsynced| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match (seed >> 33) % 3 {
            0 => 0,
            1 => unsynced,
            _ => (seed >> 35) % (unsynced + 1),
        }
    })
    .unwrap();
}

/// Lowers this process's soft limit on open files to `max` (at most the hard limit).
pub fn limit_open_files(max: libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = max.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}
