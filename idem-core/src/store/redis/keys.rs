//! Where a record lives in Redis: three keys under the record key's cluster hash tag (and
//! its pending approval, a fourth under the same tag), the index of pending approvals, run
//! accounts and budgets (named by digests), the prefix that may not move that tag, and the
//! `SCAN` pattern that finds a store's records.

use crate::key::RecordKey;
use crate::store::StoreError;

/// Keys asked for per `SCAN` step.
pub(super) const SCAN_COUNT: usize = 500;

/// The Redis keys of one record.
pub(super) struct RecordKeys {
    pub(super) rec: String,
    pub(super) steps: String,
    pub(super) fence: String,
    /// The pending approval under the record key (a string of JSON text), in the record's
    /// slot.
    pub(super) approval: String,
}

impl RecordKeys {
    pub(super) fn new(prefix: &str, key: &RecordKey) -> Self {
        Self::from_base(format!("{prefix}:{{{}}}", key.as_str()))
    }

    /// From the name of a record hash found by `SCAN`.
    pub(super) fn from_rec(rec: &str) -> Option<Self> {
        rec.strip_suffix(":rec")
            .map(|base| Self::from_base(base.to_owned()))
    }

    fn from_base(base: String) -> Self {
        RecordKeys {
            rec: format!("{base}:rec"),
            steps: format!("{base}:steps"),
            fence: format!("{base}:fence"),
            approval: format!("{base}:approval"),
        }
    }
}

/// The set of record keys that have a pending approval, which lists them. One key for the
/// whole store, so unlike a record's keys it is not in the slot of any record: no script
/// touches it with an entry (it is written by commands of its own, before a swap and after
/// a removal), and the listing reads the entries one slot at a time.
pub(super) fn approval_index(prefix: &str) -> String {
    format!("{prefix}:approvals")
}

/// The list that holds `tenant`'s run `run_id`'s account: named by a digest of both, so no
/// two runs share one whatever their ids hold, and no `SCAN` for records finds it.
pub(super) fn run_account(prefix: &str, tenant: &str, run_id: &str) -> String {
    use sha2::Digest;
    let mut digest = sha2::Sha256::new();
    digest.update((tenant.len() as u64).to_be_bytes());
    digest.update(tenant.as_bytes());
    digest.update(run_id.as_bytes());
    let hex: String = digest
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{prefix}:run:{hex}")
}

/// The string that holds the budget of `scope`: named by a digest of it, so every scope has a
/// key of its own whatever it holds (braces, separators, a kilobyte of text), in a slot of its
/// own, and no `SCAN` for records finds it.
pub(super) fn budget(prefix: &str, scope: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(scope.as_bytes());
    format!("{prefix}:budget:{}", crate::canonical::hex(&digest))
}

pub(super) fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.contains(['{', '}']) {
        return Err(StoreError::Unavailable(format!(
            "invalid Redis key prefix {prefix:?}: it may not contain `{{` or `}}`, which would \
             move the cluster hash tag"
        )));
    }
    Ok(())
}

/// Escape the glob characters of `SCAN MATCH`.
pub(super) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keys_share_one_hash_tag() {
        let k = RecordKeys::new("app", &RecordKey::from_stored("abc"));
        assert_eq!(k.rec, "app:{abc}:rec");
        assert_eq!(k.steps, "app:{abc}:steps");
        assert_eq!(k.fence, "app:{abc}:fence");
        assert_eq!(k.approval, "app:{abc}:approval");
        let back = RecordKeys::from_rec(&k.rec).expect("a record hash name");
        assert_eq!(back.fence, k.fence);
    }

    #[test]
    fn the_approval_index_is_under_the_prefix_and_matches_no_record() {
        assert_eq!(approval_index("app"), "app:approvals");
        assert!(RecordKeys::from_rec(&approval_index("app")).is_none());
    }

    #[test]
    fn a_budget_is_named_by_the_digest_of_its_scope() {
        let name = budget("app", "{tenant}:run:limit");
        assert_eq!(name.len(), "app:budget:".len() + 64, "{name}");
        assert!(name.starts_with("app:budget:"));
        assert!(!name.contains('{') && !name.contains("tenant"), "{name}");
        assert_ne!(name, budget("app", "{tenant}:run:limit "));
        assert!(RecordKeys::from_rec(&name).is_none());
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(check_prefix("a{b}").is_err());
        assert!(check_prefix("app:idem").is_ok());
    }

    #[test]
    fn scan_patterns_escape_globs() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
