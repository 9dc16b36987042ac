//! Schemas: tools defined as data, and every provider's export of them.
//!
//! One test binary, a module a theme (each was its own binary before).

#[path = "../support/mod.rs"]
mod support;

mod schemas;
mod tool_spec;
