//! Whether a callback was signed by its platform, as each platform documents it: pure
//! functions of the secret, the headers, the raw body and the time, checked before anything
//! in the body is read. Every comparison of a signature is constant-time (`verify_slice`).
//!
//! - Slack ("Verifying requests from Slack"): `X-Slack-Signature: v0=<hex HMAC-SHA256(signing
//!   secret, "v0:<X-Slack-Request-Timestamp>:<body>")>`, the timestamp within five minutes.
//! - Teams (the outgoing webhook's scheme, not the Bot Framework's JWT): `Authorization: HMAC
//!   <base64 HMAC-SHA256(base64-decoded security token, body)>`; the activity's own
//!   `timestamp` within five minutes.
//! - The generic webhook, both directions: `Idem-Signature: t=<unix seconds>,v1=<hex
//!   HMAC-SHA256(secret, "<t>.<body>")>`, `t` within five minutes.

use base64::Engine as _;
use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// How far a signed timestamp may be from now, either way.
pub const WINDOW_SECS: u64 = 5 * 60;

/// Why a callback is not believed to come from its platform (every one answered 401, and
/// none says more: a forger learns nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsigned {
    /// A header or field the scheme needs is absent.
    Missing(&'static str),
    /// It is there and not in the scheme's form.
    Malformed(&'static str),
    /// The signature does not match the body: forged, altered, or another secret's.
    Forged,
    /// Signed, too long ago (or too far ahead): perhaps a replay.
    Stale,
}

impl Unsigned {
    /// For the log: what failed, never a secret or a signature.
    pub fn describe(self) -> String {
        match self {
            Unsigned::Missing(what) => format!("no {what}"),
            Unsigned::Malformed(what) => format!("a malformed {what}"),
            Unsigned::Forged => "a signature that does not match".into(),
            Unsigned::Stale => format!("a timestamp more than {WINDOW_SECS} s from now"),
        }
    }
}

/// A verified signature, as lowercase hex of its bytes: what single use remembers. Taken
/// from the bytes, not the header's text, so that the same signature written otherwise
/// (upper-case hex, other spacing) is the same request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal(pub String);

fn mac(secret: &[u8]) -> HmacSha256 {
    <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes a key of any length")
}

/// Whether `at` (unix seconds) is within the window around `now`.
pub fn within_window(at: u64, now: u64) -> Result<(), Unsigned> {
    if at.abs_diff(now) > WINDOW_SECS {
        return Err(Unsigned::Stale);
    }
    Ok(())
}

/// A Slack request: `timestamp` and `signature` are the headers `X-Slack-Request-Timestamp`
/// and `X-Slack-Signature`; `now` in unix seconds.
pub fn verify_slack(
    secret: &[u8],
    timestamp: Option<&str>,
    body: &[u8],
    signature: Option<&str>,
    now: u64,
) -> Result<Seal, Unsigned> {
    let timestamp = timestamp.ok_or(Unsigned::Missing("X-Slack-Request-Timestamp"))?;
    let signature = signature.ok_or(Unsigned::Missing("X-Slack-Signature"))?;
    let at: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| Unsigned::Malformed("X-Slack-Request-Timestamp"))?;
    let given = signature
        .trim()
        .strip_prefix("v0=")
        .and_then(unhex)
        .ok_or(Unsigned::Malformed("X-Slack-Signature"))?;
    let mut m = mac(secret);
    m.update(b"v0:");
    m.update(timestamp.trim().as_bytes());
    m.update(b":");
    m.update(body);
    m.verify_slice(&given).map_err(|_| Unsigned::Forged)?;
    within_window(at, now)?;
    Ok(Seal(hex(&given)))
}

/// A Teams outgoing webhook's request: `authorization` is the `Authorization` header,
/// `secret` the decoded security token. The activity's time is checked once the body, now
/// trusted, is read ([`teams_time`], [`within_window`]).
pub fn verify_teams(
    secret: &[u8],
    authorization: Option<&str>,
    body: &[u8],
) -> Result<Seal, Unsigned> {
    let header = authorization.ok_or(Unsigned::Missing("Authorization"))?;
    let given = header
        .trim()
        .strip_prefix("HMAC ")
        .and_then(|b64| {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .ok()
        })
        .ok_or(Unsigned::Malformed("Authorization"))?;
    let mut m = mac(secret);
    m.update(body);
    m.verify_slice(&given).map_err(|_| Unsigned::Forged)?;
    Ok(Seal(hex(&given)))
}

