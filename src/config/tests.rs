use super::*;
use serde_json::json;

struct Files(tempfile::TempDir);

impl Files {
    fn new(files: &[(&str, &str)]) -> Files {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Files(dir)
    }

    fn load(&self, name: &str) -> Result<TacticConfig> {
        load(&self.0.path().join(name))
    }

    #[track_caller]
    fn error(&self, name: &str) -> String {
        match self.load(name) {
            Ok(_) => panic!("expected an error"),
            Err(error) => error.to_string(),
        }
    }
}

const MINIMAL: &str = "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\n";

#[test]
fn a_minimal_tactic_gets_the_defaults() {
    let files = Files::new(&[("t.yaml", MINIMAL)]);
    let config = files.load("t.yaml").unwrap();
    assert_eq!(config.name, "t");
    let agent = &config.agents[0];
    assert_eq!(agent.model_name, "mock/echo");
    assert_eq!(
        (
            agent.max_exception_retry,
            agent.max_interrupt_steps,
            agent.max_llm_recall
        ),
        (3, 5, 3)
    );
    assert!(
        matches!(&agent.system_prompt, SystemPrompt::Inline(text) if text == "You are a helpful assistant.")
    );
    assert!(agent.context_manager.is_none());
    assert_eq!(config.prompts_dir, files.0.path().join("prompts"));
    assert!(config.flow.is_empty());
}

#[test]
fn base_chains_merge_with_the_one_rule() {
    let files = Files::new(&[
        (
            "shared/root.yaml",
            "prompts: root_prompts\nglobal:\n  model_name: openai/gpt-4o\n  model_args: {temperature: 0.1, seed: 7}\n  context_manager: {type: default, max_tokens: 1000}\nagent_configs:\n  - name: a\n    tools: [x, y]\n",
        ),
        (
            "mid.yaml",
            "base: shared/root.yaml\nglobal:\n  model_args: {temperature: 0.5}\n",
        ),
        (
            "t.yaml",
            "base: mid.yaml\ntactic_type: child\nglobal:\n  context_manager: null\nagent_configs:\n  - name: a\n    tools: [z]\n",
        ),
    ]);
    let config = files.load("t.yaml").unwrap();
    assert_eq!(config.name, "child");
    let agent = &config.agents[0];
    assert_eq!(agent.model_name, "openai/gpt-4o");
    assert_eq!(
        Value::Object(agent.model_args.clone()),
        json!({"temperature": 0.5, "seed": 7})
    );
    assert_eq!(agent.tools, ["z"], "lists replace");
    assert!(
        agent.context_manager.is_none(),
        "null disables an inherited manager"
    );
    assert_eq!(
        config.prompts_dir,
        files.0.path().join("shared").join("root_prompts"),
        "relative to the base file"
    );
}

#[test]
fn a_base_cycle_is_an_error_listing_the_chain() {
    let files = Files::new(&[("a.yaml", "base: b.yaml\n"), ("b.yaml", "base: a.yaml\n")]);
    let error = files.error("a.yaml");
    assert!(error.starts_with("`base` files form a cycle: "), "{error}");
    assert_eq!(error.matches(" → ").count(), 2, "{error}");
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let files = Files::new(&[(
        "t.yaml",
        "global:\n  model_name: [oops\nagent_configs: []\n",
    )]);
    let error = files.error("t.yaml");
    assert!(error.contains("t.yaml:"), "{error}");
    let location: Vec<&str> = error.split(':').collect();
    assert!(
        location.len() >= 4 && location[1].trim().parse::<usize>().is_ok(),
        "{error}"
    );
    assert!(!error.contains('\n'), "one line: {error}");
}

#[test]
fn repeated_keys_and_deep_nesting_are_syntax_errors_at_their_line() {
    let deep = format!("{MINIMAL}    model_args: {{x: {}}}\n", "[".repeat(1000));
    let files = Files::new(&[
        ("top.yaml", &format!("{MINIMAL}agent_configs: []\n")),
        ("agent.yaml", &format!("{MINIMAL}    name: b\n")),
        ("deep.yaml", &deep),
    ]);
    assert!(
        files.error("top.yaml").ends_with(
            "top.yaml:4:1: duplicate key `agent_configs`; a key may appear once in a mapping"
        ),
        "{}",
        files.error("top.yaml")
    );
    assert!(
        files
            .error("agent.yaml")
            .ends_with("agent.yaml:4:5: agent_configs[0]: duplicate key `name`; a key may appear once in a mapping"),
        "{}",
        files.error("agent.yaml")
    );
    assert!(
        files
            .error("deep.yaml")
            .ends_with("deep.yaml:4:84: collections nested deeper than 64 levels"),
        "{}",
        files.error("deep.yaml")
    );
}

#[test]
fn unknown_keys_and_type_errors_are_named() {
    let files = Files::new(&[
        ("a.yaml", "agent_config: []\n"),
        (
            "b.yaml",
            "global: {model_name: x}\nagent_configs:\n  - name: a\n    max_exception_retry: lots\n",
        ),
        (
            "c.yaml",
            "global: {model_name: x}\nagent_configs:\n  - name: a\nflow:\n  - step: s\n    agent: a\n    promt: p\n",
        ),
    ]);
    let error = files.error("a.yaml");
    assert!(
        error.contains("unknown key `agent_config`; did you mean `agent_configs`?"),
        "{error}"
    );
    let error = files.error("b.yaml");
    assert!(
        error.contains("agent `a`: `max_exception_retry: lots` must be a whole number"),
        "{error}"
    );
    let error = files.error("c.yaml");
    assert!(
        error.contains("unknown key `promt`; did you mean `prompt`?"),
        "{error}"
    );
}

