//! Parses the arguments of `#[tool(...)]`. Some 600 lines: one parser with an arm per key,
//! each with its own error and fix, and the checks between keys, read best in one place.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Lit, LitInt, LitStr, Meta, Token};

use crate::errors::{Errors, nearest};

pub(crate) const CLASSES: [&str; 4] = [
    "read",
    "idempotent_write",
    "non_idempotent_write",
    "irreversible",
];

const KEYS: [&str; 24] = [
    "class",
    "version",
    "name",
    "description",
    "ttl_secs",
    "lease_secs",
    "max_attempts",
    "wait_secs",
    "backoff_ms",
    "open_world",
    "scopes",
    "natural_key",
    "verify",
    "verify_after_secs",
    "on_key_reuse",
    "authorize",
    "authorize_async",
    "approve_when",
    "approvers",
    "precondition",
    "compensate",
    "limits",
    "escalate",
    "crate",
];

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Read,
    IdempotentWrite,
    NonIdempotentWrite,
    Irreversible,
}

impl Class {
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Class::Read => "Read",
            Class::IdempotentWrite => "IdempotentWrite",
            Class::NonIdempotentWrite => "NonIdempotentWrite",
            Class::Irreversible => "Irreversible",
        }
    }
}

/// The parsed attribute. Every field is as the user wrote it, with its tokens for spans.
#[derive(Default)]
pub(crate) struct Attr {
    pub class: Option<Class>,
    pub name: Option<LitStr>,
    pub description: Option<LitStr>,
    pub ttl_secs: Option<u64>,
    pub lease_secs: Option<u64>,
    pub max_attempts: Option<u32>,
    pub wait_secs: Option<u64>,
    pub backoff_ms: Option<u64>,
    pub open_world: bool,
    pub scopes: Vec<LitStr>,
    pub natural_key: Option<syn::Path>,
    pub verify: Option<syn::Path>,
    pub verify_after_secs: Option<u64>,
    pub version: Option<LitStr>,
    /// `on_key_reuse = "reject"` (the default is `"replay"`: find-or-create).
    pub reject_on_key_reuse: bool,
    /// `on_key_reuse` was given (and valid), whichever policy.
    pub key_reuse_given: bool,
    pub krate: Option<syn::Path>,
    /// `authorize = f`.
    pub authorize: Option<syn::Path>,
    /// `authorize_async = f`.
    pub authorize_async: Option<syn::Path>,
    /// `approve_when = f`.
    pub approve_when: Option<syn::Path>,
    /// `approvers = 2`: four eyes, how many distinct people approve each call.
    pub approvers: Option<u8>,
    /// `precondition = f`.
    pub precondition: Option<syn::Path>,
    /// `compensate = f`.
    pub compensate: Option<syn::Path>,
    /// `limits = f`: a `fn() -> Vec<Limit>` naming the tool's limits across a run's calls.
    pub limits: Option<syn::Path>,
    /// `escalate = "failures"`: the `Escalate` variant's name, checked.
    pub escalate: Option<(&'static str, Span)>,
}

impl Attr {
    /// The name the model calls: `name = "..."`, else the function's (without `r#`).
    pub(crate) fn tool_name(&self, function: &syn::Ident) -> String {
        match &self.name {
            Some(name) => name.value(),
            None => syn::ext::IdentExt::unraw(function).to_string(),
        }
    }

    /// The description shown to the model: `description = "..."`, else the doc comment.
    pub(crate) fn description(&self, docs: &str) -> String {
        match &self.description {
            Some(description) => description.value(),
            None => docs.to_owned(),
        }
    }

