//! A link to the approval inbox's page of one pending call (`idem ui`), as an MCP server
//! hands it to a client for URL-mode elicitation: the tenant, the record key, the
//! fingerprint of the arguments shown and an expiry, signed with a secret derived from an
//! [`ApprovalKey`] both sides hold. The link approves nothing by itself: the inbox shows the
//! call only as the link was issued (a forged, altered or expired link, or one whose call is
//! now pending with other arguments or for another tenant, is refused), and the decision is
//! the signed-in person's, made on the arguments shown.

use hmac::Mac;
use idem_core::{Fingerprint, Timestamp};

use super::{ApprovalKey, ApprovalKeys, hex, unhex};

/// The label of the secret links are signed with, derived from an approval key.
const LINK_LABEL: &[u8] = b"approval-link/v1";

/// The page of one pending call, as a link names it.
///
/// ```
/// use idem::approval::ApprovalLink;
/// use idem::ApprovalKey; use idem::approval::ApprovalKeys; use idem::key::Fingerprint; use idem::record::Timestamp;
///
/// let key = ApprovalKey::new("desk-1", *b"0123456789abcdef0123456789abcdef").unwrap();
/// let link = ApprovalLink {
///     tenant: "acme corp".into(),
///     record_key: "9f2c".into(),
///     fingerprint: Fingerprint::of(&serde_json::json!({"account": 7})),
///     expires_at: Timestamp(2_000),
/// };
/// let url = link.url("http://127.0.0.1:8090", &key);
/// assert!(url.starts_with("http://127.0.0.1:8090/approval?tenant=acme%20corp&key=9f2c&"));
/// let query = url.split_once('?').unwrap().1;
/// let keys = ApprovalKeys::new([key]);
/// assert_eq!(ApprovalLink::verify(query, &keys, Timestamp(1_000)), Ok(link));
/// assert!(ApprovalLink::verify(&query.replace("acme", "evil"), &keys, Timestamp(1_000)).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalLink {
    /// The tenant the call acts for.
    pub tenant: String,
    /// The record key the call is pending under (as stored).
    pub record_key: String,
    /// The fingerprint of the arguments the page is to show.
    pub fingerprint: Fingerprint,
    /// When the link stops being shown (the store's clock, milliseconds).
    pub expires_at: Timestamp,
}

/// Why a link is not shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkRefused {
    /// A parameter is missing or malformed.
    #[error(
        "this approval link is incomplete or malformed ({0}): open the link the MCP client gave, whole"
    )]
    Malformed(&'static str),
    /// Signed with no key this inbox holds.
    #[error("this approval link was signed with a key this inbox does not hold (`{0}`)")]
    UnknownKey(String),
    /// The signature does not match: forged, or altered.
    #[error("this approval link was not issued for this call, or was altered: nothing is shown")]
    Forged,
    /// Its time is over.
    #[error("this approval link has expired: call the tool again to get a new one")]
    Expired,
}

impl ApprovalLink {
    /// The link's query string, signed with `key`.
    pub fn query(&self, key: &ApprovalKey) -> String {
        let signature = hex(&self.signature(key));
        format!(
            "tenant={}&key={}&fp={}&exp={}&kid={}&sig={signature}",
            encode(&self.tenant),
            encode(&self.record_key),
            self.fingerprint.to_hex(),
            self.expires_at.0,
            encode(key.id()),
        )
    }

    /// The inbox page's address: `inbox` (its base URL, e.g. `https://ops.example/`) then
    /// `/approval?` and the signed query.
    pub fn url(&self, inbox: &str, key: &ApprovalKey) -> String {
        format!(
            "{}/approval?{}",
            inbox.trim_end_matches('/'),
            self.query(key)
        )
    }