#[test]
fn agent_entries_win_over_global_and_stray_keys_become_model_args() {
    let files = Files::new(&[(
        "t.yaml",
        "global:\n  model_name: g\n  temperature: 0.9\n  model_args: {top_p: 0.5}\nagent_configs:\n  - name: a\n    model_name: own\n    model_args: {temperature: 0.1}\n  - name: b\n",
    )]);
    let config = files.load("t.yaml").unwrap();
    let a = config.agent("a").unwrap();
    let b = config.agent("b").unwrap();
    assert_eq!(a.model_name, "own");
    assert_eq!(
        b.model_name, "g",
        "global is untouched by the first agent's merge"
    );
    assert_eq!(
        Value::Object(a.model_args.clone()),
        json!({"top_p": 0.5, "temperature": 0.1}),
        "explicit model_args win"
    );
    assert_eq!(
        Value::Object(b.model_args.clone()),
        json!({"top_p": 0.5, "temperature": 0.9})
    );
    assert!(
        config
            .warnings
            .iter()
            .any(|w| w.contains("`temperature` ignored")),
        "{:?}",
        config.warnings
    );
    assert!(
        config
            .warnings
            .iter()
            .any(|w| w.contains("passed to the model as `model_args.temperature`"))
    );
}

#[test]
fn agents_and_steps_are_validated_together() {
    let files = Files::new(&[(
        "t.yaml",
        "agent_configs:\n  - name: writer\n  - name: writer\n    model_name: m\nflow:\n  - step: s\n    agent: writr\n    text: hi\n  - step: s\n    agent: writer\n  - agent: writer\n    prompt: p\n    text: t\n  - step: task\n    agent: writer\n    text: x\n",
    )]);
    let error = files.error("t.yaml");
    for expected in [
        "agent `writer` has no `model_name`",
        "uses agent `writr`, which is not in `agent_configs`; did you mean `writer`?",
        "step `s` is defined twice",
        "step `s` needs a `prompt` (registry key) or a `text`",
        "step `step3` has both `prompt` and `text`",
        "cannot be named `task`",
    ] {
        assert!(
            error.contains(expected),
            "expected {expected:?} in:\n{error}"
        );
    }
}

#[test]
fn steps_default_their_names_and_dialog() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: m}\nagent_configs:\n  - name: a\nflow:\n  - agent: a\n    text: one\n  - agent: a\n    prompt: k\n    dialog: side\n    args: {x: 1}\n",
    )]);
    let config = files.load("t.yaml").unwrap();
    let steps: Vec<&StepConfig> = config
        .flow
        .iter()
        .filter_map(|item| match item {
            FlowItem::Step(step) => Some(step.as_ref()),
            FlowItem::Loop(_) | FlowItem::Parallel(_) | FlowItem::Tactic(_) => None,
        })
        .collect();
    assert_eq!(steps[0].name, "step1");
    assert_eq!(steps[0].dialog, "main");
    assert_eq!(steps[1].name, "step2");
    assert_eq!(steps[1].dialog, "side");
    assert!(matches!(&steps[1].input, StepInput::Prompt(key) if key == "k"));
}

#[test]
fn sub_tactic_paths_are_relative_to_the_file_that_names_them() {
    let files = Files::new(&[
        (
            "shared/base.yaml",
            "global: {model_name: m}\nagent_configs:\n  - name: a\nflow:\n  - loop: {max: 2}\n    steps:\n      - {step: sub, tactic: inner/sub.yaml, task: \"{{ task }}!\", args: {k: 1}}\n",
        ),
        ("t.yaml", "base: shared/base.yaml\n"),
        (
            "bad.yaml",
            "global: {model_name: m}\nagent_configs:\n  - name: a\nflow:\n  - {step: s, agent: a, text: x, task: y}\n",
        ),
    ]);
    let config = files.load("t.yaml").unwrap();
    let FlowItem::Loop(looped) = &config.flow[0] else {
        panic!("a loop: {:?}", config.flow);
    };
    let FlowItem::Tactic(sub) = &looped.steps[0] else {
        panic!("a sub-tactic step: {:?}", looped.steps);
    };
    assert!(
        sub.path.ends_with("shared/inner/sub.yaml"),
        "{}",
        sub.path.display()
    );
    assert_eq!(sub.task.as_deref(), Some("{{ task }}!"));
    assert_eq!(sub.args["k"], 1);
    let error = files.load("bad.yaml").unwrap_err().to_string();
    assert!(
        error.contains("`task` is for steps that run a `tactic`"),
        "{error}"
    );
}

