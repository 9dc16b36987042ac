//! How a run's account reads as text, for a model or a person: one line per call, the
//! limits it stands at, then a summary.

use std::fmt;

use super::account::{CallOutcome, RunAccount};

/// The account as a model or a person reads it: one line per call, then a summary.
impl fmt::Display for RunAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "run `{}` ({} calls)", self.run_id, self.calls.len())?;
        for (i, c) in self.calls.iter().enumerate() {
            let id = c
                .call_id
                .as_deref()
                .map(|i| format!(" [{i}]"))
                .unwrap_or_default();
            write!(f, "{}. {}{id}: {}", i + 1, c.tool, c.outcome.name())?;
            match &c.outcome {
                CallOutcome::Refused { why } => write!(f, ": {why}")?,
                CallOutcome::Unknown {
                    retry_after, why, ..
                } => match retry_after {
                    Some(at) => write!(f, ": {why} (may be settled from {})", at.to_rfc3339())?,
                    None => write!(f, ": {why} (a person must settle it)")?,
                },
                CallOutcome::Compensated { undone, .. } => {
                    write!(f, ": undone {}", undone.join(", "))?
                }
                CallOutcome::PendingApproval => write!(f, ": waiting for a person")?,
                CallOutcome::Escalated { why, .. } => write!(f, ": {why} (sent to a person)")?,
                CallOutcome::Unrecognized => write!(f, ": written by a newer idem")?,
                _ => {}
            }
            match (c.class, c.attempts) {
                (Some(class), Some(n)) => write!(f, " ({class}, {})", Attempts(n))?,
                (Some(class), None) => write!(f, " ({class})")?,
                (None, Some(n)) => write!(f, " ({})", Attempts(n))?,
                (None, None) => {}
            }
            if let Some(d) = &c.decided {
                write!(f, "; decided by {}: {} ({})", d.by, d.decision, d.said)?;
            }
            if let Some(grant) = &c.granted {
                write!(f, "; let through by {grant}")?;
            }
            if let Some(undone) = &c.undo {
                write!(f, "; its undo: {undone}")?;
            }
            writeln!(f)?;
        }
        for l in self.limits() {
            writeln!(f, "limit `{}`: {} used, {} left", l.limit, l.used, l.left)?;
        }
        let counts: Vec<String> = self
            .counts()
            .into_iter()
            .map(|(n, c)| format!("{c} {n}"))
            .collect();
        write!(f, "in all: {}", counts.join(", "))
    }
}

/// "1 attempt", "2 attempts".
struct Attempts(u32);

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => f.write_str("1 attempt"),
            n => write!(f, "{n} attempts"),
        }
    }
}
