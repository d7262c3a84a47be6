//! How one node of a cluster reads another's status without a user: a
//! header proving it holds the cluster cookie.
//!
//! `/api/stablemq/node-status` answers a user with the monitoring tag, as
//! `/api/nodes` does. A node's own background reads (the master watching its
//! peers' disk alarms, `server/master_task/peer_alarms.rs`) have no user, so
//! they send `x-stablemq-node-proof: <ms since the epoch>.<HMAC-SHA256 of
//! those ms under the cookie, in unpadded base64url>` instead. A proof older or newer than
//! [`SKEW_MS`] is refused, so one recorded on the wire soon stops working.
//!
//! What it is not: a way in without a cookie. A cluster without a cookie has
//! no proof; its nodes' background reads are then refused, and the master
//! does not see its peers' alarms (docs/reliability.md says so).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use stablemq_cluster::transport::auth::Cookie;

/// The header's name.
pub const HEADER: &str = "x-stablemq-node-proof";
/// The label of the proof: a proof for anything else does not pass for one.
const LABEL: &[u8] = b"stablemq node-status v1";
/// How far the writer's clock may be from the reader's.
pub const SKEW_MS: u64 = 60_000;

/// The header value proving `cookie` at `now_ms`.
pub fn make(cookie: &Cookie, now_ms: u64) -> String {
    let ts = now_ms.to_string();
    let tag = cookie.sign(LABEL, &[ts.as_bytes()]);
    format!("{ts}.{}", URL_SAFE_NO_PAD.encode(tag))
}

/// Whether `value` proves `cookie`, written within [`SKEW_MS`] of `now_ms`.
pub fn check(cookie: &Cookie, value: &str, now_ms: u64) -> bool {
    let Some((ts, tag)) = value.split_once('.') else {
        return false;
    };
    let Ok(at) = ts.parse::<u64>() else {
        return false;
    };
    if at.abs_diff(now_ms) > SKEW_MS {
        return false;
    }
    URL_SAFE_NO_PAD
        .decode(tag)
        .is_ok_and(|tag| cookie.verify(LABEL, &[ts.as_bytes()], &tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_passes_with_its_cookie_and_in_time_only() {
        let c = Cookie::new(b"a-cluster-cookie-of-some-length").unwrap();
        let other = Cookie::new(b"another-cookie-entirely-here").unwrap();
        let now = 1_800_000_000_000;
        let p = make(&c, now);
        assert!(check(&c, &p, now + 10));
        assert!(!check(&other, &p, now), "another cookie");
        assert!(!check(&c, &p, now + SKEW_MS + 1), "replayed too late");
        assert!(
            !check(&c, &make(&c, now + SKEW_MS + 1), now),
            "from the future"
        );
        let (ts, tag) = p.split_once('.').unwrap();
        assert!(!check(
            &c,
            &format!("{}.{tag}", ts.parse::<u64>().unwrap() + 1),
            now
        ));
        for junk in ["", ".", "x.y", "1.zz", "1.abc", &format!("{ts}.")] {
            assert!(!check(&c, junk, now), "{junk:?}");
        }
    }
}
