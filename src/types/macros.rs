//! The two macros that declare the service's value types: `text_enum!` (a closed vocabulary
//! spelt as given) and `checked_string!` (a string newtype checked once, held inline).

use super::*;

pub(crate) fn string_schema(pattern: &str, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

/// Declares a closed vocabulary as an enum whose variants are spelt as given (`Variant =
/// "text"`): `ALL`, `as_str`, and `FromStr` failing with `$unknown`. Serves the scope values
/// (§4.3), the audit entry types and the error names.
macro_rules! text_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident ($unknown:literal) { $($variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($variant,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The value as written.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = &'static str;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)*
                    _ => Err($unknown),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        /// A string, one of the values (the OpenAPI document lists them).
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some($name::ALL.iter().map(|v| v.as_str())))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}
pub(crate) use text_enum;

/// Declares a string newtype checked by `$check`, with `FromStr`, serde and an OpenAPI schema.
/// The text is held inline (at most `$cap` bytes, the rule's own bound), so an id costs no
/// allocation: a 100-id lookup builds several hundred of them (docs/decisions.md#performance-as-the-data-grows).
macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, $cap:literal, $check:expr, $pattern:expr, $expect:literal) => {
        $(#[$doc])*
        ///
        /// Stored as text: `sqlx::Type` lets rows decode it and statements bind it on both
        /// backends (what the database holds was checked when it was written).
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(arrayvec::ArrayString<$cap>);

        impl $name {
            /// What a valid value looks like, for error messages.
            pub const EXPECTED: &'static str = $expect;

            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The owned text.
            pub fn into_string(self) -> String {
                self.0.to_string()
            }

            /// A value read back from the database, checked when it was written and not again
            /// (as decoding a row through `sqlx::Type` does); only its length is, which the
            /// inline text needs. Errors: `EXPECTED`, for text longer than any valid value.
            pub(crate) fn from_stored(s: &str) -> Result<Self, &'static str> {
                arrayvec::ArrayString::from(s).map($name).map_err(|_| $expect)
            }
        }

        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }
            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            String: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer<'q>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                self.0.to_string().encode(buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            String: sqlx::Decode<'r, DB>,
        {
            fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <String as sqlx::Decode<'r, DB>>::decode(value)?;
                Ok($name::from_stored(&text)?)
            }
        }

        impl FromStr for $name {
            type Err = &'static str;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let check: fn(&str) -> bool = $check;
                match check(s).then(|| arrayvec::ArrayString::from(s).ok()).flatten() {
                    Some(text) => Ok($name(text)),
                    None => Err($expect),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        /// Reads as its text wherever text is wanted (formatting, hashing, comparing).
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0.as_str() == other
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // A visitor on `str`, so that path extractors report the failing key.
                struct V;
                impl de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expect)
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$name, E> {
                        s.parse().map_err(|e: &str| E::custom(format!("must be {e}")))
                    }
                }
                d.deserialize_str(V)
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                string_schema($pattern, $expect)
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}
pub(crate) use checked_string;
