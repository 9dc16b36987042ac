//! The exit codes of `idem`, documented in `idem --help` and the README, and the failure
//! every command returns: what went wrong, naming the store and the fix.

use std::fmt;

use idem_core::StoreError;
use idem_core::store::approvals::DecisionRefused;
use idem_registry::approval::DecisionError;

/// How a command ended, as its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Something unexpected (a bug, an I/O error).
    Failed = 1,
    /// Bad usage or input: a malformed `--store`, invalid JSON, a missing identity or key.
    Usage = 2,
    /// The store: unreachable, a wrong schema version, Redis not `noeviction`.
    Store = 3,
    /// No record or approval under the key.
    NotFound = 4,
    /// Refused by the record's or approval's state: already decided, expired, settled, in
    /// progress without `--force`, changed since it was shown.
    Refused = 5,
    /// Not confirmed: the prompt was answered no, or nothing answered it.
    NotConfirmed = 6,
}

/// The exit codes, for `--help`.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  an unexpected failure
  2  bad usage or input (a malformed --store, invalid JSON, no identity or signing key)
  3  the store: unreachable, a wrong schema version, Redis not `noeviction`
  4  no record or approval under the key
  5  refused: already decided, expired, already completed, in progress without --force,
     or changed since it was shown; nothing changed
  6  not confirmed; nothing changed";

/// A command's failure.
#[derive(Debug)]
pub struct Failure {
    pub code: Exit,
    pub message: String,
    /// The decision was recorded, and only its entry in the decision log is missing.
    pub decided: bool,
}

impl Failure {
    pub fn new(code: Exit, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            decided: false,
        }
    }

    /// A store's error, in `store`'s name.
    pub fn store(store: &str, e: StoreError) -> Self {
        let code = match &e {
            StoreError::NotFound(_) => Exit::NotFound,
            StoreError::WrongState { .. } | StoreError::Fenced { .. } => Exit::Refused,
            StoreError::TooLarge { .. }
            | StoreError::TooDeep { .. }
            | StoreError::InvalidOutcome { .. } => Exit::Usage,
            StoreError::Unavailable(_) | StoreError::CapacityExceeded { .. } => Exit::Store,
            _ => Exit::Failed,
        };
        Failure::new(code, format!("{store}: {e}"))
    }

    /// An approval decision's error, in `store`'s name.
    pub fn decision(store: &str, e: DecisionError) -> Self {
        match e {
            DecisionError::Store(e) => Failure::store(store, e),
            DecisionError::Refused(DecisionRefused::NotRequested(key)) => Failure::new(
                Exit::NotFound,
                format!(
                    "{store}: no approval was requested under key {key} (`idem approvals list --all` lists them)"
                ),
            ),
            e @ DecisionError::NoRequest(_) => {
                Failure::new(Exit::NotFound, format!("{store}: {e}"))
            }
            e @ DecisionError::Refused(_) => Failure::new(Exit::Refused, format!("{store}: {e}")),
            e @ (DecisionError::Tampered(_)
            | DecisionError::NotShown(_)
            | DecisionError::PolicyChanged { .. }) => {
                Failure::new(Exit::Refused, format!("{store}: {e}"))
            }
            e @ DecisionError::NotLogged { .. } => Failure {
                decided: true,
                ..Failure::new(Exit::Store, format!("{store}: {e}"))
            },
            e => Failure::new(Exit::Usage, format!("{store}: {e}")),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
