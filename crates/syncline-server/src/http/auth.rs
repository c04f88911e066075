//! The API secret: requests carry it as `secret=` (or `api_secret=`), compared in constant time.

use subtle::ConstantTimeEq;

use super::params::request_secret;

/// Whether a request with this raw query string may pass when the server's secret is `secret`
/// (`None`: no secret configured, every request passes).
pub fn authorized(secret: Option<&str>, query: &str) -> bool {
    let Some(secret) = secret else {
        return true;
    };
    let given = request_secret(query).unwrap_or_default();
    bool::from(given.as_bytes().ct_eq(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::authorized;

    #[test]
    fn the_secret_must_match_exactly() {
        assert!(authorized(None, ""));
        assert!(authorized(Some("s3cret"), "table=t&secret=s3cret"));
        assert!(authorized(Some("s3cret"), "api_secret=s3cret"));
        assert!(!authorized(Some("s3cret"), "table=t"));
        assert!(!authorized(Some("s3cret"), "secret="));
        assert!(!authorized(Some("s3cret"), "secret=s3cre"));
        assert!(!authorized(Some("s3cret"), "secret=s3cret2"));
    }
}
