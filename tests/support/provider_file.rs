//! A fake provider of the crash tests, kept in files of a run's folder so that every process
//! of the run sees it: it applies each request key once (as real idempotency keys promise)
//! and writes every effect it applied to `ledger`, one line each.

use std::io::Write as _;
use std::path::Path;

/// Apply `what` under `key`: nothing if the key was seen before (`None`: a request sent
/// without a key, applied every time).
pub fn apply(dir: &Path, what: &str, key: Option<&str>) {
    if let Some(key) = key {
        let seen = std::fs::read_to_string(dir.join("keys")).unwrap_or_default();
        if seen.lines().any(|k| k == key) {
            return;
        }
        append(&dir.join("keys"), key);
    }
    append(&dir.join("ledger"), what);
}

fn append(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("the provider's file");
    writeln!(file, "{line}").expect("written");
    file.sync_all().expect("synced");
}

/// Every effect the provider applied in `dir`, in order.
pub fn ledger(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("ledger"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
