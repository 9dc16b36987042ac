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
            if let Type::Reference(r) = p.ty
                && let Some(m) = r.mutability
            {
                errors.spanned(
                    m,
                    "the context is lent to the tool by shared reference: write `ctx: &ToolContext` (it has no state a tool could change)",
                );
            }
            if context_seen {
                errors.spanned(p.ty, "a tool takes at most one `&ToolContext` parameter; remove this one and use the first");
            }
            context_seen = true;
            continue;
        }
        match p.ty {
            Type::Reference(r) if is_context_path(&r.elem) => {}
            Type::Reference(r) => {
                // `&Ctx` may be the context under another name, which #[tool] cannot see.
                let alias = match &*r.elem {
                    Type::Path(p) if p.qself.is_none() && may_be_alias(&r.elem) => {
                        p.path.get_ident().is_some_and(|i| {
                            i.to_string().chars().next().is_some_and(char::is_uppercase)
                        })
                    }
                    _ => false,
                };
                let owned = format!(
                    "tool parameters are deserialised from JSON and must own their data: use an owned type such as `{}`",
                    owned_hint(&r.elem)
                );
                let message = if alias {
                    format!(
                        "if this is the tool's context under another name, write `&ToolContext`: #[tool] recognises the context by that name; otherwise, {owned}"
                    )
                } else {
                    owned
                };
                errors.spanned(r, message)
            }
            Type::ImplTrait(t) => errors.spanned(
                t,
                "`impl Trait` parameters make the function generic; use a concrete type",
            ),
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
        ReturnType::Type(_, ty) => check_return(tool, ty, errors),
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

    if attr.description(&tool.docs).trim().is_empty()
        && (attr.description.is_some() || !tool.has_computed_docs())
    {
        let message = "a tool needs a description, which the model reads to choose it: add a `///` doc comment to the function or `description = \"...\"`";
        match &attr.description {
            Some(lit) => errors.spanned(lit, message),
            None => errors.spanned(&sig.ident, message),
        }
    }
}

/// The return type, as far as its spelling tells. A type that may be an alias of a `Result`
/// (`ToolResult<u32>`) is left to the type checker, which the expansion asks through
/// `ToolReturn`; what can never be a `Result` is refused here, with the fix.
fn check_return(tool: &ToolFn<'_>, ty: &Type, errors: &mut Errors) {
    let must = "a tool must return `Result<T, E>` where `T` is its output and `E: Into<ToolError>`";
    if let Type::ImplTrait(t) = ty {
        let future = t.bounds.iter().any(|b| {
            matches!(b, syn::TypeParamBound::Trait(t) if t.path.segments.last().is_some_and(|s| s.ident == "Future"))
        });
        if future && tool.item.sig.asyncness.is_none() {
            errors.spanned(
                ty,
                "a tool returning a future is written as an `async fn`: write `async fn` and return the future's output, e.g. `async fn get_weather(city: String) -> Result<Weather, ToolError>`",
            );
        } else {
            errors.spanned(
                ty,
                format!("{must}, and `impl Trait` names no type; write the type it is"),
            );
        }
        return;
    }
    if let Some(Type::ImplTrait(t)) = tool.ok_type {
        errors.spanned(
            t,
            "a tool's output must be a type it names, since its JSON schema is generated from the type: write the concrete type, e.g. `Result<Ticket, ToolError>` with `#[derive(Serialize, JsonSchema)] struct Ticket`",
        );
        return;
    }
    if tool.ok_type.is_none() && !is_result_alias(ty) {
        errors.spanned(
            ty,
            format!(
                "{must}; write `Result<{}, ToolError>` (an alias of a `Result` is read as one when its name ends in `Result`, e.g. `ToolResult<u32>`)",
                ty.to_token_stream()
            ),
        );
    }
}

/// Whether a return type not spelled `Result<..>` is taken for an alias of one: a path whose
/// last segment's name ends in `Result` (`ToolResult<u32>`, `api::CallResult`). Any other type
/// is refused here, with one error and the fix; the type checker would report a non-`Result`
/// twice.
fn is_result_alias(ty: &Type) -> bool {
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident.to_string().ends_with("Result")),
        Type::Group(g) => is_result_alias(&g.elem),
        Type::Paren(p) => is_result_alias(&p.elem),
        _ => false,
    }
}

/// Whether a type may be a user's own name for another (`Ctx` for `ToolContext`): a path,
/// but not a primitive or a well-known type.
fn may_be_alias(ty: &Type) -> bool {
    const NEVER: &[&str] = &[
        "bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32",
        "i64", "i128", "isize", "f32", "f64", "String", "Vec", "Option", "Box", "HashMap",
        "BTreeMap", "Value", "Self",
    ];
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|s| !NEVER.contains(&s.ident.to_string().as_str())),
        Type::Group(g) => may_be_alias(&g.elem),
        Type::Paren(p) => may_be_alias(&p.elem),
        _ => false,
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
