//! Where a server listens: a TCP host and port, or a Unix-socket directory and port.

use std::fmt;

/// The network endpoint of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Host name or address, and port.
    Tcp(String, u16),
    /// Unix-socket directory, and port (the socket file is `.s.PGSQL.<port>`).
    Unix(std::path::PathBuf, u16),
}

impl fmt::Display for Endpoint {
    /// `host:port` (`[v6]:port`), or the socket file's path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(host, port) if host.contains(':') => write!(f, "[{host}]:{port}"),
            Endpoint::Tcp(host, port) => write!(f, "{host}:{port}"),
            Endpoint::Unix(dir, port) => {
                write!(f, "{}", dir.join(format!(".s.PGSQL.{port}")).display())
            }
        }
    }
}
