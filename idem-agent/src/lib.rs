#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
mod anthropic;
mod call;
mod gemini;
#[cfg(feature = "reqwest")]
pub mod http;
mod keys;
mod openai;
#[cfg(feature = "rig")]
pub mod rig;

use futures_util::stream::{self, StreamExt};
use serde_json::Value;

pub use answer::{ARGUMENTS_NOT_JSON, Answer};
pub use anthropic::Anthropic;
pub use call::{Arguments, ModelCall, ShapeError};
pub use gemini::Gemini;
pub use keys::KeyedBy;
#[cfg(feature = "rig")]
#[cfg(feature = "rig")]
use keys::numbered;
pub use openai::{OpenAiChat, OpenAiResponses};

use idem_registry::dispatch::{DispatchError, Dispatcher, RunContext};

/// A provider's message format: where its responses hold tool calls, and how it wants them
/// answered. Implemented by [`OpenAiChat`], [`OpenAiResponses`], [`Anthropic`] and
/// [`Gemini`]; implement it for another provider's format.
///
/// ```
/// use idem::agent::{Anthropic, Shape};
/// use serde_json::json;
///
/// // Malformed JSON is an error naming where, never a panic.
/// let e = Anthropic.calls(&json!({"content": [{"type": "tool_use", "id": 7}]})).unwrap_err();
/// assert_eq!((e.at.as_str(), e.expected), ("/content/0/id", "a string"));
/// ```
pub trait Shape: Send + Sync {
    /// The API's name, for messages: `OpenAI Chat Completions`.
    fn api(&self) -> &'static str;

    /// The tool calls of a response (or of the part of it the shape's docs name), in the
    /// order the model made them.
    fn calls(&self, response: &Value) -> Result<Vec<ModelCall>, ShapeError>;

    /// The messages that answer `answered` (in the calls' order), to send next.
    fn messages(&self, answered: &[CallReport]) -> Vec<Value>;

    /// A message of the user's role holding `text` (what [`Responder::account`] sends): by
    /// default `{"role": "user", "content": text}`, as OpenAI's Chat Completions and
    /// Responses APIs take it.
    fn user_text(&self, text: &str) -> Value {
        serde_json::json!({"role": "user", "content": text})
    }
}

/// Answers a model's tool calls through a dispatcher, up to a bound of them at once.
///
/// See the [module docs](self) for an example, the keys and the errors.
#[derive(Debug, Clone)]
pub struct Responder<'d> {
    dispatcher: &'d Dispatcher,
    concurrency: usize,
}

/// How many calls of one response run at once unless [`Responder::with_concurrency`] says
/// otherwise.
pub const DEFAULT_CONCURRENCY: usize = 8;

