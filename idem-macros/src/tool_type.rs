//! The type named after the tool and its `StaticTool` impl: the one part of the expansion
//! that other code names (`Registry::builder().tool::<send_email>()`,
//! `<send_email as StaticTool>::NAME`), so a refused tool declares it too.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ast::ToolFn;
use crate::attr::Attr;

pub(crate) struct ToolType<'a> {
    /// The path of the run-time half: `::idem::__private`.
    pub p: TokenStream,
    pub ident: &'a syn::Ident,
    pub name: String,
    pub description: String,
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
            description: attr.description(&tool.docs),
            // A refused tool may have no class: its stub says `Read`, and nothing runs it.
            class: format_ident!("{}", attr.class.map_or("Read", |c| c.variant())),
            vis: &tool.item.vis,
        }
    }

    /// The type. A braced struct, so that it takes the name in the type namespace only and
    /// the function's own name stays free for values.
    pub(crate) fn declare(&self) -> TokenStream {
        let ToolType {
            ident,
            description,
            vis,
            ..
        } = self;
        quote! {
            #[doc = #description]
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
