//! The callback URL a webhook posts to: one grammar ([`URL_PATTERN`]) that both the OpenAPI
//! document states and [`check_url`] applies, so a URL the document allows is accepted and one
//! it refuses is refused (docs/webhooks.md#the-callback-url).

use std::sync::LazyLock;

use regex_automata::{
    dfa::{dense, Automaton},
    Anchored, Input,
};

use crate::{
    config::Environment,
    error::{Error, Result},
};

/// Longest callback URL, characters.
pub const MAX_URL_LEN: usize = 2048;

/// A callback URL, in the regular-expression syntax JSON Schema and Rust share: `http` or
/// `https` (any case); a host that is a DNS name (letters, digits and hyphens; the last label
/// starts with a letter, so no name reads as an IPv4 address), an IPv4 address, or an IPv6
/// address in brackets (RFC 3986 §3.2.2, without an embedded IPv4 part or zone); an optional
/// port 1 to 65535; then a path, query or fragment of printable ASCII without spaces. No user
/// name or password.
pub const URL_PATTERN: &str = concat!(
    "^[Hh][Tt][Tt][Pp][Ss]?://(",
    // A DNS name.
    "([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)*[A-Za-z]([A-Za-z0-9-]*[A-Za-z0-9])?",
    // An IPv4 address, without leading zeros.
    "|((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])",
    // An IPv6 address: eight groups, or fewer around one `::`.
    "|\\[(([0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}",
    "|([0-9A-Fa-f]{1,4}:){1,7}:",
    "|([0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}",
    "|([0-9A-Fa-f]{1,4}:){1,5}(:[0-9A-Fa-f]{1,4}){1,2}",
    "|([0-9A-Fa-f]{1,4}:){1,4}(:[0-9A-Fa-f]{1,4}){1,3}",
    "|([0-9A-Fa-f]{1,4}:){1,3}(:[0-9A-Fa-f]{1,4}){1,4}",
    "|([0-9A-Fa-f]{1,4}:){1,2}(:[0-9A-Fa-f]{1,4}){1,5}",
    "|[0-9A-Fa-f]{1,4}:(:[0-9A-Fa-f]{1,4}){1,6}",
    "|:((:[0-9A-Fa-f]{1,4}){1,7}|:))\\]",
    ")",
    "(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?",
    "([/?#][!-~]*)?$",
);

/// [`URL_PATTERN`] compiled once; `None` only if the constant itself were not a pattern, which
/// the unit tests rule out.
static GRAMMAR: LazyLock<Option<dense::DFA<Vec<u32>>>> = LazyLock::new(|| dense::DFA::new(URL_PATTERN).ok());

fn fits_grammar(url: &str) -> bool {
    let Some(dfa) = GRAMMAR.as_ref() else { return false };
    let input = Input::new(url).anchored(Anchored::Yes);
    // The pattern ends in `$`, so any match spans the whole URL.
    matches!(dfa.try_search_fwd(&input), Ok(Some(_)))
}

/// Checks a callback URL (§4.4): at most [`MAX_URL_LEN`] characters, of the form
/// [`URL_PATTERN`] states, https only in production. Errors: 400 `InvalidField` naming `url`.
pub fn check_url(url: &str, env: Environment) -> Result<()> {
    if url.len() > MAX_URL_LEN {
        return Err(Error::invalid_field("url", format!("at most {MAX_URL_LEN} characters")));
    }
    if !fits_grammar(url) {
        return Err(Error::invalid_field(
            "url",
            "not an http(s) URL of the accepted form: a host that is a DNS name, an IPv4 address or a \
             bracketed IPv6 address, an optional port (1-65535), then a path, query or fragment of \
             printable ASCII without spaces; no user name or password",
        ));
    }
    let parsed =
        url::Url::parse(url).map_err(|e| Error::invalid_field("url", format!("not an absolute URL: {e}")))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if env == Environment::Test => Ok(()),
        _ => Err(Error::invalid_field("url", "the production environment requires https")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_requires_https_callbacks() {
        assert!(check_url("http://example.com/h", Environment::Test).is_ok());
        assert!(check_url("http://example.com/h", Environment::Production).is_err());
        assert!(check_url("https://example.com/h", Environment::Production).is_ok());
        assert!(check_url("HTTPS://Example.COM/h", Environment::Production).is_ok());
    }

    #[test]
    fn the_grammar_accepts_names_addresses_and_ports() {
        for url in [
            "https://example.com",
            "https://hooks.example.com/path?query=1#frag",
            "https://1password.example/x",
            "http://localhost:4000/deposits",
            "http://127.0.0.1:4000/deposits",
            "http://10.0.0.1",
            "https://example.com:65535/",
            "https://example.com?only=query",
            "http://[::1]:8080/hook",
            "http://[2001:db8::1]/",
            "http://[::]/",
            "http://[1:2:3:4:5:6:7:8]/",
            "https://a-b.c-d.example/%7Euser/{x}|y",
        ] {
            assert!(fits_grammar(url), "{url}");
            assert!(url::Url::parse(url).is_ok(), "what the grammar accepts, the URL parser reads: {url}");
            assert!(check_url(url, Environment::Test).is_ok(), "{url}");
        }
    }

    #[test]
    fn the_grammar_refuses_what_is_not_a_plain_http_callback() {
        for url in [
            "https://",
            "mailto:a@b.co",
            "ftp://example.com",
            "not a url",
            "http://E.wgn.Jgn.hp.w.A*",
            "https://user:pass@example.com/",
            "https://example.com:0/",
            "https://example.com:65536/",
            "https://-example.com/",
            "https://example-.com/",
            "https://example.com./",
            "https://example.com/a b",
            "https://example.com/\u{e9}",
            "http://0x7f000001/",
            "http://1.2.3/",
            "http://01.2.3.4/",
            "http://256.1.1.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://[fe80::1%25eth0]/",
            "http://[1:2:3:4:5:6:7:8:9]/",
            "https://example.com/\n",
        ] {
            assert!(!fits_grammar(url), "{url:?}");
            assert!(check_url(url, Environment::Test).is_err(), "{url:?}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        assert!(check_url(&long, Environment::Test).is_err());
    }
}
