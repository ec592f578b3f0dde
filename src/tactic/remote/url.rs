//! Where a served tactic lives: the URL a user gives, checked and turned
//! into its three routes (`info`, `run`, `stream`).
//!
//! Three forms name one tactic (D21; upstream's `RemoteTactic` needs `name=`
//! for the first): a server base (`http://host:8000`, maybe under a prefix
//! such as `/api`) whose single-tactic routes are `/info`, `/run` and
//! `/stream`; a tactic of a server of several (`…/tactics/NAME`); and either
//! with one of its routes at the end (`…/run`, `…/stream`, `…/info`). A URL
//! that carries credentials, a query or a fragment is refused: a bearer token
//! travels as a header, never in the URL (it would end up in records and
//! logs). Sending is `client`'s.

use reqwest::Url;

/// The three routes of one served tactic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Routes {
    /// The URL as normalised: the form without a route at the end.
    pub service: String,
    /// The tactic's name when the URL says it (`…/tactics/NAME`).
    pub name: Option<String>,
    /// The origin (`http://host:port`) the token may be sent to.
    pub origin: String,
}

impl Routes {
    /// The URL of `route` (`info`, `run` or `stream`).
    pub fn route(&self, route: &str) -> String {
        format!("{}/{route}", self.service)
    }

    /// `text` checked and normalised; the error says what is wrong with it
    /// (the URL is not repeated: the caller names it).
    pub fn parse(text: &str) -> Result<Routes, String> {
        if text.is_empty() {
            return Err("a served tactic's URL cannot be empty".into());
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a URL cannot contain spaces or control characters".into());
        }
        let url = Url::parse(text).map_err(|error| format!("not a URL: {error}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "a served tactic's URL is `http://` or `https://`, not `{}:`",
                url.scheme()
            ));
        }
        let Some(host) = url.host_str() else {
            return Err("the URL names no host".into());
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(
                "the URL carries credentials; give a token (`token_env:`, or `RemoteTactic::token`) instead"
                    .into(),
            );
        }
        if url.query().is_some() || text.contains('?') {
            return Err("a served tactic's URL takes no query (`?…`)".into());
        }
        if url.fragment().is_some() || text.contains('#') {
            return Err("a served tactic's URL takes no fragment (`#…`)".into());
        }
        // The path as written: `Url` folds `.` and `..` away silently.
        let after_scheme = &text[text.find("://").map_or(0, |at| at + 3)..];
        let written_path = after_scheme.find('/').map_or("", |at| &after_scheme[at..]);
        let trimmed = written_path.trim_end_matches('/');
        if trimmed.contains('%') || trimmed.contains(';') || trimmed.contains('\\') {
            return Err("the URL's path cannot hold `%` escapes, `;` or `\\`".into());
        }
        let mut segments: Vec<&str> = trimmed.split('/').skip(1).collect();
        if segments.iter().any(|segment| segment.is_empty()) {
            return Err("the URL's path has an empty segment (`//`)".into());
        }
        if segments
            .iter()
            .any(|segment| matches!(*segment, "." | ".."))
        {
            return Err("the URL's path cannot hold `.` or `..` segments".into());
        }
        // `…/tactics/run` is the tactic named `run`, not the route.
        let named_like_a_route = segments.len() >= 2 && segments[segments.len() - 2] == "tactics";
        if !named_like_a_route
            && segments
                .last()
                .is_some_and(|last| matches!(*last, "run" | "stream" | "info"))
        {
            segments.pop();
        }
        let name = match segments.as_slice() {
            [.., "tactics", name] => Some((*name).to_string()),
            [.., "tactics"] => {
                return Err(
                    "the URL names the list of tactics; add the tactic's name (`…/tactics/NAME`)"
                        .into(),
                );
            }
            _ => None,
        };
        let origin = match url.port() {
            Some(port) => format!("{}://{host}:{port}", url.scheme()),
            None => format!("{}://{host}", url.scheme()),
        };
        let path: String = segments
            .iter()
            .map(|segment| format!("/{segment}"))
            .collect();
        Ok(Routes {
            service: format!("{origin}{path}"),
            name,
            origin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn case(url: &str, service: &str, name: Option<&str>) {
        let routes = Routes::parse(url).unwrap_or_else(|error| panic!("{url}: {error}"));
        assert_eq!(routes.service, service, "{url}");
        assert_eq!(routes.name.as_deref(), name, "{url}");
        assert_eq!(routes.route("run"), format!("{service}/run"));
    }

    #[track_caller]
    fn refused(url: &str, expected: &str) {
        match Routes::parse(url) {
            Ok(routes) => panic!("{url} was taken as {routes:?}"),
            Err(error) => assert!(error.contains(expected), "{url}: {error}"),
        }
    }

    #[test]
    fn base_and_route_urls_name_one_tactic() {
        case("http://127.0.0.1:8000", "http://127.0.0.1:8000", None);
        case("http://127.0.0.1:8000/", "http://127.0.0.1:8000", None);
        case("http://h:8000/run", "http://h:8000", None);
        case("http://h:8000/stream/", "http://h:8000", None);
        case("http://h:8000/info", "http://h:8000", None);
        case(
            "http://h:8000/tactics/triage",
            "http://h:8000/tactics/triage",
            Some("triage"),
        );
        case(
            "http://h:8000/tactics/triage/",
            "http://h:8000/tactics/triage",
            Some("triage"),
        );
        case(
            "http://h:8000/tactics/triage/run",
            "http://h:8000/tactics/triage",
            Some("triage"),
        );
        case(
            "http://h:8000/tactics/triage/stream",
            "http://h:8000/tactics/triage",
            Some("triage"),
        );
        case(
            "http://h:8000/tactics/triage/info",
            "http://h:8000/tactics/triage",
            Some("triage"),
        );
        // Behind a proxy's prefix.
        case(
            "https://example.com/api/tactics/t",
            "https://example.com/api/tactics/t",
            Some("t"),
        );
        case("https://example.com/api", "https://example.com/api", None);
        // A tactic named like a route is still a tactic.
        case("http://h/tactics/run", "http://h/tactics/run", Some("run"));
        // The default port is not repeated.
        case("http://h:80/run", "http://h", None);
    }

    #[test]
    fn credentials_queries_and_odd_paths_are_refused() {
        refused("http://user:pw@h:8000/run", "credentials");
        refused("http://user@h:8000/run", "credentials");
        refused("http://h:8000/run?token=x", "query");
        refused("http://h:8000/run?", "query");
        refused("http://h:8000/run#x", "fragment");
        refused("ftp://h/run", "`ftp:`");
        refused("h:8000/run", "`h:`");
        refused("/tactics/x", "not a URL");
        refused("", "empty");
        refused("http://h/a b", "spaces");
        refused("http://h//run", "empty segment");
        refused("http://h/a/../run", "`..`");
        refused("http://h/a/./run", "`.`");
        refused("http://h/tactics/%2e%2e/run", "`%`");
        refused("http://h/tactics", "list of tactics");
        refused("http://h/tactics/", "list of tactics");
    }
}
