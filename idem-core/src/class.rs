//! The four side-effect classes and the policy each one drives.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The side-effect class of a tool. Every tool has exactly one; there is no default.
///
/// The class decides whether calls are recorded, how they are retried, what a duplicate
/// sees, what happens to an orphaned call, and whether approval is required.
///
/// ```
/// use idem::ToolClass;
///
/// let class: ToolClass = "idempotent_write".parse().unwrap();
/// assert!(class.records());
/// assert_eq!(class.as_str(), "idempotent_write");
/// assert!("idempotent".parse::<ToolClass>().unwrap_err().to_string().contains("did you mean"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolClass {
    /// No effect on the world: never recorded, retried freely, executes again on a duplicate.
    Read,
    /// Applying it twice is the same as once (set a status, upsert by natural key).
    IdempotentWrite,
    /// Applying it twice does something twice (send an email, charge a card).
    NonIdempotentWrite,
    /// Cannot be undone (delete an account, wire money): never retried, needs approval.
    Irreversible,
}

/// What the store does with an in-progress record whose holder's lease has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrphanPolicy {
    /// A new holder takes the key over (the fence is incremented) and runs again.
    TakeOver,
    /// The record becomes Unknown and is never re-executed automatically.
    MarkUnknown,
}

/// The MCP tool annotations derived from a class (`openWorldHint` is a separate tool flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassHints {
    /// `readOnlyHint`.
    pub read_only: bool,
    /// `destructiveHint`.
    pub destructive: bool,
    /// `idempotentHint`.
    pub idempotent: bool,
}

impl ToolClass {
    /// Every class, in order of increasing danger.
    pub const ALL: [ToolClass; 4] = [
        ToolClass::Read,
        ToolClass::IdempotentWrite,
        ToolClass::NonIdempotentWrite,
        ToolClass::Irreversible,
    ];

    /// The spelling used in `#[tool(class = "...")]` and in serialised definitions.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolClass::Read => "read",
            ToolClass::IdempotentWrite => "idempotent_write",
            ToolClass::NonIdempotentWrite => "non_idempotent_write",
            ToolClass::Irreversible => "irreversible",
        }
    }

    /// Whether calls of this class write a dedupe record (every class but `read`).
    pub const fn records(self) -> bool {
        !matches!(self, ToolClass::Read)
    }

    /// Whether a call needs an approval bound to its key and arguments before it runs.
    pub const fn requires_approval(self) -> bool {
        matches!(self, ToolClass::Irreversible)
    }

    /// What happens to an orphaned call of this class.
    pub const fn orphan_policy(self) -> OrphanPolicy {
        match self {
            ToolClass::Read | ToolClass::IdempotentWrite => OrphanPolicy::TakeOver,
            ToolClass::NonIdempotentWrite | ToolClass::Irreversible => OrphanPolicy::MarkUnknown,
        }
    }

    /// The stricter of two classes (the later in [`ToolClass::ALL`]): the one whose policy
    /// applies to a record made under one and met under the other.
    ///
    /// ```
    /// use idem::ToolClass;
    /// assert_eq!(ToolClass::IdempotentWrite.stricter(ToolClass::Irreversible), ToolClass::Irreversible);
    /// ```
    pub const fn stricter(self, other: ToolClass) -> ToolClass {
        if (other as u8) > (self as u8) {
            other
        } else {
            self
        }
    }

    /// Whether running the body twice with the same downstream key is harmless.
    pub const fn reexecution_is_safe(self) -> bool {
        matches!(self, ToolClass::Read | ToolClass::IdempotentWrite)
    }

    /// The MCP hints of this class.
    pub const fn hints(self) -> ClassHints {
        match self {
            ToolClass::Read => ClassHints {
                read_only: true,
                destructive: false,
                idempotent: true,
            },
            ToolClass::IdempotentWrite => ClassHints {
                read_only: false,
                destructive: false,
                idempotent: true,
            },
            ToolClass::NonIdempotentWrite => ClassHints {
                read_only: false,
                destructive: false,
                idempotent: false,
            },
            ToolClass::Irreversible => ClassHints {
                read_only: false,
                destructive: true,
                idempotent: false,
            },
        }
    }

    /// The class whose spelling is closest to `input`, for "did you mean" messages.
    pub fn nearest(input: &str) -> Option<ToolClass> {
        let normalised = input.trim().to_ascii_lowercase().replace(['-', ' '], "_");
        ToolClass::ALL
            .into_iter()
            .map(|c| (edit_distance(&normalised, c.as_str()), c))
            .filter(|(d, c)| *d <= c.as_str().len() / 2 || c.as_str().contains(&normalised))
            .min_by_key(|(d, _)| *d)
            .map(|(_, c)| c)
    }
}

impl fmt::Display for ToolClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A class name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool class `{input}`: expected one of `read`, `idempotent_write`, `non_idempotent_write`, `irreversible`{}", suggestion.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
pub struct UnknownClass {
    /// What was given.
    pub input: String,
    /// The nearest valid class, if any is close.
    pub suggestion: Option<ToolClass>,
}

impl FromStr for ToolClass {
    type Err = UnknownClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ToolClass::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownClass {
                input: s.to_owned(),
                suggestion: ToolClass::nearest(s),
            })
    }
}

/// Levenshtein distance; inputs here are a few dozen bytes, so the quadratic table is fine.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for class in ToolClass::ALL {
            assert_eq!(class.as_str().parse::<ToolClass>(), Ok(class));
            let json = serde_json::to_string(&class).unwrap();
            assert_eq!(json, format!("\"{}\"", class.as_str()));
        }
    }

    #[test]
    fn suggestions_find_the_nearest_class() {
        assert_eq!(
            ToolClass::nearest("idempotent_wrte"),
            Some(ToolClass::IdempotentWrite)
        );
        assert_eq!(
            ToolClass::nearest("non-idempotent-write"),
            Some(ToolClass::NonIdempotentWrite)
        );
        assert_eq!(ToolClass::nearest("reed"), Some(ToolClass::Read));
        assert_eq!(
            ToolClass::nearest("irreversable"),
            Some(ToolClass::Irreversible)
        );
        assert_eq!(ToolClass::nearest("zzzzzzzzzzzzzzzzzzzzzzzz"), None);
    }

    #[test]
    fn policy_table() {
        use ToolClass::*;
        assert!(!Read.records() && IdempotentWrite.records());
        assert_eq!(IdempotentWrite.orphan_policy(), OrphanPolicy::TakeOver);
        assert_eq!(
            NonIdempotentWrite.orphan_policy(),
            OrphanPolicy::MarkUnknown
        );
        assert_eq!(Irreversible.orphan_policy(), OrphanPolicy::MarkUnknown);
        assert!(Irreversible.requires_approval() && !NonIdempotentWrite.requires_approval());
        assert_eq!(
            Irreversible.hints(),
            ClassHints {
                read_only: false,
                destructive: true,
                idempotent: false
            }
        );
    }
}