    /// The link a query string names, if one of `keys` signed it and it has not expired at
    /// `now` (the store's clock).
    pub fn verify(query: &str, keys: &ApprovalKeys, now: Timestamp) -> Result<Self, LinkRefused> {
        let param = |name: &'static str| {
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| decode(v).ok_or(LinkRefused::Malformed(name)))
                .unwrap_or(Err(LinkRefused::Malformed(name)))
        };
        let fingerprint =
            Fingerprint::from_hex(&param("fp")?).ok_or(LinkRefused::Malformed("fp"))?;
        let expires_at = param("exp")?
            .parse::<u64>()
            .map(Timestamp)
            .map_err(|_| LinkRefused::Malformed("exp"))?;
        let link = ApprovalLink {
            tenant: param("tenant")?,
            record_key: param("key")?,
            fingerprint,
            expires_at,
        };
        let kid = param("kid")?;
        let key = keys
            .by_id(&kid)
            .ok_or_else(|| LinkRefused::UnknownKey(kid.clone()))?;
        let given = unhex(&param("sig")?).ok_or(LinkRefused::Malformed("sig"))?;
        let mut mac = key.derived_mac(LINK_LABEL);
        link.sign_into(&mut mac);
        mac.verify_slice(&given).map_err(|_| LinkRefused::Forged)?;
        if now >= link.expires_at {
            return Err(LinkRefused::Expired);
        }
        Ok(link)
    }

    fn signature(&self, key: &ApprovalKey) -> Vec<u8> {
        let mut mac = key.derived_mac(LINK_LABEL);
        self.sign_into(&mut mac);
        mac.finalize().into_bytes().to_vec()
    }

    /// Length-prefixed fields: no two links sign the same bytes.
    fn sign_into(&self, mac: &mut super::Hmac) {
        for field in [
            self.tenant.as_bytes(),
            self.record_key.as_bytes(),
            self.fingerprint.to_hex().as_bytes(),
            &self.expires_at.0.to_be_bytes(),
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
    }
}

/// Percent-encoding of a query value: everything but unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A percent-encoded query value (`+` as a space, as forms send it); `None` if it is not
/// UTF-8 or an escape is broken.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let pair = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(pair, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, byte: u8) -> ApprovalKey {
        ApprovalKey::new(id, vec![byte; 32]).unwrap()
    }

    #[test]
    fn a_link_is_shown_only_as_issued_unexpired_and_signed_by_a_key_held() {
        let link = ApprovalLink {
            tenant: "t/ü &x=1".into(),
            record_key: "abc".into(),
            fingerprint: Fingerprint::from_bytes([3; 32]),
            expires_at: Timestamp(5_000),
        };
        let desk = key("desk-1", 1);
        let keys = ApprovalKeys::new([desk.clone()]);
        let query = link.query(&desk);
        assert_eq!(
            ApprovalLink::verify(&query, &keys, Timestamp(4_999)),
            Ok(link.clone())
        );
        // (the query as altered, the refusal)
        let other_fp = Fingerprint::from_bytes([4; 32]).to_hex();
        let cases = [
            (query.replace("exp=5000", "exp=9000"), LinkRefused::Forged),
            (query.replace("key=abc", "key=abd"), LinkRefused::Forged),
            (
                query.replace(&link.fingerprint.to_hex(), &other_fp),
                LinkRefused::Forged,
            ),
            (query.replace("tenant=t", "tenant=u"), LinkRefused::Forged),
            (link.query(&key("desk-1", 2)), LinkRefused::Forged),
            (
                link.query(&key("desk-9", 1)),
                LinkRefused::UnknownKey("desk-9".into()),
            ),
            (
                query.replace("&sig=", "&sog="),
                LinkRefused::Malformed("sig"),
            ),
            (query.replace("fp=", "fp=zz"), LinkRefused::Malformed("fp")),
        ];
        for (altered, refusal) in cases {
            assert_eq!(
                ApprovalLink::verify(&altered, &keys, Timestamp(1)),
                Err(refusal),
                "{altered}"
            );
        }
        assert_eq!(
            ApprovalLink::verify(&query, &keys, Timestamp(5_000)),
            Err(LinkRefused::Expired)
        );
    }
}