    /// The path of the run-time half of the expansion: `::idem::__private`, or the renamed
    /// crate's.
    pub(crate) fn runtime(&self) -> TokenStream {
        let krate = self.krate.clone().unwrap_or_else(|| {
            match crate::krate::renamed().and_then(|name| syn::parse_str::<syn::Ident>(&name).ok())
            {
                Some(name) => syn::parse_quote!(::#name),
                None => syn::parse_quote!(::idem),
            }
        });
        quote::quote!(#krate::__private)
    }
}

pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Attr {
    let mut attr = Attr::default();
    let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args) {
        Ok(m) => m,
        Err(e) => {
            errors.at(
                e.span(),
                format!("{e}: expected `key = value` pairs, e.g. `#[tool(class = \"read\")]`"),
            );
            return attr;
        }
    };
    let mut seen: Vec<String> = Vec::new();
    // Where each key was written, for errors about keys that only make sense together.
    let mut spans: Vec<(String, Span)> = Vec::new();
    let mut class_given = false;
    for meta in &metas {
        let path = meta.path();
        let Some(ident) = path.get_ident() else {
            errors.spanned(
                path,
                format!("expected a key; valid keys are {}", list(&KEYS)),
            );
            continue;
        };
        let key = ident.to_string();
        if !KEYS.contains(&key.as_str()) {
            let suggestion = nearest(&key, &KEYS);
            // A misspelt `class` is reported once, here, not again as a missing class.
            if suggestion == Some("class") {
                class_given = true;
            }
            let hint = suggestion
                .map(|k| format!("did you mean `{k}`? "))
                .unwrap_or_default();
            errors.spanned(
                ident,
                format!("unknown key `{key}`: {hint}valid keys are {}", list(&KEYS)),
            );
            continue;
        }
        if seen.contains(&key) {
            errors.spanned(ident, format!("`{key}` is given twice; keep only one"));
            continue;
        }
        seen.push(key.clone());
        spans.push((key.clone(), ident.span()));
        if key == "class" {
            class_given = true;
        }
        let value = match meta {
            Meta::NameValue(nv) => &nv.value,
            Meta::Path(_) if key == "open_world" => {
                attr.open_world = true;
                continue;
            }
            Meta::Path(_) => {
                errors.spanned(meta, format!("`{key}` needs a value: {}", example(&key)));
                continue;
            }
            Meta::List(_) => {
                errors.spanned(
                    meta,
                    format!("`{key}` takes `=`, not parentheses: {}", example(&key)),
                );
                continue;
            }
        };
        match key.as_str() {
            "class" => {
                let Some(lit) = string(value, &key, errors) else {
                    continue;
                };
                attr.class = parse_class(&lit, errors);
            }
            "name" => attr.name = string(value, &key, errors),
            "version" => {
                let Some(lit) = string(value, &key, errors) else {
                    continue;
                };
                match version_problem(&lit.value()) {
                    Some(problem) => errors.spanned(&lit, problem),
                    None => attr.version = Some(lit),
                }
            }
            "description" => attr.description = string(value, &key, errors),
            "ttl_secs" => attr.ttl_secs = int(value, &key, 1, errors),
            "lease_secs" => attr.lease_secs = int(value, &key, 1, errors),
            "wait_secs" => attr.wait_secs = int(value, &key, 0, errors),
            "backoff_ms" => attr.backoff_ms = int(value, &key, 0, errors),
            "verify_after_secs" => attr.verify_after_secs = int(value, &key, 0, errors),
            "max_attempts" => {
                attr.max_attempts = int::<u32>(value, &key, 1, errors);
            }
            "approvers" => attr.approvers = int::<u8>(value, &key, 1, errors),
            "open_world" => match value {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b), ..
                }) => attr.open_world = b.value,
                other => errors.spanned(
                    other,
                    "`open_world` is a flag: write `open_world` or `open_world = true`",
                ),
            },
            "scopes" => match value {
                Expr::Array(array) => {
                    for elem in &array.elems {
                        if let Some(s) = string(elem, "scopes", errors) {
                            if s.value().trim().is_empty() {
                                errors.spanned(&s, "a scope cannot be empty");
                            } else {
                                attr.scopes.push(s);
                            }
                        }
                    }
                }
                other => errors.spanned(
                    other,
                    format!("`scopes` takes a list: {}", example("scopes")),
                ),
            },
            "natural_key" => match value {
                Expr::Path(p) if p.qself.is_none() => attr.natural_key = Some(p.path.clone()),
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => match s.parse::<syn::Path>() {
                    Ok(p) => attr.natural_key = Some(p),
                    Err(_) => errors.spanned(
                        s,
                        "`natural_key` names a function: `natural_key = ticket_key`",
                    ),
                },
                other => errors.spanned(
                    other,
                    "`natural_key` names a function: `natural_key = ticket_key`",
                ),
            },
            "verify" => match value {
                Expr::Path(p) if p.qself.is_none() => attr.verify = Some(p.path.clone()),
                other => errors.spanned(
                    other,
                    "`verify` names an async function `fn(&ToolContext) -> Result<Verified, ToolError>`: `verify = check_sent`",
                ),
            },
            "authorize" | "authorize_async" | "approve_when" | "precondition" | "compensate"
            | "limits" => {
                let Expr::Path(p) = value else {
                    errors.spanned(
                        value,
                        format!("`{key}` names a function: {}", example(&key)),
                    );
                    continue;
                };
                if p.qself.is_some() {
                    errors.spanned(value, format!("`{key}` names a function: {}", example(&key)));
                    continue;
                }
                let path = Some(p.path.clone());
                match key.as_str() {
                    "authorize" => attr.authorize = path,
                    "authorize_async" => attr.authorize_async = path,
                    "approve_when" => attr.approve_when = path,
                    "precondition" => attr.precondition = path,
                    "limits" => attr.limits = path,
                    _ => attr.compensate = path,
                }
            }
            "on_key_reuse" => {
                let Some(lit) = string(value, &key, errors) else {
                    continue;
                };
                match lit.value().as_str() {
                    "reject" => {
                        attr.reject_on_key_reuse = true;
                        attr.key_reuse_given = true;
                    }
                    "replay" => {
                        attr.reject_on_key_reuse = false;
                        attr.key_reuse_given = true;
                    }
                    other => errors.spanned(&lit, format!("unknown `on_key_reuse` policy `{other}`: expected `\"replay\"` (the default: find-or-create) or `\"reject\"`")),
                }
            }
            "escalate" => {
                let Some(lit) = string(value, &key, errors) else {
                    continue;
                };
                match lit.value().as_str() {
                    "failures" => attr.escalate = Some(("Failures", lit.span())),
                    "unknown" => attr.escalate = Some(("Unknown", lit.span())),
                    "failures_and_unknown" => {
                        attr.escalate = Some(("FailuresAndUnknown", lit.span()))
                    }
                    other => errors.spanned(&lit, format!("`escalate = \"{other}\"` is not a kind of call sent to a person: write `\"failures\"`, `\"unknown\"` or `\"failures_and_unknown\"`")),
                }
            }
            "crate" => {
                let Some(lit) = string(value, &key, errors) else {
                    continue;
                };
                match lit.parse::<syn::Path>() {
                    Ok(p) => attr.krate = Some(p),
                    Err(_) => errors.spanned(
                        &lit,
                        "`crate` takes the path of the idem crate, e.g. `crate = \"::my_idem\"`",
                    ),
                }
            }
            _ => unreachable!("every key in KEYS is handled"),
        }
    }
    let span_of = |key: &str| {
        spans
            .iter()
            .find(|(k, _)| k == key)
            .map_or_else(Span::call_site, |(_, span)| *span)
    };
    if matches!(attr.class, Some(Class::Read)) {
        // A read records nothing: these keys would silently do nothing.
        for (key, given) in [
            ("ttl_secs", attr.ttl_secs.is_some()),
            ("lease_secs", attr.lease_secs.is_some()),
            ("wait_secs", attr.wait_secs.is_some()),
            ("natural_key", attr.natural_key.is_some()),
            ("on_key_reuse", attr.key_reuse_given),
            ("verify_after_secs", attr.verify_after_secs.is_some()),
            ("verify", attr.verify.is_some()),
            ("version", attr.version.is_some()),
        ] {
            if given {
                let why = if key == "verify" {
                    ", so no outcome of it is ever unknown and nothing asks the hook"
                } else {
                    ""
                };
                errors.at(
                    span_of(key),
                    format!(
                        "`{key}` has no effect on a `read` tool, which records nothing{why}: \
                         remove it, or give the tool the class of a write"
                    ),
                );
            }
        }
        // A read makes no effect: nothing to approve, guard or undo.
        for (key, given) in [
            ("approve_when", attr.approve_when.is_some()),
            ("approvers", attr.approvers.is_some()),
            ("precondition", attr.precondition.is_some()),
            ("compensate", attr.compensate.is_some()),
            ("escalate", attr.escalate.is_some()),
        ] {
            if given {
                errors.at(
                    span_of(key),
                    format!(
                        "`{key}` has no effect on a `read` tool, which makes no effect: \
                         remove it, or give the tool the class of a write"
                    ),
                );
            }
        }
    } else if matches!(attr.class, Some(Class::Irreversible)) && attr.approve_when.is_some() {
        errors.at(
            span_of("approve_when"),
            "`approve_when` has no effect on an `irreversible` tool, every call of which needs \
             approval: remove it, or give the tool the class `non_idempotent_write` to ask only \
             for the calls it selects",
        );
    } else if !matches!(attr.class, Some(Class::Irreversible) | None)
        && attr.approve_when.is_none()
        && attr.approvers.is_some_and(|n| n > 1)
    {
        errors.at(
            span_of("approvers"),
            "`approvers` has no effect: no call of this tool needs approval; give the tool \
             the class `irreversible`, or add `approve_when = large_refund` to ask for the \
             calls it selects",
        );
    } else if attr.key_reuse_given && attr.natural_key.is_none() {
        let policy = if attr.reject_on_key_reuse {
            "reject"
        } else {
            "replay"
        };
        errors.at(
            span_of("on_key_reuse"),
            format!(
                "`on_key_reuse = \"{policy}\"` applies only to calls keyed by a natural key: add \
                 `natural_key = ticket_key`, or remove `on_key_reuse`"
            ),
        );
    }
    if !class_given {
        errors.at(
            Span::call_site(),
            format!(
                "missing `class`: every tool must declare its side-effect class; add `class = \"...\"` with one of {}",
                list(&CLASSES)
            ),
        );
    }
    attr
}

