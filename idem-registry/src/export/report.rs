//! The portability report: what an export changed and what it lost, and the [`Notes`] a
//! transform collects it in.

use std::fmt;

use super::Provider;
use crate::pointer;

/// Whether a provider was told to enforce the schema strictly.
///
/// ```
/// use idem::export::{self, Provider, Strictness};
/// use idem::{ToolContext, ToolDef};
/// use idem::{ToolClass, ToolError};
/// use serde_json::{json, Value};
///
/// let tool = ToolDef::builder("store", ToolClass::IdempotentWrite)
///     .description("Store any JSON.")
///     .input_schema(json!({"type": "object", "properties": {"doc": true}, "required": ["doc"]}))
///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
///     .build()
///     .unwrap();
/// let report = export::export(&tool, Provider::OpenAiChat).unwrap().report;
/// assert!(matches!(report.strictness, Strictness::NotStrict { .. }));
/// let report = export::export(&tool, Provider::Mcp).unwrap().report;
/// assert_eq!(report.strictness, Strictness::NotApplicable);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strictness {
    /// The form has no strict flag (Anthropic plain, Gemini, MCP).
    NotApplicable,
    /// Exported with `strict: true`.
    Strict,
    /// Exported with `strict: false`; why strict mode was not possible.
    NotStrict {
        /// One reason per obstacle, each naming where it is.
        reasons: Vec<String>,
    },
}

/// How much of a schema feature survived an export.
///
/// ```
/// use idem::export::ChangeKind;
/// // Reports list changes in document order; kinds sort from harmless to lossy.
/// assert!(ChangeKind::Adapted < ChangeKind::Described && ChangeKind::Described < ChangeKind::Dropped);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangeKind {
    /// Rewritten into the provider's form with the same meaning for the model (`oneOf` to
    /// `anyOf`, an optional property made required and nullable, `additionalProperties:
    /// false` added).
    Adapted,
    /// A constraint the provider does not take, moved into the description: the model reads
    /// it, the provider does not enforce it, idem's validation does.
    Described,
    /// Removed: the model does not see it. idem's validation still applies the canonical
    /// schema, so a call that needed it is refused with a clear error rather than run.
    Dropped,
}

impl ChangeKind {
    fn label(self) -> &'static str {
        match self {
            ChangeKind::Adapted => "adapted",
            ChangeKind::Described => "described",
            ChangeKind::Dropped => "dropped",
        }
    }
}

/// One change an export made; see [`PortabilityReport`] for an example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// JSON pointer into the canonical schema (into the exported one where recursion was
    /// unrolled).
    pub pointer: String,
    /// How much survived.
    pub kind: ChangeKind,
    /// What changed, in words.
    pub detail: String,
}

/// What an export changed and what it lost, for one tool and one provider. Print it, or
/// assert on it in your own tests.
///
/// ```
/// use idem::export::{self, ChangeKind, Provider};
/// use idem::{ToolContext, ToolDef};
/// use idem::{ToolClass, ToolError};
/// use serde_json::{json, Value};
///
/// let tool = ToolDef::builder("tag", ToolClass::IdempotentWrite)
///     .description("Tag a ticket.")
///     .input_schema(json!({
///         "type": "object",
///         "properties": {
///             "ticket": {"type": "integer"},
///             "labels": {"type": "object", "additionalProperties": {"type": "string"}}
///         },
///         "required": ["ticket"]
///     }))
///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
///     .build()
///     .unwrap();
///
/// let out = export::export(&tool, Provider::OpenAiChat).unwrap();
/// assert!(!out.report.is_strict());
/// assert!(out.report.not_strict_reasons()[0].contains("/properties/labels"));
/// assert_eq!(out.tool["function"]["strict"], false);
/// println!("{}", out.report);
///
/// let out = export::export(&tool, Provider::Anthropic).unwrap();
/// assert!(out.report.is_lossless());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortabilityReport {
    /// The tool.
    pub tool: String,
    /// The target.
    pub provider: Provider,
    /// Whether the provider enforces the schema strictly.
    pub strictness: Strictness,
    /// Every change, in document order.
    pub changes: Vec<Change>,
}

impl PortabilityReport {
    /// Nothing was described, dropped or refused strictness: the provider sees and enforces
    /// the whole canonical schema.
    pub fn is_lossless(&self) -> bool {
        !matches!(self.strictness, Strictness::NotStrict { .. })
            && self.changes.iter().all(|c| c.kind == ChangeKind::Adapted)
    }

    /// Exported with `strict: true`.
    pub fn is_strict(&self) -> bool {
        self.strictness == Strictness::Strict
    }

    /// Why strict mode was not possible (empty when it was, or when it does not apply).
    pub fn not_strict_reasons(&self) -> &[String] {
        match &self.strictness {
            Strictness::NotStrict { reasons } => reasons,
            _ => &[],
        }
    }

    /// What the provider will not enforce: the changes that are not merely adapted.
    pub fn lost(&self) -> impl Iterator<Item = &Change> {
        self.changes
            .iter()
            .filter(|c| c.kind != ChangeKind::Adapted)
    }

    /// The changes of one kind.
    pub fn of_kind(&self, kind: ChangeKind) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(move |c| c.kind == kind)
    }
}

impl fmt::Display for PortabilityReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} for {}:", self.tool, self.provider)?;
        match &self.strictness {
            Strictness::NotApplicable => {}
            Strictness::Strict => f.write_str(" strict")?,
            Strictness::NotStrict { .. } => f.write_str(" not strict")?,
        }
        if self.changes.is_empty() && self.not_strict_reasons().is_empty() {
            f.write_str(if self.strictness == Strictness::NotApplicable {
                " unchanged"
            } else {
                ", unchanged"
            })?;
        }
        for reason in self.not_strict_reasons() {
            write!(f, "\n  not strict: {reason}")?;
        }
        for c in &self.changes {
            let at = pointer::display(&c.pointer, "(root)");
            write!(f, "\n  {:<9} {at}: {}", c.kind.label(), c.detail)?;
        }
        Ok(())
    }
}

/// What a transform changed, and why it could not be strict.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    pub(crate) changes: Vec<Change>,
    pub(crate) not_strict: Vec<String>,
}

impl Notes {
    pub(crate) fn push(&mut self, pointer: &str, kind: ChangeKind, detail: impl Into<String>) {
        self.changes.push(Change {
            pointer: pointer.to_owned(),
            kind,
            detail: detail.into(),
        });
    }

    pub(crate) fn adapted(&mut self, pointer: &str, detail: impl Into<String>) {
        self.push(pointer, ChangeKind::Adapted, detail);
    }

    pub(crate) fn described(&mut self, pointer: &str, detail: impl Into<String>) {
        self.push(pointer, ChangeKind::Described, detail);
    }

    pub(crate) fn dropped(&mut self, pointer: &str, detail: impl Into<String>) {
        self.push(pointer, ChangeKind::Dropped, detail);
    }

    pub(crate) fn refuse_strict(&mut self, pointer: &str, reason: impl fmt::Display) {
        let at = pointer::display(pointer, "(root)");
        let reason = format!("{at}: {reason}");
        // Kept sorted (after any equal one): the same report whatever order the schema's
        // maps iterate in (serde_json's `preserve_order`).
        let place = self.not_strict.partition_point(|r| *r <= reason);
        self.not_strict.insert(place, reason);
    }

    /// Sort changes into document order, so reports read top to bottom.
    pub(crate) fn finish(mut self) -> Self {
        self.changes
            .sort_by(|a, b| a.pointer.cmp(&b.pointer).then(a.kind.cmp(&b.kind)));
        self
    }
}
