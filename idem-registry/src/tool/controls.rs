//! The controls a tool layers around dedupe, each read from the call itself: who may make it
//! ([`Authorizer`], rules, and checks that may read what the call acts on), which calls need a person ([`ApprovalSelector`], rules), what
//! must still hold just before each attempt ([`Precondition`]), and how a completed step is
//! undone when a later one fails for good ([`Compensator`]). Some 600 lines: the rule
//! language ([`Rule`]) and every control it serves are read best in one place.
//!
//! Data-defined tools ([`ToolSpec`](super::ToolSpec)) say the first two as [`Rule`]s over
//! JSON Pointers into the arguments, compared with the run ([`RunContext::acting_for`],
//! [`RunContext::limits`]) or with a value. A rule is checked against the tool's schema when
//! the tool is built: a pointer the schema lacks, or a comparison the argument's type cannot
//! make, is refused then, naming the tool and the rule.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use idem_core::{IdempotencyKey, ToolError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::BoxFuture;
use crate::context::ToolContext;
use crate::run::RunContext;

/// An authorization check over a call's arguments and its run: `Err` names the rule that
/// failed, in words the model can act on (never an argument's value).
pub type Authorizer = Arc<dyn Fn(&Value, &RunContext) -> Result<(), String> + Send + Sync>;

/// An authorization check that may read (the resource the call acts on), given a context of
/// the run and the arguments (see [`ToolBuilder::authorize_async`](super::ToolBuilder::authorize_async)).
pub(crate) type AsyncAuthorizer =
    Arc<dyn Fn(ToolContext, &Value) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Selects the calls that need a person's approval, from their arguments and run.
pub type ApprovalSelector = Arc<dyn Fn(&Value, &RunContext) -> bool + Send + Sync>;

/// A check made after the claim and before every attempt of the body: `Err` says what
/// changed (see [`ToolBuilder::precondition`](super::ToolBuilder::precondition)).
pub type Precondition =
    Arc<dyn Fn(ToolContext, &Value) -> BoxFuture<'static, Result<(), ToolError>> + Send + Sync>;

/// Undoes one completed step of a call (see [`Undo`]).
pub type Compensator =
    Arc<dyn Fn(ToolContext, Undo) -> BoxFuture<'static, Result<(), ToolError>> + Send + Sync>;

/// A completed step to undo: its name, the value it journaled, and the key it was made
/// under. While the compensation runs, `ctx.downstream_key()` is a key of its own, the same
/// on every attempt and every worker: send it with the undoing request (a refund, a
/// cancellation), so that a compensation resumed after a crash undoes once.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Undo {
    /// The step's name, as given to [`ToolContext::step`].
    pub step: String,
    /// The value the step journaled (what its closure returned).
    pub output: Value,
    /// The key the step was made under: the one it handed downstream.
    pub step_key: IdempotencyKey,
}

impl Undo {
    /// A step to undo (for tests of a compensation function).
    pub fn new(step: impl Into<String>, output: Value, step_key: IdempotencyKey) -> Self {
        Undo {
            step: step.into(),
            output,
            step_key,
        }
    }

    /// The step's output read as a `T` (what the step's closure returned).
    ///
    /// ```
    /// use idem::tool::Undo;
    /// use idem::IdempotencyKey;
    ///
    /// let undo = Undo::new("hold_seat", serde_json::json!({"hold": "h-7"}), IdempotencyKey::new("k"));
    /// #[derive(serde::Deserialize)]
    /// struct Hold { hold: String }
    /// assert_eq!(undo.output_as::<Hold>().unwrap().hold, "h-7");
    /// ```
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, ToolError> {
        serde_json::from_value(self.output.clone()).map_err(|e| {
            ToolError::not_applied(format!(
                "step `{}`'s journaled value cannot be read for its compensation: {e}",
                self.step
            ))
        })
    }
}

