//! What a tool's definition checks of a call's arguments: its schema's compiled validator,
//! `null` read as absent, and the registration check that compiles it once.

use std::borrow::Cow;

use serde_json::Value;

use super::definition::ToolDef;
use crate::error::{ArgumentError, RegistryError};
use crate::schema::{ArgumentValidator, SchemaError, check_shape, drop_absent_nulls_lent};

impl ToolDef {
    /// The compiled validator of this tool's argument schema: compiled once per definition,
    /// at registration or on first use.
    ///
    /// ```
    /// use idem::{ToolDef, ToolContext};
    /// use idem::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let tool = ToolDef::builder("greet", ToolClass::Read)
    ///     .description("Greet someone.")
    ///     .input_schema(json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// let validator = tool.arguments_validator().unwrap();
    /// assert!(validator.is_valid(&json!({"name": "Dana"})));
    /// assert!(!validator.is_valid(&json!({"name": 7})));
    /// ```
    pub fn arguments_validator(&self) -> Result<&ArgumentValidator, &SchemaError> {
        self.validator
            .get_or_init(|| ArgumentValidator::new(&self.input_schema))
            .as_ref()
    }

    /// Prepare a model's arguments for deserialisation: a `null` given for an optional
    /// property that does not accept `null` is read as "absent" (strict provider modes make
    /// every property required and send `null` for the ones the model leaves out; see
    /// [`drop_absent_nulls`](crate::schema::drop_absent_nulls)), then the result is validated against the canonical schema.
    ///
    /// ```
    /// use idem::{ToolDef, ToolContext};
    /// use idem::{ToolClass, ToolError};
    /// use serde_json::{json, Value};
    ///
    /// let tool = ToolDef::builder("page", ToolClass::Read)
    ///     .description("Read a page.")
    ///     .input_schema(json!({
    ///         "type": "object",
    ///         "properties": {"n": {"type": "integer", "minimum": 1, "default": 1}},
    ///         "additionalProperties": false
    ///     }))
    ///     .handler(|_: ToolContext, args: Value| async move { Ok::<_, ToolError>(args) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(tool.validate_arguments(json!({"n": null})).unwrap(), json!({}));
    /// let err = tool.validate_arguments(json!({"n": 0})).unwrap_err();
    /// assert_eq!((err.pointer.as_str(), err.message.as_str()), ("/n", "must be at least 1, got 0"));
    /// ```
    pub fn validate_arguments(&self, arguments: Value) -> Result<Value, ArgumentError> {
        self.validate_call_arguments(Cow::Owned(arguments))
            .map(Cow::into_owned)
    }

    /// [`ToolDef::validate_arguments`] without taking the arguments: they are copied only
    /// when a `null` has to be dropped (the dispatcher's path, which keeps the call intact).
    pub(crate) fn validate_call_arguments<'a>(
        &self,
        mut arguments: Cow<'a, Value>,
    ) -> Result<Cow<'a, Value>, ArgumentError> {
        let validator = self
            .arguments_validator()
            .map_err(|e| ArgumentError::new("", e.to_string()))?;
        drop_absent_nulls_lent(&self.input_schema, &mut arguments);
        validator.validate(&arguments)?;
        Ok(arguments)
    }

    /// The registration check: the arguments form one object, and the validator compiles (it
    /// is compiled here, once, and kept for every call).
    pub(crate) fn check_registrable(&self) -> Result<(), RegistryError> {
        check_shape(self.name(), self.input_schema())?;
        self.arguments_validator()
            .map(|_| ())
            .map_err(|e| e.refuses(self.name()))
    }
}
