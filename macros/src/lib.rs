//! `#[sql_bounds]`: adds to a generic impl or function over `DB` the bounds every statement of
//! Custodian's store needs from sqlx, so that each `impl<DB> ...Store for SqlStore<DB>` states
//! only what is its own (the rows it reads, `for<'r> Row: FromRow<'r, DB::Row>`).
//!
//! Rust does not carry bounds on other types (`i64: Encode<DB>`) from a trait's where clause to
//! its users, so a trait alias cannot hold them; an attribute keeps the item formatted by
//! rustfmt, which a function-like macro wrapping the item would not. The bounds added:
//!
//! - `DB: Dialect` (the item's module must have `Dialect` in scope);
//! - `&mut DB::Connection` is an executor (so is `&Pool<DB>`), `DB::Arguments` are arguments;
//! - `&str`, `String`, `i64`, `f64`, `bool` and `&[u8]` encode and have a type; their
//!   `Option`s (and `Option<Vec<u8>>`) encode.

use proc_macro::TokenStream;
use quote::quote;
use syn::{parse_macro_input, parse_quote, Item, WhereClause, WherePredicate};

fn bounds() -> Vec<WherePredicate> {
    vec![
        parse_quote!(DB: Dialect),
        parse_quote!(for<'c> &'c mut DB::Connection: ::sqlx::Executor<'c, Database = DB>),
        parse_quote!(for<'q> DB::Arguments<'q>: ::sqlx::IntoArguments<'q, DB>),
        parse_quote!(for<'q> &'q str: ::sqlx::Encode<'q, DB> + ::sqlx::Type<DB>),
        parse_quote!(for<'q> String: ::sqlx::Encode<'q, DB> + ::sqlx::Type<DB>),
        parse_quote!(for<'q> i64: ::sqlx::Encode<'q, DB> + ::sqlx::Type<DB>),
        parse_quote!(for<'q> f64: ::sqlx::Encode<'q, DB> + ::sqlx::Type<DB>),
        parse_quote!(for<'q> bool: ::sqlx::Encode<'q, DB> + ::sqlx::Type<DB>),
        parse_quote!(for<'q> &'q [u8]: ::sqlx::Encode<'q, DB> + ::sqlx::Type<DB>),
        parse_quote!(for<'q> Option<&'q str>: ::sqlx::Encode<'q, DB>),
        parse_quote!(for<'q> Option<String>: ::sqlx::Encode<'q, DB>),
        parse_quote!(for<'q> Option<i64>: ::sqlx::Encode<'q, DB>),
        parse_quote!(for<'q> Option<Vec<u8>>: ::sqlx::Encode<'q, DB>),
    ]
}

fn extend(clause: &mut Option<WhereClause>) {
    let clause = clause.get_or_insert_with(|| parse_quote!(where));
    clause.predicates.extend(bounds());
}

/// Adds the store's sqlx bounds over `DB` to an `impl` or `fn` (see the crate's doc).
#[proc_macro_attribute]
pub fn sql_bounds(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(proc_macro2::Span::call_site(), "#[sql_bounds] takes no arguments")
            .to_compile_error()
            .into();
    }
    let mut item = parse_macro_input!(item as Item);
    match &mut item {
        Item::Impl(i) => extend(&mut i.generics.where_clause),
        Item::Fn(f) => extend(&mut f.sig.generics.where_clause),
        _ => {
            return syn::Error::new(proc_macro2::Span::call_site(), "#[sql_bounds] goes on an impl or a fn")
                .to_compile_error()
                .into()
        }
    }
    quote!(#item).into()
}
