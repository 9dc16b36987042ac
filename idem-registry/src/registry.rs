//! The registry: every tool the process knows, by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::tool::{StaticTool, ToolDef, ToolRegistration};

pub use crate::error::RegistryError;
/// The name rule, at the path it always had.
pub use crate::tool::check_name;

/// Every tool the dispatcher can call, by name.
///
/// ```
/// use idem::{Registry, ToolClass, ToolContext, ToolDef, ToolError};
/// use serde_json::{json, Value};
///
/// let tool = ToolDef::builder("ping", ToolClass::Read)
///     .description("Answer pong.")
///     .input_schema(json!({"type": "object"}))
///     .handler(|_: ToolContext, _: Value| async { Ok::<_, ToolError>(json!("pong")) })
///     .build()
///     .unwrap();
/// let registry = Registry::builder().add(tool).build().unwrap();
/// assert!(registry.get("ping").is_some());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<ToolDef>>,
    /// The tools a combination rule of another tool names (their applied calls are counted
    /// per run).
    combined: std::collections::BTreeSet<String>,
}

impl Registry {
    /// Every tool declared with `#[tool]` and linked into this binary.
    pub fn linked() -> Result<Registry, RegistryError> {
        Registry::builder().linked().build()
    }

    /// Start an empty registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&Arc<ToolDef>> {
        self.tools.get(name)
    }

    /// Every tool, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ToolDef>> {
        self.tools.values()
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether a combination rule of some tool names `tool` (`ToolBuilder::after`): its
    /// applied calls are then counted per run.
    pub fn is_combined(&self, tool: &str) -> bool {
        !self.combined.is_empty() && self.combined.contains(tool)
    }

    /// The registered name closest to `name`, for "did you mean" messages.
    pub fn nearest(&self, name: &str) -> Option<&str> {
        nearest_of(&self.tools, name)
    }
}

/// Collects tools, then checks them all at once; see [`Registry::builder`].
#[derive(Debug, Default)]
pub struct RegistryBuilder {
    pending: Vec<ToolDef>,
    errors: Vec<RegistryError>,
}

impl RegistryBuilder {
    /// Add every `#[tool]` linked into this binary.
    pub fn linked(mut self) -> Self {
        for reg in inventory::iter::<ToolRegistration> {
            let mut def = (reg.build)();
            def.location.get_or_insert_with(|| reg.location.clone());
            self.pending.push(def);
        }
        self
    }

    /// Add one `#[tool]` by its type.
    pub fn tool<T: StaticTool>(mut self) -> Self {
        self.pending.push(T::definition());
        self
    }

    /// Add a definition.
    // A builder step, not arithmetic: `std::ops::Add` would read wrongly here.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, def: ToolDef) -> Self {
        self.pending.push(def);
        self
    }

    /// Add a definition that may have failed to build (from [`crate::ToolSpec::into_def`]).
    pub fn try_add(mut self, def: Result<ToolDef, RegistryError>) -> Self {
        match def {
            Ok(d) => self.pending.push(d),
            Err(e) => self.errors.push(e),
        }
        self
    }

    /// Check names and uniqueness. The first error is returned; all are logged.
    pub fn build(self) -> Result<Registry, RegistryError> {
        let mut errors = self.errors;
        let mut tools: BTreeMap<String, Arc<ToolDef>> = BTreeMap::new();
        for def in self.pending {
            if let Err(e) = check_name(&def.name) {
                errors.push(e);
                continue;
            }
            // Arguments must form one object, and its validator is compiled here, once.
            if let Err(e) = def.check_registrable() {
                errors.push(e);
                continue;
            }
            if let Some(first) = tools.get(def.name.as_ref()) {
                let at = |d: &ToolDef| {
                    d.location
                        .as_ref()
                        .map(|l| l.to_string())
                        .unwrap_or_else(|| "runtime".into())
                };
                errors.push(RegistryError::DuplicateName {
                    name: def.name.to_string(),
                    first: at(first),
                    second: at(&def),
                });
                continue;
            }
            tools.insert(def.name.to_string(), Arc::new(def));
        }
        errors.extend(check_across(&tools));
        for e in &errors {
            tracing::error!(error = %e, "tool not registered");
        }
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => {
                let combined = tools
                    .values()
                    .flat_map(|t| t.rules.after.iter().map(|r| r.tool.clone()))
                    .collect();
                Ok(Registry { tools, combined })
            }
        }
    }
}

/// What only the whole registry can check: a combination rule names a tool of the registry,
/// and the tools sharing a limit's group agree on it.
fn check_across(tools: &BTreeMap<String, Arc<ToolDef>>) -> Vec<RegistryError> {
    let mut errors = Vec::new();
    let mut groups: BTreeMap<(&str, &str), (&str, &crate::tool::Limit)> = BTreeMap::new();
    for (name, tool) in tools {
        for rule in &tool.rules.after {
            if !tools.contains_key(&rule.tool) {
                let near = nearest_of(tools, &rule.tool)
                    .map(|n| format!(" (did you mean `{n}`?)"))
                    .unwrap_or_default();
                errors.push(RegistryError::invalid(
                    name,
                    format!(
                        "`after` names the tool `{}`, which is not in the registry{near}: a combination rule looks for that tool's applied calls in the run",
                        rule.tool
                    ),
                ));
            }
        }
        for limit in &tool.rules.limits {
            let Some(group) = &limit.group else { continue };
            match groups.get(&(group.as_str(), limit.name.as_str())) {
                Some((first, other)) if *other != limit => {
                    errors.push(RegistryError::invalid(
                        name,
                        format!(
                            "limit `{}` of group `{group}` differs from the one tool `{first}` declares: the tools of a group share one limit, so declare it alike on each",
                            limit.name
                        ),
                    ));
                }
                Some(_) => {}
                None => {
                    groups.insert((group, &limit.name), (name, limit));
                }
            }
        }
    }
    errors
}

/// The name among `tools` closest to `name`, if one is close enough.
fn nearest_of<'a>(tools: &'a BTreeMap<String, Arc<ToolDef>>, name: &str) -> Option<&'a str> {
    tools
        .keys()
        .map(|k| (idem_core::class::edit_distance(name, k), k))
        .filter(|(d, k)| *d <= k.len() / 3 + 1)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}
