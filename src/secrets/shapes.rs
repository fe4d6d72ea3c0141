//! What a credential looks like from the outside: a variable name shaped like one, and a
//! value that carries URL credentials (`scheme://user:password@host`). Used to keep such
//! variables away from programs started with `env_all` (see [`crate::tool::env`]), to refuse
//! them as values written into a spec, and to register the password inside a URL that is
//! registered as a secret.

/// Parts of a name (split on `_`) that mark a credential wherever they stand.
const CREDENTIAL_PARTS: &[&str] = &["KEY", "KEYS", "SK", "PAT", "PW", "PWD"];

/// Text that marks a credential anywhere in a name (`PGPASSWORD`, `MY_APITOKEN`).
const CREDENTIAL_WORDS: &[&str] = &[
    "PASS",
    "SECRET",
    "TOKEN",
    "CRED",
    "APIKEY",
    "PRIVATE",
    "COOKIE",
    "SESSIONID",
    "CONNECTION_STRING",
    "CONNSTR",
];

/// Name prefixes of whole families of credentials (cloud keys, and runtape's own variables:
/// the receipt key, the serve token, a database URL).
const CREDENTIAL_PREFIXES: &[&str] = &["AWS_", "RUNTAPE_"];

/// True for a variable name that looks like it holds a credential (any case):
///
/// - it contains `PASS` (`PGPASSWORD`, `PGPASSFILE`, `DB_PASSWD`), `SECRET`, `TOKEN`,
///   `CRED` (`CREDENTIALS`, `DB_CREDS`), `APIKEY`, `PRIVATE`, `COOKIE`, `SESSIONID` or a
///   connection string's name;
/// - it contains `AUTH` other than in the word `AUTHOR` (`OAUTH_CLIENT`, `SSH_AUTH_SOCK`,
///   `XAUTHORITY`; `GIT_AUTHOR_NAME` is not one);
/// - one of its `_`-separated parts is `KEY`, `KEYS`, `SK`, `PAT`, `PW` or `PWD`
///   (`OPENAI_API_KEY`, `STRIPE_SK`, `GH_PAT`), or it ends in `KEY` after a `_`;
/// - it starts with `AWS_` or `RUNTAPE_`.
///
/// A program started with `env_all = true` gets no such variable unless its spec names it.
/// The rule errs on the side of withholding: a spec passes a variable it really needs by
/// name.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_WORDS.iter().any(|w| upper.contains(w))
        || CREDENTIAL_PREFIXES.iter().any(|p| upper.starts_with(p))
        || upper
            .split('_')
            .any(|part| CREDENTIAL_PARTS.contains(&part) || mentions_auth(part))
}

/// `AUTH` in a part of a name, except as the word `AUTHOR(S)`.
fn mentions_auth(part: &str) -> bool {
    part.match_indices("AUTH")
        .any(|(at, _)| !part[at..].starts_with("AUTHOR") || part[at..].starts_with("AUTHORI"))
}

/// The user information of every URL in `text` (`user:password` in
/// `postgres://user:password@host/db`, `token` in `https://token@github.com`), in order.
/// Only `scheme://` URLs count; the authority ends at the first `/`, `?`, `#` or whitespace.
pub fn url_credentials(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_ok = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        let after = &rest[at + 3..];
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        if scheme_ok
            && let Some((userinfo, _host)) = authority.rsplit_once('@')
            && !userinfo.is_empty()
        {
            out.push(userinfo);
        }
        rest = &after[end..];
    }
    out
}

/// True when `text` holds a URL with a user name or password in it (see
/// [`url_credentials`]). Such a value is a credential whatever its variable is called.
pub fn carries_url_credentials(text: &str) -> bool {
    !url_credentials(text).is_empty()
}

/// The secret parts of one URL's user information: the password of `user:password`, the
/// whole `user:password`, or a lone user name (a token used as the user, as Git hosts
/// accept). What [`super::register_value`] registers besides the whole value.
pub(super) fn secret_parts(userinfo: &str) -> Vec<&str> {
    match userinfo.split_once(':') {
        Some((_user, password)) if !password.is_empty() => vec![userinfo, password],
        Some((user, _)) => vec![user],
        None => vec![userinfo],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_shaped_names() {
        for name in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "aws_secret_access_key",
            "AWS_REGION",
            "DB_PASSWORD",
            "PGPASSWORD",
            "PGPASSFILE",
            "STRIPE_SK",
            "SK_LIVE",
            "GH_PAT",
            "MYSERVICE_APIKEY",
            "OAUTH_CLIENT",
            "SSH_AUTH_SOCK",
            "XAUTHORITY",
            "HTTP_AUTHORIZATION",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "DB_CREDS",
            "SIGNING_PRIVATE_PEM",
            "RUNTAPE_SERVE_TOKEN",
            "RUNTAPE_DB",
            "AZURE_STORAGE_CONNECTION_STRING",
            "SESSION_COOKIE",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "KEYBOARD_LAYOUT",
            "MONKEY",
            "EDITOR",
            "GIT_AUTHOR_NAME",
            "DATABASE_URL",
            "PAGER",
            "LANG",
            "TZ",
        ] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn url_credentials_are_found_anywhere_in_a_value() {
        assert_eq!(
            url_credentials("postgres://u:pw-1234567@host:5432/db"),
            ["u:pw-1234567"]
        );
        assert_eq!(
            url_credentials("https://ghp_tok@github.com/x http://a:b@proxy:3128"),
            ["ghp_tok", "a:b"]
        );
        assert_eq!(url_credentials("redis://:onlypass@cache/0"), [":onlypass"]);
        for clean in [
            "https://example.com/a@b",
            "postgres://host/db?user=x",
            "mailto:someone@example.com",
            "plain text",
            "://@",
        ] {
            assert!(!carries_url_credentials(clean), "{clean}");
        }
        assert_eq!(secret_parts("u:pw"), ["u:pw", "pw"]);
        assert_eq!(secret_parts(":pw"), [":pw", "pw"]);
        assert_eq!(secret_parts("token"), ["token"]);
        assert_eq!(secret_parts("token:"), ["token"]);
    }
}
