use idem::prelude::*;

/// Irreversibly delete an account.
#[tool(class = "irreversible", open_world = false)]
pub fn delete_account(account: u64) -> Result<(), ToolError> {
    let _ = account;
    Ok(())
}

fn main() {
    let registry = Registry::linked().unwrap();
    let def = registry
        .get("delete_account")
        .expect("delete_account is registered");
    assert_eq!(def.class(), ToolClass::Irreversible);
    assert_eq!(def.version(), "1", "the default handler version");
    assert!(!def.has_natural_key());
    // Keys left out keep the documented defaults.
    assert_eq!(def.policy(), &idem::ToolPolicy::default());
    // The function became a type implementing `StaticTool`.
    assert_eq!(<delete_account as idem::StaticTool>::NAME, "delete_account");
    assert_eq!(
        <delete_account as idem::StaticTool>::CLASS,
        ToolClass::Irreversible
    );
}