#[test]
fn loops_and_conditions_parse_and_are_checked() {
    let files = Files::new(&[
        (
            "ok.yaml",
            "global: {model_name: m}\nagent_configs:\n  - name: a\nflow:\n  - step: draft\n    agent: a\n    text: d\n  - loop: {max: 3, until: \"review.content == 'ok'\"}\n    steps:\n      - step: review\n        agent: a\n        text: r\n      - step: fix\n        agent: a\n        text: f\n        if: \"review.content != 'ok'\"\n",
        ),
        (
            "bad.yaml",
            "global: {model_name: m}\nagent_configs:\n  - name: a\nflow:\n  - loop: {until: x}\n    steps: [{agent: a, text: t}]\n  - loop: {max: 2, whilst: y}\n    steps: []\n",
        ),
    ]);
    let config = files.load("ok.yaml").unwrap();
    let FlowItem::Loop(settings) = &config.flow[1] else {
        panic!("a loop")
    };
    assert_eq!(settings.max, 3);
    assert_eq!(settings.until.as_deref(), Some("review.content == 'ok'"));
    let FlowItem::Step(fix) = &settings.steps[1] else {
        panic!("a step")
    };
    assert_eq!(fix.condition.as_deref(), Some("review.content != 'ok'"));
    let error = files.error("bad.yaml");
    assert!(error.contains("`flow[0].loop` needs `max: N`"), "{error}");
    assert!(error.contains("unknown key `whilst`"), "{error}");
    assert!(error.contains("`flow[1]` needs `steps:`"), "{error}");
}

#[test]
fn model_override_reaches_agents_and_the_resolved_document() {
    let files = Files::new(&[("t.yaml", MINIMAL)]);
    let mut config = files.load("t.yaml").unwrap();
    config.override_model("openai/gpt-4o-mini");
    assert_eq!(config.agents[0].model_name, "openai/gpt-4o-mini");
    assert_eq!(
        config.resolved["agent_configs"][0]["model_name"],
        "openai/gpt-4o-mini"
    );
    // `--show-config` shows the model that runs under `global` too.
    assert_eq!(
        config.resolved["global"]["model_name"],
        "openai/gpt-4o-mini"
    );
}

#[test]
fn command_line_model_args_reach_agents_and_the_resolved_document() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: mock/echo, model_args: {temperature: 0.2, max_tokens: 1024}}\n\
         agent_configs:\n  - name: writer\n  - {name: critic, model_args: {top_p: 0.5}}\n",
    )]);
    let mut config = files.load("t.yaml").unwrap();
    let args = ModelArgs::parse(&["max_tokens=256", "critic.temperature=0", "top_p=null"]).unwrap();
    config.override_model_args(&args);
    let writer = &config.agents[0].model_args;
    assert_eq!(
        Value::Object(writer.clone()),
        json!({"temperature": 0.2, "max_tokens": 256})
    );
    let critic = &config.agents[1].model_args;
    assert_eq!(
        Value::Object(critic.clone()),
        json!({"temperature": 0, "max_tokens": 256})
    );
    assert_eq!(
        config.resolved["global"]["model_args"],
        json!({"temperature": 0.2, "max_tokens": 256})
    );
    assert_eq!(
        config.resolved["agent_configs"][1]["model_args"],
        json!({"temperature": 0, "max_tokens": 256})
    );
    assert_eq!(config.model_args_override, args);
}

#[test]
fn model_args_are_checked_where_they_are_set() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: mock/echo, model_args: {temperature: 5}}\n\
         agent_configs:\n  - {name: a, model_args: {max_tokens: 0}}\n  - {name: b, top_p: 2}\n  - name: c\n",
    )]);
    let error = files.error("t.yaml");
    let lines: Vec<&str> = error.lines().collect();
    let path = files.0.path().join("t.yaml").display().to_string();
    assert_eq!(
        lines,
        [
            format!(
                "{path}:1:46: `global`: `model_args.temperature: 5` must be a number from 0 to 2 \
                 (sampling temperature)"
            ),
            format!(
                "{path}:3:28: agent `a`: `model_args.max_tokens: 0` must be a whole number from 1 to \
                 100000000 (tokens)"
            ),
            format!(
                "{path}:4:5: agent `b`: `model_args.top_p: 2` must be a number from 0 to 1 \
                 (probability mass)"
            ),
        ],
        "the global one once, each agent's own under its name"
    );
}

#[test]
fn tool_and_script_paths_resolve_against_their_file() {
    let files = Files::new(&[(
        "sub/t.yaml",
        "global: {model_name: mock/script}\nagent_configs:\n  - name: a\nproviders:\n  mock: {script: replies.yaml}\ntools:\n  - name: wc\n    command: [python3, wc.py]\n",
    )]);
    let config = files.load("sub/t.yaml").unwrap();
    let sub = files.0.path().join("sub");
    assert_eq!(config.tools[0].cwd, sub);
    assert_eq!(
        config.providers["mock"].script.as_deref(),
        Some(sub.join("replies.yaml").as_path())
    );
    assert_eq!(config.providers["mock"].api, ProviderApi::Mock);
}

#[test]
fn a_missing_file_is_named() {
    let files = Files::new(&[]);
    assert_eq!(
        files.error("nope.yaml"),
        format!(
            "tactic file `{}` not found",
            files.0.path().join("nope.yaml").display()
        )
    );
}

#[test]
fn header_values_never_reach_the_resolved_document() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: m}\nagent_configs:\n  - name: a\nproviders:\n  p: {base_url: \"http://127.0.0.1:1\", headers: {Authorization: Bearer sk-secret}}\n",
    )]);
    let config = files.load("t.yaml").unwrap();
    assert_eq!(
        config.providers["p"].headers["Authorization"], "Bearer sk-secret",
        "still sent"
    );
    assert!(!config.resolved.to_string().contains("sk-secret"));
}

