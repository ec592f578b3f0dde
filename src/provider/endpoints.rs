//! Where a provider's requests go: the built-in presets, the environment
//! variables their ecosystems use for a base URL and the form each one is
//! read in, and which hosted service an endpoint is (for prices and for what
//! its API accepts). `registry` builds providers from what this decides.
//!
//! Each variable is read the way the tools that define it read it, so a
//! value that works with the provider's own SDK works here:
//! `OPENAI_BASE_URL` as given (openai-python: it includes `/v1`);
//! `ANTHROPIC_BASE_URL` a host (Anthropic's SDKs add `/v1/messages`);
//! `OLLAMA_BASE_URL` (promptfoo), `OLLAMA_API_BASE` (LiteLLM) and
//! `OLLAMA_HOST` (Ollama) in Ollama's host form; the other presets'
//! `<NAME>_BASE_URL` as given, a bare host getting the preset's API path
//! (the Groq SDK's `GROQ_BASE_URL` is `https://api.groq.com`).

/// How a base-URL variable's value becomes the base URL requests go under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Used as given.
    AsGiven,
    /// Used as given, but a URL with no path gets the path of the preset's
    /// default (`https://api.groq.com` → `https://api.groq.com/openai/v1`).
    HostGetsPath,
    /// Ollama's host rules (`OLLAMA_HOST`): the scheme is optional (`http`),
    /// a missing port is 11434 (80 or 443 after an explicit scheme), a
    /// missing host is 127.0.0.1, and 0.0.0.0 (a bind address) means this
    /// machine; `/v1` is added, a trailing `/v1` is tolerated.
    OllamaHost,
}

/// A service users name directly (`groq/llama-3.3-70b`).
pub struct Preset {
    pub name: &'static str,
    pub base_url: &'static str,
    pub key_variable: &'static str,
    /// Local servers run without a key; hosted services need one.
    pub key_required: bool,
    /// The variables that move its endpoint, strongest first.
    pub variables: &'static [(&'static str, Form)],
}

