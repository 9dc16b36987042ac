//! What a tool says of its calls that end badly: [`Escalate`], which of them are sent to a
//! person (`Dispatcher::cases` lists them; a person's decision settles them).

use serde::{Deserialize, Serialize};

/// Which calls of a tool that end badly are sent to a person
/// ([`ToolBuilder::escalate`](crate::ToolBuilder::escalate)) instead of being answered and
/// forgotten: the call waits in the store as a case (its error, its run, what the run applied
/// before it), every later call under its key is answered that a person has it, and nothing
/// settles it but the person's decision (run it again under the same key, say what happened,
/// or undo the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Escalate {
    /// A call whose body failed for good (a `terminal` error, or the last attempt's).
    Failures,
    /// A call whose outcome became unknown (its body's `ambiguous` error, after the class's
    /// retries).
    Unknown,
    /// Both.
    FailuresAndUnknown,
}

impl Escalate {
    /// Whether a call that failed for good is sent to a person.
    pub fn failures(self) -> bool {
        matches!(self, Escalate::Failures | Escalate::FailuresAndUnknown)
    }

    /// Whether a call whose outcome became unknown is sent to a person.
    pub fn unknown(self) -> bool {
        matches!(self, Escalate::Unknown | Escalate::FailuresAndUnknown)
    }

    /// Its name, as a tool's file and the attribute spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Escalate::Failures => "failures",
            Escalate::Unknown => "unknown",
            Escalate::FailuresAndUnknown => "failures_and_unknown",
        }
    }

    /// The declaration a name spells, or what names there are.
    ///
    /// ```
    /// use idem::tool::Escalate;
    /// assert_eq!(Escalate::parse("failures"), Ok(Escalate::Failures));
    /// assert!(Escalate::parse("failure").unwrap_err().contains("failures_and_unknown"));
    /// ```
    pub fn parse(name: &str) -> Result<Escalate, String> {
        [
            Escalate::Failures,
            Escalate::Unknown,
            Escalate::FailuresAndUnknown,
        ]
        .into_iter()
        .find(|e| e.as_str() == name)
        .ok_or_else(|| {
            format!(
                "`escalate = \"{name}\"` is not a kind of call sent to a person: write \"failures\", \"unknown\" or \"failures_and_unknown\""
            )
        })
    }
}
