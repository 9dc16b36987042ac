//! The attribute's entry point, and the code it emits for a valid tool: what only that tool
//! can say (its arguments struct, its body, one static declaration, the `StaticTool` impl
//! that hands it out, its registration); the rest is the run-time half, `idem::__private`.
//! Generation cannot fail: every user error was found before it, and a refused function goes
//! to [`fallback`](crate::fallback) instead.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn};

use crate::ast::{ToolFn, is_context_type, without_param_attrs};
use crate::attr::{self, Attr};
use crate::errors::Errors;
use crate::tool_type::ToolType;
use crate::{fallback, valid};

pub(crate) fn tool(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut item: ItemFn = match syn::parse2(item.clone()) {
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
    let mut errors = Errors::new();
    // A second `#[tool]` would expand the function again, with errors of its own: it is
    // reported here, once, and taken off.
    if let Some(again) = item.attrs.iter().find(|a| is_tool_attr(a)) {
        errors.spanned(
            again,
            "`#[tool]` is written twice on this function: remove one (a function is one tool; to offer it under two names, write a second function that calls it)",
        );
        item.attrs.retain(|a| !is_tool_attr(a));
    }
    let attr = attr::parse(args, &mut errors);
    let view = ToolFn::from_item(&item, &mut errors);
    valid::check(&view, &attr, &mut errors);
    match errors.check() {
        Ok(()) => generate(&view, &attr),
        Err(e) => fallback::expand(&view, &attr, e),
    }
}

/// `#[tool]` or `#[idem::tool]`.
fn is_tool_attr(a: &syn::Attribute) -> bool {
    let segments = &a.path().segments;
    segments.last().is_some_and(|s| s.ident == "tool")
        && (segments.len() == 1
            || segments.first().is_some_and(|s| {
                s.ident == "idem" || crate::krate::renamed().is_some_and(|r| s.ident == r)
            }))
}

/// The names the expansion binds in scopes the user's parameters share, each chosen so that no
/// parameter is called the same (a parameter named `__idem_ctx` is the user's to have).
pub(crate) struct Hidden {
    pub ctx: syn::Ident,
    pub err: syn::Ident,
    pub params: syn::Ident,
}

impl Hidden {
    fn new(tool: &ToolFn<'_>) -> Self {
        // The tool's own name too: the closures call the body by it.
        let taken: Vec<String> = tool
            .params
            .iter()
            .map(|p| p.ident.to_string())
            .chain([tool.item.sig.ident.to_string()])
            .collect();
        let fresh = |base: &str| {
            let mut name = base.to_owned();
            while taken.contains(&name) {
                name.push('_');
            }
            format_ident!("{name}")
        };
        Hidden {
            ctx: fresh("__idem_ctx"),
            err: fresh("__idem_e"),
            params: fresh("__idem_params"),
        }
    }
}

fn generate(tool: &ToolFn<'_>, attr: &Attr) -> TokenStream {
    let ty = ToolType::new(tool, attr);
    let p = &ty.p;
    let (name, description, class, ident) = (&ty.name, &ty.description, &ty.class, ty.ident);
    let hidden = Hidden::new(tool);
    let err = &hidden.err;
    let args = Arguments::new(tool, p);
    let args_struct = &args.declaration;
    let body = body(tool, p, &hidden);
    let (proofs, fields, normal) = (&args.proofs, &args.fields, &args.normal);
    let idents = tool.args().map(|param| param.ident);
    let call = call(tool, p, &hidden);
    let alias = tool.unspelled_return();

    // The output and error types are proven like the parameters, on their own tokens; a
    // return type that is not spelled `Result<T, E>` (an alias) through `ToolReturn`.
    let output_proof = match (tool.ok_type, alias) {
        (Some(t), _) => quote_spanned!(t.span()=> #p::output::<#t, _>()),
        (None, Some(t)) => {
            quote_spanned!(t.span()=> #p::output::<<#t as #p::ToolReturn>::Ok, _>())
        }
        (None, None) => quote!(#p::output::<(), _>()),
    };
    // Called in a closure, not passed as a fn item: the item's bound would be checked a
    // second time, spanned on the attribute.
    let into_tool_error = match (tool.err_type, alias, &tool.item.sig.output) {
        (Some(t), _, _) => quote_spanned!(t.span()=> #p::tool_error::<#t, _>(#err)),
        (None, Some(t), _) => {
            quote_spanned!(t.span()=> #p::tool_error::<<#t as #p::ToolReturn>::Err, _>(#err))
        }
        (None, None, syn::ReturnType::Type(_, t)) => {
            quote_spanned!(t.span()=> #p::tool_error(#err))
        }
        (None, None, syn::ReturnType::Default) => quote!(#p::tool_error(#err)),
    };
    // Spanned where a failure of the body's type is reported once: on a return type left to
    // the type checker, else on the function's name.
    let span = alias.map_or_else(|| tool.item.sig.ident.span(), |t| t.span());
    let body_value = quote_spanned! {span=>
        &#p::Body::new(
            #proofs,
            #output_proof,
            #normal,
            |__IdemArgs { #(#idents),* }| #fields,
            #call,
            |#err| #into_tool_error,
        )
    };
    let settings = settings(tool, attr, p);
    let implement = ty.implement(quote!(__IDEM_TOOL.definition()));
    let declare = ty.declare();
    let cfgs = tool
        .item
        .attrs
        .iter()
        .filter(|a| crate::tool_type::is_cfg(a));

    quote! {
        #declare

        #(#cfgs)*
        const _: () = {
            // The derives call `.into()`: a module without the prelude has no `Into` in scope.
            // Imported without a name, so that nothing the user's body names changes.
            use ::core::convert::Into as _;

            #args_struct

            #body

            static __IDEM_TOOL: #p::Declaration = #p::Declaration {
                name: #name,
                class: #p::ToolClass::#class,
                description: #description,
                settings: &[#(#settings),*],
                // The struct is taken apart by one closure and the body called by another,
                // so that the struct's types come from the proofs alone, never from the
                // body's signature (see `Proofs` in the run-time half).
                body: #body_value,
                file: ::core::file!(),
                line: ::core::line!(),
                schemas: #p::Schemas::new(),
            };

            #implement

            // The type may be `#[deprecated]`: naming it here is the macro's, not the user's.
            #[allow(deprecated)]
            const _: () = {
                #p::inventory::submit! {
                    #p::ToolRegistration::new(#name, <#ident as #p::StaticTool>::definition, ::core::file!(), ::core::line!())
                }
            };
        };
    }
}

/// The arguments struct, and the two lists that connect it to the body: the proofs of the
/// parameters' types and the pattern of their values, each `(first, (second, ()))`.
struct Arguments {
    declaration: TokenStream,
    proofs: TokenStream,
    fields: TokenStream,
    /// How the arguments are normalised: by their names, or by the struct's `Serialize`.
    normal: TokenStream,
}

impl Arguments {
    fn new(tool: &ToolFn<'_>, p: &TokenStream) -> Self {
        // Each parameter's type is proven usable, on its own tokens, before anything uses it:
        // the struct is generic, and receives its type arguments only through the proofs (see
        // `proofs` in the run-time half). A type that fails its proof is reported once, there,
        // and nothing downstream reports it again.
        let mut generics = Vec::new();
        let mut fields = Vec::new();
        let mut proofs = Vec::new();
        // Whether every field serialises as its type does, under its own name: then the
        // normal form is written from the fields by code shared with every tool whose
        // parameters have the same types, and the struct needs no `Serialize` of its own.
        let mut plain = true;
        for (i, param) in tool.args().enumerate() {
            let id = param.ident;
            let ty = param.ty;
            let attrs = &param.field_attrs;
            let keys: Vec<(String, bool)> = attrs.iter().flat_map(|a| codec_keys(a)).collect();
            plain &= attrs
                .iter()
                .filter(|a| a.path().is_ident("serde"))
                .flat_map(|a| codec_keys(a))
                .all(|(key, valued)| serialise_as_is(&key, valued));
            if keys.iter().any(|(key, valued)| concrete_key(key, *valued)) {
                // The attribute names code written for the concrete type (`with = "module"`,
                // `default = "path"`, `skip_serializing_if = "..."`): the field keeps that
                // type, and it is not proven, since a custom codec frees the type of the
                // traits.
                fields.push(quote!(#(#attrs)* #id: #ty));
                proofs.push(quote!(#p::param_with_codec::<#ty>()));
                continue;
            }
            let generic = format_ident!("__P{}", i);
            // schemars, unlike serde, does not bound a generic `#[serde(default)]` field by
            // `Default` (nor by `Serialize`, which it needs to show the default in the
            // schema). A field's own bound replaces the one schemars infers, hence
            // `JsonSchema` too.
            let default_bound = keys.iter().any(|(key, _)| key == "default").then(|| {
                let bound = quote!(#generic: #p::schemars::JsonSchema + ::core::default::Default + #p::serde::Serialize)
                    .to_string();
                quote!(#[schemars(bound = #bound)])
            });
            fields.push(quote!(#(#attrs)* #default_bound #id: #generic));
            proofs.push(quote_spanned!(ty.span()=> #p::param::<#ty, _>()));
            generics.push(generic);
        }
        let generics = (!generics.is_empty()).then(|| quote!(<#(#generics),*>));
        let serde_crate = quote!(#p::serde).to_string().replace(' ', "");
        let schemars_crate = quote!(#p::schemars).to_string().replace(' ', "");
        let (serialize, normal) = if plain {
            let names = tool.args().map(|param| param.ident.unraw().to_string());
            (None, quote!(#p::Named(&[#(#names),*])))
        } else {
            (Some(quote!(#p::serde::Serialize,)), quote!(#p::Derived))
        };
        let declaration = quote! {
            #[derive(#p::serde::Deserialize, #serialize #p::schemars::JsonSchema)]
            #[serde(crate = #serde_crate, deny_unknown_fields)]
            #[schemars(crate = #schemars_crate)]
            struct __IdemArgs #generics { #(#fields,)* }
        };
        Arguments {
            declaration,
            normal,
            proofs: list(proofs),
            fields: list(tool.args().map(|param| {
                let id = param.ident;
                quote!(#id)
            })),
        }
    }
}

/// `(a, (b, ()))`: a list of any length, as the run-time half's `Proofs` reads it.
fn list(items: impl IntoIterator<Item = TokenStream>) -> TokenStream {
    let items: Vec<_> = items.into_iter().collect();
    items
        .into_iter()
        .rev()
        .fold(quote!(()), |rest, item| quote!((#item, #rest)))
}

/// The body, out of reach inside the anonymous `const` under the function's own name: it runs
/// only through the dispatcher. The context comes first, owned by an async body (so that its
/// future is the handler's without an `async` block around it) and lent to a synchronous one;
/// the user's name for it is bound to a borrow of that.
fn body(tool: &ToolFn<'_>, p: &TokenStream, hidden: &Hidden) -> ItemFn {
    let ctx = &hidden.ctx;
    let mut body = without_param_attrs(tool.item);
    body.vis = syn::Visibility::Inherited;
    // Docs, `#[deprecated]` and `#[cfg]` went to the tool's type; the rest (lint levels,
    // `#[cfg_attr]`, `#[inline]`) is about the body.
    body.attrs
        .retain(|a| !a.path().is_ident("doc") && !crate::tool_type::is_type_attr(a));
    // The signature is the macro's to require (a `Result`, owned parameters, `async` or
    // not), so lints about the signature of a private function do not apply to it.
    body.attrs.push(syn::parse_quote!(#[allow(
        clippy::unnecessary_wraps,
        clippy::needless_pass_by_value,
        clippy::unused_async
    )]));
    // The parameters arrive as the list the proofs typed, `(a, (b, ()))`, and the context
    // first: owned by an async body (its future must own what it borrows), lent to a
    // synchronous one.
    let inputs = std::mem::take(&mut body.sig.inputs);
    let mut pats = Vec::new();
    let mut types = Vec::new();
    let mut context = None;
    for input in inputs {
        if let FnArg::Typed(pt) = input {
            if is_context_type(&pt.ty) {
                context = Some((pt.pat, pt.ty));
            } else {
                pats.push(*pt.pat);
                types.push(*pt.ty);
            }
        }
    }
    let asyncness = body.sig.asyncness.is_some();
    if asyncness {
        body.sig
            .inputs
            .push(syn::parse_quote!(#ctx: #p::ToolContext));
    } else {
        body.sig
            .inputs
            .push(syn::parse_quote!(#ctx: &#p::ToolContext));
    }
    let (pats, types) = (
        list(pats.iter().map(|p| quote!(#p))),
        list(types.iter().map(|t| quote!(#t))),
    );
    body.sig.inputs.push(syn::parse_quote!(#pats: #types));
    if let Some((pat, ty)) = context {
        let value = if asyncness {
            quote!(&#ctx)
        } else {
            quote!(#ctx)
        };
        body.block
            .stmts
            .insert(0, syn::parse_quote!(let #pat: #ty = #value;));
    }
    body
}

/// The body's future, from the context and the parameters, proven `Send` on the function's
/// name (the dispatcher may resume a tool on another thread): the closure binds only hidden
/// names, and calls the body by the function's own name, which rustc's messages then use.
fn call(tool: &ToolFn<'_>, p: &TokenStream, hidden: &Hidden) -> TokenStream {
    let Hidden { ctx, params, .. } = hidden;
    let body = &tool.item.sig.ident;
    let span = body.span();
    let future = if tool.item.sig.asyncness.is_some() {
        quote_spanned!(span=> #body(#ctx, #params))
    } else {
        // A synchronous body runs when the handler's future is first polled, as an async one
        // does, so that the dispatcher's panic and lease handling cover it.
        quote_spanned!(span=> #p::lazy(move |_| #body(&#ctx, #params)))
    };
    quote_spanned!(span=> |#ctx, #params| #p::send(#future))
}

/// What the attribute and `#[secret]` set, as `Setting`s; what they leave out is not listed.
fn settings(tool: &ToolFn<'_>, attr: &Attr, p: &TokenStream) -> Vec<TokenStream> {
    let s = quote!(#p::Setting);
    let mut settings = Vec::new();
    for (variant, value) in [
        ("TtlSecs", attr.ttl_secs),
        ("LeaseSecs", attr.lease_secs),
        ("WaitSecs", attr.wait_secs),
        ("BackoffMs", attr.backoff_ms),
        ("VerifyAfterSecs", attr.verify_after_secs),
    ] {
        if let Some(v) = value {
            let variant = format_ident!("{variant}");
            settings.push(quote!(#s::#variant(#v)));
        }
    }
    if let Some(v) = attr.max_attempts {
        settings.push(quote!(#s::MaxAttempts(#v)));
    }
    if let Some(v) = attr.approvers {
        settings.push(quote!(#s::Approvers(#v)));
    }
    if let Some(v) = &attr.version {
        settings.push(quote!(#s::Version(#v)));
    }
    if attr.open_world {
        settings.push(quote!(#s::OpenWorld));
    }
    if attr.reject_on_key_reuse {
        settings.push(quote!(#s::RejectOnKeyReuse));
    }
    if !attr.scopes.is_empty() {
        let scopes = &attr.scopes;
        settings.push(quote!(#s::Scopes(&[#(#scopes),*])));
    }
    // The hooks are called through traits whose errors name the signature they need,
    // spanned on the hook's path.
    if let Some(path) = &attr.natural_key {
        let p = respan(p, path.span());
        let call = quote_spanned!(path.span()=> #p::NaturalKeyFn::key(&#path, __idem_v));
        settings.push(quote!(#s::NaturalKey(|__idem_v| #call)));
    }
    if let Some(path) = &attr.verify {
        let p = respan(p, path.span());
        let call = quote_spanned!(path.span()=> #p::verify(&#path, &__idem_ctx).await);
        settings
            .push(quote!(#s::Verify(|__idem_ctx| ::std::boxed::Box::pin(async move { #call }))));
    }
    if let Some(path) = &attr.authorize {
        let p = respan(p, path.span());
        let call = quote_spanned!(path.span()=> #p::authorize(&#path, __idem_v, __idem_run));
        settings.push(quote!(#s::Authorize(|__idem_v, __idem_run| #call)));
    }
    if let Some(path) = &attr.authorize_async {
        let p = respan(p, path.span());
        let call = quote_spanned!(path.span()=> #p::authorize_async(&#path, __idem_ctx, __idem_v));
        settings.push(quote!(#s::AuthorizeAsync(|__idem_ctx, __idem_v| #call)));
    }
    if let Some(path) = &attr.approve_when {
        let p = respan(p, path.span());
        let call = quote_spanned!(path.span()=> #p::approve_when(&#path, __idem_v, __idem_run));
        settings.push(quote!(#s::ApproveWhen(|__idem_v, __idem_run| #call)));
    }
    if let Some(path) = &attr.precondition {
        let p = respan(p, path.span());
        let call = quote_spanned!(path.span()=> #p::precondition(&#path, __idem_ctx, __idem_v));
        settings.push(quote!(#s::Precondition(|__idem_ctx, __idem_v| #call)));
    }
    if let Some(path) = &attr.compensate {
        let p = respan(p, path.span());
        let call = quote_spanned!(path.span()=> #p::compensate(&#path, __idem_ctx, __idem_undo));
        settings.push(quote!(#s::Compensate(|__idem_ctx, __idem_undo| #call)));
    }
    if let Some(path) = &attr.limits {
        settings.push(quote_spanned!(path.span()=> #s::Limits(#path)));
    }
    if let Some((variant, span)) = attr.escalate {
        let variant = syn::Ident::new(variant, span);
        settings.push(quote_spanned!(span=> #s::Escalate(#p::Escalate::#variant)));
    }
    for param in tool.args().filter(|param| param.secret.is_some()) {
        // The argument's JSON name, escaped as RFC 6901 says.
        let name = json_name(param).replace('~', "~0").replace('/', "~1");
        let pointer = format!("/{name}");
        settings.push(quote!(#s::Secret(#pointer)));
    }
    settings
}

/// `tokens` with every span set to `span`: a path of the run-time half written where the
/// user's tokens are, so that rustc's labels on a call through it stay on those tokens.
fn respan(tokens: &TokenStream, span: Span) -> TokenStream {
    tokens
        .clone()
        .into_iter()
        .map(|mut t| {
            t.set_span(span);
            t
        })
        .collect()
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

/// Whether a serde key leaves the field's serialisation as its type's, under its own name:
/// `default` and `alias` change only what is read.
fn serialise_as_is(key: &str, valued: bool) -> bool {
    (key == "default" && !valued) || key == "alias"
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

#[cfg(test)]
#[path = "expand_tests.rs"]
mod tests;
