//! Emits the generated code. Every user error was found before this runs.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn};

use crate::ast::{ToolFn, is_field_attr};
use crate::attr::{self, Attr};
use crate::errors::Errors;
use crate::valid;

pub(crate) fn tool(args: TokenStream, item: TokenStream) -> TokenStream {
    let item: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            let e = syn::Error::new(
                Span::call_site(),
                "#[tool] goes on a function: `#[tool(class = \"read\")] async fn get_weather(city: String) -> Result<Weather, ToolError>`",
            );
            let e = e.to_compile_error();
            return quote!(#e #item);
        }
    };
    let mut errors = Errors::default();
    let attr = attr::parse(args, &mut errors);
    let view = ToolFn::from_item(&item, &mut errors);
    valid::check(&view, &attr, &mut errors);
    match errors.finish() {
        // Emit the function as written (minus the parameter attributes rustc would reject)
        // so that other code keeps compiling and the user sees only our errors.
        Err(e) => {
            let e = e.to_compile_error();
            let plain = strip_param_attrs(item.clone());
            quote!(#e #plain)
        }
        Ok(()) => generate(&view, &attr),
    }
}

fn strip_param_attrs(mut item: ItemFn) -> ItemFn {
    for input in item.sig.inputs.iter_mut() {
        if let FnArg::Typed(pt) = input {
            pt.attrs.retain(|a| !is_field_attr(a));
        }
    }
    item
}

fn generate(tool: &ToolFn<'_>, attr: &Attr) -> TokenStream {
    let item = tool.item;
    let krate = attr
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::idem));
    let p = quote!(#krate::__private);
    let ident = &item.sig.ident;
    let vis = &item.vis;
    let name = attr
        .name
        .as_ref()
        .map(|n| n.value())
        .unwrap_or_else(|| ident.to_string().trim_start_matches("r#").to_owned());
    let description = attr
        .description
        .as_ref()
        .map(|d| d.value())
        .unwrap_or_else(|| tool.docs.clone());
    let class = format_ident!("{}", attr.class.map(|c| c.variant()).unwrap_or("Read"));

    // The arguments struct.
    let fields = tool.args().map(|param| {
        let id = param.ident;
        let ty = param.ty;
        let attrs = &param.field_attrs;
        quote!(#(#attrs)* #id: #ty)
    });
    let serde_crate = quote!(#p::serde).to_string().replace(' ', "");
    let schemars_crate = quote!(#p::schemars).to_string().replace(' ', "");
    let args_struct = quote! {
        #[derive(#p::serde::Deserialize, #p::serde::Serialize, #p::schemars::JsonSchema)]
        #[serde(crate = #serde_crate, deny_unknown_fields)]
        #[schemars(crate = #schemars_crate)]
        struct __IdemArgs { #(#fields,)* }
    };
    let param_checks = tool.args().map(|param| {
        let ty = param.ty;
        quote_spanned!(ty.span()=> #p::assert_param::<#ty>();)
    });

    // The body, renamed and out of reach: it runs only through the dispatcher.
    let mut body = strip_param_attrs(item.clone());
    body.sig.ident = format_ident!("__idem_body");
    body.vis = syn::Visibility::Inherited;
    body.attrs.retain(|a| !a.path().is_ident("doc"));

    let arg_idents: Vec<_> = tool.args().map(|p| p.ident).collect();
    let call_args = tool.params.iter().map(|param| {
        if param.is_context {
            quote!(&__idem_ctx)
        } else {
            let id = param.ident;
            quote!(#id)
        }
    });
    let await_body = item.sig.asyncness.map(|_| quote!(.await));
    let ok_type = tool
        .ok_type
        .map(|t| quote!(#t))
        .unwrap_or_else(|| quote!(()));

    let mut policy = Vec::new();
    if let Some(v) = attr.ttl_secs {
        policy.push(quote!(ttl: #p::Duration::from_secs(#v)));
    }
    if let Some(v) = attr.lease_secs {
        policy.push(quote!(lease: #p::Duration::from_secs(#v)));
    }
    if let Some(v) = attr.wait_secs {
        policy.push(quote!(wait: #p::Duration::from_secs(#v)));
    }
    if let Some(v) = attr.backoff_ms {
        policy.push(quote!(backoff: #p::Duration::from_millis(#v)));
    }
    if let Some(v) = attr.max_attempts {
        policy.push(quote!(max_attempts: #v));
    }
    if attr.open_world {
        policy.push(quote!(open_world: true));
    }
    if attr.replay_on_key_reuse {
        policy.push(quote!(replay_on_key_reuse: true));
    }
    if !attr.scopes.is_empty() {
        let scopes = &attr.scopes;
        policy.push(quote!(scopes: ::std::vec![#(::std::string::String::from(#scopes)),*]));
    }
    let natural_key = attr
        .natural_key
        .as_ref()
        .map(|path| quote!(.natural_key(#path)));

    quote! {
        #[doc = #description]
        ///
        /// This is an idem tool: it runs only through a `Dispatcher`, which applies its class's policy.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident;

        #[doc(hidden)]
        const _: () = {
            #args_struct

            #[allow(dead_code)]
            fn __idem_check_params() {
                #(#param_checks)*
            }

            #body

            #[automatically_derived]
            impl #p::StaticTool for #ident {
                const NAME: &'static str = #name;
                const CLASS: #p::ToolClass = #p::ToolClass::#class;

                fn definition() -> #p::ToolDef {
                    static __IDEM_INPUT: #p::OnceLock<#p::Arc<#p::Value>> = #p::OnceLock::new();
                    static __IDEM_OUTPUT: #p::OnceLock<#p::Arc<#p::Value>> = #p::OnceLock::new();
                    let __idem_input = __IDEM_INPUT.get_or_init(|| #p::Arc::new(#p::schema::arguments::<__IdemArgs>())).clone();
                    let __idem_output = __IDEM_OUTPUT.get_or_init(|| #p::Arc::new(#p::schema::output::<#ok_type>())).clone();
                    #p::finish(
                        #p::ToolDef::builder(#name, #p::ToolClass::#class)
                            .description(#description)
                            .input_schema_shared(__idem_input)
                            .output_schema_shared(__idem_output)
                            .policy(#p::ToolPolicy { #(#policy,)* ..::core::default::Default::default() })
                            .prepare(#p::args::normalise::<__IdemArgs>)
                            .handler(|__idem_ctx: #p::ToolContext, __idem_args: #p::Value| async move {
                                let __IdemArgs { #(#arg_idents,)* } = #p::args::parse::<__IdemArgs>(__idem_args)
                                    .map_err(#p::ToolError::not_applied)?;
                                let __idem_out = __idem_body(#(#call_args),*) #await_body
                                    .map_err(::core::convert::Into::<#p::ToolError>::into)?;
                                #p::output_value(&__idem_out)
                            })
                            #natural_key
                            .location(::core::file!(), ::core::line!()),
                    )
                }
            }

            #p::inventory::submit! {
                #p::ToolRegistration::new(#name, <#ident as #p::StaticTool>::definition, ::core::file!(), ::core::line!())
            }
        };
    }
}
