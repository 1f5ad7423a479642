//! iggy-wire-derive: `#[derive(Wire)]` emits `WireEncode` and `WireDecode` for a struct with
//! named fields. Each field's codec comes from its `#[wire(...)]` attribute, mapped to a codec
//! type in `iggy_wire::field`, so the byte logic lives once, in iggy-wire:
//!
//! | attribute | codec | Rust type |
//! |---|---|---|
//! | (none) | `Plain` (the type's own impls) | any `WireEncode + WireDecode` |
//! | `name` | u8-length UTF-8 | `&'a str` |
//! | `string(u8)` / `string(u32)` | length-prefixed UTF-8 | `&'a str` |
//! | `bytes(u8)` / `bytes(u32)` | length-prefixed bytes | `&'a [u8]` |
//! | `rest` | every remaining byte | `&'a [u8]` |
//! | `opt(K)` | u8 flag then K | `Option<T>` |
//! | `opt_pad(N, K)` | u8 flag then K, or 0 then N zero bytes | `Option<T>` |
//! | `sized(K)` | u32 byte length then K filling it exactly | `T` |
//! | `vec(u32, K)` / `vec(u8, K)` / `vec(rest, K)` | count-prefixed / to the end | `Vec<T>` |
//! | `vec(flag, K)` | each element after a u8 1, closed by a u8 0 | `Vec<T>` |
//!
//! It also emits `WireJson` (the canonical decoded form of conformance vectors), field by field.
use proc_macro::TokenStream;
use proc_macro2::{TokenStream as Ts, TokenTree};
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, parse_macro_input};