#[test]
fn url_credentials_never_reach_the_resolved_document() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: m}\nagent_configs:\n  - name: a\nproviders:\n  p: {base_url: \"http://user:PASSWORD@127.0.0.1:1/v1?key=sk-q\", headers: {X-Key: sk-header}}\n",
    )]);
    let config = files.load("t.yaml").unwrap();
    let url = config.providers["p"].base_url.as_deref();
    assert_eq!(
        url,
        Some("http://user:PASSWORD@127.0.0.1:1/v1?key=sk-q"),
        "still used"
    );
    assert_eq!(
        config.resolved["providers"]["p"]["base_url"],
        "http://***@127.0.0.1:1/v1?key=***"
    );
    // The resolved types serialize the same way, for library users.
    let typed = serde_json::to_string(&config.providers).unwrap();
    assert!(
        typed.contains(r#""base_url":"http://***@127.0.0.1:1/v1?key=***""#),
        "{typed}"
    );
    assert!(typed.contains(r#""headers":{"X-Key":"***"}"#), "{typed}");
    for shown in [config.resolved.to_string(), typed] {
        assert!(
            !shown.contains("PASSWORD") && !shown.contains("sk-"),
            "{shown}"
        );
    }
}

#[test]
fn mcp_servers_resolve_their_paths_and_hide_their_env() {
    let files = Files::new(&[(
        "sub/t.yaml",
        "global: {model_name: m}\nagent_configs:\n  - name: a\n    mcp_servers: [files]\nmcp_servers:\n  - name: files\n    command: [npx, server]\n    args: [\".\"]\n    env: {TOKEN: sk-mcp-secret}\n  - name: local\n    command: [./server]\n    cwd: tools\n    timeout_s: 5\n",
    )]);
    let config = files.load("sub/t.yaml").unwrap();
    let sub = files.0.path().join("sub");
    assert_eq!(config.agents[0].mcp_servers, ["files"]);
    let [files_server, local] = &config.mcp_servers[..] else {
        panic!("two servers expected");
    };
    assert_eq!(
        (&files_server.command[..], &files_server.args[..]),
        (
            &["npx".to_string(), "server".into()][..],
            &[".".to_string()][..]
        )
    );
    assert_eq!(files_server.env["TOKEN"], "sk-mcp-secret", "still given");
    assert_eq!(
        (files_server.cwd.as_path(), files_server.timeout_s),
        (sub.as_path(), 60.0)
    );
    assert_eq!(
        (local.cwd.clone(), local.timeout_s),
        (sub.join("tools"), 5.0)
    );
    assert_eq!(config.resolved["mcp_servers"][0]["env"]["TOKEN"], "***");
    assert!(!config.resolved.to_string().contains("sk-mcp-secret"));
}

#[test]
fn command_tools_get_their_env_but_records_never_show_it() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: m}\nagent_configs:\n  - name: a\ntools:\n  - name: fetch\n    command: [./fetch]\n    env: {API_TOKEN: sk-tool-secret, MODE: fast}\n",
    )]);
    let config = files.load("t.yaml").unwrap();
    assert_eq!(
        config.tools[0].env["API_TOKEN"], "sk-tool-secret",
        "still given"
    );
    assert_eq!(
        config.resolved["tools"][0]["env"],
        serde_json::json!({"API_TOKEN": "***", "MODE": "***"})
    );
    assert!(!config.resolved.to_string().contains("sk-tool-secret"));
}

#[test]
fn bad_mcp_server_entries_are_named() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: m}\nagent_configs:\n  - name: a\nmcp_servers:\n  - name: s\n    command: [x]\n  - name: s\n    command: [y]\n  - name: t\n    command: []\n  - name: u\n    command: [z]\n    timeout_s: 0\n",
    )]);
    let error = files.error("t.yaml");
    let path = files.0.path().join("t.yaml").display().to_string();
    assert_eq!(
        error,
        [
            "7:5: MCP server `s` is defined twice under `mcp_servers:`",
            "10:5: `mcp_servers[2]` needs a `name` and a non-empty `command`",
            "13:5: MCP server `u`: `timeout_s: 0` must be a number from 0.001 to 86400 (seconds)",
        ]
        .map(|problem| format!("{path}:{problem}"))
        .join("\n")
    );
}

