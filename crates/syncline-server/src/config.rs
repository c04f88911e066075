//! Configuration: command-line flags, each also settable from the environment under
//! Electric's variable name where Electric has one.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::Args;
use serde::Deserialize;

/// `syncline serve` settings.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Postgres connection URL (`postgres://user:pass@host:port/db`, or libpq key=value). The
    /// user needs the REPLICATION attribute and must own the tables it syncs (Syncline adds them
    /// to its publication and sets REPLICA IDENTITY FULL on them).
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,

    /// HTTP port.
    #[arg(long, env = "ELECTRIC_PORT", default_value_t = 3000)]
    pub port: u16,

    /// Address to listen on.
    #[arg(long, env = "SYNCLINE_LISTEN_ADDRESS", default_value = "0.0.0.0")]
    pub listen_address: IpAddr,

    /// Secret that every /v1/shape request (and /status, and /metrics on the main port) must carry as
    /// `secret=` (or `api_secret=`). Required unless --insecure; not empty; not together with
    /// --insecure.
    #[arg(long, env = "ELECTRIC_SECRET", hide_env_values = true)]
    pub secret: Option<String>,

    /// Serve without a secret (development only).
    #[arg(long, env = "ELECTRIC_INSECURE", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value = "false", default_missing_value = "true")]
    pub insecure: bool,

    /// Directory for shape logs and their metadata.
    #[arg(long, env = "ELECTRIC_STORAGE_DIR", default_value = "./persistent")]
    pub storage_dir: PathBuf,

    /// JSON bytes after which a shape log chunk closes (a response never crosses a chunk end).
    #[arg(long, env = "ELECTRIC_SHAPE_CHUNK_BYTES_THRESHOLD", default_value_t = 10 * 1024 * 1024)]
    pub chunk_bytes_threshold: u64,

    /// How long a live request waits for new data, in milliseconds.
    #[arg(long, env = "ELECTRIC_LONG_POLL_TIMEOUT", default_value_t = 20_000)]
    pub long_poll_timeout_ms: u64,

    /// `max-age` of cacheable non-live responses, in seconds.
    #[arg(long, env = "ELECTRIC_CACHE_MAX_AGE", default_value_t = 60)]
    pub cache_max_age: u64,

    /// `stale-while-revalidate` of cacheable non-live responses, in seconds.
    #[arg(long, env = "ELECTRIC_CACHE_STALE_AGE", default_value_t = 300)]
    pub cache_stale_age: u64,

    /// Names the replication slot (`syncline_slot_<id>`) and publication
    /// (`syncline_publication_<id>`), so several servers can share one database.
    #[arg(
        long,
        env = "ELECTRIC_REPLICATION_STREAM_ID",
        default_value = "default"
    )]
    pub replication_stream_id: String,

    /// Postgres connections for snapshots and subset queries: that many run at once, more
    /// wait their turn.
    #[arg(long, env = "ELECTRIC_DB_POOL_SIZE", default_value_t = 20)]
    pub db_pool_size: usize,

    /// Allow DELETE /v1/shape (for test suites).
    #[arg(long, env = "ELECTRIC_ENABLE_INTEGRATION_TESTING", value_parser = BoolishValueParser::new(), num_args = 0..=1, default_value = "false", default_missing_value = "true")]
    pub enable_integration_testing: bool,

    /// Most shapes kept; creating one more evicts the least recently used.
    #[arg(long, env = "ELECTRIC_MAX_SHAPES")]
    pub max_shapes: Option<usize>,

    /// How often shapes made with `experimental_compaction=true` have the updates in their
    /// older chunks merged, in seconds (each time ± half, at random).
    #[arg(long, env = "SYNCLINE_COMPACTION_PERIOD_S", default_value_t = 600)]
    pub compaction_period_s: u64,

    /// Shape requests in flight before more are turned away with 503 and `retry-after`, as
    /// JSON: initial requests (`offset=-1`) and all others (waiting live requests count).
    #[arg(long, env = "ELECTRIC_MAX_CONCURRENT_REQUESTS", default_value_t = ConcurrencyLimits::default())]
    pub max_concurrent_requests: ConcurrencyLimits,

    /// Serve Prometheus metrics at /metrics on this port only, without the secret (keep the port
    /// private); unset, /metrics is served on the main port and needs the secret like
    /// /v1/shape.
    #[arg(long, env = "ELECTRIC_PROMETHEUS_PORT")]
    pub prometheus_port: Option<u16>,

    /// Connections served at once; past it, a small reserve of connections is kept for
    /// /v1/health and /metrics and the rest are closed on accept. Default: three quarters of
    /// the open-files limit.
    #[arg(long, env = "SYNCLINE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,

    /// How long a connection may take to send a request head, also while idle between
    /// requests, before it is closed (e.g. `60s`, `500ms`, `2m`; a bare number is
    /// milliseconds).
    #[arg(long, env = "SYNCLINE_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub http_idle_timeout: Duration,

    /// Which HTTP/1.1 implementation serves connections: `syncline`, Syncline's own, in which
    /// a connection whose request waits (a parked long-poll) holds no read or write buffer
    /// (about 10 KB per waiting request instead of 29 KB), or `hyper`'s.
    #[arg(long, env = "SYNCLINE_HTTP_ENGINE", value_enum, default_value_t = HttpEngine::default())]
    pub http_engine: HttpEngine,

    /// How long a response may wait for the client to read before the connection is closed
    /// (same format).
    #[arg(long, env = "ELECTRIC_TCP_SEND_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub tcp_send_timeout: Duration,

    /// Shape logs kept open at once (each holds up to six file descriptors); past it the least
    /// recently used are held: their files are closed, their lock and their writer's state
    /// kept, so the next change opens only the files it writes. Held logs take the descriptors
    /// the open ones leave (one each); past that the least recently used idle ones are parked
    /// (their lock released too: the next change checks the log, but reads nothing). Default:
    /// what the held logs and the open connections leave of the descriptors (a quarter of the
    /// open-files limit, at least 256, is kept for everything else), six per log, at least 16;
    /// logs past it are held as connections come.
    #[arg(long, env = "SYNCLINE_OPEN_LOGS_MAX")]
    pub open_logs_max: Option<usize>,

    /// Shape logs kept held at once (files closed, lock kept: one file descriptor each); past
    /// it the least recently used idle ones are parked. Default: the descriptors that the open
    /// connections and `--open-logs-max` (or 16) open logs leave to logs.
    #[arg(long, env = "SYNCLINE_HELD_LOGS_MAX")]
    pub held_logs_max: Option<usize>,

    /// Shape logs kept parked at once (no file descriptors, about a kilobyte of memory each);
    /// past it the least recently used are closed (an idle shape then holds no writer at
    /// all). Default: eight times `--open-logs-max`, or half the open-files limit when that is
    /// not set.
    #[arg(long, env = "SYNCLINE_PARKED_LOGS_MAX")]
    pub parked_logs_max: Option<usize>,

    /// How long a shape log may go unwritten before its writer is parked, releasing its file
    /// descriptors (an idle shape then holds none); the next change resumes it without reading
    /// the log. Parked writers are checked this often, so one waits up to twice this. The same
    /// sweep drops the cached readers of shapes nobody requested since the last one and returns
    /// the heap's free pages to the kernel. Same format as `--http-idle-timeout`.
    #[arg(long, env = "SYNCLINE_IDLE_LOG_PARK", default_value = "60s", value_parser = parse_duration)]
    pub idle_log_park: Duration,

    /// This server's part among servers sharing one storage directory and stream id: `auto`
    /// takes the writer's lock (a Postgres advisory lock) when it is free, and until then is a
    /// standby serving existing shapes read-only from the shared files; `replica` never takes
    /// it (a permanent read replica).
    #[arg(long, env = "SYNCLINE_ROLE", value_enum, default_value_t = RoleSetting::Auto)]
    pub role: RoleSetting,

    /// How a standby or replica notices what the writer wrote: `inotify` (watch the files;
    /// same host) or `poll` (re-read every --follow-poll-interval; e.g. network file systems,
    /// where inotify does not see another host's writes).
    #[arg(long, env = "SYNCLINE_FOLLOW", value_enum, default_value_t = FollowMode::Inotify)]
    pub follow: FollowMode,

    /// How often a standby or replica re-reads the end of the shape logs requests wait on:
    /// with `--follow=poll` the only way it learns of new data, with inotify a backstop (same
    /// format as --http-idle-timeout).
    #[arg(long, env = "SYNCLINE_FOLLOW_POLL_INTERVAL", default_value = "100ms", value_parser = parse_duration)]
    pub follow_poll_interval: Duration,

    /// Log format: `text` or `json`.
    #[arg(long, env = "SYNCLINE_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// `--role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RoleSetting {
    /// Become the writer when the lock is free; a standby until then.
    Auto,
    /// Never write: serve the writer's shapes read-only.
    Replica,
}