#[proc_macro_derive(Wire, attributes(wire))]
pub fn derive_wire(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn codec(tokens: &[TokenTree], span: proc_macro2::Span) -> syn::Result<Ts> {
    let f = quote!(::iggy_wire::field);
    let word = match tokens.first() {
        Some(TokenTree::Ident(i)) => i.to_string(),
        _ => return Err(syn::Error::new(span, "expected a codec name")),
    };
    let args: Vec<TokenTree> = match tokens.get(1) {
        Some(TokenTree::Group(g)) => g.stream().into_iter().collect(),
        _ => Vec::new(),
    };
    let split: Vec<Vec<TokenTree>> = args
        .split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
        .map(|s| s.to_vec())
        .filter(|s| !s.is_empty())
        .collect();
    let prefix = |a: &[TokenTree]| -> syn::Result<Ts> {
        match a.first().map(|t| t.to_string()).as_deref() {
            Some("u8") => Ok(quote!(#f::U8)),
            Some("u32") => Ok(quote!(#f::U32)),
            _ => Err(syn::Error::new(span, "expected u8 or u32")),
        }
    };
    Ok(match word.as_str() {
        "plain" => quote!(#f::Plain),
        "name" => quote!(#f::Str<#f::U8>),
        "rest" => quote!(#f::Rest),
        "string" => {
            let p = prefix(split.first().map(|v| v.as_slice()).unwrap_or(&[]))?;
            quote!(#f::Str<#p>)
        }
        "bytes" => {
            let p = prefix(split.first().map(|v| v.as_slice()).unwrap_or(&[]))?;
            quote!(#f::Bytes<#p>)
        }
        "opt" => {
            let inner = codec(split.first().map(|v| v.as_slice()).unwrap_or(&[]), span)?;
            quote!(#f::Opt<#inner>)
        }
        "sized" => {
            let inner = codec(split.first().map(|v| v.as_slice()).unwrap_or(&[]), span)?;
            quote!(#f::Sized<#inner>)
        }
        "opt_pad" => {
            let n: Ts = split.first().map(|v| v.iter().cloned().collect()).unwrap_or_default();
            let inner = codec(split.get(1).map(|v| v.as_slice()).unwrap_or(&[]), span)?;
            quote!(#f::OptPad<#inner, #n>)
        }
        "vec" => {
            let (Some(kind), inner) = (split.first(), split.get(1)) else {
                return Err(syn::Error::new(span, "expected vec(u32|u8|rest|flag, codec)"));
            };
            let inner = match inner {
                Some(i) => codec(i, span)?,
                None => quote!(#f::Plain),
            };
            match kind.first().map(|t| t.to_string()).as_deref() {
                Some("u32") => quote!(#f::VecCount<#inner>),
                Some("rest") => quote!(#f::VecRest<#inner>),
                Some("u8") => quote!(#f::VecCount8<#inner>),
                Some("flag") => quote!(#f::VecFlag<#inner>),
                _ => return Err(syn::Error::new(span, "expected vec(u32|u8|rest|flag, codec)")),
            }
        }
        other => return Err(syn::Error::new(span, format!("unknown wire codec `{other}`"))),
    })
}

fn expand(input: &DeriveInput) -> syn::Result<Ts> {
    let name = &input.ident;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(name, "Wire derives only structs"));
    };
    let fields: Vec<_> = match &data.fields {
        Fields::Named(n) => n.named.iter().collect(),
        Fields::Unit => Vec::new(),
        Fields::Unnamed(_) => return Err(syn::Error::new_spanned(name, "named fields only")),
    };
    let mut size = Vec::new();
    let mut check = Vec::new();
    let mut enc = Vec::new();
    let mut dec = Vec::new();
    let mut idents = Vec::new();
    let mut json = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let ident = field.ident.clone().unwrap();
        let ty = &field.ty;
        let mut c = quote!(::iggy_wire::field::Plain);
        for attr in field.attrs.iter().filter(|a| a.path().is_ident("wire")) {
            let list = attr.meta.require_list()?;
            let toks: Vec<TokenTree> = list.tokens.clone().into_iter().collect();
            c = codec(&toks, proc_macro2::Span::call_site())?;
        }
        let fname = ident.to_string();
        size.push(quote!(<#c as ::iggy_wire::field::Codec<'_, #ty>>::size(&self.#ident)));
        check.push(quote!(<#c as ::iggy_wire::field::Codec<'_, #ty>>::check(&self.#ident, #fname)?;));
        enc.push(quote!(<#c as ::iggy_wire::field::Codec<'_, #ty>>::encode(&self.#ident, out);));
        dec.push(quote!(let #ident = <#c as ::iggy_wire::field::Codec<'__w, #ty>>::decode(input, #fname)?;));
        let key = format!("{}\"{fname}\":", if i == 0 { "" } else { "," });
        json.push(quote!(out.push_str(#key); ::iggy_wire::WireJson::write_json(&self.#ident, out);));
        idents.push(ident);
    }
    // Decode borrows from the input with the struct's own lifetime if it has one.
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();
    let lt = input.generics.lifetimes().next().map(|l| l.lifetime.clone());
    let decode_impl = match lt {
        Some(l) => {
            let dec = dec.iter().map(|d| {
                let s = d.to_string().replace("'__w", &l.to_string());
                s.parse::<Ts>().unwrap()
            });
            quote! {
                impl #impl_g ::iggy_wire::WireDecode<#l> for #name #ty_g #where_c {
                    fn decode_from(input: &mut &#l [u8]) -> Result<Self, ::iggy_wire::WireError> {
                        #(#dec)*
                        Ok(Self { #(#idents),* })
                    }
                }
            }
        }
        None => {
            let w = format_ident!("__w");
            let _ = w;
            quote! {
                impl<'__w> ::iggy_wire::WireDecode<'__w> for #name {
                    fn decode_from(input: &mut &'__w [u8]) -> Result<Self, ::iggy_wire::WireError> {
                        #(#dec)*
                        Ok(Self { #(#idents),* })
                    }
                }
            }
        }
    };
    Ok(quote! {
        impl #impl_g ::iggy_wire::WireEncode for #name #ty_g #where_c {
            fn encoded_size(&self) -> usize { 0 #(+ #size)* }
            fn encode_to(&self, out: &mut Vec<u8>) { #(#enc)* }
            fn check_encodable(&self) -> Result<(), ::iggy_wire::WireError> {
                #(#check)*
                Ok(())
            }
        }
        impl #impl_g ::iggy_wire::WireJson for #name #ty_g #where_c {
            fn write_json(&self, out: &mut String) {
                out.push('{');
                #(#json)*
                out.push('}');
            }
        }
        #decode_impl
    })
}