#[test]
fn every_number_out_of_range_is_listed_at_once_with_its_place_and_range() {
    let files = Files::new(&[(
        "t.yaml",
        r#"global:
  model_name: m
  max_llm_recall: -1
  context_manager: {type: default, max_tokens: 0}
agent_configs:
  - name: a
  - name: b
    max_exception_retry: 1000
    max_interrupt_steps: 2.5
providers:
  p: {max_concurrency: 0, rpm: 0, tpm: 0, timeout_s: 1e20, connect_timeout_s: -1,
      retry_base_ms: 1e30, retry_cap_ms: .inf}
  q: {timeout_s: .nan, retry_base_ms: 120000}
  r: {retry_base_ms: 500, retry_cap_ms: 100}
tools:
  - {name: t, command: [x], timeout_s: -1}
mcp_servers:
  - {name: s, command: [y], timeout_s: 1e20}
flow:
  - loop: {max: 100000}
    steps: [{step: one, agent: a, text: hi}]
"#,
    )]);
    let error = files.error("t.yaml");
    let path = files.0.path().join("t.yaml").display().to_string();
    // Each at the line and column of its key (in `global` for what the
    // agents have from there).
    let expected = [
        "3:3: `global`: `max_llm_recall: -1` must be a whole number from 0 to 100 (retries)",
        "4:36: `global`: `context_manager.max_tokens: 0` must be a whole number from 1 to 100000000 (tokens)",
        "8:5: agent `b`: `max_exception_retry: 1000` must be a whole number from 0 to 100 (repairs)",
        "9:5: agent `b`: `max_interrupt_steps: 2.5` must be a whole number from 0 to 100 (tool rounds; 0 is the cap of 100)",
        "11:7: provider `p`: `max_concurrency: 0` must be a whole number from 1 to 100000 (requests at once)",
        "11:27: provider `p`: `rpm: 0` must be a whole number from 1 to 1000000000 (requests per minute)",
        "11:35: provider `p`: `tpm: 0` must be a whole number from 1 to 1000000000000 (tokens per minute)",
        "11:43: provider `p`: `timeout_s: 1e+20` must be a number from 0.001 to 86400 (seconds)",
        "11:60: provider `p`: `connect_timeout_s: -1` must be a number from 0.001 to 3600 (seconds)",
        "12:7: provider `p`: `retry_base_ms: 1e+30` must be a whole number from 0 to 3600000 (milliseconds)",
        "12:28: provider `p`: `retry_cap_ms: .inf` must be a whole number from 0 to 3600000 (milliseconds)",
        "13:7: provider `q`: `timeout_s: .nan` must be a number from 0.001 to 86400 (seconds)",
        "13:24: provider `q`: `retry_base_ms: 120000` is above `retry_cap_ms` (60000, the default); the first back-off cannot be longer than the longest",
        "14:7: provider `r`: `retry_base_ms: 500` is above `retry_cap_ms` (100); the first back-off cannot be longer than the longest",
        "16:29: tool `t`: `timeout_s: -1` must be a number from 0.001 to 86400 (seconds)",
        "18:29: MCP server `s`: `timeout_s: 1e+20` must be a number from 0.001 to 86400 (seconds)",
        "20:12: `flow[0].loop`: `max: 100000` must be a whole number from 1 to 10000 (rounds)",
    ];
    let mut lines: Vec<&str> = error.lines().collect();
    lines.sort();
    let mut expected: Vec<String> = expected
        .iter()
        .map(|problem| format!("{path}:{problem}"))
        .collect();
    expected.sort();
    assert_eq!(
        lines, expected,
        "once each, `global` problems not per agent"
    );
}

#[test]
fn numbers_in_range_are_taken_as_written() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: m, max_llm_recall: 0, max_interrupt_steps: 100}\nagent_configs:\n  - name: a\n    context_manager: {type: default, max_tokens: 2000000}\nproviders:\n  p: {max_concurrency: 8, rpm: 1, tpm: 1000.0, timeout_s: 0.5, connect_timeout_s: 2, retry_base_ms: 0, retry_cap_ms: 0}\ntools:\n  - {name: t, command: [x], timeout_s: 86400}\n",
    )]);
    let config = files.load("t.yaml").unwrap();
    let agent = &config.agents[0];
    assert_eq!((agent.max_llm_recall, agent.max_interrupt_steps), (0, 100));
    assert_eq!(
        agent.context_manager.as_ref().unwrap().max_tokens,
        Some(2_000_000)
    );
    let provider = &config.providers["p"];
    assert_eq!(
        (provider.max_concurrency, provider.rpm, provider.tpm),
        (Some(8), Some(1), Some(1000))
    );
    assert_eq!(
        (provider.timeout_s, provider.connect_timeout_s),
        (Some(0.5), Some(2.0))
    );
    assert_eq!(
        (provider.retry_base_ms, provider.retry_cap_ms),
        (Some(0), Some(0))
    );
    assert_eq!(config.tools[0].timeout_s, 86400.0);
}

#[test]
fn names_holding_line_breaks_keep_one_problem_per_line() {
    let files = Files::new(&[
        ("top.yaml", "\"a\\nb\": 1\n"),
        (
            "agent.yaml",
            "agent_configs:\n  - name: \"w\\nx\"\n    \"bad\\u001b[31m\": 1\n",
        ),
    ]);
    let error = files.error("top.yaml");
    // A key with an escape is placed too.
    assert!(
        error
            .lines()
            .any(|line| line.ends_with("top.yaml:1:1: unknown key `a\\nb`")),
        "{error}"
    );
    for name in ["top.yaml", "agent.yaml"] {
        let error = files.error(name);
        for line in error.lines() {
            assert!(line.contains(name), "a line not naming the file: {line:?}");
            assert!(!line.contains('\u{1b}'), "{line:?}");
        }
    }
}

#[test]
fn max_workers_is_read_as_the_default_concurrency_of_bcall() {
    let files = Files::new(&[
        ("t.yaml", &format!("max_workers: 8\n{MINIMAL}")),
        ("none.yaml", MINIMAL),
        ("zero.yaml", &format!("max_workers: 0\n{MINIMAL}")),
        ("text.yaml", &format!("max_workers: many\n{MINIMAL}")),
    ]);
    assert_eq!(files.load("t.yaml").unwrap().max_workers, Some(8));
    assert_eq!(files.load("none.yaml").unwrap().max_workers, None);
    assert!(
        files
            .error("zero.yaml")
            .contains("`max_workers: 0` must be a whole number from 1 to 100000 (tasks at once)"),
        "{}",
        files.error("zero.yaml")
    );
    assert!(
        files
            .error("text.yaml")
            .contains("`max_workers: many` must be a whole number")
    );
}

