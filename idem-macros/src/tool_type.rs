//! The type named after the tool and its `StaticTool` impl: the one part of the expansion
//! that other code names (`Registry::builder().tool::<send_email>()`,
//! `<send_email as StaticTool>::NAME`), so a refused tool declares it too.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ast::{DocPart, ToolFn};
use crate::attr::Attr;

pub(crate) struct ToolType<'a> {
    /// The path of the run-time half: `::idem::__private`.
    pub p: TokenStream,
    pub ident: &'a syn::Ident,
    pub name: String,
    /// The description as an expression of type `&'static str`: a literal, or a `concat!`
    /// of the doc attributes when a macro computes one of them.
    pub description: TokenStream,
    /// What the type carries of the function's attributes: its docs, `#[deprecated]` (the
    /// type is what code names) and `#[cfg]`.
    attrs: TokenStream,
    /// The `ToolClass` variant.
    pub class: syn::Ident,
    vis: &'a syn::Visibility,
}

impl<'a> ToolType<'a> {
    pub(crate) fn new(tool: &ToolFn<'a>, attr: &Attr) -> Self {
        let sig = &tool.item.sig;
        ToolType {
            p: attr.runtime(),
            ident: &sig.ident,
            name: attr.tool_name(&sig.ident),
            description: description(tool, attr),
            attrs: type_attrs(tool, attr),
            // A refused tool may have no class: its stub says `Read`, and nothing runs it.
            class: format_ident!("{}", attr.class.map_or("Read", |c| c.variant())),
            vis: &tool.item.vis,
        }
    }

    /// The type. A braced struct, so that it takes the name in the type namespace only and
    /// the function's own name stays free for values.
    pub(crate) fn declare(&self) -> TokenStream {
        let ToolType {
            ident, attrs, vis, ..
        } = self;
        quote! {
            #attrs
            ///
            /// This is an idem tool: it runs only through a `Dispatcher`, which applies its class's policy.
            #[allow(non_camel_case_types)]
            #vis struct #ident {}
        }
    }

    /// Its `StaticTool` impl, whose `definition()` is `definition`.
    pub(crate) fn implement(&self, definition: TokenStream) -> TokenStream {
        let ToolType {
            p,
            ident,
            name,
            class,
            ..
        } = self;
        quote! {
            #[automatically_derived]
            #[allow(deprecated)]
            impl #p::StaticTool for #ident {
                const NAME: &'static str = #name;
                const CLASS: #p::ToolClass = #p::ToolClass::#class;
                fn definition() -> #p::ToolDef {
                    #definition
                }
            }
        }
    }
}

fn description(tool: &ToolFn<'_>, attr: &Attr) -> TokenStream {
    if attr.description.is_some() || !tool.has_computed_docs() {
        let text = attr.description(&tool.docs);
        return quote!(#text);
    }
    // Joined as rustdoc joins them; the registry trims the ends.
    let mut parts = Vec::new();
    for (i, part) in tool.doc_parts.iter().enumerate() {
        if i > 0 {
            parts.push(quote!("\n"));
        }
        parts.push(match part {
            DocPart::Line(line) => quote!(#line),
            DocPart::Expr(expr) => quote!(#expr),
        });
    }
    quote!(::core::concat!(#(#parts),*))
}

fn type_attrs(tool: &ToolFn<'_>, attr: &Attr) -> TokenStream {
    let docs = match &attr.description {
        Some(text) => quote!(#[doc = #text]),
        None => {
            let docs = tool.item.attrs.iter().filter(|a| a.path().is_ident("doc"));
            quote!(#(#docs)*)
        }
    };
    let others = tool.item.attrs.iter().filter(|a| is_type_attr(a));
    quote!(#docs #(#others)*)
}

/// Attributes of the function that belong on the tool's type rather than on its body:
/// `#[deprecated]` warns where the tool is named, `#[cfg]` removes the tool as a whole.
pub(crate) fn is_type_attr(a: &syn::Attribute) -> bool {
    a.path().is_ident("deprecated") || is_cfg(a)
}

/// `#[cfg(...)]` (a `#[cfg_attr]` stays on the body: what it adds may only suit a function).
pub(crate) fn is_cfg(a: &syn::Attribute) -> bool {
    a.path().is_ident("cfg")
}
