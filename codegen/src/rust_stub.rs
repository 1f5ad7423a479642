//! The Rust SDK stub (`sdk-stubs/rust`): owned client types with explicit, field-by-field
//! encode/decode/JSON code emitted from each spec type, a per-command `client` API, the error
//! table and the version gates. It shares no emitter with `generated/` (which borrows from the
//! input and expands its codecs through the derive), so it is a second, independent reading of the
//! spec that conformance can hold against the official crates; its shape (runtime, types,
//! per-command functions, hooks) is the template for stubs in other languages.
use crate::emit::ClientSurface;
use crate::rust::{doc, file, guard, ident, num, window};
use crate::vectors::{Ty, parse_ty};
use crate::{Command, Enum, Model, Spec, Struct, module_of, unpack};
use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};

const GENERATED_BY: &str = "cargo codegen from spec/*.spec (sdk-stubs/rust)";

/// Every file of the stub, keyed by path relative to the workspace.
pub fn emit(spec: &Spec, surface: &ClientSurface, dir: &str) -> Vec<(String, String)> {
    let g = &spec.global;
    let mut out = Vec::new();
    let mut modules = Vec::new();
    for (name, _) in &spec.files {
        let module = module_of(name);
        let enums: Vec<&Enum> = surface
            .enums
            .iter()
            .copied()
            .filter(|e| module_of(&e.file) == module)
            .collect();
        let structs: Vec<&Struct> = surface
            .structs
            .iter()
            .copied()
            .filter(|s| module_of(&s.file) == module)
            .collect();
        if enums.is_empty() && structs.is_empty() {
            continue;
        }
        out.push((
            format!("{dir}/{module}.rs"),
            types_module(g, name, &enums, &structs),
        ));
        modules.push(module);
    }
    out.push((format!("{dir}/lib.rs"), lib(&modules)));
    out.push((format!("{dir}/codec.rs"), codec()));
    out.push((format!("{dir}/errors.rs"), errors(spec)));
    out.push((format!("{dir}/client.rs"), client(spec, surface)));
    out.push((format!("{dir}/registry.rs"), registry(surface)));
    out
}

fn lib(modules: &[String]) -> String {
    let mods = modules.iter().map(|m| ident(m));
    file(
        GENERATED_BY,
        quote! {
            //! iggy-sdk-stub: what a client of iggy-server needs, generated from `spec/`: the frame
            //! headers it sends and reads, the request and response payloads of every command (owned
            //! types, each with `encode`/`decode`), `client` (per command: the code, the request encoder,
            //! the reply decoder, the version window), the error codes and the protocol versions.
            //! Server-only records (storage, replication) are not here. `registry` is the entry point
            //! conformance and the fuzz loop drive by struct name and command code.
            pub mod codec;
            #(pub mod #mods;)*
            pub mod errors;
            pub mod client;
            pub mod registry;
            pub use codec::{Error, Wire};
        },
    )
}

