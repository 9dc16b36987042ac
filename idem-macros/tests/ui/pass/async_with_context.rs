use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where to deliver a parcel.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Address {
    street: String,
    city: String,
}

/// Ship a parcel.
///
/// Returns the tracking number.
#[tool(class = "idempotent_write")]
async fn ship_parcel(
    ctx: &ToolContext,
    /// Where the parcel goes.
    to: Address,
    /// Weight in grams.
    grams: u32,
    /// A note for the courier, if any.
    note: Option<String>,
) -> Result<String, ToolError> {
    Ok(format!(
        "{} to {}, {} ({grams} g, {:?})",
        ctx.idempotency_key(),
        to.street,
        to.city,
        note
    ))
}

fn main() {
    let registry = Registry::linked().unwrap();
    let def = registry
        .get("ship_parcel")
        .expect("ship_parcel is registered");
    assert_eq!(def.class(), ToolClass::IdempotentWrite);
    assert_eq!(
        def.description(),
        "Ship a parcel.\n\nReturns the tracking number."
    );

    let schema = def.input_schema().to_string();
    // The context is injected, never a JSON argument.
    assert!(!schema.contains("ctx"), "{schema}");
    // Parameter doc comments become descriptions.
    assert!(schema.contains("Where the parcel goes."), "{schema}");
    assert!(schema.contains("Weight in grams."), "{schema}");

    // `Option<T>` parameters are optional; the others are required.
    let required: Vec<&str> = def.input_schema()["required"]
        .as_array()
        .expect("required is a list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(required.contains(&"to"), "{required:?}");
    assert!(required.contains(&"grams"), "{required:?}");
    assert!(!required.contains(&"note"), "{required:?}");
    assert!(!required.contains(&"ctx"), "{required:?}");
}