#[test]
fn stream_on_an_agent_is_refused_with_a_hint() {
    let files = Files::new(&[
        (
            "agent.yaml",
            "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\n    stream: true\n",
        ),
        (
            "global.yaml",
            "global: {model_name: mock/echo, stream: false}\nagent_configs:\n  - name: a\n",
        ),
    ]);
    for name in ["agent.yaml", "global.yaml"] {
        let error = files.error(name);
        assert!(
            error.contains("agent `a`: `stream` is not an agent setting; hint: streaming is chosen per run (`lllm run --stream`"),
            "{error}"
        );
    }
}

#[test]
fn an_inline_system_prompt_with_a_python_placeholder_is_warned_about() {
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: mock/echo}\nagent_configs:\n  - name: a\n    system_prompt: \"You are {role}.\"\n  - name: b\n    system_prompt: \"You are {{ role }}, not {x}.\"\n  - name: c\n",
    )]);
    let config = files.load("t.yaml").unwrap();
    assert_eq!(
        config.warnings,
        [format!(
            "{}:4:5: agent `a`: `system_prompt` holds `{{role}}`, a Python `str.format` placeholder that \
          Jinja sends literally; write `{{{{ role }}}}`, or move the text to a prompt file with \
          `renderer: format`",
            files.0.path().join("t.yaml").display()
        )]
    );
}

#[test]
fn a_tool_s_parameters_are_a_json_schema_of_an_object() {
    #[track_caller]
    fn case(parameters: &str, expected: Option<&str>) {
        let tactic = format!(
            "global: {{model_name: mock/echo}}\nagent_configs: [{{name: a, tools: [wc]}}]\n\
             tools:\n  - name: wc\n    parameters: {parameters}\n    command: [wc]\n"
        );
        let files = Files::new(&[("t.yaml", &tactic)]);
        match (files.load("t.yaml"), expected) {
            (Ok(_), None) => {}
            (Err(error), Some(expected)) => {
                let error = error.to_string();
                assert!(
                    error.starts_with(&format!(
                        "{}:5:5: tool `wc`: `parameters` ",
                        files.0.path().join("t.yaml").display()
                    )),
                    "{error}"
                );
                assert!(error.contains(expected), "{error} lacks {expected}");
                assert_eq!(error.lines().count(), 1, "{error}");
            }
            (Ok(_), Some(expected)) => panic!("{parameters}: accepted, expected {expected}"),
            (Err(error), None) => panic!("{parameters}: {error}"),
        }
    }
    case("{type: object}", None);
    case(
        "{type: object, properties: {text: {type: string}}, required: [text]}",
        None,
    );
    case("~", None);
    case(
        "\"a string\"",
        Some("is a string, not a JSON Schema object"),
    );
    case("[text]", Some("is a list, not a JSON Schema object"));
    case("5", Some("is a number"));
    case("{type: 5}", Some("has `type: 5`"));
    case("{type: string}", Some("has `type: \"string\"`"));
    case("{properties: {}}", Some("has no `type`"));
    case(
        "{type: object, properties: {a: {type: 7}}}",
        Some("is not a valid JSON Schema at `/properties/a/type`"),
    );
    case(
        "{type: object, required: 3}",
        Some("is not a valid JSON Schema at `/required`"),
    );
}