/// A condition on one argument, as data: `{"pointer": "/amount", "at_most": {"limit":
/// "refund"}}`. Exactly one comparison is given. Its operand is the run's
/// `{"run": "acting_for"}`, one of the run's limits `{"limit": "name"}`, or a value
/// (`{"value": ...}`, or the value itself when it is not such an object).
///
/// As an authorization rule (`authorize`) the condition must hold, or the call is refused; as
/// an approval rule (`approve_when`) a call for which it holds needs a person. A condition
/// that cannot be judged (the argument is absent, the run lacks the value) fails safe:
/// refused, or asked.
///
/// ```
/// use idem::tool::Rule;
/// use idem::RunContext;
/// use serde_json::json;
///
/// let rule: Rule = serde_json::from_value(json!(
///     {"pointer": "/amount", "at_most": {"limit": "refund"}}
/// )).unwrap();
/// let run = RunContext::new("shop").with_limit("refund", 50);
/// assert!(rule.holds(&json!({"amount": 20}), &run).is_ok());
/// let why = rule.holds(&json!({"amount": 5000}), &run).unwrap_err();
/// assert_eq!(why, "`/amount` must be at most the run's limit `refund` (50)");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The JSON Pointer of the argument.
    pub pointer: String,
    /// The argument equals the operand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    /// The argument is one of these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<Value>>,
    /// The argument, a number, is at most the operand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_most: Option<Value>,
    /// The argument, a number, is at least the operand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_least: Option<Value>,
    /// The argument, a number, is above the operand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<Value>,
    /// The argument, a number, is below the operand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<Value>,
}

/// Four eyes by rule: the calls for which `when` holds (or which it cannot judge) need the
/// approval of `approvers` distinct people, as with
/// [`ToolBuilder::approvers_rule`](super::ToolBuilder::approvers_rule).
///
/// ```
/// use idem::tool::ApproversWhen;
/// use serde_json::json;
///
/// let rule: ApproversWhen = serde_json::from_value(json!(
///     {"approvers": 2, "when": {"pointer": "/amount", "above": 10000}}
/// )).unwrap();
/// assert_eq!(rule.approvers, 2);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproversWhen {
    /// How many distinct people approve a call the rule selects (at least 2).
    pub approvers: u8,
    /// The calls it selects.
    pub when: Rule,
}

/// What a rule compares its argument with.
#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// The run's [`RunContext::acting_for`].
    ActingFor,
    /// One of the run's limits.
    Limit(String),
    /// A value written in the rule.
    Value(Value),
}

impl Operand {
    fn of(value: &Value) -> Result<Operand, String> {
        let Some(map) = value.as_object().filter(|m| m.len() == 1) else {
            return Ok(Operand::Value(value.clone()));
        };
        match map.iter().next() {
            Some((k, Value::String(what))) if k == "run" => match what.as_str() {
                "acting_for" => Ok(Operand::ActingFor),
                other => Err(format!(
                    "`{{\"run\": \"{other}\"}}` names nothing of the run: the run offers \"acting_for\" (and its limits, as `{{\"limit\": \"name\"}}`)"
                )),
            },
            Some((k, Value::String(name))) if k == "limit" => Ok(Operand::Limit(name.clone())),
            Some((k, other)) if k == "run" || k == "limit" => {
                Err(format!("`{{\"{k}\": {other}}}` must name it with a string"))
            }
            Some((k, v)) if k == "value" => Ok(Operand::Value(v.clone())),
            _ => Ok(Operand::Value(value.clone())),
        }
    }

    fn describe(&self, run: Option<&RunContext>) -> String {
        match self {
            Operand::ActingFor => "the one the run acts for".to_owned(),
            Operand::Limit(name) => match run.and_then(|r| r.limit(name)) {
                Some(v) => format!("the run's limit `{name}` ({v})"),
                None => format!("the run's limit `{name}`"),
            },
            Operand::Value(v) => v.to_string(),
        }
    }

    /// The operand's value in `run`, or why there is none.
    fn resolve<'r>(&'r self, run: &'r RunContext) -> Result<std::borrow::Cow<'r, Value>, String> {
        use std::borrow::Cow;
        match self {
            Operand::ActingFor => run
                .acting_for
                .as_ref()
                .map(|who| Cow::Owned(Value::String(who.clone())))
                .ok_or_else(|| "the run acts for no one (`RunContext::acting_for`)".to_owned()),
            Operand::Limit(name) => run.limit(name).map(Cow::Borrowed).ok_or_else(|| {
                format!("the run carries no limit `{name}` (`RunContext::with_limit`)")
            }),
            Operand::Value(v) => Ok(Cow::Borrowed(v)),
        }
    }
}