/// The stub's runtime: the error type, the `Wire` trait every type implements, and the byte
/// helpers the emitted code calls. Another language's stub emits the same few helpers.
fn codec() -> String {
    file(
        GENERATED_BY,
        quote! {
            //! The codec runtime the generated types call: little-endian integers, length prefixes
            //! checked against their width, UTF-8 checks, zero-filled reserved bytes, and the canonical
            //! JSON form (fields in spec order, bytes as lowercase hex, enums by variant name).
            use std::fmt;

            /// Why bytes could not be read, or a value could not be written.
            #[derive(Debug, Clone, PartialEq, Eq)]
            pub enum Error {
                /// The input ended before a field was complete.
                UnexpectedEnd { needed: usize, remaining: usize },
                /// A field held a value outside its domain (enum value, flag, UTF-8).
                InvalidValue { field: &'static str },
                /// Bytes that must be zero were not.
                NonZeroReserved { field: &'static str },
                /// A value was read but bytes were left over.
                TrailingBytes { count: usize },
                /// A length or count does not fit its prefix.
                TooLong { field: &'static str, len: usize, max: usize },
            }
            impl fmt::Display for Error {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    match self {
                        Error::UnexpectedEnd { needed, remaining } => write!(f, "input ended: {needed} bytes needed, {remaining} left"),
                        Error::InvalidValue { field } => write!(f, "`{field}` holds an invalid value"),
                        Error::NonZeroReserved { field } => write!(f, "`{field}` has non-zero reserved bytes"),
                        Error::TrailingBytes { count } => write!(f, "{count} bytes after the value"),
                        Error::TooLong { field, len, max } => write!(f, "`{field}` is {len} long, its prefix holds at most {max}"),
                    }
                }
            }
            impl std::error::Error for Error {}

            /// A value with a wire form and a canonical JSON form.
            pub trait Wire: Sized {
                /// Appends the wire bytes; fails when a length does not fit its prefix.
                fn write(&self, out: &mut Vec<u8>) -> Result<(), Error>;
                /// Reads one value from the front of `input`, advancing it.
                fn read(input: &mut &[u8]) -> Result<Self, Error>;
                /// Appends the canonical JSON form.
                fn write_json(&self, out: &mut String);
                /// The wire bytes.
                fn encode(&self) -> Result<Vec<u8>, Error> {
                    let mut out = Vec::new();
                    self.write(&mut out)?;
                    Ok(out)
                }
                /// Reads a value that spans all of `bytes`.
                fn decode(bytes: &[u8]) -> Result<Self, Error> {
                    let mut input = bytes;
                    let value = Self::read(&mut input)?;
                    end(input)?;
                    Ok(value)
                }
                /// The canonical JSON form.
                fn to_json(&self) -> String {
                    let mut out = String::new();
                    self.write_json(&mut out);
                    out
                }
            }

            /// Takes `n` bytes from the front of `input`.
            pub fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], Error> {
                if input.len() < n {
                    return Err(Error::UnexpectedEnd { needed: n, remaining: input.len() });
                }
                let (head, tail) = input.split_at(n);
                *input = tail;
                Ok(head)
            }
            /// Takes `N` bytes as an array (the bytes of a little-endian integer, or `bytes[N]`).
            pub fn array<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], Error> {
                let mut a = [0u8; N];
                a.copy_from_slice(take(input, N)?);
                Ok(a)
            }
            /// Fails unless `input` is used up.
            pub fn end(input: &[u8]) -> Result<(), Error> {
                if input.is_empty() { Ok(()) } else { Err(Error::TrailingBytes { count: input.len() }) }
            }
            /// A one-byte flag: 0 or 1 (booleans, option and list flags).
            pub fn flag(input: &mut &[u8], field: &'static str) -> Result<bool, Error> {
                match take(input, 1)?[0] {
                    0 => Ok(false),
                    1 => Ok(true),
                    _ => Err(Error::InvalidValue { field }),
                }
            }
            /// `n` bytes that must be zero.
            pub fn zeros(input: &mut &[u8], n: usize, field: &'static str) -> Result<(), Error> {
                if take(input, n)?.iter().any(|b| *b != 0) {
                    return Err(Error::NonZeroReserved { field });
                }
                Ok(())
            }
            /// Writes `len` as a `width`-byte (1 or 4) little-endian prefix, refusing what does not fit.
            pub fn put_len(out: &mut Vec<u8>, len: usize, width: usize, field: &'static str) -> Result<(), Error> {
                let max = if width == 1 { u8::MAX as usize } else { u32::MAX as usize };
                if len > max {
                    return Err(Error::TooLong { field, len, max });
                }
                out.extend_from_slice(&(len as u32).to_le_bytes()[..width]);
                Ok(())
            }
            /// Reads a `width`-byte (1 or 4) little-endian length prefix.
            pub fn get_len(input: &mut &[u8], width: usize) -> Result<usize, Error> {
                let mut b = [0u8; 4];
                b[..width].copy_from_slice(take(input, width)?);
                Ok(u32::from_le_bytes(b) as usize)
            }
            /// A length-prefixed string's bytes as UTF-8.
            pub fn utf8(bytes: &[u8], field: &'static str) -> Result<String, Error> {
                String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidValue { field })
            }
            /// Appends `s` as a JSON string.
            pub fn json_str(s: &str, out: &mut String) {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            /// Appends `b` as a JSON string of lowercase hex.
            pub fn json_hex(b: &[u8], out: &mut String) {
                out.push('"');
                for x in b {
                    out.push_str(&format!("{x:02x}"));
                }
                out.push('"');
            }
        },
    )
}

