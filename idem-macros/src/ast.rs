//! A small typed view of the annotated function, keeping references to the user's tokens.

use syn::{Attribute, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type};

use crate::errors::Errors;

pub(crate) struct ToolFn<'a> {
    pub item: &'a ItemFn,
    /// The function's doc comment, joined: its literal lines only.
    pub docs: String,
    /// The function's doc attributes, in order, literal or not (`#[doc = include_str!(..)]`).
    pub doc_parts: Vec<DocPart<'a>>,
    pub params: Vec<Param<'a>>,
    /// `T` of `Result<T, E>`, when the return type is a `Result`.
    pub ok_type: Option<&'a Type>,
    /// `E` of `Result<T, E>`, when it is written out (an alias such as `io::Result<T>` hides it).
    pub err_type: Option<&'a Type>,
}

pub(crate) struct Param<'a> {
    pub ident: &'a Ident,
    pub ty: &'a Type,
    /// `doc`, `serde` and `schemars` attributes: moved onto the arguments struct's field.
    pub field_attrs: Vec<&'a Attribute>,
    /// `#[secret]`: sealed in records, cut out of errors.
    pub secret: Option<&'a Attribute>,
    pub is_context: bool,
}

/// One `#[doc = ...]` attribute of the function.
pub(crate) enum DocPart<'a> {
    /// A `///` line or `#[doc = "..."]`, without the space after `///`.
    Line(String),
    /// A doc attribute whose value a macro computes (`concat!`, `include_str!`): rustdoc shows
    /// what it expands to, and so does the tool's description.
    Expr(&'a syn::Expr),
}

pub(crate) fn doc_parts(attrs: &[Attribute]) -> Vec<DocPart<'_>> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => Some(match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => {
                    let line = s.value();
                    DocPart::Line(
                        line.strip_prefix(' ')
                            .unwrap_or(&line)
                            .trim_end()
                            .to_owned(),
                    )
                }
                other => DocPart::Expr(other),
            }),
            _ => None,
        })
        .collect()
}

/// The literal lines of the doc attributes, joined as rustdoc joins them.
fn docs(parts: &[DocPart<'_>]) -> String {
    let lines: Vec<&str> = parts
        .iter()
        .filter_map(|part| match part {
            DocPart::Line(line) => Some(line.as_str()),
            DocPart::Expr(_) => None,
        })
        .collect();
    lines.join("\n").trim().to_owned()
}

/// Whether a parameter type is the injected context: `&ToolContext` (any path ending in it).
pub(crate) fn is_context_type(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => is_context_path(&r.elem),
        _ => false,
    }
}

pub(crate) fn is_context_path(ty: &Type) -> bool {
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "ToolContext"),
        _ => false,
    }
}

/// An attribute the macro takes off a parameter (rustc would reject `#[secret]`, and the
/// others move to the arguments struct).
fn is_param_attr(a: &Attribute) -> bool {
    is_field_attr(a) || a.path().is_ident("secret")
}

/// The function without the parameter attributes the macro takes off, as rustc accepts it.
pub(crate) fn without_param_attrs(item: &ItemFn) -> ItemFn {
    let mut item = item.clone();
    for input in item.sig.inputs.iter_mut() {
        if let FnArg::Typed(pt) = input {
            pt.attrs.retain(|a| !is_param_attr(a));
        }
    }
    item
}

pub(crate) fn is_field_attr(a: &Attribute) -> bool {
    a.path().is_ident("doc") || a.path().is_ident("serde") || a.path().is_ident("schemars")
}

impl<'a> ToolFn<'a> {
    pub(crate) fn from_item(item: &'a ItemFn, errors: &mut Errors) -> Self {
        let mut params = Vec::new();
        for input in &item.sig.inputs {
            match input {
                FnArg::Receiver(r) => errors.spanned(
                    r,
                    "#[tool] functions cannot take `self`: declare a free function, and reach shared state through a static or a handle the function can access",
                ),
                FnArg::Typed(pt) => {
                    if let Some(cfg) = pt
                        .attrs
                        .iter()
                        .find(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"))
                    {
                        errors.spanned(
                            cfg,
                            "a tool parameter cannot be conditional: the parameters are the tool's JSON schema, which must not change with the build; put the `#[cfg]` on the whole tool, or make the parameter an `Option`",
                        );
                        continue;
                    }
                    let ident = match &*pt.pat {
                        Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => &pi.ident,
                        other => {
                            errors.spanned(
                                other,
                                "#[tool] parameters must be plain names, because each name becomes a JSON argument; bind the name and destructure inside the body: `point: Point` then `let Point { x, y } = point;`",
                            );
                            continue;
                        }
                    };
                    params.push(Param {
                        ident,
                        ty: &pt.ty,
                        field_attrs: pt.attrs.iter().filter(|a| is_field_attr(a)).collect(),
                        secret: pt.attrs.iter().find(|a| a.path().is_ident("secret")),
                        is_context: is_context_type(&pt.ty),
                    });
                }
            }
        }
        let doc_parts = doc_parts(&item.attrs);
        ToolFn {
            item,
            docs: docs(&doc_parts),
            doc_parts,
            params,
            ok_type: result_arg(&item.sig.output, 0),
            err_type: result_arg(&item.sig.output, 1),
        }
    }

    pub(crate) fn args(&self) -> impl Iterator<Item = &Param<'a>> {
        self.params.iter().filter(|p| !p.is_context)
    }

    /// Whether a macro computes one of the doc attributes (`#[doc = include_str!(..)]`), so
    /// that the description is only known once it has expanded.
    pub(crate) fn has_computed_docs(&self) -> bool {
        self.doc_parts.iter().any(|d| matches!(d, DocPart::Expr(_)))
    }

    /// The return type when it is not spelled `Result<..>` (an alias such as
    /// `ToolResult<u32>`), which the expansion reads through `ToolReturn`.
    pub(crate) fn unspelled_return(&self) -> Option<&'a Type> {
        match (&self.item.sig.output, self.ok_type) {
            (ReturnType::Type(_, ty), None) => Some(ty),
            _ => None,
        }
    }
}

/// The `index`th type argument of a `Result<...>` return type.
fn result_arg(output: &ReturnType, index: usize) -> Option<&Type> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    let Type::Path(p) = &**ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args
        .iter()
        .filter_map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .nth(index)
}
