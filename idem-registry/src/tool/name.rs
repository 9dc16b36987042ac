//! The rule every tool name follows: the one every provider accepts.

use crate::error::RegistryError;

/// Check a name against `^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$`, the rule every provider accepts.
pub fn check_name(name: &str) -> Result<(), RegistryError> {
    let bad = |reason: &str| {
        Err(RegistryError::InvalidName {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return bad("it is empty"),
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        Some(_) => return bad("it must start with an ASCII letter or `_`"),
    }
    if name.len() > 64 {
        return bad("it is longer than 64 characters");
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return bad(&format!(
            "`{c}` is not allowed; use ASCII letters, digits, `_` and `-`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("send_email").is_ok());
        assert!(check_name("a-b_C9").is_ok());
        assert!(check_name(&"a".repeat(64)).is_ok());
        assert!(check_name(&"a".repeat(65)).is_err());
        assert!(check_name("9lives").is_err());
        assert!(check_name("send email").is_err());
        assert!(check_name("").is_err());
        assert!(check_name("émail").is_err());
    }
}
