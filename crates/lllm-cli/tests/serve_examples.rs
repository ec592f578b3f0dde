//! The deployment examples of `lllm serve` (examples/k8s/serve.yaml,
//! examples/systemd/lllm-serve.service) say what they do: the manifests parse
//! as YAML and hold what docs/serve.md promises (a Secret with the token, a
//! volume for the store, readiness on `/health`, a Service onto the server's
//! port), every flag of their command lines is one `lllm serve --help`
//! lists, and each command line, with its paths pointed into a scratch
//! directory, starts a real `lllm serve` of the shipped example that answers
//! the probe, refuses a call without the token, serves one with it (and
//! the Kubernetes one, its metrics to a scraper without the token), writes
//! the call's record into the store they name, and exits 0 on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use clap::Parser;
use serde_json::{Value, json};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn tactics() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tactics")
}

/// The documents of a multi-document YAML file, each parsed.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n---\n")
        .map(|document| {
            lllm::yaml::parse(document)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        })
        .collect()
}

/// The long flags `lllm serve --help` lists.
fn serve_flags() -> Vec<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_lllm"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "lllm serve --help failed");
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .map(|word| word.trim_end_matches([']', '.']).to_string())
        .collect()
}

/// The command line is one the real parser takes, and every flag in it is
/// one `lllm serve --help` shows.
#[track_caller]
fn check_flags(arguments: &[String]) {
    assert_eq!(arguments[0], "serve", "{arguments:?}");
    let flags = serve_flags();
    for word in arguments.iter().filter(|word| word.starts_with("--")) {
        let flag = word.split('=').next().unwrap();
        assert!(
            flags.iter().any(|known| known == flag),
            "{flag} is not a flag of `lllm serve --help` ({flags:?})"
        );
    }
    let argv = std::iter::once("lllm".to_string()).chain(arguments.iter().cloned());
    if let Err(error) = lllm_cli::Cli::try_parse_from(argv) {
        panic!("{arguments:?} does not parse: {error}");
    }
}

/// A served `lllm serve`, killed when dropped unless it was stopped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(arguments: &[String], env: &[(&str, &str)], dir: &Path) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lllm"));
        command
            .args(arguments)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start lllm serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Server { child, url }
    }

    /// SIGTERM, then the exit code.
    fn stop(mut self) -> i32 {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.child.wait().unwrap();
        status.code().unwrap_or(-1)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a deployed server must do: the probe without a token, 401 on a call
/// without it, a served call with it; a record of that call in `store`.
fn serve_and_check(
    arguments: &[String],
    env: &[(&str, &str)],
    dir: &Path,
    token: &str,
    probe: &str,
    store: &Path,
    scrape: Option<&str>,
) {
    let server = Server::start(arguments, env, dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let health = client
            .get(format!("{}{probe}", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200, "the probe {probe}");
        let run = format!("{}/tactics/triage/run", server.url);
        let body = json!({"input": {"ticket": "I was charged twice this month."}});
        let refused = client.post(&run).json(&body).send().await.unwrap();
        assert_eq!(refused.status(), 401);
        let answer = client
            .post(&run)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(answer["tactic"], "triage", "{answer}");
        assert!(answer["output"]["category"].is_string(), "{answer}");
        // A scraper without the token reads the metrics, the call counted.
        if let Some(path) = scrape {
            let metrics = client
                .get(format!("{}{path}", server.url))
                .send()
                .await
                .unwrap();
            assert_eq!(metrics.status(), 200, "the scrape of {path}");
            let text = metrics.text().await.unwrap();
            assert!(
                text.contains(
                    "lllm_serve_requests_total{tactic=\"triage\",route=\"/tactics/{name}/run\",status=\"200\"} 1\n"
                ),
                "{text}"
            );
        }
    });
    assert_eq!(server.stop(), 0, "SIGTERM drains, then exit 0");
    let output = Command::new(env!("CARGO_BIN_EXE_lllm"))
        .args(["logs", "--json", "--store"])
        .arg(store)
        .env_clear()
        .env("HOME", dir)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        listing.lines().count(),
        1,
        "one served call, one record: {listing}"
    );
    assert!(listing.contains("triage"), "{listing}");
}

