//! URLs that may carry a secret: credentials in the userinfo (`https://user:token@host`) or a
//! token in the query (`?apikey=…`). Everywhere qtg shows a URL — logs, stored errors, API
//! answers, `--print-config`, the startup line — it shows [`redact`]'s form; the credentials
//! travel only on the wire.

/// The parts of an absolute URL qtg cares about (no allocation; `None` for anything that is
/// not `scheme://authority…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts<'a> {
    pub scheme: &'a str,
    /// What precedes the last `@` of the authority, if any.
    pub userinfo: Option<&'a str>,
    /// The host and port (`[::1]:80`, `example.com`).
    pub host_port: &'a str,
    /// Path, query and fragment, as written.
    pub rest: &'a str,
}

impl<'a> Parts<'a> {
    pub fn of(url: &'a str) -> Option<Parts<'a>> {
        let (scheme, after) = url.split_once("://")?;
        if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
            return None;
        }
        let end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(end);
        let (userinfo, host_port) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        Some(Parts { scheme, userinfo, host_port, rest })
    }

    /// The host without port or IPv6 brackets, lower-cased by the caller if needed.
    pub fn host(&self) -> &'a str {
        let hp = self.host_port;
        if let Some(v6) = hp.strip_prefix('[') {
            return v6.split(']').next().unwrap_or(v6);
        }
        hp.rsplit_once(':').map_or(hp, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { hp })
    }
}

/// Whether `url` carries credentials in its userinfo.
pub fn has_userinfo(url: &str) -> bool {
    Parts::of(url).is_some_and(|p| p.userinfo.is_some())
}

/// `url` with its secrets masked: the userinfo's password (or the whole userinfo when it is a
/// bare token) and every query value. A string that is not a URL is returned as is.
pub fn redact(url: &str) -> String {
    let Some(p) = Parts::of(url) else {
        return url.to_string();
    };
    let mut out = format!("{}://", p.scheme);
    if let Some(u) = p.userinfo {
        match u.split_once(':') {
            Some((user, _)) => out.push_str(&format!("{user}:***@")),
            None => out.push_str("***@"),
        }
    }
    out.push_str(p.host_port);
    let (before_fragment, fragment) = match p.rest.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (p.rest, None),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let masked: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) => format!("{k}=***"),
                    None => kv.to_string(),
                })
                .collect();
            out.push_str(&masked.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    if fragment.is_some() {
        out.push_str("#***");
    }
    out
}

/// Replaces every occurrence of `url` in `text` by its redacted form (an error message that
/// quotes the URL it failed on).
pub fn redact_in(text: &str, url: &str) -> String {
    if url.is_empty() {
        return text.to_string();
    }
    text.replace(url, &redact(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_the_rest_kept() {
        for (url, shown) in [
            ("https://user:token@host.example/v1", "https://user:***@host.example/v1"),
            ("https://tok3n@host.example:8443/x", "https://***@host.example:8443/x"),
            ("http://a:b@c@evil.example/", "http://a:***@evil.example/"),
            ("https://rpc.example/v2?apikey=s3cret&chain=1", "https://rpc.example/v2?apikey=***&chain=***"),
            ("postgres://qtg:pw@db:5432/qtg?sslmode=require", "postgres://qtg:***@db:5432/qtg?sslmode=***"),
            ("https://host.example/cb", "https://host.example/cb"),
            ("https://host.example/cb#frag", "https://host.example/cb#***"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        assert!(has_userinfo("https://u@h/"));
        assert!(!has_userinfo("https://h/p@x"));
        assert_eq!(redact_in("GET https://u:p@h/x failed", "https://u:p@h/x"), "GET https://u:***@h/x failed");
    }

    #[test]
    fn hosts_come_from_the_authority_after_the_userinfo() {
        for (url, host) in [
            ("http://127.0.0.1@evil.example/", "evil.example"),
            ("http://127.0.0.1:x@evil.example/", "evil.example"),
            ("http://[::1]:9400/", "::1"),
            ("http://localhost:9400", "localhost"),
            ("https://h.example", "h.example"),
        ] {
            assert_eq!(Parts::of(url).map(|p| p.host()), Some(host), "{url}");
        }
    }
}
