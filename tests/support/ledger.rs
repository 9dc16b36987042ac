//! The fake downstream service of the multi-process proofs (crash matrix, race): a ledger
//! file shared by every process of a run. It logs every attempt and applies each key at most
//! once, under an exclusive `flock`, so two processes cannot both apply a key; its answer on a
//! repeated key is the process that applied it, as a downstream service's dedupe would say.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// One line of the ledger: `kind label key pid`, `kind` being `attempt` or `applied`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub kind: String,
    pub label: String,
    pub key: String,
    pub pid: u32,
}

/// Every line of a ledger's text.
pub fn parse_ledger(text: &str) -> Vec<LedgerEntry> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts.len(), 4, "malformed ledger line {line:?}");
            LedgerEntry {
                kind: parts[0].to_owned(),
                label: parts[1].to_owned(),
                key: parts[2].to_owned(),
                pid: parts[3].parse().expect("pid"),
            }
        })
        .collect()
}

/// Apply the effect of call `label` under downstream key `key`, once across every process.
/// The attempt is logged (and synced) first; `before_applying` then runs, with the ledger
/// still locked (a crash test dies there). Returns the process that applied the key.
pub fn call_downstream(
    ledger: &Path,
    label: &str,
    key: &str,
    before_applying: impl FnOnce(),
) -> u32 {
    let pid = std::process::id();
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(ledger)
        .expect("open the ledger");
    lock_exclusive(&file);
    let mut text = String::new();
    file.read_to_string(&mut text).expect("read the ledger");
    writeln!(file, "attempt {label} {key} {pid}").expect("write the ledger");
    file.sync_data().ok();
    before_applying();
    if let Some(entry) = parse_ledger(&text)
        .into_iter()
        .find(|e| e.kind == "applied" && e.key == key)
    {
        return entry.pid;
    }
    writeln!(file, "applied {label} {key} {pid}").expect("write the ledger");
    pid
}

fn lock_exclusive(file: &File) {
    // SAFETY: `flock` only reads the descriptor, which `file` keeps open for the call. The
    // lock is released when the file is closed, or by the kernel when the process dies.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
}
