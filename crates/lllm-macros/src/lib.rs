//! The procedural macros of [lllm](https://docs.rs/lllm), re-exported by it
//! as `lllm::tool` and `lllm::JsonSchema` (feature `macros`, on by default).
//! Their expansions name `::lllm`, so use them through `lllm`; the docs with
//! runnable examples are on the re-exports.

mod derive;
mod tool;

use proc_macro::TokenStream;

/// Makes an ordinary function a tool: see `lllm::tool`.
#[proc_macro_attribute]
pub fn tool(attribute: TokenStream, item: TokenStream) -> TokenStream {
    tool::expand(attribute.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// schemars' `JsonSchema` derive through `lllm::schemars`: see `lllm::JsonSchema`.
#[proc_macro_derive(JsonSchema, attributes(schemars, serde, validate, garde))]
pub fn json_schema(item: TokenStream) -> TokenStream {
    derive::expand(item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
