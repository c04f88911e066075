//! What a server holds, as the scenarios check it: its Prometheus `/metrics` (Syncline's; a
//! server without them, such as Electric, answers `None`) and its open file descriptors.

use super::client::Error;
use super::http_pool::Pool;
use super::Server;

/// The value of the sample `sample` (its name with its labels as the server writes them, e.g.
/// `syncline_admission_in_flight{kind="existing"}`) in the `/metrics` of the server at `url`;
/// `None` if the server has no `/metrics` or no such sample.
pub(super) async fn metric(http: &Pool, url: &str, sample: &str) -> Result<Option<f64>, Error> {
    let response = http.get(&format!("{url}/metrics"), None).await?;
    if !response.status().is_success() {
        return Ok(None);
    }
    let body = response.bytes().await?;
    Ok(String::from_utf8_lossy(&body)
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(name, _)| *name == sample)
        .and_then(|(_, value)| value.parse().ok()))
}

/// Entries of `/proc/<pid>/fd` of `server`.
pub(super) fn open_fds(server: &Server) -> Result<usize, Error> {
    let pid = server.pid.ok_or("the server's pid is unknown")?;
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}
