//! The keys the proxy reads from its environment: the secret key that seals secret
//! arguments, and the approval keys that verify operators' approvals.

use idem::mcp_proxy::{APPROVAL_KEY_ENV, ProxyKeys, SECRET_KEY_ENV};
use idem::{ApprovalKey, ApprovalKeys, SecretKey};

/// The keys set in the environment (none is required until a tool needs it).
pub fn from_env() -> Result<ProxyKeys, String> {
    let secret = match std::env::var(SECRET_KEY_ENV) {
        Err(_) => None,
        Ok(hex) => {
            let bytes = decode(hex.trim()).map_err(|e| format!("{SECRET_KEY_ENV}: {e}"))?;
            Some(SecretKey::new(bytes).map_err(|e| format!("{SECRET_KEY_ENV}: {e}"))?)
        }
    };
    let mut approvals = Vec::new();
    if let Ok(list) = std::env::var(APPROVAL_KEY_ENV) {
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((id, hex)) = entry.split_once(':') else {
                return Err(format!(
                    "{APPROVAL_KEY_ENV}: `{}...` is not `id:hex-secret` (e.g. `ops-1:` and 64 hex digits)",
                    entry.chars().take(8).collect::<String>()
                ));
            };
            let secret = decode(hex).map_err(|e| format!("{APPROVAL_KEY_ENV}, key `{id}`: {e}"))?;
            let key =
                ApprovalKey::new(id, secret).map_err(|e| format!("{APPROVAL_KEY_ENV}: {e}"))?;
            approvals.push(key);
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
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!(
            "`{}` is not a hex digit: write the key in hex, e.g. from `openssl rand -hex 32`",
            c as char
        )),
    };
    hex.as_bytes()
        .chunks(2)
        .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}