/// The comparisons a rule can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Equals,
    OneOf,
    AtMost,
    AtLeast,
    Above,
    Below,
}

impl Comparison {
    fn name(self) -> &'static str {
        match self {
            Comparison::Equals => "equals",
            Comparison::OneOf => "one_of",
            Comparison::AtMost => "at_most",
            Comparison::AtLeast => "at_least",
            Comparison::Above => "above",
            Comparison::Below => "below",
        }
    }

    fn numeric(self) -> bool {
        !matches!(self, Comparison::Equals | Comparison::OneOf)
    }

    fn words(self) -> &'static str {
        match self {
            Comparison::Equals => "equal",
            Comparison::OneOf => "be one of",
            Comparison::AtMost => "be at most",
            Comparison::AtLeast => "be at least",
            Comparison::Above => "be above",
            Comparison::Below => "be below",
        }
    }
}

impl Rule {
    /// `pointer` equals `operand` (see [`Rule`] for operands).
    pub fn equals(pointer: impl Into<String>, operand: Value) -> Rule {
        Rule {
            equals: Some(operand),
            ..Rule::on(pointer)
        }
    }

    /// `pointer` is at most `operand`.
    pub fn at_most(pointer: impl Into<String>, operand: Value) -> Rule {
        Rule {
            at_most: Some(operand),
            ..Rule::on(pointer)
        }
    }

    /// `pointer` is above `operand`.
    pub fn above(pointer: impl Into<String>, operand: Value) -> Rule {
        Rule {
            above: Some(operand),
            ..Rule::on(pointer)
        }
    }

    fn on(pointer: impl Into<String>) -> Rule {
        Rule {
            pointer: pointer.into(),
            equals: None,
            one_of: None,
            at_most: None,
            at_least: None,
            above: None,
            below: None,
        }
    }

