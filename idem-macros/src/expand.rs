//! Emits the generated code. Every user error was found before this runs.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn};

use crate::ast::{ToolFn, is_context_path, is_param_attr};
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
            pt.attrs.retain(|a| !is_param_attr(a));
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

    // Each parameter's type is proven usable, on its own tokens, before anything uses it:
    // the arguments struct is generic, and `__idem_define` receives its type arguments only
    // through the proofs (see `__private` in the facade). A type that fails its proof is
    // reported once, there, and nothing downstream reports it again.
    let args: Vec<_> = tool.args().collect();
    let mut struct_generics = Vec::new();
    let mut proof_generics = Vec::new();
    let mut proofs = Vec::new();
    let mut fields = Vec::new();
    let mut run_types = Vec::new();
    let mut args_type_args = Vec::new();
    for (i, param) in args.iter().enumerate() {
        let id = param.ident;
        let ty = param.ty;
        let attrs = &param.field_attrs;
        let keys: Vec<(String, bool)> = attrs.iter().flat_map(|a| codec_keys(a)).collect();
        if keys.iter().any(|(key, valued)| concrete_key(key, *valued)) {
            // The attribute names code written for the concrete type (`with = "module"`,
            // `default = "path"`, `skip_serializing_if = "..."`): the field keeps that type,
            // and it is not proven, since a custom codec frees the type of the traits.
            fields.push(quote!(#(#attrs)* #id: #ty));
            run_types.push(quote!(#ty));
            continue;
        }
        let generic = format_ident!("__P{}", i);
        let proof = format_ident!("__M{}", i);
        // schemars, unlike serde, does not bound a generic `#[serde(default)]` field by
        // `Default` (nor by `Serialize`, which it needs to show the default in the schema).
        // A field's own bound replaces the one schemars infers, hence `JsonSchema` too.
        let default_bound = keys.iter().any(|(key, _)| key == "default").then(|| {
            let bound = quote!(#generic: #p::schemars::JsonSchema + ::core::default::Default + #p::serde::Serialize)
                .to_string();
            quote!(#[schemars(bound = #bound)])
        });
        fields.push(quote!(#(#attrs)* #default_bound #id: #generic));
        run_types.push(quote!(<#proof as #p::Proven>::Type));
        args_type_args.push(quote!(<#proof as #p::Proven>::Type));
        proofs.push(quote_spanned!(ty.span()=> #p::param::<#ty, _>()));
        struct_generics.push(generic);
        proof_generics.push(proof);
    }
    let struct_params = (!struct_generics.is_empty()).then(|| quote!(<#(#struct_generics),*>));
    let args_type = if args_type_args.is_empty() {
        quote!(__IdemArgs)
    } else {
        quote!(__IdemArgs<#(#args_type_args),*>)
    };
    let serde_crate = quote!(#p::serde).to_string().replace(' ', "");
    let schemars_crate = quote!(#p::schemars).to_string().replace(' ', "");
    let args_struct = quote! {
        #[derive(#p::serde::Deserialize, #p::serde::Serialize, #p::schemars::JsonSchema)]
        #[serde(crate = #serde_crate, deny_unknown_fields)]
        #[schemars(crate = #schemars_crate)]
        struct __IdemArgs #struct_params { #(#fields,)* }
    };

    // The output and error types are proven the same way, on their own tokens.
    let output_proof = match tool.ok_type {
        Some(t) => quote_spanned!(t.span()=> #p::output::<#t, _>()),
        None => quote!(#p::output::<(), _>()),
    };
    // Called in a closure, not passed as a fn item: the item's bound would be checked a
    // second time, spanned on the attribute.
    let into_tool_error = match (tool.err_type, &item.sig.output) {
        (Some(t), _) => quote_spanned!(t.span()=> #p::tool_error::<#t, _>(__idem_e)),
        (None, syn::ReturnType::Type(_, t)) => quote_spanned!(t.span()=> #p::tool_error(__idem_e)),
        (None, syn::ReturnType::Default) => quote!(#p::tool_error(__idem_e)),
    };

    // The body, renamed and out of reach: it runs only through the dispatcher. An async body
    // owns its context, so that its future is the handler's without an `async` block around
    // it: the context parameter becomes `__idem_ctx: ToolContext`, first, and the user's name
    // for it a borrow of that.
    let mut body = strip_param_attrs(item.clone());
    body.sig.ident = format_ident!("__idem_body");
    body.vis = syn::Visibility::Inherited;
    body.attrs.retain(|a| !a.path().is_ident("doc"));
    let is_async = item.sig.asyncness.is_some();
    if is_async {
        let inputs = std::mem::take(&mut body.sig.inputs);
        body.sig
            .inputs
            .push(syn::parse_quote!(__idem_ctx: #p::ToolContext));
        for input in inputs {
            match input {
                FnArg::Typed(pt) if is_context_param(&pt.ty) => {
                    let (pat, ty) = (&pt.pat, &pt.ty);
                    body.block
                        .stmts
                        .insert(0, syn::parse_quote!(let #pat: #ty = &__idem_ctx;));
                }
                other => body.sig.inputs.push(other),
            }
        }
    }

    let arg_idents: Vec<_> = args.iter().map(|p| p.ident).collect();
    let run = if is_async {
        quote!(|__idem_ctx: #p::ToolContext, #(#arg_idents),*| __idem_body(__idem_ctx, #(#arg_idents),*))
    } else {
        // A synchronous body runs when the handler's future is first polled, as an async
        // one does, so that the dispatcher's panic and lease handling cover it.
        let call_args = tool.params.iter().map(|param| {
            if param.is_context {
                quote!(&__idem_ctx)
            } else {
                let id = param.ident;
                quote!(#id)
            }
        });
        quote!(|__idem_ctx: #p::ToolContext, #(#arg_idents),*| #p::glue::lazy(move |_| __idem_body(#(#call_args),*)))
    };

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
    if let Some(v) = attr.verify_after_secs {
        policy.push(quote!(verify_after: #p::Duration::from_secs(#v)));
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
    let verify = attr.verify.as_ref().map(|path| {
        let call = quote_spanned!(path.span()=> #path(&__idem_ctx).await);
        quote!(.verify(|__idem_ctx: #p::ToolContext, _: #p::Value| async move { #call }))
    });

    let secrets = tool
        .args()
        .filter(|param| param.secret.is_some())
        .map(|param| {
            // The argument's JSON name, escaped as RFC 6901 says.
            let name = json_name(param).replace('~', "~0").replace('/', "~1");
            let pointer = format!("/{name}");
            quote!(.secret(#pointer))
        });

    let policy = if policy.is_empty() {
        quote!(::core::default::Default::default())
    } else {
        quote!(#p::ToolPolicy { #(#policy,)* ..::core::default::Default::default() })
    };

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

            #body

            // Names the arguments type from the proofs; everything else is `glue::define`.
            #[allow(clippy::type_complexity)]
            fn __idem_define<#(#proof_generics: #p::Proven,)* __MO: #p::Proven, __E, __F, __Fut, __C>(
                __idem_builder: #p::ToolBuilder,
                _: (#(::core::marker::PhantomData<#proof_generics>,)*),
                _: ::core::marker::PhantomData<__MO>,
                __idem_run: __F,
                __idem_error: __C,
            ) -> #p::ToolBuilder
            where
                #args_type: #p::serde::de::DeserializeOwned + #p::serde::Serialize + #p::schemars::JsonSchema
                    + ::core::marker::Send,
                <__MO as #p::Proven>::Type: #p::serde::Serialize + #p::schemars::JsonSchema,
                __F: ::core::ops::Fn(#p::ToolContext, #(#run_types),*) -> __Fut
                    + ::core::marker::Send + ::core::marker::Sync + 'static,
                __Fut: ::core::future::Future<
                        Output = ::core::result::Result<<__MO as #p::Proven>::Type, __E>,
                    > + ::core::marker::Send + 'static,
                __C: ::core::ops::Fn(__E) -> #p::ToolError
                    + ::core::marker::Copy + ::core::marker::Send + ::core::marker::Sync + 'static,
            {
                static __IDEM_SCHEMAS: #p::glue::Schemas = #p::glue::Schemas::new();
                #p::glue::define(
                    __idem_builder,
                    &__IDEM_SCHEMAS,
                    move |__idem_ctx: #p::ToolContext, __IdemArgs { #(#arg_idents,)* }: #args_type| {
                        __idem_run(__idem_ctx, #(#arg_idents),*)
                    },
                    __idem_error,
                )
            }

            #[automatically_derived]
            impl #p::StaticTool for #ident {
                const NAME: &'static str = #name;
                const CLASS: #p::ToolClass = #p::ToolClass::#class;

                // `needless_update`: the policy literal ends in `..Default::default()` even
                // when every key is given.
                #[allow(clippy::needless_update)]
                fn definition() -> #p::ToolDef {
                    #p::finish(
                        __idem_define(
                            #p::ToolDef::builder(#name, #p::ToolClass::#class)
                                .description(#description)
                                .policy(#policy)
                                .location(::core::file!(), ::core::line!()),
                            (#(#proofs,)*),
                            #output_proof,
                            #run,
                            |__idem_e| #into_tool_error,
                        )
                        #natural_key
                        #verify
                        #(#secrets)*
                    )
                }
            }

            #p::inventory::submit! {
                #p::ToolRegistration::new(#name, <#ident as #p::StaticTool>::definition, ::core::file!(), ::core::line!())
            }
        };
    }
}

/// A parameter's name in the arguments: its `#[serde(rename = "...")]` if it has one, else
/// its identifier.
fn json_name(param: &crate::ast::Param<'_>) -> String {
    let mut name = syn::ext::IdentExt::unraw(param.ident).to_string();
    for attr in param
        .field_attrs
        .iter()
        .filter(|a| a.path().is_ident("serde"))
    {
        // Keys other than `rename` are skipped with their values; a form this does not read
        // (`rename(deserialize = "...")`) leaves the identifier, which registration then
        // checks against the schema.
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") && meta.input.peek(syn::Token![=]) {
                let lit: syn::LitStr = meta.value()?.parse()?;
                name = lit.value();
            } else if meta.input.peek(syn::Token![=]) {
                let _: syn::Expr = meta.value()?.parse()?;
            } else if meta.input.peek(syn::token::Paren) {
                meta.parse_nested_meta(|inner| {
                    if inner.input.peek(syn::Token![=]) {
                        let _: syn::Expr = inner.value()?.parse()?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        });
    }
    name
}

fn is_context_param(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Reference(r) if is_context_path(&r.elem))
}

/// The keys of a `#[serde(...)]` or `#[schemars(...)]` parameter attribute, each with whether
/// it has a value (`default` versus `default = "path"`).
fn codec_keys(attr: &syn::Attribute) -> Vec<(String, bool)> {
    if !(attr.path().is_ident("serde") || attr.path().is_ident("schemars")) {
        return Vec::new();
    }
    let syn::Meta::List(list) = &attr.meta else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    let mut tokens = list.tokens.clone().into_iter().peekable();
    let mut at_key = true;
    while let Some(token) = tokens.next() {
        match &token {
            proc_macro2::TokenTree::Punct(p) if p.as_char() == ',' => at_key = true,
            proc_macro2::TokenTree::Ident(ident) if at_key => {
                let valued = matches!(tokens.peek(), Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '=');
                keys.push((ident.to_string(), valued));
                at_key = false;
            }
            _ => at_key = false,
        }
    }
    keys
}

/// Whether a key makes serde or schemars use code written for the parameter's concrete type,
/// which a generic field would not type-check against.
fn concrete_key(key: &str, valued: bool) -> bool {
    matches!(
        key,
        "with"
            | "deserialize_with"
            | "serialize_with"
            | "schema_with"
            | "skip_serializing_if"
            | "getter"
            | "bound"
            | "skip"
            | "skip_deserializing"
            | "skip_serializing"
    ) || (key == "default" && valued)
}
