//! Keys from the environment or a file, never from the command line (where `ps` and shell
//! histories would show them): the proxy's sealing and approval keys, and the key an
//! operator signs approvals with.

use std::path::Path;

use crate::env::APPROVAL_KEY;
#[cfg(feature = "mcp-proxy")]
use crate::env::{PROXY_APPROVAL_KEYS, PROXY_SECRET_KEY};
#[cfg(feature = "mcp-proxy")]
use idem_mcp::proxy::ProxyKeys;
use idem_registry::ApprovalKey;
#[cfg(feature = "mcp-proxy")]
use idem_registry::{ApprovalKeys, SecretKey};

use crate::exit::{Exit, Failure};

/// The key an operator signs approvals with: from `file` if given, else from
/// `IDEM_APPROVAL_KEY`; either holds `id:hex-secret`, the id and secret a dispatcher's
/// `ApprovalKeys` verify with.
pub fn signing_key(file: Option<&Path>) -> Result<ApprovalKey, Failure> {
    let (text, source) = match file {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| {
                Failure::new(
                    Exit::Usage,
                    format!("cannot read the signing key file {}: {e}", path.display()),
                )
            })?,
            format!("the signing key file {}", path.display()),
        ),
        None => match std::env::var(APPROVAL_KEY) {
            Ok(text) => (text, APPROVAL_KEY.to_owned()),
            Err(_) => {
                return Err(Failure::new(
                    Exit::Usage,
                    format!(
                        "no key to sign approvals with: set {APPROVAL_KEY}=id:hex-secret, or give --approval-key-file FILE holding it (the id and key your dispatchers' ApprovalKeys verify)"
                    ),
                ));
            }
        },
    };
    approval_key(&text).map_err(|why| Failure::new(Exit::Usage, format!("{source}: {why}")))
}

/// An approval key written `id:hex-secret`; a refusal never shows the text, part of which
/// is a secret.
fn approval_key(text: &str) -> Result<ApprovalKey, String> {
    let Some((id, hex)) = text.trim().split_once(':') else {
        return Err(
            "not `id:hex-secret` (e.g. `desk-1:` and 64 hex digits from `openssl rand -hex 32`)"
                .into(),
        );
    };
    let secret = decode(hex.trim()).map_err(|e| format!("key `{}`: {e}", id.trim()))?;
    ApprovalKey::new(id.trim(), secret).map_err(|e| e.to_string())
}

/// The keys set in the environment (none is required until a tool needs it).
#[cfg(feature = "mcp-proxy")]
pub fn from_env() -> Result<ProxyKeys, String> {
    let secret = match std::env::var(PROXY_SECRET_KEY) {
        Err(_) => None,
        Ok(hex) => {
            let bytes = decode(hex.trim()).map_err(|e| format!("{PROXY_SECRET_KEY}: {e}"))?;
            Some(SecretKey::new(bytes).map_err(|e| format!("{PROXY_SECRET_KEY}: {e}"))?)
        }
    };
    let mut approvals = Vec::new();
    if let Ok(list) = std::env::var(PROXY_APPROVAL_KEYS) {
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            approvals.push(approval_key(entry).map_err(|e| format!("{PROXY_APPROVAL_KEYS}: {e}"))?);
        }
    }
    Ok(ProxyKeys::new(secret, ApprovalKeys::new(approvals)))
}

/// Bytes from hex digits.
fn decode(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!(
            "an odd number of hex digits ({}): write whole bytes, e.g. from `openssl rand -hex 32`",
            hex.len()
        ));
    }
    // A wrong character is named by its place, never shown: it is part of a secret.
    let digit = |at: usize, c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!(
            "character {} is not a hex digit: write the key in hex, e.g. from `openssl rand -hex 32`",
            at + 1
        )),
    };
    hex.as_bytes()
        .chunks(2)
        .enumerate()
        .map(|(i, pair)| Ok(digit(2 * i, pair[0])? << 4 | digit(2 * i + 1, pair[1])?))
        .collect()
}