fn parse_class(lit: &LitStr, errors: &mut Errors) -> Option<Class> {
    let value = lit.value();
    let class = match value.as_str() {
        "read" => Class::Read,
        "idempotent_write" => Class::IdempotentWrite,
        "non_idempotent_write" => Class::NonIdempotentWrite,
        "irreversible" => Class::Irreversible,
        other => {
            let hint = nearest(other, &CLASSES)
                .map(|c| format!("; did you mean `{c}`?"))
                .unwrap_or_default();
            errors.spanned(
                lit,
                format!(
                    "unknown class `{other}`: expected one of {}{hint}",
                    list(&CLASSES)
                ),
            );
            return None;
        }
    };
    Some(class)
}

fn string(value: &Expr, key: &str, errors: &mut Errors) -> Option<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.clone()),
        other => {
            let fix = match bare_word(other) {
                Some(word) if key == "scopes" => format!("write `\"{word}\"`"),
                Some(word) => format!("write `{key} = \"{word}\"`"),
                None => example(key),
            };
            errors.spanned(other, format!("`{key}` takes a string literal: {fix}"));
            None
        }
    }
}

/// The text of a bare identifier or number, which the user probably meant as a string.
fn bare_word(value: &Expr) -> Option<String> {
    match value {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident().map(|i| i.to_string()),
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => Some(i.to_string()),
        _ => None,
    }
}

