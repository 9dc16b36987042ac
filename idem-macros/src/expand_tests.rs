use proc_macro2::{TokenStream, TokenTree};
use quote::quote;

/// Tokens, groups counted with their contents: a proxy for the code rustc must check.
fn count(tokens: TokenStream) -> usize {
    tokens
        .into_iter()
        .map(|t| match t {
            TokenTree::Group(g) => 1 + count(g.stream()),
            _ => 1,
        })
        .sum()
}

/// The tool the macro benchmark (BENCHMARKS.md §5) declares a hundred times.
fn bench_tool() -> TokenStream {
    super::tool(
        quote!(class = "idempotent_write"),
        quote! {
            /// Tool 1: set a ticket's status.
            pub async fn tool_001(
                /// The ticket.
                ticket: u64,
                /// The new status.
                status: String,
                /// A note for the customer.
                note: Option<String>,
            ) -> Result<String, ToolError> {
                Ok(format!("{ticket} {status} {note:?} 1 {}", 0))
            }
        },
    )
}

#[test]
fn a_tool_expands_to_what_only_it_can_say() {
    let out = bench_tool();
    let text = out.to_string();
    // Nothing shared is spelled out per tool: no builder chain, no generic glue fn.
    assert!(!text.contains("builder"), "{text}");
    assert!(!text.contains("where"), "{text}");
    // 1,200 tokens before the declaration became one static (a generic define fn with a
    // where clause, a builder chain, four derives on the tool's type).
    let tokens = count(out);
    assert!(tokens <= 650, "{tokens} tokens:\n{text}");
}

#[test]
fn a_refused_tool_keeps_its_function_and_declares_its_type() {
    let out = super::tool(
        quote!(class = "reed"),
        quote! {
            /// Look up the weather.
            fn get_weather(#[secret] city: String) -> Result<String, ToolError> { Ok(city) }
        },
    )
    .to_string();
    assert!(out.contains("compile_error"), "{out}");
    assert!(out.contains("fn get_weather (city : String)"), "{out}");
    assert!(out.contains("struct get_weather { }"), "{out}");
    assert!(out.contains("StaticTool for get_weather"), "{out}");
}