impl<'d> Responder<'d> {
    /// An agent loop over `dispatcher`, running up to [`DEFAULT_CONCURRENCY`] calls at once.
    pub fn new(dispatcher: &'d Dispatcher) -> Responder<'d> {
        Responder {
            dispatcher,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Run up to `calls` of a response's calls at once (at least one). They run on the
    /// task that awaits [`answer`](Responder::answer), interleaved at their awaits: a
    /// blocking body holds the others up, as it would any async code.
    pub fn with_concurrency(mut self, calls: usize) -> Responder<'d> {
        self.concurrency = calls.max(1);
        self
    }

    /// Extract the tool calls of `response`, dispatch them under `run`, and give back the
    /// messages that answer them. `run` must have a run id and a step
    /// ([`RunContext::with_run`]); see the [module docs](self) for the keys and the errors.
    pub async fn answer(
        &self,
        shape: &(impl Shape + ?Sized),
        response: &Value,
        run: &RunContext,
    ) -> Result<Turn, AgentError> {
        if run.run_id.is_none() || run.step.is_none() {
            return Err(AgentError::NoRun);
        }
        let calls = shape.calls(response)?;
        let keyed = keys::keyed_by(&calls);
        // The futures are made first: a stream holding the closure that makes them would not
        // be `Send` for every lifetime its arguments could have.
        let pending: Vec<_> = calls
            .iter()
            .zip(&keyed)
            .enumerate()
            .map(|(i, (call, by))| self.answer_one(call, position(i), *by, run))
            .collect();
        let answers: Vec<Result<Answer, DispatchError>> = stream::iter(pending)
            .buffered(self.concurrency)
            .collect()
            .await;
        let mut reports = Vec::with_capacity(calls.len());
        for ((i, (call, keyed_by)), answer) in calls.into_iter().zip(keyed).enumerate().zip(answers)
        {
            match answer {
                Ok(answer) => reports.push(CallReport {
                    index: position(i),
                    call,
                    keyed_by,
                    answer,
                }),
                // The first, in the calls' order; every call has finished by now.
                Err(error) => {
                    return Err(AgentError::Host {
                        index: position(i),
                        name: call.name,
                        id: call.id,
                        error,
                    });
                }
            }
        }
        Ok(Turn {
            messages: shape.messages(&reports),
            calls: reports,
        })
    }

    /// The run's account as a message the model can read: every tool call of the run so far
    /// and what became of it (answered for a read; applied, replayed, refused and why,
    /// unknown, waiting for a person, undone), with its class and how many times it ran, from
    /// the store rather than from what the model remembers. Send it
    /// before the model reports to a person, so that it reports what happened. The
    /// dispatcher must keep run accounts (`Dispatcher::with_run_accounts`).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// use idem::agent::{Anthropic, Responder};
    /// # use idem::{Dispatcher, MemoryStore, Registry, RunContext};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let registry = Registry::builder().build().unwrap();
    /// let dispatcher = Dispatcher::new(registry, Arc::new(MemoryStore::new()))
    ///     .unwrap()
    ///     .with_run_accounts(std::time::Duration::from_secs(24 * 3600));
    /// let run = RunContext::new("tenant-a").with_run("run-1", 4);
    /// let message = Responder::new(&dispatcher).account(&Anthropic, &run).await.unwrap();
    /// assert_eq!(message["role"], "user");
    /// assert!(message["content"][0]["text"].as_str().unwrap().contains("run `run-1` (0 calls)"));
    /// # }
    /// ```
    pub async fn account(
        &self,
        shape: &(impl Shape + ?Sized),
        run: &RunContext,
    ) -> Result<Value, AgentError> {
        let Some(run_id) = run.run_id.as_deref() else {
            return Err(AgentError::NoRun);
        };
        if !self.dispatcher.keeps_run_accounts() {
            return Err(AgentError::NoAccounts);
        }
        let account = self
            .dispatcher
            .run_account(&run.tenant, run_id)
            .await
            .map_err(AgentError::Account)?;
        let text = format!(
            "The account of this run's tool calls, as recorded (what happened, which may differ from what was intended; report from it):\n{account}"
        );
        Ok(shape.user_text(&text))
    }

    async fn answer_one(
        &self,
        call: &ModelCall,
        index: u32,
        by: KeyedBy,
        run: &RunContext,
    ) -> Result<Answer, DispatchError> {
        let arguments = match &call.arguments {
            Arguments::Json(value) => value.clone(),
            Arguments::NotJson { error, .. } => {
                return Ok(Answer::NotJson {
                    tool: call.name.clone(),
                    error: error.clone(),
                });
            }
        };
        let dispatched = keys::tool_call(call, arguments, index, by);
        Answer::of(self.dispatcher.dispatch(&dispatched, run).await)
    }
}

/// [`Responder::answer`] with the default concurrency.
///
/// ```
/// # use std::sync::Arc;
/// use idem::agent::{Gemini, run_tool_calls};
/// # use idem::{Dispatcher, MemoryStore, Registry, RunContext};
/// # use serde_json::json;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let dispatcher = Dispatcher::new(Registry::builder().build().unwrap(), Arc::new(MemoryStore::new())).unwrap();
/// let response = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hello!"}]}}]});
/// let turn = run_tool_calls(&dispatcher, &Gemini, &response, &RunContext::new("t").with_run("r", 0)).await.unwrap();
/// assert!(turn.is_empty()); // no tool calls: the model has answered
/// # }
/// ```
pub async fn run_tool_calls(
    dispatcher: &Dispatcher,
    shape: &(impl Shape + ?Sized),
    response: &Value,
    run: &RunContext,
) -> Result<Turn, AgentError> {
    Responder::new(dispatcher)
        .answer(shape, response, run)
        .await
}

/// The answers to one response's tool calls.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The messages to send next, after the model's own (in the shape's format).
    pub messages: Vec<Value>,
    /// Each call and what it was answered, in the calls' order.
    pub calls: Vec<CallReport>,
}

impl Turn {
    /// Whether the response called no tool (the model has given its answer).
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// One call of a response and its answer.
#[derive(Debug, Clone)]
pub struct CallReport {
    /// Its position among the response's calls.
    pub index: u32,
    /// The call as the model made it.
    pub call: ModelCall,
    /// How it was keyed.
    pub keyed_by: KeyedBy,
    /// What the model is told.
    pub answer: Answer,
}

/// What the host must handle: nothing of it is for the model.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The response does not have the shape its API documents; nothing was dispatched.
    #[error(transparent)]
    Malformed(#[from] ShapeError),
    /// The run has no run id or no step, so its calls would have no stable key: give it
    /// both with `RunContext::with_run`.
    #[error(
        "an agent loop's calls are keyed by their run: give the RunContext a run id and a step with `with_run(run_id, step)`"
    )]
    NoRun,
    /// [`Responder::account`] on a dispatcher that keeps no run accounts.
    #[error(
        "this dispatcher keeps no run accounts: build it with `Dispatcher::with_run_accounts(retention)`"
    )]
    NoAccounts,
    /// The store could not tell the run's account.
    #[error("the run's account could not be read: {0}")]
    Account(idem_core::StoreError),
    /// The dispatcher's error for the host ([`DispatchError::is_for_host`]) on a call. The
    /// other calls of the response have finished: answer it again once the cause is fixed,
    /// and those that completed are replayed.
    #[error("tool call {index} (`{name}`) of the response: {error}")]
    Host {
        /// The call's position in the response.
        index: u32,
        /// The tool it named.
        name: String,
        /// The provider's id of the call.
        id: Option<String>,
        /// What the dispatcher reported.
        error: DispatchError,
    },
}

/// A call's position as the dispatcher keys it (no response holds 2³² calls).
fn position(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
