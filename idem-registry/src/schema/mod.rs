//! Argument and output schemas: everything idem knows about a JSON Schema, and nothing of
//! the tools that carry one.
//!
//! - `generate`: the canonical schema of a Rust type ([`arguments`], [`output`]);
//! - `shape`: what every argument schema must be ([`check_argument_schema`]);
//! - `validator`: the compiled [`ArgumentValidator`] that checks a call's arguments;
//! - `nulls`: `null` read as "absent" before validation ([`drop_absent_nulls`]);
//! - `messages`: the words of a validation error, which a model can act on;
//! - `keywords`: the keywords that hold subschemas, and walking a schema through them.

mod generate;
mod keywords;
mod messages;
mod nulls;
mod shape;
mod validator;

pub use generate::{arguments, output};
pub use nulls::drop_absent_nulls;
pub use shape::check_argument_schema;
pub use validator::{ArgumentValidator, SchemaError};

/// The old name of [`check_argument_schema`], kept for code that names it.
#[doc(hidden)]
pub use shape::check_argument_schema as check_arguments;

pub(crate) use keywords::{
    SCHEMA_ARRAY_KEYWORDS, SCHEMA_KEYWORDS, SCHEMA_MAP_KEYWORDS, properties,
};
pub(crate) use nulls::{accepts_null, drop_absent_nulls_lent};
pub(crate) use shape::{check_argument_pointer, check_shape};