#[test]
fn prompts_names_a_directory() {
    let tactic = |prompts: &str| format!("prompts: {prompts}\n{MINIMAL}");
    let files = Files::new(&[
        ("file.yaml", &tactic("notes.txt")),
        ("notes.txt", "not prompts"),
        ("dir.yaml", &tactic("p")),
        ("p/system.md", "You help."),
        ("later.yaml", &tactic("not_yet")),
        // A file named like the default directory is not the tactic's doing.
        ("default/t.yaml", MINIMAL),
        ("default/prompts", "a file"),
    ]);
    let error = files.error("file.yaml");
    assert!(
        error.ends_with(
            "notes.txt` is a regular file, not a directory; `prompts` names the directory of \
             the prompt files"
        ),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(files.load("dir.yaml").is_ok());
    assert!(files.load("later.yaml").is_ok());
    assert!(files.load("default/t.yaml").is_ok());
    // Built from code, the same rule.
    let built = from_yaml(&tactic("notes.txt"), files.0.path());
    assert!(built.is_err_and(|error| {
        error
            .to_string()
            .contains("is a regular file, not a directory")
    }));
}

#[test]
fn a_fork_names_a_dialog_its_agent_has_opened() {
    #[track_caller]
    fn case(flow: &str, expected: Option<&str>) {
        let tactic = format!(
            "global: {{model_name: mock/echo}}\nagent_configs: [{{name: a}}, {{name: b}}]\nflow:\n{flow}"
        );
        let files = Files::new(&[("t.yaml", &tactic)]);
        match (files.load("t.yaml"), expected) {
            (Ok(_), None) => {}
            (Err(error), Some(expected)) => {
                let error = error.to_string();
                assert!(error.contains(expected), "{error} lacks {expected}");
                assert_eq!(error.lines().count(), 1, "{error}");
            }
            (Ok(_), Some(expected)) => panic!("accepted, expected {expected}:\n{flow}"),
            (Err(error), None) => panic!("{error}:\n{flow}"),
        }
    }
    let step = |name: &str, agent: &str, dialog: &str, from: Option<&str>| {
        let fork = from.map_or(String::new(), |from| format!(", fork: {{from: {from}}}"));
        format!("{{step: {name}, agent: {agent}, dialog: {dialog}, text: x{fork}}}")
    };
    let open = step("one", "a", "main", None);
    // Forked from a dialog an earlier step opened: fine, at any depth.
    case(
        &format!(
            "  - {open}\n  - {}\n",
            step("two", "a", "side", Some("main"))
        ),
        None,
    );
    case(
        &format!(
            "  - {open}\n  - loop: {{max: 2}}\n    steps:\n      - {}\n",
            step("two", "a", "side", Some("main"))
        ),
        None,
    );
    // Opened by a conditional step: it may exist, so it is not refused.
    case(
        &format!(
            "  - {{step: one, agent: a, text: x, if: \"task == 'x'\"}}\n  - {}\n",
            step("two", "a", "side", Some("main"))
        ),
        None,
    );
    // In a loop, a dialog a later step of the loop opens exists in the next round.
    case(
        &format!(
            "  - loop: {{max: 2}}\n    steps:\n      - {}\n      - {}\n",
            step("two", "a", "side", Some("later")),
            step("three", "a", "later", None)
        ),
        None,
    );
    // Never opened, by anyone.
    case(
        &format!(
            "  - {open}\n  - {}\n",
            step("two", "a", "side", Some("nowhere"))
        ),
        Some(
            "step `two`: `fork.from` names dialog `nowhere`, which no step of agent `a` opens \
             before it (open then: `main`)",
        ),
    );
    // Opened later, outside any loop.
    case(
        &format!(
            "  - {}\n  - {}\n",
            step("two", "a", "side", Some("later")),
            step("three", "a", "later", None)
        ),
        Some("names dialog `later`, which no step of agent `a` opens before it (open then: none)"),
    );
    // Opened by another agent.
    case(
        &format!(
            "  - {}\n  - {}\n",
            step("one", "b", "main", None),
            step("two", "a", "side", Some("main"))
        ),
        Some("names dialog `main`, which no step of agent `a`"),
    );
    // A parallel branch starts on fresh agents.
    case(
        &format!(
            "  - {open}\n  - parallel:\n    steps:\n      - {}\n",
            step("two", "a", "side", Some("main"))
        ),
        Some("names dialog `main`, which no step of agent `a`"),
    );
    case(
        &format!(
            "  - parallel: {{foreach: \"[1, 2]\"}}\n    steps:\n      - {}\n      - {}\n",
            step("one", "a", "main", None),
            step("two", "a", "side", Some("main"))
        ),
        None,
    );
    // A step whose dialog is open already does not fork: nothing to refuse.
    case(
        &format!(
            "  - {}\n  - {open}\n  - {}\n",
            step("zero", "a", "side", None),
            step("two", "a", "side", Some("nowhere"))
        ),
        None,
    );
}

/// The problems of `name`, each with the files' directory cut off.
fn problems_of(files: &Files, name: &str) -> Vec<String> {
    let root = format!("{}/", files.0.path().display());
    files
        .error(name)
        .lines()
        .map(|line| line.replace(&root, ""))
        .collect()
}

#[test]
fn every_value_of_the_wrong_type_is_listed_at_its_place() {
    // Serde stopped at the first wrong type: one run, one problem. Each is
    // now left out and the rest read again, so all are listed, and what
    // they belong to stays (the agent with a wrong `tools` still exists,
    // so the step naming it is not told it does not).
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: mock/echo}\n\
         agent_configs:\n\
         \x20 - 5\n\
         \x20 - name: a\n\
         \x20   tools: [x, 3, y, [4]]\n\
         \x20   api_type: maybe\n\
         \x20   stream: true\n\
         tools:\n\
         \x20 - just a name\n\
         \x20 - {name: t, command: [x], cwd: [no]}\n\
         providers:\n\
         \x20 p: {rpmx: 1, send_name: often}\n\
         flow:\n\
         \x20 - {step: one, agent: a, text: hi, args: 5}\n\
         \x20 - {step: two, agent: a, prompt: [p]}\n\
         \x20 - 7\n\
         cache: sometimes\n",
    )]);
    assert_eq!(
        problems_of(&files, "t.yaml"),
        [
            "t.yaml:12:7: `providers.p.rpmx`: unknown field `rpmx`, expected one of `api`, \
             `base_url`, `api_key_env`, `max_concurrency`, `rpm`, `tpm`, `timeout_s`, \
             `connect_timeout_s`, `system_role`, `send_name`, `structured_output`, \
             `retry_base_ms`, `retry_cap_ms`, `script`, `headers`, `cache`, `cache_ttl_s`",
            "t.yaml:12:16: `providers.p.send_name`: invalid type: string \"often\", expected a boolean",
            "t.yaml:17:1: `cache`: invalid type: string \"sometimes\", expected a boolean",
            // A number in a list has no place of its own: the list's.
            "t.yaml:3:5: `agent_configs[0]` must be a mapping (`name`, `model_name`, …), not a number",
            // Items after a dropped one keep their indexes as written.
            "t.yaml:5:16: `agent_configs[1].tools[1]`: invalid type: integer `3`, expected a string",
            "t.yaml:5:22: `agent_configs[1].tools[3]`: invalid type: sequence, expected a string",
            "t.yaml:7:5: agent `a`: `stream` is not an agent setting; hint: streaming is chosen \
             per run (`lllm run --stream` shows the final turn as it arrives) or per call in \
             code, so remove it",
            "t.yaml:6:5: agent `a`: `api_type: maybe` must be `completion` or `response`",
            "t.yaml:9:5: `tools[0]` must be a mapping (`name`, `command`, …), not a string",
            "t.yaml:10:29: `tools[1].cwd`: invalid type: sequence, expected a string",
            "t.yaml:14:37: `flow[0].args`: invalid type: integer `5`, expected a map",
            "t.yaml:15:27: `flow[1].prompt`: invalid type: sequence, expected a string",
            "t.yaml:16:5: `flow[2]` must be a mapping (a step, a `loop` or a `parallel`), not a number",
        ]
    );
}

