//! Checks that span several parts of the function and the attribute.

use quote::ToTokens;
use syn::{ReturnType, Type};

use crate::ast::{ToolFn, is_context_path};
use crate::attr::Attr;
use crate::errors::Errors;

pub(crate) fn check(tool: &ToolFn<'_>, attr: &Attr, errors: &mut Errors) {
    let sig = &tool.item.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.spanned(
            &sig.generics,
            "#[tool] functions cannot be generic: the schema and the registry entry need concrete types; write a concrete function per type",
        );
    }
    if let Some(c) = &sig.constness {
        errors.spanned(c, "#[tool] functions cannot be `const`; remove `const`");
    }
    if let syn::Safety::Unsafe(u) = &sig.safety {
        errors.spanned(u, "#[tool] functions cannot be `unsafe`: the model calls them; wrap the unsafe code in a safe function");
    }
    if let Some(abi) = &sig.abi {
        errors.spanned(
            abi,
            "#[tool] functions cannot have an `extern` ABI; remove it",
        );
    }
    if let Some(v) = &sig.variadic {
        errors.spanned(v.dots, "#[tool] functions cannot be variadic");
    }

    let mut context_seen = false;
    for p in &tool.params {
        if let Some(secret) = p.secret {
            if p.is_context {
                errors.spanned(
                    secret,
                    "the context is not an argument and cannot be secret; remove `#[secret]`",
                );
            } else if !matches!(secret.meta, syn::Meta::Path(_)) {
                errors.spanned(secret, "`#[secret]` takes no arguments: write `#[secret]`");
            }
        }
        if p.is_context {
            if context_seen {
                errors.spanned(p.ty, "a tool takes at most one `&ToolContext` parameter; remove this one and use the first");
            }
            context_seen = true;
            continue;
        }
        match p.ty {
            Type::Reference(r) if is_context_path(&r.elem) => {}
            Type::Reference(r) => errors.spanned(
                r,
                format!(
                    "tool parameters are deserialised from JSON and must own their data: use an owned type such as `{}`",
                    owned_hint(&r.elem)
                ),
            ),
            Type::ImplTrait(t) => errors.spanned(t, "`impl Trait` parameters make the function generic; use a concrete type"),
            ty if is_context_path(ty) => {
                errors.spanned(ty, "take the context by reference: `ctx: &ToolContext`")
            }
            _ => {}
        }
    }

    match &sig.output {
        ReturnType::Default => errors.spanned(
            &sig.ident,
            "a tool must return `Result<T, E>` where `T` is its output and `E: Into<ToolError>`; add `-> Result<(), ToolError>`",
        ),
        ReturnType::Type(_, ty) if tool.ok_type.is_none() => errors.spanned(
            ty,
            format!(
                "a tool must return `Result<T, E>` where `T` is its output and `E: Into<ToolError>`; write `Result<{}, ToolError>`",
                ty.to_token_stream()
            ),
        ),
        _ => {}
    }

    let name = attr.tool_name(&sig.ident);
    if let Some(problem) = name_problem(&name) {
        let hint = match sanitised(&name) {
            Some(fixed) if fixed != name && name_problem(&fixed).is_none() => {
                format!("; did you mean `{fixed}`?")
            }
            _ => String::new(),
        };
        let message = format!(
            "tool name `{name}` {problem}; names must match `^[a-zA-Z_][a-zA-Z0-9_-]{{0,63}}$`{hint}"
        );
        match &attr.name {
            Some(lit) => errors.spanned(lit, message),
            None => errors.spanned(
                &sig.ident,
                format!("{message}; set one with `name = \"...\"`"),
            ),
        }
    }

    if attr.description(&tool.docs).trim().is_empty() {
        let message = "a tool needs a description, which the model reads to choose it: add a `///` doc comment to the function or `description = \"...\"`";
        match &attr.description {
            Some(lit) => errors.spanned(lit, message),
            None => errors.spanned(&sig.ident, message),
        }
    }
}

fn owned_hint(elem: &Type) -> String {
    match elem {
        Type::Path(p) if p.path.is_ident("str") => "String".into(),
        Type::Slice(s) => format!("Vec<{}>", s.elem.to_token_stream()),
        other => other.to_token_stream().to_string(),
    }
}

fn name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Some("is empty"),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
            return Some("must start with an ASCII letter or `_`");
        }
        _ => {}
    }
    if name.len() > 64 {
        return Some("is longer than 64 characters");
    }
    if chars.any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')) {
        return Some("contains a character other than ASCII letters, digits, `_` and `-`");
    }
    None
}

/// `name` with each disallowed character replaced by `_`, if that is all that is wrong.
fn sanitised(name: &str) -> Option<String> {
    let fixed: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (!fixed.is_empty()).then_some(fixed)
}