/// The OpenAI-compatible presets; each default is overridable under `providers:`.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "openai",
        base_url: "https://api.openai.com/v1",
        key_variable: "OPENAI_API_KEY",
        key_required: true,
        variables: &[("OPENAI_BASE_URL", Form::AsGiven)],
    },
    Preset {
        name: "ollama",
        base_url: "http://127.0.0.1:11434/v1",
        key_variable: "OLLAMA_API_KEY",
        key_required: false,
        // The variables meant for clients come before the server's own,
        // which is often set in the same shell to make it listen on 0.0.0.0.
        variables: &[
            ("OLLAMA_BASE_URL", Form::OllamaHost),
            ("OLLAMA_API_BASE", Form::OllamaHost),
            ("OLLAMA_HOST", Form::OllamaHost),
        ],
    },
    Preset {
        name: "vllm",
        base_url: "http://localhost:8000/v1",
        key_variable: "VLLM_API_KEY",
        key_required: false,
        variables: &[("VLLM_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "llamacpp",
        base_url: "http://localhost:8080/v1",
        key_variable: "LLAMACPP_API_KEY",
        key_required: false,
        variables: &[("LLAMACPP_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "openrouter",
        base_url: "https://openrouter.ai/api/v1",
        key_variable: "OPENROUTER_API_KEY",
        key_required: true,
        variables: &[("OPENROUTER_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "groq",
        base_url: "https://api.groq.com/openai/v1",
        key_variable: "GROQ_API_KEY",
        key_required: true,
        variables: &[("GROQ_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "deepseek",
        base_url: "https://api.deepseek.com/v1",
        key_variable: "DEEPSEEK_API_KEY",
        key_required: true,
        variables: &[("DEEPSEEK_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "together",
        base_url: "https://api.together.xyz/v1",
        key_variable: "TOGETHER_API_KEY",
        key_required: true,
        variables: &[("TOGETHER_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "mistral",
        base_url: "https://api.mistral.ai/v1",
        key_variable: "MISTRAL_API_KEY",
        key_required: true,
        variables: &[("MISTRAL_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "xai",
        base_url: "https://api.x.ai/v1",
        key_variable: "XAI_API_KEY",
        key_required: true,
        variables: &[("XAI_BASE_URL", Form::HostGetsPath)],
    },
    Preset {
        name: "gemini",
        base_url: "https://generativelanguage.googleapis.com/v1beta/openai",
        key_variable: "GEMINI_API_KEY",
        key_required: true,
        variables: &[("GEMINI_BASE_URL", Form::HostGetsPath)],
    },
];

/// Anthropic's Messages API: a host, as its SDKs take it.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Read by every provider with `api: anthropic` that has no `base_url`.
pub const ANTHROPIC_VARIABLES: &[(&str, Form)] = &[("ANTHROPIC_BASE_URL", Form::AsGiven)];

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|preset| preset.name == name)
}

/// Every variable some provider may read for its base URL.
pub fn variables() -> impl Iterator<Item = &'static str> {
    PRESETS
        .iter()
        .flat_map(|preset| preset.variables)
        .chain(ANTHROPIC_VARIABLES)
        .map(|(name, _)| *name)
}

/// A base URL and where it came from (`OLLAMA_HOST`, `` `providers.local.base_url` ``,
/// `the default of `ollama``), which errors about a wrong address name.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseUrl {
    pub url: String,
    pub source: String,
    /// Set by the user (configuration or environment), not a default.
    pub explicit: bool,
}

/// The base URL of provider `name`: its `base_url` setting, else the first of
/// `variables` that is set (read in its form), else `default`. `Ok(None)`
/// when there is none at all.
pub fn resolve(
    name: &str,
    configured: Option<&str>,
    variables: &[(&str, Form)],
    default: Option<&str>,
    default_path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<BaseUrl>, String> {
    if let Some(url) = configured {
        return Ok(Some(BaseUrl {
            url: url.to_string(),
            source: format!("`providers.{name}.base_url`"),
            explicit: true,
        }));
    }
    for (variable, form) in variables {
        if let Some(value) = env(variable).filter(|value| !value.trim().is_empty()) {
            let url = read(&value, *form, default_path)
                .map_err(|message| format!("{variable}: {message}"))?;
            return Ok(Some(BaseUrl {
                url,
                source: (*variable).to_string(),
                explicit: true,
            }));
        }
    }
    Ok(default.map(|url| BaseUrl {
        url: url.to_string(),
        source: format!("the default of `{name}`"),
        explicit: false,
    }))
}

/// `value` read in `form`; `default_path` is the preset's API path (`/v1`).
pub fn read(value: &str, form: Form, default_path: &str) -> Result<String, String> {
    let value = value.trim();
    match form {
        Form::AsGiven => Ok(value.to_string()),
        Form::HostGetsPath => match reqwest::Url::parse(value) {
            // The path goes before a query, not after it.
            Ok(url) if matches!(url.path(), "" | "/") => {
                Ok(super::http::edit_path(value, |_| default_path.to_string()))
            }
            // Not a URL: used as given, and the endpoint check names it.
            _ => Ok(value.to_string()),
        },
        Form::OllamaHost => ollama_host(value),
    }
}

/// Ollama's `OLLAMA_HOST` rules (envconfig.Host in ollama, `_parse_host`
/// in ollama-python), plus `/v1`, where its OpenAI-compatible API lives.
fn ollama_host(value: &str) -> Result<String, String> {
    let value = value.trim_matches(['"', '\'']).trim();
    let (scheme, rest, default_port) = match value.split_once("://") {
        Some((scheme @ "https", rest)) => (scheme, rest, 443),
        Some((scheme, rest)) => (scheme, rest, 80),
        None => ("http", value, 11434),
    };
    let (host_port, path) = match rest.split_once('/') {
        Some((host_port, path)) => (host_port, path.trim_end_matches('/')),
        None => (rest, ""),
    };
    let path = match path {
        "v1" => "",
        path => path.strip_suffix("/v1").unwrap_or(path),
    };
    let (host, port) = split_host_port(host_port)?;
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| format!("`{value}` has an invalid port `{port}`"))?,
        None => default_port,
    };
    let host = match host {
        "" => "127.0.0.1",
        // A bind address for the server; a client reaches it on this
        // machine (Go's dialer does the same with an unspecified address).
        "0.0.0.0" => "127.0.0.1",
        "[::]" | "::" => "[::1]",
        host => host,
    };
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let path = if path.is_empty() {
        String::new()
    } else {
        format!("/{path}")
    };
    Ok(format!("{scheme}://{host}:{port}{path}/v1"))
}

/// `host:port`, `[v6]:port`, `host`, `[v6]` or a bare IPv6 address.
fn split_host_port(host_port: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(inside) = host_port.strip_prefix('[') {
        let Some(end) = inside.find(']') else {
            return Err(format!("`{host_port}` has no closing `]`"));
        };
        let host = &host_port[..end + 2];
        return match &host_port[end + 2..] {
            "" => Ok((host, None)),
            rest => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!("`{host_port}` is not host:port")),
            },
        };
    }
    match host_port.matches(':').count() {
        0 => Ok((host_port, None)),
        1 => Ok(host_port
            .split_once(':')
            .map_or((host_port, None), |(host, port)| (host, Some(port)))),
        // An IPv6 address without brackets or a port.
        _ => Ok((host_port, None)),
    }
}

/// The hosted service an endpoint belongs to, by its host: a preset's
/// (`openai`, `groq`, …) or `anthropic`. `None` for any other host (a local
/// server, a proxy, a gateway): what it charges and accepts is unknown.
pub fn service(url: &str) -> Option<&'static str> {
    let host = reqwest::Url::parse(url)
        .ok()?
        .host_str()?
        .to_ascii_lowercase();
    let host_of = |url: &str| {
        reqwest::Url::parse(url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_string))
    };
    if host_of(ANTHROPIC_BASE_URL).as_deref() == Some(host.as_str()) {
        return Some("anthropic");
    }
    PRESETS
        .iter()
        .filter(|preset| preset.key_required)
        .find(|preset| host_of(preset.base_url).as_deref() == Some(host.as_str()))
        .map(|preset| preset.name)
}

/// The path of a preset's default base URL (`/v1`, `/openai/v1`, …).
pub fn default_path(base_url: &str) -> String {
    reqwest::Url::parse(base_url)
        .map(|url| url.path().trim_end_matches('/').to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn ollama(value: &str, expected: &str) {
        assert_eq!(
            read(value, Form::OllamaHost, "/v1").as_deref(),
            Ok(expected),
            "{value}"
        );
    }

    #[test]
    fn ollama_host_follows_ollamas_rules() {
        ollama("", "http://127.0.0.1:11434/v1");
        ollama("0.0.0.0", "http://127.0.0.1:11434/v1");
        ollama("0.0.0.0:11434", "http://127.0.0.1:11434/v1");
        ollama("myhost", "http://myhost:11434/v1");
        ollama(":56789", "http://127.0.0.1:56789/v1");
        ollama("myhost:56789", "http://myhost:56789/v1");
        ollama("http://myhost", "http://myhost:80/v1");
        ollama("https://myhost", "https://myhost:443/v1");
        ollama("https://myhost:56789/", "https://myhost:56789/v1");
        ollama("http://localhost:11434/v1", "http://localhost:11434/v1");
        ollama("http://localhost:11434/v1/", "http://localhost:11434/v1");
        ollama("myhost/proxy/ollama", "http://myhost:11434/proxy/ollama/v1");
        ollama("myhost/proxy/v1", "http://myhost:11434/proxy/v1");
        ollama("myhost/xv1", "http://myhost:11434/xv1/v1");
        ollama("\"127.0.0.1:9\"", "http://127.0.0.1:9/v1");
        ollama("[::1]", "http://[::1]:11434/v1");
        ollama("[::1]:56789", "http://[::1]:56789/v1");
        ollama("[::]:11434", "http://[::1]:11434/v1");
        ollama("fe80::1", "http://[fe80::1]:11434/v1");
        assert!(read("myhost:port", Form::OllamaHost, "/v1").is_err());
        assert!(read("[::1", Form::OllamaHost, "/v1").is_err());
    }

    #[test]
    fn a_bare_host_gets_the_presets_path_and_other_forms_stay() {
        let groq = "/openai/v1";
        assert_eq!(
            read("https://api.groq.com", Form::HostGetsPath, groq).unwrap(),
            "https://api.groq.com/openai/v1"
        );
        assert_eq!(
            read("https://api.groq.com/", Form::HostGetsPath, groq).unwrap(),
            "https://api.groq.com/openai/v1"
        );
        assert_eq!(
            read("http://gpu:8000/v1", Form::HostGetsPath, "/v1").unwrap(),
            "http://gpu:8000/v1"
        );
        assert_eq!(
            read("http://gpu:8000/?api-version=1", Form::HostGetsPath, "/v1").unwrap(),
            "http://gpu:8000/v1?api-version=1",
            "the path goes before the query"
        );
        assert_eq!(
            read("http://127.0.0.1:8000", Form::AsGiven, "/v1").unwrap(),
            "http://127.0.0.1:8000"
        );
        assert_eq!(default_path("https://openrouter.ai/api/v1"), "/api/v1");
    }

    #[test]
    fn sources_are_named_in_order() {
        let env = |name: &str| match name {
            "OLLAMA_HOST" => Some("0.0.0.0".to_string()),
            "OLLAMA_API_BASE" => Some("http://litellm-style:11434".to_string()),
            _ => None,
        };
        let ollama = preset("ollama").unwrap();
        let found = resolve(
            "ollama",
            None,
            ollama.variables,
            Some(ollama.base_url),
            "/v1",
            &env,
        )
        .unwrap()
        .unwrap();
        assert_eq!(found.url, "http://litellm-style:11434/v1");
        assert_eq!(found.source, "OLLAMA_API_BASE");
        let configured = resolve(
            "ollama",
            Some("http://x/v1"),
            ollama.variables,
            None,
            "/v1",
            &env,
        )
        .unwrap()
        .unwrap();
        assert_eq!(configured.source, "`providers.ollama.base_url`");
        let none = |_: &str| None;
        let default = resolve(
            "ollama",
            None,
            ollama.variables,
            Some(ollama.base_url),
            "/v1",
            &none,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                default.url.as_str(),
                default.source.as_str(),
                default.explicit
            ),
            (
                "http://127.0.0.1:11434/v1",
                "the default of `ollama`",
                false
            )
        );
        let bad = |_: &str| Some("host:nope".to_string());
        let error = resolve("ollama", None, ollama.variables, None, "/v1", &bad).unwrap_err();
        assert!(error.starts_with("OLLAMA_BASE_URL: "), "{error}");
    }

    #[test]
    fn services_are_known_by_their_host() {
        assert_eq!(service("https://api.openai.com/v1"), Some("openai"));
        assert_eq!(service("https://api.anthropic.com"), Some("anthropic"));
        assert_eq!(service("https://api.groq.com/openai/v1"), Some("groq"));
        assert_eq!(
            service("https://generativelanguage.googleapis.com/v1beta/openai"),
            Some("gemini")
        );
        assert_eq!(service("http://127.0.0.1:8000/v1"), None);
        assert_eq!(service("http://localhost:11434/v1"), None);
        assert_eq!(service("https://my-proxy.example/v1"), None);
        assert_eq!(service("not a url"), None);
    }
}
