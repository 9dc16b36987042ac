#![doc = include_str!("../README.md")]

mod ast;
mod attr;
mod errors;
mod expand;
mod fallback;
mod krate;
mod tool_type;
mod valid;

use proc_macro::TokenStream;

/// Declare a tool. See the `idem` crate's documentation for the attribute's keys.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::tool(args.into(), item.into()).into()
}
