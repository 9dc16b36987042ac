//! The error a tool body returns, and the four kinds that decide what the dispatcher does next.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool error says about the effect, which decides retries and the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Transient and safe to try again (rate limited, connection refused before sending).
    /// The claim is released; `read` and `idempotent_write` tools are retried automatically.
    Retryable,
    /// Certainly no effect happened (validation failed downstream, nothing was sent).
    /// The claim is released; even a `non_idempotent_write` may be retried once.
    NotApplied,
    /// A business answer ("insufficient funds"): recorded and replayed like a success.
    Terminal,
    /// The effect may or may not have happened (timeout after sending, panic, cancellation).
    /// `idempotent_write` retries with the same key; other writes end in Unknown.
    Ambiguous,
}

impl ErrorKind {
    /// The spelling used in records and messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Retryable => "retryable",
            ErrorKind::NotApplied => "not_applied",
            ErrorKind::Terminal => "terminal",
            ErrorKind::Ambiguous => "ambiguous",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error type of every tool body: a kind, a message for the model, optional details.
///
/// A tool's own error type converts into it with `From`, choosing a kind per variant:
///
/// ```
/// use idem::{ErrorKind, ToolError};
///
/// enum MailError { Rejected(String), Timeout }
///
/// impl From<MailError> for ToolError {
///     fn from(e: MailError) -> Self {
///         match e {
///             MailError::Rejected(why) => ToolError::terminal(format!("rejected: {why}")),
///             // The provider may have accepted the message before the timeout.
///             MailError::Timeout => ToolError::ambiguous("mail provider timed out"),
///         }
///     }
/// }
///
/// let e: ToolError = MailError::Timeout.into();
/// assert_eq!(e.kind(), ErrorKind::Ambiguous);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    kind: ErrorKind,
    message: String,
    // Boxed: every `Result` of a tool body carries this error, and a `Value` is three times
    // larger with serde_json's `preserve_order`, which a dependency may turn on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    details: Option<Box<Value>>,
}

impl ToolError {
    /// An error of the given kind.
    pub fn new(kind: ErrorKind, message: impl fmt::Display) -> Self {
        ToolError {
            kind,
            message: message.to_string(),
            details: None,
        }
    }

    /// Transient, safe to try again.
    pub fn retryable(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Retryable, message)
    }

    /// Certainly not applied.
    pub fn not_applied(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::NotApplied, message)
    }

    /// A business answer, recorded and replayed.
    pub fn terminal(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Terminal, message)
    }

    /// May or may not have happened.
    pub fn ambiguous(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Ambiguous, message)
    }

    /// Attach structured details (shown to the model, stored with a terminal error).
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The details, if any.
    pub fn details(&self) -> Option<&Value> {
        self.details.as_deref()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind)
    }
}

impl std::error::Error for ToolError {}

impl From<std::convert::Infallible> for ToolError {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}