#[test]
fn problems_are_placed_in_the_file_of_the_chain_that_wrote_them() {
    let files = Files::new(&[
        (
            "base.yaml",
            "global:\n  model_name: mock/echo\n  max_llm_recall: lots\nagent_configs:\n  - name: a\n    tools: 5\ncolour: red\n",
        ),
        (
            "t.yaml",
            "base: base.yaml\nglobal: {max_exception_retry: -1}\nflavour: sweet\n",
        ),
    ]);
    assert_eq!(
        problems_of(&files, "t.yaml"),
        [
            "t.yaml:3:1: unknown key `flavour`",
            "base.yaml:7:1: unknown key `colour`",
            "base.yaml:6:5: `agent_configs[0].tools`: invalid type: integer `5`, expected a sequence",
            "t.yaml:2:10: `global`: `max_exception_retry: -1` must be a whole number from 0 to 100 (repairs)",
            "base.yaml:3:3: `global`: `max_llm_recall: lots` must be a whole number from 0 to 100 (retries)",
        ]
    );
    // A setting a user's defaults brought has no place in the files.
    let defaults = Defaults {
        model: None,
        providers: json!({"local": {"rpm": 0}}).as_object().cloned().unwrap(),
    };
    let files = Files::new(&[(
        "t.yaml",
        "providers: {other: {}}\nagent_configs: [{name: a, model_name: mock/echo}]\n",
    )]);
    let error = load_with(&files.0.path().join("t.yaml"), &defaults)
        .unwrap_err()
        .to_string();
    assert!(
        error.ends_with("t.yaml: provider `local`: `rpm: 0` must be a whole number from 1 to 1000000000 (requests per minute)"),
        "{error}"
    );
}

#[test]
fn a_missing_key_is_at_its_entry_unless_its_value_was_wrong() {
    let files = Files::new(&[(
        "t.yaml",
        "agent_configs:\n  - name: a\n  - {name: b, model_name: [x]}\n  - model_name: mock/echo\n\
         flow:\n  - step: one\n    text: hi\n  - {step: two, agent: a, text: [x]}\n\
         mcp_servers:\n  - {name: s}\n",
    )]);
    assert_eq!(
        problems_of(&files, "t.yaml"),
        [
            "t.yaml:2:5: agent `a` has no `model_name`; set it under `global` or on the agent",
            // Its model is wrong, not missing.
            "t.yaml:3:15: `agent_configs[1].model_name`: invalid type: sequence, expected a string",
            "t.yaml:4:5: `agent_configs[2]` has no `name`",
            "t.yaml:10:5: `mcp_servers[0]` needs a `name` and a non-empty `command`",
            "t.yaml:6:5: step `one` has no `agent`",
            // Its text is wrong, not missing.
            "t.yaml:8:27: `flow[1].text`: invalid type: sequence, expected a string",
        ]
    );
}

#[test]
fn a_flow_with_problems_keeps_every_step_name() {
    // The partial config keeps a step with problems (its agent or input
    // empty) and a loop with a wrong `max` (once), so later templates'
    // checks still know their names.
    let files = Files::new(&[(
        "t.yaml",
        "global: {model_name: mock/echo}\nagent_configs: [{name: a}]\nflow:\n\
         \x20 - {step: one, text: hi}\n\
         \x20 - {step: two, agent: a}\n\
         \x20 - {step: three, agent: a, prompt: p, text: hi}\n\
         \x20 - loop: {max: 0}\n\
         \x20   steps: [{step: four, agent: a, text: x}]\n\
         \x20 - parallel: 5\n\
         \x20   steps: [{step: five, agent: a, text: x}]\n",
    )]);
    match files.load("t.yaml") {
        Err(Error::Incomplete {
            partial, problems, ..
        }) => {
            let mut names = Vec::new();
            fn walk(items: &[FlowItem], names: &mut Vec<String>) {
                for item in items {
                    match item {
                        FlowItem::Step(step) => names.push(step.name.clone()),
                        FlowItem::Tactic(step) => names.push(step.name.clone()),
                        FlowItem::Loop(config) => walk(&config.steps, names),
                        FlowItem::Parallel(config) => walk(&config.steps, names),
                    }
                }
            }
            walk(&partial.flow, &mut names);
            assert_eq!(names, ["one", "two", "three", "four", "five"]);
            assert_eq!(problems.len(), 5, "{problems:#?}");
        }
        other => panic!("{:?}", other.map(|config| config.name)),
    }
}
