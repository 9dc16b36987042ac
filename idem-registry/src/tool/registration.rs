//! How a `#[tool]` reaches the registry: the trait its generated type implements, and the
//! entry it submits to the link-time collection that [`Registry::linked`](crate::Registry::linked)
//! reads.

use idem_core::ToolClass;

use super::definition::{Location, ToolDef};

/// A tool declared with `#[tool]`: the macro implements this for the type it declares.
pub trait StaticTool {
    /// The registered name.
    const NAME: &'static str;
    /// The class.
    const CLASS: ToolClass;
    /// Build the definition.
    fn definition() -> ToolDef;
}

/// What `#[tool]` submits to the link-time registry.
#[derive(Debug)]
pub struct ToolRegistration {
    /// Builds the definition.
    pub build: fn() -> ToolDef,
    /// The tool's name, for duplicate checks without building.
    pub name: &'static str,
    /// Where it was defined.
    pub location: Location,
}

impl ToolRegistration {
    /// Used by the macro.
    pub const fn new(
        name: &'static str,
        build: fn() -> ToolDef,
        file: &'static str,
        line: u32,
    ) -> Self {
        ToolRegistration {
            build,
            name,
            location: Location { file, line },
        }
    }
}

inventory::collect!(ToolRegistration);