#[test]
fn the_kubernetes_manifest_deploys_a_served_tactic_with_its_store_and_token() {
    let path = examples().join("k8s/serve.yaml");
    let documents = documents(&path);
    let kinds: Vec<&str> = documents
        .iter()
        .map(|document| document["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["Secret", "PersistentVolumeClaim", "Deployment", "Service"]
    );
    let [secret, claim, deployment, service] = &documents[..] else {
        unreachable!()
    };
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let arguments: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|word| word.as_str().unwrap().to_string())
        .collect();
    check_flags(&arguments);
    let value_of = |flag: &str| -> String {
        let at = arguments.iter().position(|word| word == flag).unwrap();
        arguments[at + 1].clone()
    };

    // The probe is /health on the port the server listens on, which the
    // Service targets.
    let port = value_of("--port");
    assert_eq!(container["ports"][0]["containerPort"].to_string(), port);
    let port_name = &container["ports"][0]["name"];
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["path"], "/health", "{probe}");
        assert_eq!(&container[probe]["httpGet"]["port"], port_name, "{probe}");
    }
    assert_eq!(&service["spec"]["ports"][0]["targetPort"], port_name);
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    // The token file is the Secret's `token`, mounted; the store is on the claim.
    let mount = |name: &str| -> String {
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|mount| mount["name"] == name)
            .unwrap_or_else(|| panic!("no mount {name}"))["mountPath"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let volume = |name: &str| -> Value {
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|volume| volume["name"] == name)
            .unwrap()
            .clone()
    };
    let token_file = value_of("--token-file");
    let secrets = mount("secrets");
    let items = &volume("secrets")["secret"]["items"][0];
    assert_eq!(
        token_file,
        format!("{secrets}/{}", items["path"].as_str().unwrap())
    );
    assert_eq!(
        volume("secrets")["secret"]["secretName"],
        secret["metadata"]["name"]
    );
    assert!(secret["stringData"][items["key"].as_str().unwrap()].is_string());
    let env = |name: &str| -> Value {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|var| var["name"] == name)
            .unwrap_or_else(|| panic!("no env {name}"))
            .clone()
    };
    assert_eq!(env("LLLM_HOME")["value"].as_str().unwrap(), mount("store"));
    assert_eq!(
        volume("store")["persistentVolumeClaim"]["claimName"],
        claim["metadata"]["name"]
    );
    assert_eq!(
        env("OPENAI_API_KEY")["valueFrom"]["secretKeyRef"]["name"],
        secret["metadata"]["name"]
    );
    let tactic = PathBuf::from(&arguments[1]);
    assert_eq!(tactic.parent().unwrap().to_str().unwrap(), mount("tactics"));

    // Prometheus's annotations name the server's port and its metrics,
    // which it may read without the token.
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], port.as_str());
    let scrape = annotations["prometheus.io/path"].as_str().unwrap();
    assert!(arguments.iter().any(|word| word == "--metrics-public"));

    // The container's command line, its paths in a scratch directory (the
    // address too: the test listens on loopback only, on a free port).
    let dir = tempfile::tempdir().unwrap();
    let token = "k8s-example-token-0123456789";
    std::fs::write(dir.path().join("token"), token).unwrap();
    let store = dir.path().join("store");
    let local: Vec<String> = arguments
        .iter()
        .map(|word| {
            if word == &token_file {
                dir.path().join("token").display().to_string()
            } else if word == &arguments[1] {
                tactics()
                    .join(tactic.file_name().unwrap())
                    .display()
                    .to_string()
            } else if word == "0.0.0.0" {
                "127.0.0.1".into()
            } else if word == &port {
                "0".into()
            } else {
                word.clone()
            }
        })
        .collect();
    let home = store.display().to_string();
    serve_and_check(
        &local,
        &[("LLLM_HOME", &home)],
        dir.path(),
        token,
        "/health",
        &store,
        Some(scrape),
    );
}

#[test]
fn the_systemd_unit_runs_a_hardened_served_tactic_with_its_store_and_token() {
    let path = examples().join("systemd/lllm-serve.service");
    let text = std::fs::read_to_string(&path).unwrap();
    let settings: Vec<(&str, &str)> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with('['))
        .filter_map(|line| line.split_once('='))
        .collect();
    let get = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(name, _)| *name == key)
            .map(|(_, value)| *value)
            .collect()
    };
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
        ("KillSignal", "SIGTERM"),
    ] {
        assert_eq!(get(key), [value], "{key}");
    }
    assert_eq!(get("StateDirectory"), ["lllm"]);
    assert_eq!(get("Environment"), ["LLLM_HOME=%S/lllm"]);
    let credential = get("LoadCredential")[0];
    let (name, _source) = credential.split_once(':').unwrap();

    let exec = get("ExecStart")[0];
    let words: Vec<String> = exec.split_whitespace().map(str::to_string).collect();
    assert!(words[0].ends_with("/lllm"), "{exec}");
    let arguments = words[1..].to_vec();
    check_flags(&arguments);
    let at = arguments
        .iter()
        .position(|word| word == "--token-file")
        .unwrap();
    assert_eq!(
        arguments[at + 1],
        format!("${{CREDENTIALS_DIRECTORY}}/{name}")
    );

    // ExecStart as systemd runs it: the credential under
    // $CREDENTIALS_DIRECTORY, the store in the state directory (%S/lllm).
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    let token = "systemd-example-token-0123456789";
    std::fs::write(credentials.join(name), token).unwrap();
    let state = dir.path().join("state/lllm");
    let local: Vec<String> = arguments
        .iter()
        .map(|word| {
            if let Some(file) = word.strip_prefix("${CREDENTIALS_DIRECTORY}/") {
                credentials.join(file).display().to_string()
            } else if let Some(file) = word.strip_prefix("/etc/lllm/") {
                tactics().join(file).display().to_string()
            } else if word == "8000" {
                "0".into()
            } else {
                word.clone()
            }
        })
        .collect();
    let home = state.display().to_string();
    serve_and_check(
        &local,
        &[("LLLM_HOME", &home)],
        dir.path(),
        token,
        "/health",
        &state,
        None,
    );
}