/// The `Authorization` header Teams sends with `body`, signed with `secret` (the decoded
/// token): what a test's fake Teams sends.
#[cfg(test)]
fn sign_teams(secret: &[u8], body: &[u8]) -> String {
    let mut m = mac(secret);
    m.update(body);
    format!(
        "HMAC {}",
        base64::engine::general_purpose::STANDARD.encode(m.finalize().into_bytes())
    )
}

/// The `Idem-Signature` header of `body` signed at `at` (unix seconds).
pub fn sign_webhook(secret: &[u8], at: u64, body: &[u8]) -> String {
    let mut m = mac(secret);
    m.update(at.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    format!("t={at},v1={}", hex(&m.finalize().into_bytes()))
}

/// A request signed with `Idem-Signature` (`header`); `now` in unix seconds.
pub fn verify_webhook(
    secret: &[u8],
    header: Option<&str>,
    body: &[u8],
    now: u64,
) -> Result<Seal, Unsigned> {
    let header = header.ok_or(Unsigned::Missing("Idem-Signature"))?;
    let mut at = None;
    let mut given = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => at = Some(t),
            Some(("v1", v)) => given = Some(v),
            _ => {}
        }
    }
    let at_text = at.ok_or(Unsigned::Malformed("Idem-Signature"))?;
    let at: u64 = at_text
        .parse()
        .map_err(|_| Unsigned::Malformed("Idem-Signature"))?;
    let given = given
        .and_then(unhex)
        .ok_or(Unsigned::Malformed("Idem-Signature"))?;
    let mut m = mac(secret);
    m.update(at_text.as_bytes());
    m.update(b".");
    m.update(body);
    m.verify_slice(&given).map_err(|_| Unsigned::Forged)?;
    within_window(at, now)?;
    Ok(Seal(hex(&given)))
}