/// `--follow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FollowMode {
    /// Watch the files with inotify (and poll as a backstop).
    Inotify,
    /// Poll only.
    Poll,
}

impl Config {
    /// The name of the writer's lock: the slot's (one writer per slot).
    pub fn lock_name(&self) -> String {
        self.slot_name()
    }

    /// The long-poll timeout.
    pub fn long_poll_timeout(&self) -> Duration {
        Duration::from_millis(self.long_poll_timeout_ms)
    }

    /// The replication slot's name.
    pub fn slot_name(&self) -> String {
        format!("syncline_slot_{}", self.replication_stream_id)
    }

    /// The publication's name.
    pub fn publication_name(&self) -> String {
        format!("syncline_publication_{}", self.replication_stream_id)
    }

    /// Checks combinations clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.secret.as_deref().is_some_and(str::is_empty) {
            return Err("ELECTRIC_SECRET (--secret) is empty: set a secret, or ELECTRIC_INSECURE=true (--insecure) to serve without one".into());
        }
        if self.secret.is_some() && self.insecure {
            return Err("ELECTRIC_SECRET (--secret) and ELECTRIC_INSECURE=true (--insecure) cannot both be set: choose one".into());
        }
        if self.secret.is_none() && !self.insecure {
            return Err(
                "set ELECTRIC_SECRET (--secret), or ELECTRIC_INSECURE=true (--insecure) to serve without one"
                    .into(),
            );
        }
        if self.chunk_bytes_threshold == 0 {
            return Err("the chunk bytes threshold must be at least 1".into());
        }
        if self.compaction_period_s == 0 {
            return Err("the compaction period must be at least 1 second".into());
        }
        if self.follow_poll_interval.is_zero() {
            return Err("the follow poll interval must be positive".into());
        }
        if self.db_pool_size == 0 {
            return Err("the pool size must be at least 1".into());
        }
        let id_ok = !self.replication_stream_id.is_empty()
            && self
                .replication_stream_id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !id_ok {
            return Err("the replication stream id may hold only a-z, 0-9 and _".into());
        }
        Ok(())
    }
}

