//! What `#[tool]` emits for a function it refused: its errors, the function as written (so
//! that the rest of the crate, and an IDE, keep working with it), and a stub of the tool's
//! type (so that code naming the tool adds no errors of its own). The user sees one error
//! per misuse, the macro's. In the manner of clap_derive's `dummies.rs`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::ast::{ToolFn, without_param_attrs};
use crate::attr::Attr;
use crate::tool_type::ToolType;

pub(crate) fn expand(tool: &ToolFn<'_>, attr: &Attr, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    let function = without_param_attrs(tool.item);
    // A function taking `self` sits in an `impl` or a trait, where no type can be declared.
    if tool.item.sig.receiver().is_some() {
        return quote!(#error #function);
    }
    let ty = ToolType::new(tool, attr);
    let declare = ty.declare();
    let implement = ty.implement(quote!(::core::unreachable!(
        "#[tool] refused this function"
    )));
    quote! {
        #error
        #function
        #declare
        const _: () = { #implement };
    }
}
