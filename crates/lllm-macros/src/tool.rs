//! `#[lllm::tool]`: an ordinary function, sync or async, of any number of
//! arguments, becomes a tool. The function stays as written (callable as
//! before); next to it, in the type namespace, a hidden struct of the same
//! name carries `tool()`, which builds the `lllm::tool::FunctionTool`:
//! `Registry::new().tool_impl(word_count::tool())`. A struct rather than a
//! module, because a module's `super::` cannot reach a function declared in
//! a block (a doc test's, a test's), and items in a block can.
//!
//! The arguments become the fields of a private struct deriving serde's
//! `Deserialize` and schemars' `JsonSchema` through `lllm::__private`, so
//! the schema is schemars' and the user's Cargo.toml needs neither crate.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, FnArg, ItemFn, Lit, LitStr, Meta, Pat, ReturnType, Signature, Type, TypePath,
};

pub(crate) fn expand(attribute: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let renamed = parse_attribute(attribute)?;
    let mut function: ItemFn = syn::parse2(item)?;
    refuse_unsupported(&function.sig)?;
    let output = output(&function.sig)?;
    let name = match &renamed {
        Some(literal) => checked_name(&literal.value(), literal.span())?,
        None => checked_name(&function.sig.ident.to_string(), function.sig.ident.span())?,
    };
    let (description, mut listed) = split_docs(&docs(&function.attrs));
    let mut arguments = Vec::new();
    for input in &mut function.sig.inputs {
        arguments.push(argument(input, &mut listed)?);
    }
    if let Some((unknown, _)) = listed.first() {
        return Err(syn::Error::new(
            function.sig.ident.span(),
            format!(
                "the `# Arguments` section of `{}` documents `{unknown}`, which is not one of its arguments",
                function.sig.ident
            ),
        ));
    }

    let ident = &function.sig.ident;
    let visibility = &function.vis;
    let fields = arguments.iter().map(|argument| {
        let (ident, ty) = (&argument.ident, &argument.owned);
        let doc = argument.doc.iter();
        quote!(#(#[doc = #doc])* #ident: #ty)
    });
    let bindings = arguments.iter().map(|argument| {
        let ident = &argument.ident;
        match argument.passed {
            Passed::MutRef => quote!(mut #ident),
            _ => quote!(#ident),
        }
    });
    let passed = arguments.iter().map(|argument| {
        let ident = &argument.ident;
        match argument.passed {
            Passed::Value => quote!(#ident),
            Passed::Ref => quote!(&#ident),
            Passed::MutRef => quote!(&mut #ident),
        }
    });
    let call = quote!(#ident(#(#passed),*));
    let returned = format_ident!("__lllm_returned", span = Span::mixed_site());
    let run = if function.sig.asyncness.is_some() {
        // Spanned at the name: a future that is not `Send` is reported there.
        let sendable = quote_spanned!(ident.span()=> ::lllm::__private::sendable);
        quote!(let #returned = #sendable(#call).await;)
    } else {
        quote!(let #returned = ::lllm::__private::blocking(move || #call).await;)
    };
    let answer = match output {
        Output::Value(span) => quote_spanned!(span=>
            ::core::result::Result::Ok::<_, ::core::convert::Infallible>(
                ::lllm::__private::value(#returned)
            )
        ),
        Output::Result(span) => quote_spanned!(span=> ::lllm::__private::result(#returned)),
    };
    let arguments_type = format_ident!("__LllmArguments", span = Span::mixed_site());
    let received = format_ident!("__lllm_arguments", span = Span::mixed_site());
    let tool_doc = format!(
        "The tool `{name}` made of the function `{ident}` by `#[lllm::tool]`: \
         register it with `lllm::Registry::tool_impl({ident}::tool())`."
    );
    Ok(quote! {
        #function

        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code)]
        #visibility struct #ident {}

        impl #ident {
            #[doc = #tool_doc]
            #[allow(dead_code)]
            #visibility fn tool() -> ::lllm::tool::FunctionTool {
                #[derive(::lllm::__private::serde::Deserialize, ::lllm::__private::schemars::JsonSchema)]
                #[serde(crate = "::lllm::__private::serde")]
                #[schemars(crate = "::lllm::__private::schemars")]
                struct #arguments_type {
                    #(#fields,)*
                }
                ::lllm::tool::FunctionTool::new(
                    #name,
                    ::core::option::Option::Some(#description),
                    |#received: #arguments_type| async move {
                        let #arguments_type { #(#bindings),* } = #received;
                        #run
                        #answer
                    },
                )
            }
        }
    })
}

/// `name = "…"`, or nothing.
fn parse_attribute(attribute: TokenStream) -> syn::Result<Option<LitStr>> {
    let mut name = None;
    if attribute.is_empty() {
        return Ok(name);
    }
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            name = Some(meta.value()?.parse::<LitStr>()?);
            Ok(())
        } else {
            Err(meta.error("`#[lllm::tool]` takes only `name = \"…\"`"))
        }
    });
    syn::parse::Parser::parse2(parser, attribute)?;
    Ok(name)
}

/// The tool name providers accept: 1 to 64 ASCII letters, digits, `_`, `-`.
fn checked_name(name: &str, span: Span) -> syn::Result<String> {
    let name = name.strip_prefix("r#").unwrap_or(name);
    if (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
    {
        Ok(name.to_string())
    } else {
        Err(syn::Error::new(
            span,
            format!(
                "the tool name `{name}` must be 1 to 64 ASCII letters, digits, `_` or `-` (what the OpenAI and Anthropic APIs accept)"
            ),
        ))
    }
}

fn refuse_unsupported(signature: &Signature) -> syn::Result<()> {
    let refuse = |span: Span, message: &str| Err(syn::Error::new(span, message));
    if !signature.generics.params.is_empty() || signature.generics.where_clause.is_some() {
        return refuse(
            signature.generics.span(),
            "a tool cannot be generic: its arguments' types make its JSON schema, so they must be concrete",
        );
    }
    if let Some(unsafety) = &signature.unsafety {
        return refuse(
            unsafety.span,
            "a tool cannot be an `unsafe fn`: the model calls it with any arguments",
        );
    }
    if let Some(abi) = &signature.abi {
        return refuse(
            abi.span(),
            "a tool is a Rust function: drop the `extern` ABI",
        );
    }
    if let Some(variadic) = &signature.variadic {
        return refuse(variadic.span(), "a tool cannot be variadic");
    }
    Ok(())
}

/// What the function returns: a value the model sees as JSON, or a
/// `Result` whose `Err` is the tool error the model sees. The span is the
/// return type's, where a type that does not fit is reported.
enum Output {
    Value(Span),
    Result(Span),
}

fn output(signature: &Signature) -> syn::Result<Output> {
    let supported = "a tool returns what the model sees: a value that is `Serialize`, or a `Result<T, E>` with `T: Serialize` and `E: Display`";
    let ty = match &signature.output {
        ReturnType::Default => {
            return Err(syn::Error::new(
                signature.ident.span(),
                format!("`{}` returns nothing, but {supported}", signature.ident),
            ));
        }
        ReturnType::Type(_, ty) => ty,
    };
    match &**ty {
        Type::ImplTrait(_) => Err(syn::Error::new(
            ty.span(),
            format!(
                "a tool cannot return `impl Trait` (write `async fn` for a future): {supported}"
            ),
        )),
        Type::Never(_) => Err(syn::Error::new(
            ty.span(),
            format!("a tool cannot return `!`: {supported}"),
        )),
        Type::Tuple(tuple) if tuple.elems.is_empty() => Err(syn::Error::new(
            ty.span(),
            format!("a tool cannot return `()`: {supported}"),
        )),
        Type::Path(TypePath { qself: None, path })
            if path
                .segments
                .last()
                .is_some_and(|segment| segment.ident == "Result") =>
        {
            Ok(Output::Result(ty.span()))
        }
        _ => Ok(Output::Value(ty.span())),
    }
}

/// How an argument reaches the function from the owned value read from JSON.
enum Passed {
    Value,
    Ref,
    MutRef,
}

struct Argument {
    ident: syn::Ident,
    /// The type read from the JSON arguments: `String` for `&str`,
    /// `Vec<T>` for `&[T]`, `T` for `&T`.
    owned: Type,
    passed: Passed,
    doc: Option<String>,
}

/// One argument of the function: its name, its owned type, its doc (a
/// `///` line on it, which is taken off the function, or its entry in the
/// `# Arguments` list, which is taken out of `listed`).
fn argument(input: &mut FnArg, listed: &mut Vec<(String, String)>) -> syn::Result<Argument> {
    let typed = match input {
        FnArg::Receiver(receiver) => {
            return Err(syn::Error::new(
                receiver.span(),
                "a tool is a free function: it cannot take `self`",
            ));
        }
        FnArg::Typed(typed) => typed,
    };
    let ident = match &*typed.pat {
        Pat::Ident(pattern) if pattern.by_ref.is_none() && pattern.subpat.is_none() => {
            pattern.ident.clone()
        }
        other => {
            return Err(syn::Error::new(
                other.span(),
                "a tool's argument must be a plain name: it is the argument's name in the tool's JSON schema",
            ));
        }
    };
    let own_doc = docs(&typed.attrs);
    typed
        .attrs
        .retain(|attribute| !attribute.path().is_ident("doc"));
    let key = ident.to_string();
    let key = key.strip_prefix("r#").unwrap_or(&key);
    let from_list = listed
        .iter()
        .position(|(name, _)| name == key)
        .map(|index| listed.remove(index).1);
    let doc = if own_doc.trim().is_empty() {
        from_list
    } else {
        Some(own_doc.trim().to_string())
    };
    let (owned, passed) = owned(&typed.ty)?;
    Ok(Argument {
        ident,
        owned,
        passed,
        doc,
    })
}

fn owned(ty: &Type) -> syn::Result<(Type, Passed)> {
    match ty {
        Type::Reference(reference) => {
            if let Some(lifetime) = &reference.lifetime
                && lifetime.ident != "_"
            {
                return Err(syn::Error::new(
                    lifetime.span(),
                    "a tool's argument can borrow only for the call: leave its lifetime out",
                ));
            }
            let passed = if reference.mutability.is_some() {
                Passed::MutRef
            } else {
                Passed::Ref
            };
            let owned = match &*reference.elem {
                Type::Path(path) if path.qself.is_none() && path.path.is_ident("str") => {
                    syn::parse_quote!(::std::string::String)
                }
                Type::Slice(slice) => {
                    let element = &slice.elem;
                    syn::parse_quote!(::std::vec::Vec<#element>)
                }
                other => {
                    owned(other)?;
                    other.clone()
                }
            };
            Ok((owned, passed))
        }
        Type::ImplTrait(_) | Type::Infer(_) => Err(syn::Error::new(
            ty.span(),
            "a tool's argument needs a concrete type: it makes the argument's JSON schema",
        )),
        other => Ok((other.clone(), Passed::Value)),
    }
}

/// The text of the `#[doc]` attributes (`///` lines), one line each.
fn docs(attributes: &[Attribute]) -> String {
    let mut lines = Vec::new();
    for attribute in attributes {
        if let Meta::NameValue(pair) = &attribute.meta
            && pair.path.is_ident("doc")
            && let Expr::Lit(literal) = &pair.value
            && let Lit::Str(text) = &literal.lit
        {
            for line in text.value().lines() {
                lines.push(line.strip_prefix(' ').unwrap_or(line).to_string());
            }
        }
    }
    lines.join("\n")
}

/// The function's doc comment split into the tool's description (the text
/// before its first heading) and the entries of its `# Arguments` section
/// (rustdoc's convention: ``* `name` - what it is``).
fn split_docs(doc: &str) -> (String, Vec<(String, String)>) {
    let mut description = Vec::new();
    let mut entries: Vec<(String, String)> = Vec::new();
    // Before the first heading: the description; in `# Arguments`: the
    // entries; the other sections (`# Examples`, `# Panics`) are for people.
    let (mut in_description, mut in_arguments, mut in_code) = (true, false, false);
    for line in doc.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_code = !in_code;
        }
        if let Some(heading) = trimmed.strip_prefix('#').filter(|_| !in_code) {
            in_description = false;
            in_arguments = heading.trim_start_matches('#').trim() == "Arguments";
            continue;
        }
        if in_description {
            description.push(line);
            continue;
        }
        if !in_arguments {
            continue;
        }
        let bullet = trimmed
            .strip_prefix("* ")
            .or_else(|| trimmed.strip_prefix("- "));
        match bullet {
            Some(entry) => {
                let entry = entry.trim_start();
                let (name, rest) = match entry.strip_prefix('`') {
                    Some(quoted) => quoted.split_once('`').unwrap_or((quoted, "")),
                    None => entry
                        .split_once(|c: char| c.is_whitespace() || c == ':')
                        .unwrap_or((entry, "")),
                };
                let rest = rest.trim_start();
                let rest = rest
                    .strip_prefix(['-', ':', '–', '—'])
                    .unwrap_or(rest)
                    .trim();
                entries.push((name.trim().to_string(), rest.to_string()));
            }
            None if !trimmed.is_empty() => {
                if let Some((_, text)) = entries.last_mut() {
                    if !text.is_empty() {
                        text.push(' ');
                    }
                    text.push_str(trimmed);
                }
            }
            None => {}
        }
    }
    (description.join("\n").trim().to_string(), entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one error `#[lllm::tool] item` gives.
    fn refused(attribute: TokenStream, item: TokenStream) -> String {
        match expand(attribute, item) {
            Ok(expanded) => panic!("expanded: {expanded}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn bad_uses_are_refused_with_the_reason() {
        let cases = [
            (
                quote!(
                    fn f(&self) -> u32 {
                        1
                    }
                ),
                "a tool is a free function: it cannot take `self`",
            ),
            (
                quote!(
                    fn f<T: Into<u32>>(n: T) -> u32 {
                        n.into()
                    }
                ),
                "a tool cannot be generic: its arguments' types make its JSON schema, so they must be concrete",
            ),
            (
                quote!(
                    fn f((a, b): (u32, u32)) -> u32 {
                        a + b
                    }
                ),
                "a tool's argument must be a plain name: it is the argument's name in the tool's JSON schema",
            ),
            (
                quote!(
                    fn f(n: impl Into<u32>) -> u32 {
                        n.into()
                    }
                ),
                "a tool's argument needs a concrete type: it makes the argument's JSON schema",
            ),
            (
                quote!(
                    fn f(text: &'static str) -> usize {
                        text.len()
                    }
                ),
                "a tool's argument can borrow only for the call: leave its lifetime out",
            ),
            (
                quote!(
                    fn f(n: u32) {
                        drop(n)
                    }
                ),
                "`f` returns nothing, but a tool returns what the model sees: a value that is `Serialize`, or a `Result<T, E>` with `T: Serialize` and `E: Display`",
            ),
            (
                quote!(
                    fn f() -> () {}
                ),
                "a tool cannot return `()`: a tool returns what the model sees",
            ),
            (
                quote!(
                    fn f() -> impl Future<Output = u32> {
                        async { 1 }
                    }
                ),
                "a tool cannot return `impl Trait` (write `async fn` for a future)",
            ),
            (
                quote!(
                    unsafe fn f() -> u32 {
                        1
                    }
                ),
                "a tool cannot be an `unsafe fn`: the model calls it with any arguments",
            ),
            (
                quote!(
                    /// # Arguments
                    /// * `txt` - The text.
                    fn f(text: String) -> usize {
                        text.len()
                    }
                ),
                "the `# Arguments` section of `f` documents `txt`, which is not one of its arguments",
            ),
        ];
        for (item, expected) in cases {
            let error = refused(TokenStream::new(), item.clone());
            assert!(error.starts_with(expected), "{item}: {error}");
        }
        assert_eq!(
            refused(
                quote!(title = "x"),
                quote!(
                    fn f() -> u32 {
                        1
                    }
                )
            ),
            "`#[lllm::tool]` takes only `name = \"…\"`"
        );
        assert!(
            refused(
                quote!(name = "word count"),
                quote!(
                    fn f() -> u32 {
                        1
                    }
                )
            )
            .starts_with("the tool name `word count` must be 1 to 64 ASCII letters")
        );
    }

    #[test]
    fn the_description_stops_at_the_first_heading_and_arguments_are_listed() {
        let doc = "Count words.\n\nIn a text.\n\n# Arguments\n\n* `text` - The text;\n  all of it.\n- limit: At most this many.\n\n# Examples\n\n```\n# use x;\n* `not` - an argument\n```";
        let (description, entries) = split_docs(doc);
        assert_eq!(description, "Count words.\n\nIn a text.");
        assert_eq!(
            entries,
            [
                ("text".to_string(), "The text; all of it.".to_string()),
                ("limit".to_string(), "At most this many.".to_string()),
            ]
        );
    }

    #[test]
    fn borrowed_arguments_are_read_owned_and_lent() {
        let expanded = expand(
            TokenStream::new(),
            quote!(
                fn f(text: &str, words: &[String], n: &mut u32) -> usize {
                    0
                }
            ),
        )
        .unwrap()
        .to_string();
        assert!(
            expanded.contains("text : :: std :: string :: String"),
            "{expanded}"
        );
        assert!(
            expanded.contains("words : :: std :: vec :: Vec < String >"),
            "{expanded}"
        );
        assert!(
            expanded.contains("f (& text , & words , & mut n)"),
            "{expanded}"
        );
        assert!(
            expanded.contains(":: lllm :: __private :: blocking"),
            "{expanded}"
        );
    }
}