/// A duration as Electric writes them: a number with `ms`, `s`, `m` or `h`, or a bare number
/// of milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 500ms, 2m)"))?;
    let ms = match unit.trim() {
        "" | "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ms, s, m or h"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// `ELECTRIC_MAX_CONCURRENT_REQUESTS`: `{"initial":300,"existing":10000}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyLimits {
    /// Initial requests (`offset=-1`) in flight.
    pub initial: usize,
    /// Other shape requests in flight (live requests count while they wait).
    pub existing: usize,
}

impl Default for ConcurrencyLimits {
    fn default() -> Self {
        ConcurrencyLimits {
            initial: 300,
            existing: 10_000,
        }
    }
}

impl std::str::FromStr for ConcurrencyLimits {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        serde_json::from_str(text)
            .map_err(|e| format!("expected {{\"initial\":N,\"existing\":N}}: {e}"))
    }
}

impl std::fmt::Display for ConcurrencyLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            r#"{{"initial":{},"existing":{}}}"#,
            self.initial, self.existing
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_electric_writes_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1500"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("5 days").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }
}

/// Which HTTP/1.1 implementation serves the connections (`--http-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HttpEngine {
    /// hyper's.
    Hyper,
    /// Syncline's own (`http/http1.rs`): a connection whose request waits holds no buffer.
    #[default]
    Syncline,
}