/// Unix seconds of an RFC 3339 time (`2024-05-01T12:00:00.1234567Z`, or with an offset), as
/// a Teams activity's `timestamp` writes it; `None` if it is not one.
pub fn teams_time(text: &str) -> Option<u64> {
    let b = text.trim().as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits.iter().try_fold(0i64, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = 19;
    if b.get(rest) == Some(&b'.') {
        rest += 1;
        let start = rest;
        while b.get(rest).is_some_and(u8::is_ascii_digit) {
            rest += 1;
        }
        if rest == start {
            return None;
        }
    }
    let offset = match b.get(rest)? {
        b'Z' | b'z' if rest + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if rest + 6 == b.len() && b[rest + 3] == b':' => {
            let minutes = num(rest + 1, 2)? * 60 + num(rest + 4, 2)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60;
    u64::try_from(secs).ok()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of Slack's "Verifying requests from Slack": its signing secret, timestamp,
    /// body (a slash command's) and the signature Slack computed.
    const SLACK_SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
    const SLACK_TS: &str = "1531420618";
    const SLACK_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SLACK_SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    /// (timestamp, body, signature, now, verdict)
    type SlackCase<'a> = (
        Option<&'a str>,
        &'a str,
        Option<&'a str>,
        u64,
        Result<Seal, Unsigned>,
    );

    #[test]
    fn slack_as_its_documentation_signs() {
        let now = 1_531_420_618 + 30;
        let altered = SLACK_BODY.replace("roadrunner", "coyote");
        let flipped = SLACK_SIG.replace("a2114d", "a2114e");
        let seal = Seal(SLACK_SIG[3..].to_owned());
        let upper = format!("v0={}", SLACK_SIG[3..].to_uppercase());
        // (timestamp, body, signature, now, verdict)
        let cases: [SlackCase; 10] = [
            (
                Some(SLACK_TS),
                SLACK_BODY,
                Some(SLACK_SIG),
                now,
                Ok(seal.clone()),
            ),
            // The same signature written otherwise is the same seal: a replay is seen.
            (
                Some(SLACK_TS),
                SLACK_BODY,
                Some(&upper),
                now,
                Ok(seal.clone()),
            ),
            (
                Some(SLACK_TS),
                &altered,
                Some(SLACK_SIG),
                now,
                Err(Unsigned::Forged),
            ),
            (
                Some(SLACK_TS),
                SLACK_BODY,
                Some(&flipped),
                now,
                Err(Unsigned::Forged),
            ),
            (
                Some("1531420619"),
                SLACK_BODY,
                Some(SLACK_SIG),
                now,
                Err(Unsigned::Forged),
            ),
            // Correctly signed, six minutes old (or ahead).
            (
                Some(SLACK_TS),
                SLACK_BODY,
                Some(SLACK_SIG),
                1_531_420_618 + 360,
                Err(Unsigned::Stale),
            ),
            (
                Some(SLACK_TS),
                SLACK_BODY,
                Some(SLACK_SIG),
                1_531_420_618 - 360,
                Err(Unsigned::Stale),
            ),
            (
                None,
                SLACK_BODY,
                Some(SLACK_SIG),
                now,
                Err(Unsigned::Missing("X-Slack-Request-Timestamp")),
            ),
            (
                Some(SLACK_TS),
                SLACK_BODY,
                None,
                now,
                Err(Unsigned::Missing("X-Slack-Signature")),
            ),
            (
                Some(SLACK_TS),
                SLACK_BODY,
                Some("v1=00"),
                now,
                Err(Unsigned::Malformed("X-Slack-Signature")),
            ),
        ];
        for (ts, body, sig, now, verdict) in cases {
            assert_eq!(
                verify_slack(SLACK_SECRET, ts, body.as_bytes(), sig, now),
                verdict,
                "{ts:?} {sig:?} at {now}"
            );
        }
    }

    #[test]
    fn teams_as_its_outgoing_webhook_signs() {
        let token = b"a security token, decoded";
        let body = br#"{"type":"message","timestamp":"2024-05-01T12:00:00.000Z"}"#;
        let header = sign_teams(token, body);
        assert!(header.starts_with("HMAC "));
        let seal = verify_teams(token, Some(&header), body).expect("signed as Teams signs");
        assert_eq!(seal.0.len(), 64);
        let cases = [
            (header.clone(), &b"{}"[..], Err(Unsigned::Forged)),
            (
                sign_teams(b"another token", body),
                body,
                Err(Unsigned::Forged),
            ),
            (
                header.replace("HMAC ", "Bearer "),
                body,
                Err(Unsigned::Malformed("Authorization")),
            ),
            (
                "HMAC !!!".into(),
                body,
                Err(Unsigned::Malformed("Authorization")),
            ),
        ];
        for (given, body, verdict) in cases {
            assert_eq!(verify_teams(token, Some(&given), body), verdict, "{given}");
        }
        assert_eq!(
            verify_teams(token, None, body),
            Err(Unsigned::Missing("Authorization"))
        );
    }

    #[test]
    fn the_webhook_signs_and_verifies_both_ways() {
        let secret = b"0123456789abcdef0123";
        let body = br#"{"record_key":"k"}"#;
        let header = sign_webhook(secret, 1_700_000_000, body);
        assert!(header.starts_with("t=1700000000,v1="));
        let seal = Seal(header["t=1700000000,v1=".len()..].to_owned());
        let cases = [
            (header.clone(), &body[..], 1_700_000_100, Ok(seal.clone())),
            (
                header
                    .replace(",v1=", ", v1=")
                    .to_uppercase()
                    .replace("T=", "t=")
                    .replace("V1=", "v1="),
                body,
                1_700_000_100,
                Ok(seal),
            ),
            (
                header.clone(),
                &b"{}"[..],
                1_700_000_100,
                Err(Unsigned::Forged),
            ),
            (
                header.replace("t=1700000000", "t=1700000050"),
                body,
                1_700_000_100,
                Err(Unsigned::Forged),
            ),
            (header.clone(), body, 1_700_000_360, Err(Unsigned::Stale)),
            (
                sign_webhook(b"another secret!!", 1_700_000_000, body),
                body,
                1_700_000_100,
                Err(Unsigned::Forged),
            ),
            (
                "v1=00".into(),
                body,
                1_700_000_100,
                Err(Unsigned::Malformed("Idem-Signature")),
            ),
        ];
        for (given, body, now, verdict) in cases {
            assert_eq!(
                verify_webhook(secret, Some(&given), body, now),
                verdict,
                "{given} at {now}"
            );
        }
    }

    #[test]
    fn rfc3339_times_as_teams_writes_them() {
        let cases = [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2024-05-01T12:00:00.000Z", Some(1_714_564_800)),
            ("2024-05-01T12:00:00.1234567Z", Some(1_714_564_800)),
            ("2024-05-01T14:00:00+02:00", Some(1_714_564_800)),
            ("2024-05-01T07:30:00-04:30", Some(1_714_564_800)),
            ("2000-02-29T00:00:00Z", Some(951_782_400)),
            ("2024-05-01 12:00:00Z", Some(1_714_564_800)),
            ("2024-05-01T12:00:00", None),
            ("2024-13-01T12:00:00Z", None),
            ("2024-05-01T12:00:00.Z", None),
            ("yesterday", None),
            ("", None),
        ];
        for (text, secs) in cases {
            assert_eq!(teams_time(text), secs, "{text}");
        }
    }
}
