//! `#[derive(lllm::JsonSchema)]`: schemars' own derive, reached through
//! `lllm::schemars` so the user's Cargo.toml needs no `schemars`.
//!
//! A derive cannot add `#[schemars(crate = "…")]` to the item it is given,
//! so it derives schemars' `JsonSchema` for a private copy of the item (same
//! fields, docs and serde/schemars attributes, renamed back to the item's
//! name) and implements the trait for the item by delegating to the copy.
//! The schema is schemars' to the byte; the copy is never built.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};
use syn::{Attribute, Data, DeriveInput, Fields, Token, parse_quote};

/// The attributes the copy keeps: docs (descriptions) and what schemars reads.
fn kept(attribute: &Attribute) -> bool {
    ["doc", "serde", "schemars", "validate", "garde"]
        .iter()
        .any(|name| attribute.path().is_ident(name))
}

fn keep_fields(fields: &mut Fields) {
    for field in fields.iter_mut() {
        field.attrs.retain(kept);
    }
}

/// Whether a `serde`/`schemars` attribute among `attributes` has the key
/// `key`, and whether it has it bare (`default` rather than `default = "…"`).
fn has_key(attributes: &[Attribute], key: &str) -> syn::Result<(bool, bool)> {
    let (mut found, mut bare) = (false, false);
    for attribute in attributes {
        if !(attribute.path().is_ident("serde") || attribute.path().is_ident("schemars")) {
            continue;
        }
        attribute.parse_nested_meta(|meta| {
            let this = meta.path.is_ident(key);
            if meta.input.peek(Token![=]) {
                meta.value()?.parse::<syn::Expr>()?;
                found |= this;
            } else if meta.input.peek(syn::token::Paren) {
                let content;
                syn::parenthesized!(content in meta.input);
                content.parse::<TokenStream>()?;
                found |= this;
            } else if this {
                found = true;
                bare = true;
            }
            Ok(())
        })?;
    }
    Ok((found, bare))
}

pub(crate) fn expand(item: TokenStream) -> syn::Result<TokenStream> {
    let input: DeriveInput = syn::parse2(item)?;
    let ident = &input.ident;
    let copy_ident = format_ident!("__LllmJsonSchemaOf{}", ident);
    let mut copy = input.clone();
    copy.ident = copy_ident.clone();
    copy.attrs.retain(kept);
    match &mut copy.data {
        Data::Struct(data) => keep_fields(&mut data.fields),
        Data::Enum(data) => {
            for variant in &mut data.variants {
                variant.attrs.retain(kept);
                keep_fields(&mut variant.fields);
            }
        }
        Data::Union(data) => {
            return Err(syn::Error::new(
                data.union_token.span,
                "JSON schemas are derived for structs and enums, not unions",
            ));
        }
    }
    // The schema's name is the item's, as schemars' derive gives it.
    let name = ident.to_string();
    if !has_key(&input.attrs, "rename")?.0 {
        copy.attrs.push(parse_quote!(#[schemars(rename = #name)]));
    }
    // A container-level `default` reads the defaults of the fields from a
    // value of the type: the item's `Default`, not the copy's (it has none).
    if has_key(&input.attrs, "default")?.1 {
        let (_, type_generics, _) = input.generics.split_for_impl();
        let path = format!(
            "{ident}{}::default",
            type_generics.as_turbofish().to_token_stream()
        );
        copy.attrs.push(parse_quote!(#[schemars(default = #path)]));
    }

    let mut generics = input.generics.clone();
    for parameter in generics.type_params_mut() {
        parameter
            .bounds
            .push(parse_quote!(::lllm::__private::schemars::JsonSchema));
    }
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    let (_, type_generics, _) = input.generics.split_for_impl();
    let copy_type = quote!(#copy_ident #type_generics);
    let schemars = quote!(::lllm::__private::schemars);
    Ok(quote! {
        const _: () = {
            #[derive(#schemars::JsonSchema)]
            #[schemars(crate = "::lllm::__private::schemars")]
            #[allow(dead_code, non_camel_case_types)]
            #copy

            #[automatically_derived]
            impl #impl_generics #schemars::JsonSchema for #ident #type_generics #where_clause {
                fn inline_schema() -> bool {
                    <#copy_type as #schemars::JsonSchema>::inline_schema()
                }

                fn schema_name() -> ::std::borrow::Cow<'static, str> {
                    <#copy_type as #schemars::JsonSchema>::schema_name()
                }

                fn schema_id() -> ::std::borrow::Cow<'static, str> {
                    <#copy_type as #schemars::JsonSchema>::schema_id()
                }

                fn json_schema(generator: &mut #schemars::SchemaGenerator) -> #schemars::Schema {
                    <#copy_type as #schemars::JsonSchema>::json_schema(generator)
                }

                fn _schemars_private_non_optional_json_schema(
                    generator: &mut #schemars::SchemaGenerator,
                ) -> #schemars::Schema {
                    <#copy_type as #schemars::JsonSchema>::_schemars_private_non_optional_json_schema(
                        generator,
                    )
                }

                fn _schemars_private_is_option() -> bool {
                    <#copy_type as #schemars::JsonSchema>::_schemars_private_is_option()
                }
            }
        };
    })
}
