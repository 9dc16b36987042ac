//! What the model is told about one call: the tool's output, or a refusal it can act on.
//! What the host must handle instead is sorted out here, by [`DispatchError::is_for_host`],
//! the question every front end asks.

use serde_json::{Map, Value, json};

use idem_registry::dispatch::{DispatchError, Dispatched};

/// The answer to one call, as the model will read it.
///
/// ```
/// use idem::DispatchError;
/// use idem::agent::Answer;
///
/// let unknown = Answer::Refused(DispatchError::UnknownTool {
///     name: "get_wether".into(),
///     suggestion: Some("get_weather".into()),
/// });
/// assert_eq!(unknown.code(), Some("unknown_tool"));
/// assert_eq!(
///     unknown.text(),
///     r#"{"error":{"code":"unknown_tool","message":"unknown tool `get_wether`; did you mean `get_weather`?"}}"#
/// );
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Answer {
    /// The tool ran, or its recorded outcome was replayed (`deduplicated`).
    Output(Dispatched),
    /// The dispatcher refused the call, or the tool failed: invalid arguments (with the
    /// pointer and the rule), an unknown tool (with the nearest name), permission denied,
    /// approval pending or refused, an outcome unknown (with when to call again), a key
    /// reused, a recorded failure replayed. Never one of [`DispatchError::is_for_host`].
    Refused(DispatchError),
    /// The arguments were not JSON text; nothing was dispatched.
    NotJson {
        /// The tool the model called.
        tool: String,
        /// serde_json's error, with its line and column.
        error: String,
    },
}

/// The code of [`Answer::NotJson`], beside the dispatcher's codes.
pub const ARGUMENTS_NOT_JSON: &str = "arguments_not_json";

impl Answer {
    /// The answer to a dispatch, or the error the host must handle.
    pub(crate) fn of(
        dispatched: Result<Dispatched, DispatchError>,
    ) -> Result<Answer, DispatchError> {
        match dispatched {
            Ok(done) => Ok(Answer::Output(done)),
            Err(e) if e.is_for_host() => Err(e),
            Err(e) => Ok(Answer::Refused(e)),
        }
    }

    /// Whether the model is told of an error.
    pub fn is_error(&self) -> bool {
        !matches!(self, Answer::Output(_))
    }

    /// The error's stable code ([`DispatchError::code`], or [`ARGUMENTS_NOT_JSON`]);
    /// `None` for an output.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Answer::Output(_) => None,
            Answer::Refused(e) => Some(e.code()),
            Answer::NotJson { .. } => Some(ARGUMENTS_NOT_JSON),
        }
    }

    /// What the model reads where a provider takes text: the output as the JSON text
    /// recorded (the same bytes on every replay), or the error as
    /// `{"error": {"code", "message", "retry_after"?}}`. A find-or-create replay whose
    /// arguments differ from the recorded call's is
    /// `{"output": .., "deduplicated": true, "differing_arguments": [..], "note": ..}`, so
    /// that the model knows its wording did not make a second effect.
    ///
    /// ```
    /// use idem::agent::Answer;
    /// use idem::{Dispatched, ToolClass};
    /// use serde_json::json;
    ///
    /// let found = Answer::Output(Dispatched {
    ///     output: json!({"ticket": 7}),
    ///     output_json: r#"{"ticket":7}"#.into(),
    ///     deduplicated: true,
    ///     differing_arguments: vec!["/subject".into()],
    ///     key: None,
    ///     attempts: 0,
    ///     class: ToolClass::IdempotentWrite,
    ///     limits: Vec::new(),
    ///     granted: None,
    /// });
    /// let text: serde_json::Value = serde_json::from_str(&found.text()).unwrap();
    /// assert_eq!(text["output"], json!({"ticket": 7}));
    /// assert_eq!(text["differing_arguments"], json!(["/subject"]));
    /// ```
    pub fn text(&self) -> String {
        match self {
            Answer::Output(done) if done.differing_arguments.is_empty() => done.output_json.clone(),
            Answer::Output(done) => found(done, "output").to_string(),
            _ => json!({ "error": self.error_object() }).to_string(),
        }
    }

    /// What the model reads where a provider takes an object (Gemini's `response`):
    /// `{"output": ..}`, or `{"error": {"code", "message", "retry_after"?}}`, the two keys
    /// Gemini documents; a find-or-create replay adds what [`Answer::text`] says.
    pub fn object(&self) -> Value {
        match self {
            Answer::Output(done) => found(done, "output"),
            _ => json!({ "error": self.error_object() }),
        }
    }

    /// The error's message, written for the model; `None` for an output.
    pub fn message(&self) -> Option<String> {
        match self {
            Answer::Output(_) => None,
            Answer::Refused(e) => Some(e.to_string()),
            Answer::NotJson { tool, error } => Some(format!(
                "the arguments of `{tool}` are not valid JSON ({error}); nothing ran: call it \
                 again with the arguments as one JSON object"
            )),
        }
    }

    fn error_object(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), Value::from(self.code().unwrap_or_default()));
        error.insert(
            "message".into(),
            Value::from(self.message().unwrap_or_default()),
        );
        if let Answer::Refused(DispatchError::OutcomeUnknown {
            retry_after: Some(at),
            ..
        }) = self
        {
            error.insert("retry_after".into(), Value::from(at.to_rfc3339()));
        }
        Value::Object(error)
    }
}

/// An output under `key`, with, for a find-or-create replay of other arguments, which
/// arguments differ and what that means.
fn found(done: &Dispatched, key: &str) -> Value {
    let mut object = Map::new();
    object.insert(key.into(), done.output.clone());
    if !done.differing_arguments.is_empty() {
        object.insert("deduplicated".into(), Value::Bool(true));
        object.insert(
            "differing_arguments".into(),
            Value::from(done.differing_arguments.clone()),
        );
        object.insert("note".into(), Value::from(done.replay_note()));
    }
    Value::Object(object)
}