    /// The one comparison the rule makes and its operand, or why it is not one.
    fn comparison(&self) -> Result<(Comparison, Operand), String> {
        let given: Vec<(Comparison, &Value)> = [
            (Comparison::Equals, self.equals.as_ref()),
            (Comparison::AtMost, self.at_most.as_ref()),
            (Comparison::AtLeast, self.at_least.as_ref()),
            (Comparison::Above, self.above.as_ref()),
            (Comparison::Below, self.below.as_ref()),
        ]
        .into_iter()
        .filter_map(|(c, v)| v.map(|v| (c, v)))
        .collect();
        let one_of = self.one_of.as_ref().map(|v| Value::Array(v.clone()));
        let mut all = given;
        if let Some(list) = &one_of {
            all.push((Comparison::OneOf, list));
        }
        match all.as_slice() {
            [(Comparison::OneOf, list)] => Ok((Comparison::OneOf, Operand::Value((*list).clone()))),
            [(c, v)] => Ok((*c, Operand::of(v)?)),
            [] => Err(
                "it makes no comparison: give one of `equals`, `one_of`, `at_most`, `at_least`, `above`, `below`"
                    .to_owned(),
            ),
            more => Err(format!(
                "it makes {} comparisons ({}): a rule makes one; write one rule per comparison",
                more.len(),
                more.iter()
                    .map(|(c, _)| format!("`{}`", c.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The rule in words, for messages: `` `/amount` at_most {"limit":"refund"} ``.
    pub fn describe(&self) -> String {
        match self.comparison() {
            Ok((c, operand)) => format!(
                "`{}` {} {}",
                self.pointer,
                c.name(),
                match operand {
                    Operand::ActingFor => "{\"run\":\"acting_for\"}".to_owned(),
                    Operand::Limit(n) => format!("{{\"limit\":\"{n}\"}}"),
                    Operand::Value(v) => v.to_string(),
                }
            ),
            Err(_) => format!("`{}`", self.pointer),
        }
    }

    /// Refuse a rule that cannot work on `schema`: not exactly one comparison, a pointer the
    /// schema lacks, a number comparison on an argument that is not a number, or a value of
    /// another type than the argument's.
    pub(crate) fn check(&self, use_: &str, schema: &Value) -> Result<(), String> {
        let rule = self.describe();
        let refuse = |why: String| format!("`{use_}` rule {rule}: {why}");
        if self.pointer.is_empty() {
            return Err(refuse("a rule names one argument, e.g. \"/amount\"".into()));
        }
        crate::schema::check_argument_pointer(use_, &self.pointer, schema).map_err(&refuse)?;
        let (comparison, operand) = self.comparison().map_err(&refuse)?;
        let types = argument_types(schema, &self.pointer);
        if comparison.numeric() {
            if let Some(types) = &types
                && !types.iter().any(|t| t == "number" || t == "integer")
            {
                return Err(refuse(format!(
                    "`{}` compares numbers, and the schema says the argument is {}",
                    comparison.name(),
                    types.join(" or ")
                )));
            }
            if let Operand::Value(v) = &operand
                && !v.is_number()
            {
                return Err(refuse(format!(
                    "`{}` compares numbers, and {v} is not a number",
                    comparison.name()
                )));
            }
        }
        let values: Vec<&Value> = match (&operand, comparison) {
            (Operand::Value(Value::Array(list)), Comparison::OneOf) => list.iter().collect(),
            (Operand::Value(v), Comparison::Equals) => vec![v],
            _ => Vec::new(),
        };
        if let Some(types) = &types {
            for v in values {
                if !types.iter().any(|t| json_type_fits(t, v)) {
                    return Err(refuse(format!(
                        "{v} can never equal the argument, which the schema says is {}",
                        types.join(" or ")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Whether the condition holds for these arguments in this run: `Err` says why not, or
    /// why it cannot be judged, in words the model can act on (never the argument's value).
    pub fn holds(&self, args: &Value, run: &RunContext) -> Result<(), String> {
        match self.judge(args, run) {
            Judged::Holds => Ok(()),
            Judged::Fails(why) | Judged::Unjudged(why) => Err(why),
        }
    }

    /// As an approval rule: whether the call needs a person (the condition holds, or cannot
    /// be judged).
    pub fn selects(&self, args: &Value, run: &RunContext) -> bool {
        !matches!(self.judge(args, run), Judged::Fails(_))
    }

    fn judge(&self, args: &Value, run: &RunContext) -> Judged {
        let (comparison, operand) = match self.comparison() {
            Ok(c) => c,
            Err(why) => return Judged::Unjudged(why),
        };
        let pointer = &self.pointer;
        let Some(argument) = args.pointer(pointer).filter(|v| !v.is_null()) else {
            return Judged::Unjudged(format!(
                "`{pointer}` is missing, and the rule \"`{pointer}` must {} {}\" needs it",
                comparison.words(),
                operand.describe(Some(run))
            ));
        };
        let expected = match operand.resolve(run) {
            Ok(v) => v,
            Err(why) => return Judged::Unjudged(why),
        };
        let ok = match comparison {
            Comparison::Equals => same(argument, &expected),
            Comparison::OneOf => expected
                .as_array()
                .is_some_and(|list| list.iter().any(|v| same(argument, v))),
            numeric => {
                let (Some(a), Some(b)) = (argument.as_f64(), expected.as_f64()) else {
                    let what = if argument.is_number() {
                        operand.describe(Some(run))
                    } else {
                        format!("`{pointer}`")
                    };
                    return Judged::Unjudged(format!(
                        "{what} is not a number, and the rule \"`{pointer}` must {} {}\" compares numbers",
                        numeric.words(),
                        operand.describe(Some(run))
                    ));
                };
                match numeric {
                    Comparison::AtMost => a <= b,
                    Comparison::AtLeast => a >= b,
                    Comparison::Above => a > b,
                    _ => a < b,
                }
            }
        };
        match ok {
            true => Judged::Holds,
            false => Judged::Fails(format!(
                "`{pointer}` must {} {}",
                comparison.words(),
                operand.describe(Some(run))
            )),
        }
    }
}

/// What a rule found of one call.
enum Judged {
    Holds,
    /// The condition does not hold, for this reason.
    Fails(String),
    /// It cannot be judged (an argument or a value of the run is missing, or not a number).
    Unjudged(String),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// JSON equality, numbers by value (`50` equals `50.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

/// The JSON types the schema gives the argument at `pointer` (a top-level property), if it
/// says.
fn argument_types(schema: &Value, pointer: &str) -> Option<Vec<String>> {
    let first = crate::pointer::first_key(pointer)?;
    if pointer[1..].contains('/') {
        // A pointer into an argument: its schema is not read here.
        return None;
    }
    let property = schema.get("properties")?.get(first.as_ref())?;
    match property.get("type")? {
        Value::String(t) => Some(vec![t.clone()]),
        Value::Array(ts) => Some(
            ts.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    }
}

fn json_type_fits(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true,
    }
}

/// The hooks a `#[tool]` names, over typed arguments: each reads the call's arguments into
/// the type its function takes (any `Deserialize` type that mirrors the arguments it needs;
/// `serde_json::Value` for all of them).
pub(crate) fn typed_args<T: serde::de::DeserializeOwned>(
    what: &str,
    args: &Value,
) -> Result<T, String> {
    T::deserialize(args).map_err(|e| {
        format!(
            "its {what} could not read the arguments as `{}`: {e}",
            std::any::type_name::<T>()
        )
    })
}

/// Wrap a handler so that `precondition` guards the start of the call's effect: it is asked
/// before each attempt until it passes once, and its pass is journaled before the body is
/// created. An attempt of a call under way (the pass journaled, or a step of the tool's own,
/// by this or an earlier holder) runs the body without asking: the precondition may well
/// fail because of the call's own effect, which a refusal would then wrongly call "nothing
/// applied". A failed precondition is recorded as the body's refusal (terminal, never an
/// effect); a check that could not be made is not applied, and may be tried again.
pub(crate) fn guarded(handler: super::Handler, precondition: Precondition) -> super::Handler {
    Arc::new(move |ctx: ToolContext, args: &Value, typed| {
        if ctx.under_way() {
            return handler(ctx, args, typed);
        }
        let check = precondition(ctx.clone(), args);
        let handler = handler.clone();
        let args = args.clone();
        Box::pin(async move {
            if let Err(e) = check.await {
                return Err(precondition_failed(&ctx, e));
            }
            ctx.journaled_step(crate::context::PRECONDITION_STEP, || async { Ok(true) })
                .await
                .map_err(|e| {
                    ToolError::not_applied(format!(
                        "the precondition passed but could not be journaled, so the tool did not run: {}",
                        e.message()
                    ))
                })?;
            // Only now is the body created: a handler that starts work when called (before
            // its future is polled) does nothing for a refused call.
            handler(ctx, &args, typed).await
        })
    })
}

/// What a precondition's error becomes: a refusal the model can act on, its message cut of
/// the call's secrets before it is copied anywhere.
pub(crate) fn precondition_failed(ctx: &ToolContext, e: ToolError) -> ToolError {
    use idem_core::ErrorKind;
    let message = ctx.scrub(e.message());
    match e.kind() {
        ErrorKind::Terminal | ErrorKind::NotApplied => ToolError::terminal(format!(
            "precondition failed, nothing was applied: {message}"
        ))
        .with_details(serde_json::json!({"precondition": message})),
        // A check that could not be made applied nothing: it may be tried again.
        ErrorKind::Retryable | ErrorKind::Ambiguous => ToolError::not_applied(format!(
            "the precondition could not be checked, nothing was applied: {message}"
        )),
    }
}

/// Make a [`Precondition`] of an async function.
pub(crate) fn precondition_of<F, Fut>(f: F) -> Precondition
where
    F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ToolError>> + Send + 'static,
{
    Arc::new(move |ctx, args: &Value| Box::pin(f(ctx, args.clone())))
}

#[cfg(test)]
#[path = "controls_tests.rs"]
mod tests;