fn int<T: TryFrom<u64>>(value: &Expr, key: &str, min: u64, errors: &mut Errors) -> Option<T> {
    let (min, max, unit) = range(key, min);
    let lit = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i,
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) if matches!(
            &**expr,
            Expr::Lit(ExprLit {
                lit: Lit::Int(_),
                ..
            })
        ) =>
        {
            errors.push(negative(value, key, min, max, unit));
            return None;
        }
        _ => {
            let fix = match value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) if s.value().trim().parse::<u64>().is_ok() => {
                    format!("write `{key} = {}`, without quotes", s.value().trim())
                }
                _ => example(key),
            };
            errors.spanned(value, format!("`{key}` takes an integer literal: {fix}"));
            return None;
        }
    };
    match check_int(lit, key, min, max, unit) {
        // In range, so the conversion holds: `max` fits every key's type.
        Ok(v) => T::try_from(v).ok(),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

/// The values a numeric key accepts and their unit. Deadlines are the current time plus
/// these: past ten years they could overflow the clock (the registry refuses the same values
/// for tools built at run time).
fn range(key: &str, min: u64) -> (u64, u64, &'static str) {
    match key {
        "backoff_ms" => (min, TEN_YEARS_SECS * 1000, "milliseconds"),
        "max_attempts" => (min, u64::from(u32::MAX), "attempts"),
        "approvers" => (min, 16, "approvers"),
        _ => (min, TEN_YEARS_SECS, "seconds"),
    }
}

fn negative(value: impl quote::ToTokens, key: &str, min: u64, max: u64, unit: &str) -> syn::Error {
    syn::Error::new_spanned(
        value,
        format!(
            "`{key}` cannot be negative: it is a number of {unit} from {min} to {max}; e.g. {}",
            example(key)
        ),
    )
}

fn check_int(i: &LitInt, key: &str, min: u64, max: u64, unit: &str) -> syn::Result<u64> {
    // syn reads `-5` in an attribute as one negative literal.
    if i.base10_digits().starts_with('-') {
        return Err(negative(i, key, min, max, unit));
    }
    // The digits alone: a literal too large for any integer type is still too large here.
    let wide: Option<u64> = i.base10_digits().parse().ok();
    if let Some(wide) = wide
        && wide < min
    {
        return Err(syn::Error::new_spanned(
            i,
            format!(
                "`{key}` must be at least {min}{}; e.g. {}",
                match key {
                    "lease_secs" => ": a lease of 0 s would expire before the body starts",
                    "ttl_secs" => ": a record kept 0 s would never dedupe anything",
                    "max_attempts" => ": it counts the first attempt",
                    _ => "",
                },
                example(key)
            ),
        ));
    }
    match wide {
        Some(wide) if wide <= max => Ok(wide),
        _ if unit == "attempts" || unit == "approvers" => Err(syn::Error::new_spanned(
            i,
            format!(
                "`{key}` must be at most {max} {unit}; e.g. {}",
                example(key)
            ),
        )),
        _ => Err(syn::Error::new_spanned(
            i,
            format!(
                "`{key}` must be at most {max} {unit} (ten years): deadlines are computed by \
                 adding it to the current time; e.g. {}",
                example(key)
            ),
        )),
    }
}

/// Ten years in seconds: the longest TTL, lease or wait (`idem_registry`'s
/// `LONGEST_POLICY_DURATION`).
const TEN_YEARS_SECS: u64 = 10 * 365 * 24 * 3600;

fn example(key: &str) -> String {
    match key {
        "class" => "`class = \"idempotent_write\"`".into(),
        "name" => "`name = \"send_email\"`".into(),
        "description" => "`description = \"Send an email.\"`".into(),
        "scopes" => "`scopes = [\"mail:send\"]`".into(),
        "natural_key" => "`natural_key = ticket_key`".into(),
        "verify" => "`verify = check_sent`".into(),
        "on_key_reuse" => "`on_key_reuse = \"replay\"`".into(),
        "crate" => "`crate = \"::idem\"`".into(),
        "open_world" => "`open_world = true`".into(),
        "max_attempts" => "`max_attempts = 3`".into(),
        "backoff_ms" => "`backoff_ms = 100`".into(),
        "verify_after_secs" => "`verify_after_secs = 300`".into(),
        "version" => "`version = \"2\"`".into(),
        "authorize" => "`authorize = own_orders_only`".into(),
        "authorize_async" => "`authorize_async = owns_the_order`".into(),
        "approve_when" => "`approve_when = large_refund`".into(),
        "approvers" => "`approvers = 2`".into(),
        "precondition" => "`precondition = still_open`".into(),
        "compensate" => "`compensate = cancel_step`".into(),
        "limits" => "`limits = refund_limits`".into(),
        "escalate" => "`escalate = \"failures\"`".into(),
        other => format!("`{other} = 30`"),
    }
}

/// What is wrong with a handler version, if anything (`idem_registry`'s builder checks the
/// same).
fn version_problem(version: &str) -> Option<String> {
    if version.trim().is_empty() {
        return Some(
            "a handler version cannot be empty: write `version = \"2\"`, or leave it out for the default \"1\"".into(),
        );
    }
    if version.len() > 64 || version.trim() != version || version.chars().any(char::is_control) {
        return Some(format!(
            "handler version {version:?} must be at most 64 characters, without surrounding spaces or control characters: e.g. `version = \"2\"`"
        ));
    }
    None
}

fn list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