/// The Rust type of a spec type, owned (strings and byte runs are `String` and `Vec<u8>`).
fn owned_ty(g: &Model, ty: &Ty) -> TokenStream {
    match ty {
        Ty::Int { size, signed } => int_ty(*size, *signed),
        Ty::Bool => quote!(bool),
        Ty::Array(n) => {
            let n = num(*n);
            quote!([u8; #n])
        }
        Ty::Zero(_) => quote!(()),
        Ty::Str(_) => quote!(String),
        Ty::Bytes(_) | Ty::Rest => quote!(Vec<u8>),
        Ty::Opt(t) | Ty::OptPad(t, _) => {
            let t = owned_ty(g, t);
            quote!(Option<#t>)
        }
        Ty::Sized(t) => owned_ty(g, t),
        Ty::Vec(t, _) => {
            let t = owned_ty(g, t);
            quote!(Vec<#t>)
        }
        Ty::Enum(n) => item_path(
            &g.enums
                .iter()
                .find(|e| &e.name == n)
                .expect("validated enum")
                .file,
            n,
        ),
        Ty::Struct(n) => item_path(
            &g.structs
                .iter()
                .find(|s| &s.name == n)
                .expect("validated struct")
                .file,
            n,
        ),
    }
}

fn int_ty(size: usize, signed: bool) -> TokenStream {
    let t = format_ident!("{}{}", if signed { "i" } else { "u" }, size * 8);
    quote!(#t)
}

fn item_path(file: &str, name: &str) -> TokenStream {
    let (m, n) = (ident(&module_of(file)), ident(name));
    quote!(crate::#m::#n)
}

fn width(prefix: usize) -> TokenStream {
    let w = num(prefix);
    quote!(#w)
}

/// Statements appending `value` (an expression of type `&T`) as a `ty` to `out`.
fn write_code(ty: &Ty, value: &TokenStream, field: &str) -> TokenStream {
    match ty {
        Ty::Int { .. } => quote!(out.extend_from_slice(&#value.to_le_bytes());),
        Ty::Bool => quote!(out.push(u8::from(*#value));),
        Ty::Array(_) => quote!(out.extend_from_slice(&#value[..]);),
        Ty::Zero(n) => {
            let n = num(*n);
            quote!(out.resize(out.len() + #n, 0);)
        }
        Ty::Str(p) => {
            let w = width(*p);
            quote! {
                codec::put_len(out, #value.len(), #w, #field)?;
                out.extend_from_slice(#value.as_bytes());
            }
        }
        Ty::Bytes(p) => {
            let w = width(*p);
            quote! {
                codec::put_len(out, #value.len(), #w, #field)?;
                out.extend_from_slice(&#value[..]);
            }
        }
        Ty::Rest => quote!(out.extend_from_slice(&#value[..]);),
        Ty::Opt(t) | Ty::OptPad(t, _) => {
            let inner = write_code(t, &quote!(x), field);
            let none = match ty {
                Ty::OptPad(_, n) => {
                    let n = num(1 + n);
                    quote!(out.resize(out.len() + #n, 0))
                }
                _ => quote!(out.push(0)),
            };
            quote! {
                match #value {
                    Some(x) => {
                        out.push(1);
                        #inner
                    }
                    None => #none,
                }
            }
        }
        Ty::Sized(t) => {
            let inner = write_code(t, value, field);
            quote! {
                let mut sized = Vec::new();
                {
                    let out = &mut sized;
                    #inner
                }
                codec::put_len(out, sized.len(), 4, #field)?;
                out.extend_from_slice(&sized);
            }
        }
        Ty::Vec(t, kind) => {
            let inner = write_code(t, &quote!(x), field);
            match *kind {
                "u32" | "u8" => {
                    let w = width(if *kind == "u8" { 1 } else { 4 });
                    quote! {
                        codec::put_len(out, #value.len(), #w, #field)?;
                        for x in #value.iter() { #inner }
                    }
                }
                "flag" => quote! {
                    for x in #value.iter() {
                        out.push(1);
                        #inner
                    }
                    out.push(0);
                },
                _ => quote!(for x in #value.iter() { #inner }),
            }
        }
        Ty::Enum(_) | Ty::Struct(_) => quote!(codec::Wire::write(#value, out)?;),
    }
}

/// An expression reading a `ty` from `input` (a `&mut &[u8]`), `?` on failure.
fn read_code(g: &Model, ty: &Ty, field: &str) -> TokenStream {
    match ty {
        Ty::Int { size, signed } => {
            let t = int_ty(*size, *signed);
            quote!(<#t>::from_le_bytes(codec::array(input)?))
        }
        Ty::Bool => quote!(codec::flag(input, #field)?),
        Ty::Array(_) => quote!(codec::array(input)?),
        Ty::Zero(n) => {
            let n = num(*n);
            quote!(codec::zeros(input, #n, #field)?)
        }
        Ty::Str(p) => {
            let w = width(*p);
            quote!({
                let len = codec::get_len(input, #w)?;
                codec::utf8(codec::take(input, len)?, #field)?
            })
        }
        Ty::Bytes(p) => {
            let w = width(*p);
            quote!({
                let len = codec::get_len(input, #w)?;
                codec::take(input, len)?.to_vec()
            })
        }
        Ty::Rest => quote!(std::mem::take(input).to_vec()),
        Ty::Opt(t) => {
            let inner = read_code(g, t, field);
            quote!(if codec::flag(input, #field)? { Some(#inner) } else { None })
        }
        Ty::OptPad(t, n) => {
            let (inner, n) = (read_code(g, t, field), num(*n));
            quote!(if codec::flag(input, #field)? {
                Some(#inner)
            } else {
                codec::zeros(input, #n, #field)?;
                None
            })
        }
        Ty::Sized(t) => {
            let inner = read_code(g, t, field);
            quote!({
                let len = codec::get_len(input, 4)?;
                let mut sized = codec::take(input, len)?;
                let value = {
                    let input = &mut sized;
                    #inner
                };
                codec::end(sized)?;
                value
            })
        }
        Ty::Vec(t, kind) => {
            let inner = read_code(g, t, field);
            match *kind {
                "u32" | "u8" => {
                    let w = width(if *kind == "u8" { 1 } else { 4 });
                    // The count is bounded by the input so a hostile count cannot reserve memory.
                    quote!({
                        let count = codec::get_len(input, #w)?;
                        let mut list = Vec::with_capacity(count.min(input.len()));
                        for _ in 0..count {
                            list.push(#inner);
                        }
                        list
                    })
                }
                "flag" => quote!({
                    let mut list = Vec::new();
                    while codec::flag(input, #field)? {
                        list.push(#inner);
                    }
                    list
                }),
                _ => quote!({
                    let mut list = Vec::new();
                    while !input.is_empty() {
                        let before = input.len();
                        list.push(#inner);
                        // A zero-sized element would never use the input up.
                        if input.len() == before {
                            return Err(codec::Error::InvalidValue { field: #field });
                        }
                    }
                    list
                }),
            }
        }
        Ty::Enum(_) | Ty::Struct(_) => {
            let t = owned_ty(g, ty);
            quote!(<#t as codec::Wire>::read(input)?)
        }
    }
}

/// Statements appending the JSON form of `value` (an expression of type `&T`).
fn json_code(ty: &Ty, value: &TokenStream) -> TokenStream {
    match ty {
        Ty::Int { .. } => quote!(out.push_str(&#value.to_string());),
        Ty::Bool => quote!(out.push_str(if *#value { "true" } else { "false" });),
        Ty::Array(_) | Ty::Bytes(_) | Ty::Rest => quote!(codec::json_hex(&#value[..], out);),
        Ty::Zero(_) => TokenStream::new(),
        Ty::Str(_) => quote!(codec::json_str(#value, out);),
        Ty::Opt(t) | Ty::OptPad(t, _) => {
            let inner = json_code(t, &quote!(x));
            quote! {
                match #value {
                    Some(x) => { #inner }
                    None => out.push_str("null"),
                }
            }
        }
        Ty::Sized(t) => json_code(t, value),
        Ty::Vec(t, _) => {
            let inner = json_code(t, &quote!(x));
            quote! {
                out.push('[');
                for (i, x) in #value.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    #inner
                }
                out.push(']');
            }
        }
        Ty::Enum(_) | Ty::Struct(_) => quote!(codec::Wire::write_json(#value, out);),
    }
}

/// A module of client types from one spec file.
fn types_module(g: &Model, source: &str, enums: &[&Enum], structs: &[&Struct]) -> String {
    let enums = enums.iter().map(|e| client_enum(e));
    let structs = structs.iter().map(|s| client_struct(g, s));
    file(GENERATED_BY, {
        let d = format!("Client types declared in spec/{source}.");
        quote! {
            #![doc = #d]
            #![allow(clippy::all)]
            use crate::codec;
            #(#enums)*
            #(#structs)*
        }
    })
}

fn client_enum(e: &Enum) -> TokenStream {
    let name = ident(&e.name);
    let repr = ident(&e.repr);
    let field = e.name.as_str();
    // A value only the server's journal holds is no client's business.
    let client_variants: Vec<&(u64, String)> = e
        .variants
        .iter()
        .zip(&e.variant_journal_only)
        .filter(|(_, journal_only)| !**journal_only)
        .map(|(variant, _)| variant)
        .collect();
    let defs = client_variants.iter().enumerate().map(|(i, (v, n))| {
        let (n, v) = (ident(n), num(*v));
        let default = (i == 0).then(|| quote!(#[default]));
        quote!(#default #n = #v,)
    });
    let reads = client_variants.iter().map(|(v, n)| {
        let (n, v) = (ident(n), num(*v));
        quote!(#v => Ok(#name::#n),)
    });
    let names = client_variants.iter().map(|(_, n)| {
        let (i, text) = (ident(n), format!("\"{n}\""));
        quote!(#name::#i => #text,)
    });
    let d = doc(&format!(
        "`{}` ({}:{}), a `{}` on the wire.",
        e.name, e.file, e.line, e.repr
    ));
    quote! {
        #d
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(#repr)]
        pub enum #name { #(#defs)* }
        impl codec::Wire for #name {
            fn write(&self, out: &mut Vec<u8>) -> Result<(), codec::Error> {
                out.extend_from_slice(&(*self as #repr).to_le_bytes());
                Ok(())
            }
            fn read(input: &mut &[u8]) -> Result<Self, codec::Error> {
                match <#repr>::from_le_bytes(codec::array(input)?) {
                    #(#reads)*
                    _ => Err(codec::Error::InvalidValue { field: #field }),
                }
            }
            fn write_json(&self, out: &mut String) {
                out.push_str(match self { #(#names)* });
            }
        }
    }
}

fn client_struct(g: &Model, s: &Struct) -> TokenStream {
    let name = ident(&s.name);
    let typed: Vec<(&crate::Field, Ty)> = s
        .fields
        .iter()
        .map(|f| (f, parse_ty(g, &f.ty).expect("validated field type")))
        .collect();
    let stored: Vec<&(&crate::Field, Ty)> = typed
        .iter()
        .filter(|(_, t)| !matches!(t, Ty::Zero(_)))
        .collect();
    let defs = stored.iter().map(|(f, t)| {
        let (fd, n, t) = (
            (!f.doc.is_empty()).then(|| doc(&f.doc)),
            ident(&f.name),
            owned_ty(g, t),
        );
        quote!(#fd pub #n: #t,)
    });
    // `let Self { a, b } = self;` binds every stored field as `&T`, the form the code takes.
    let bound: Vec<_> = stored.iter().map(|(f, _)| ident(&f.name)).collect();
    let writes = typed
        .iter()
        .map(|(f, t)| write_code(t, &ident(&f.name).into_token_stream(), &f.name));
    let reads = typed.iter().map(|(f, t)| {
        let (n, code) = (ident(&f.name), read_code(g, t, &f.name));
        if matches!(t, Ty::Zero(_)) {
            quote!(#code;)
        } else {
            quote!(let #n = #code;)
        }
    });
    let names = stored.iter().map(|(f, _)| ident(&f.name));
    let json = stored.iter().enumerate().map(|(i, (f, t))| {
        let (key, n) = (
            format!("{}\"{}\":", if i == 0 { "" } else { "," }, f.name),
            ident(&f.name),
        );
        let code = json_code(t, &n.clone().into_token_stream());
        quote! {
            out.push_str(#key);
            #code
        }
    });
    let what = if s.doc.is_empty() {
        String::new()
    } else {
        format!(": {}", s.doc)
    };
    let d = doc(&format!("`{}` ({}:{}){what}.", s.name, s.file, s.line));
    let size = s.fixed.map(|n| {
        let n = num(n);
        quote! {
            impl #name {
                /// Encoded size in bytes: every field is fixed-width.
                pub const SIZE: usize = #n;
            }
        }
    });
    quote! {
        #d
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct #name { #(#defs)* }
        #size
        impl codec::Wire for #name {
            fn write(&self, out: &mut Vec<u8>) -> Result<(), codec::Error> {
                let #name { #(#bound),* } = self;
                #(#writes)*
                Ok(())
            }
            fn read(input: &mut &[u8]) -> Result<Self, codec::Error> {
                #(#reads)*
                Ok(#name { #(#names),* })
            }
            fn write_json(&self, out: &mut String) {
                let #name { #(#bound),* } = self;
                out.push('{');
                #(#json)*
                out.push('}');
            }
        }
    }
}

/// `errors.rs`: the error codes as a table a client looks a status up in.
fn errors(spec: &Spec) -> String {
    let rows =
        spec.files
            .iter()
            .flat_map(|(_, m)| m.errors.iter())
            .map(|(code, name, message, _)| {
                let code = num(*code);
                quote!(ErrorInfo { code: #code, name: #name, message: #message },)
            });
    file(
        GENERATED_BY,
        quote! {
            //! Every wire error code (a reply header's `status`, a rejected result section's entry).
            /// One error code: its number, its name and its message template (`{0}` marks an argument).
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub struct ErrorInfo {
                pub code: u32,
                pub name: &'static str,
                pub message: &'static str,
            }
            /// Every error code, in spec order.
            pub const ERRORS: &[ErrorInfo] = &[#(#rows)*];
            /// The error with this code, if the spec declares it.
            pub fn error_info(code: u32) -> Option<&'static ErrorInfo> {
                ERRORS.iter().find(|e| e.code == code)
            }
        },
    )
}

fn snake(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("_")
}

/// Per command row, a unique snake name: the command name, with the version suffix when an
/// earlier row has the same name (`topic_get_v0_11_1`).
fn row_names(cmds: &[&Command]) -> Vec<String> {
    cmds.iter()
        .enumerate()
        .map(|(k, c)| {
            let base = snake(&c.name);
            if cmds[..k].iter().any(|p| p.name == c.name) {
                let tag = c
                    .until
                    .as_deref()
                    .or(c.since.as_deref())
                    .unwrap_or("x")
                    .replace('.', "_");
                format!("{base}_v{tag}")
            } else {
                base
            }
        })
        .collect()
}

/// The client type of a command's request or response struct; None for a body with no fields.
fn body_ty(surface: &ClientSurface, name: &str) -> Option<TokenStream> {
    let s = surface
        .structs
        .iter()
        .find(|s| s.name == name && !s.fields.is_empty())?;
    Some(item_path(&s.file, &s.name))
}

/// `client.rs`: the protocol versions, the command table and one encode/decode pair per row.
fn client(spec: &Spec, surface: &ClientSurface) -> String {
    let g = &spec.global;
    let cmds = &surface.commands;
    let versions = g.versions.iter().map(|(v, p)| {
        let p = num(*p);
        quote!((#v, #p),)
    });
    let current = num(g.versions.first().map_or(0, |v| v.1));
    // The header's operation as the typed enum when the spec declares it, else by name.
    let operation = surface
        .enums
        .iter()
        .find(|e| e.name == "Operation")
        .map(|e| item_path(&e.file, &e.name));
    let operation_ty = operation.clone().unwrap_or_else(|| quote!(&'static str));
    let rows = cmds.iter().map(|c| {
        let (since, until) = window(&c.since, &c.until);
        let (code, since, until, rf) = (num(c.code), num(since), num(until), c.rf);
        let (name, req, resp) = (&c.name, &c.req, &c.resp);
        let op = match &operation {
            Some(t) => {
                let v = ident(&c.op);
                quote!(#t::#v)
            }
            None => {
                let v = c.op.as_str();
                quote!(#v)
            }
        };
        quote!(CommandRow { code: #code, name: #name, operation: #op, result_framed: #rf, request: #req, response: #resp, since: #since, until: #until },)
    });
    let section = body_ty(surface, crate::emit::RESULT_SECTION);
    if cmds.iter().any(|c| c.rf) {
        assert!(
            section.is_some(),
            "result-framed commands need the `{}` struct",
            crate::emit::RESULT_SECTION
        );
    }
    let result_payload = section.map(|section| {
        quote! {
            /// The payload after a result section, or the refusal it carries.
            pub fn result_payload(body: &[u8]) -> Result<&[u8], ReplyError> {
                let mut input = body;
                let section = #section::read(&mut input)?;
                match section.results.first() {
                    None => Ok(input),
                    Some(entry) => Err(ReplyError::Rejected(entry.result)),
                }
            }
        }
    });
    let mut items = Vec::new();
    for (c, n) in cmds.iter().zip(row_names(cmds)) {
        let (since, until) = window(&c.since, &c.until);
        let upto = if until == u32::MAX {
            "current".to_string()
        } else {
            unpack(until)
        };
        let shown = format!(
            "`{}` ({}), protocol {}..={upto}",
            c.name,
            c.code,
            unpack(since)
        );
        let (code_name, code) = (format_ident!("{}", n.to_uppercase()), num(c.code));
        let (enc, dec) = (
            format_ident!("encode_{n}"),
            format_ident!("decode_{n}_reply"),
        );
        let d = doc(&format!("Code of {shown}."));
        items.push(quote!(#d pub const #code_name: u32 = #code;));
        items.push(match body_ty(surface, &c.req) {
            Some(t) => {
                let d = doc(&format!("Request body of {shown}: `{}`.", c.req));
                quote!(#d pub fn #enc(request: &#t) -> Result<Vec<u8>, Error> { request.encode() })
            }
            None => {
                let d = doc(&format!("Request body of {shown}: empty."));
                quote!(#d pub fn #enc() -> Vec<u8> { Vec::new() })
            }
        });
        let framed = c.rf.then(|| quote!(let body = result_payload(body)?;));
        let after = if c.rf {
            " after the result section"
        } else {
            ""
        };
        items.push(match body_ty(surface, &c.resp) {
            Some(t) => {
                let d = doc(&format!("Reply body of {shown}: `{}`{after}.", c.resp));
                quote! {
                    #d
                    pub fn #dec(body: &[u8]) -> Result<#t, ReplyError> {
                        #framed
                        Ok(<#t>::decode(body)?)
                    }
                }
            }
            None => {
                let d = doc(&format!("Reply body of {shown}: empty{after}."));
                quote! {
                    #d
                    pub fn #dec(body: &[u8]) -> Result<(), ReplyError> {
                        #framed
                        Ok(codec::end(body)?)
                    }
                }
            }
        });
    }
    file(
        GENERATED_BY,
        quote! {
            #![allow(clippy::all)]
            //! Per command row: its code, `encode_<name>` (the request body after the 256-byte request
            //! header) and `decode_<name>_reply` (the reply body after the reply header). A result-framed
            //! reply starts with a result section: count 0 then the payload, or one `[index][code]`
            //! entry when the server refused the request ([`ReplyError::Rejected`]).
            use crate::codec::{self, Error, Wire};
            /// The protocol versions a client may speak, newest first: `(x.y.z, packed)`, packed as
            /// `major<<20 | minor<<10 | patch` (the request header's `release`).
            pub const VERSIONS: &[(&str, u32)] = &[#(#versions)*];
            /// The packed version this stub speaks natively.
            pub const CURRENT_VERSION: u32 = #current;
            /// One command row.
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub struct CommandRow {
                pub code: u32,
                pub name: &'static str,
                /// Sent in the request header; `NonReplicated` commands also carry the code there.
                pub operation: #operation_ty,
                /// Whether the reply body starts with a result section.
                pub result_framed: bool,
                pub request: &'static str,
                pub response: &'static str,
                /// Packed inclusive version window; 0 and u32::MAX when open.
                pub since: u32,
                pub until: u32,
            }
            /// Every command row.
            pub const COMMANDS: &[CommandRow] = &[#(#rows)*];
            /// The row of command `code` for a client speaking the packed `version` (None: the
            /// command does not exist in that version).
            pub fn command(code: u32, version: u32) -> Option<&'static CommandRow> {
                COMMANDS.iter().find(|c| c.code == code && c.since <= version && version <= c.until)
            }
            /// Why a reply body could not be read.
            #[derive(Debug, Clone, PartialEq, Eq)]
            pub enum ReplyError {
                /// The bytes do not decode.
                Wire(Error),
                /// The server refused the request with this error code.
                Rejected(u32),
            }
            impl From<Error> for ReplyError {
                fn from(e: Error) -> Self {
                    ReplyError::Wire(e)
                }
            }
            impl ReplyError {
                /// The refusal's error code, looked up in the error table.
                pub fn rejection(&self) -> Option<&'static crate::errors::ErrorInfo> {
                    match self {
                        ReplyError::Rejected(code) => crate::errors::error_info(*code),
                        ReplyError::Wire(_) => None,
                    }
                }
            }
            #result_payload
            #(#items)*
        },
    )
}

/// `registry.rs`: the stub by struct name and by command code, for conformance and fuzzing.
fn registry(surface: &ClientSurface) -> String {
    let names = surface
        .structs
        .iter()
        .filter(|s| !s.fields.is_empty())
        .map(|s| s.name.as_str());
    let arms = surface
        .structs
        .iter()
        .filter(|s| !s.fields.is_empty())
        .map(|s| {
            let (n, t) = (&s.name, item_path(&s.file, &s.name));
            quote!(#n => Some(roundtrip_as::<#t>(input)),)
        });
    let row_names = row_names(&surface.commands);
    let mut enc_arms = Vec::new();
    let mut dec_arms = Vec::new();
    for (c, n) in surface.commands.iter().zip(&row_names) {
        let g_ = guard(c);
        let (enc, dec) = (
            format_ident!("encode_{n}"),
            format_ident!("decode_{n}_reply"),
        );
        enc_arms.push(match body_ty(surface, &c.req) {
            Some(t) => quote!(#g_ => Some((|| -> Result<Encoded, Error> {
                let request = <#t>::decode(body)?;
                Ok(Encoded { json: request.to_json(), bytes: client::#enc(&request)? })
            })()),),
            None => quote!(#g_ => Some(codec::end(body).map(|()| Encoded { json: "{}".into(), bytes: client::#enc() })),),
        });
        dec_arms.push(match body_ty(surface, &c.resp) {
            Some(_) => quote!(#g_ => Some(client::#dec(body).and_then(|reply| Ok(Encoded { json: reply.to_json(), bytes: reply.encode()? }))),),
            None => quote!(#g_ => Some(client::#dec(body).map(|()| Encoded { json: "{}".into(), bytes: Vec::new() })),),
        });
    }
    file(
        GENERATED_BY,
        quote! {
            #![allow(clippy::all)]
            //! The stub by name: every client struct (`STRUCTS`, `roundtrip`) and every command row by
            //! code and packed version (`encode_request`, `decode_reply`). Conformance holds what these
            //! return against the official crates; the fuzz loop feeds them arbitrary bytes.
            use crate::client::{self, ReplyError};
            use crate::codec::{self, Error, Wire};
            /// Every client struct, in spec order.
            pub const STRUCTS: &[&str] = &[#(#names),*];
            /// A value decoded by the stub, encoded again and rendered.
            #[derive(Debug, Clone, PartialEq, Eq)]
            pub struct Roundtrip {
                /// The value encoded again.
                pub bytes: Vec<u8>,
                /// The canonical JSON form of the decoded value.
                pub json: String,
                /// `decode(encode(value)) == value`.
                pub stable: bool,
            }
            fn roundtrip_as<T: Wire + PartialEq>(input: &[u8]) -> Result<Roundtrip, Error> {
                let value = T::decode(input)?;
                let bytes = value.encode()?;
                let stable = T::decode(&bytes).is_ok_and(|again| again == value);
                Ok(Roundtrip { json: value.to_json(), bytes, stable })
            }
            /// Decodes all of `input` as the client struct `name` (None: no such client struct).
            pub fn roundtrip(name: &str, input: &[u8]) -> Option<Result<Roundtrip, Error>> {
                match name {
                    #(#arms)*
                    _ => None,
                }
            }
            /// A command body as the stub sees it: the canonical JSON of the value and its bytes
            /// as the stub encodes them.
            #[derive(Debug, Clone, PartialEq, Eq)]
            pub struct Encoded {
                pub json: String,
                pub bytes: Vec<u8>,
            }
            /// Reads `body` as the request of command `code` at the packed `version` and writes it
            /// with that row's `encode_*` (None: no such command in that version).
            pub fn encode_request(code: u32, version: u32, body: &[u8]) -> Option<Result<Encoded, Error>> {
                match code {
                    #(#enc_arms)*
                    _ => None,
                }
            }
            /// Reads a reply body of command `code` at the packed `version` with that row's
            /// `decode_*_reply`; the bytes are the payload (result section removed) encoded again.
            pub fn decode_reply(code: u32, version: u32, body: &[u8]) -> Option<Result<Encoded, ReplyError>> {
                match code {
                    #(#dec_arms)*
                    _ => None,
                }
            }
        },
    )
}
