//! Tools from ordinary functions (`#[lllm::tool]`, issue 29): a plain sync
//! function of two arguments, an async one taking structs, one returning a
//! `Result`, each called by an agent end to end on the offline scripted
//! model; and the JSON schemas the macro writes from the signatures and
//! doc comments.

#![cfg(feature = "macros")]

use std::sync::Mutex;
use std::thread::ThreadId;

use lllm::{Registry, Tactic, Task, Tool};
use serde::Deserialize;
use serde_json::{Value, json};

/// The thread the last `repeat` ran on.
static REPEAT_THREAD: Mutex<Option<ThreadId>> = Mutex::new(None);

/// Repeat a word.
#[lllm::tool]
fn repeat(
    /// The word to repeat.
    word: &str,
    /// How many times.
    times: usize,
) -> String {
    *REPEAT_THREAD.lock().unwrap() = Some(std::thread::current().id());
    vec![word; times].join(" ")
}

/// A point in the plane.
#[derive(Deserialize, lllm::JsonSchema)]
struct Point {
    /// Across.
    x: f64,
    /// Up.
    y: f64,
}

/// The distance between two points.
#[lllm::tool]
async fn distance(from: Point, to: Point) -> f64 {
    tokio::task::yield_now().await;
    ((to.x - from.x).powi(2) + (to.y - from.y).powi(2)).sqrt()
}

/// Divide one whole number by another.
///
/// # Arguments
///
/// * `dividend` - The number divided.
/// * `divisor` - The number it is divided by;
///   never zero.
///
/// # Examples
///
/// ```
/// # Not a heading: a line of code.
/// ```
#[lllm::tool(name = "safe_divide")]
fn divide(dividend: i64, divisor: i64) -> Result<i64, String> {
    if divisor == 0 {
        return Err(format!("cannot divide {dividend} by zero"));
    }
    Ok(dividend / divisor)
}

/// Fails in the blocking pool.
#[lllm::tool]
fn explode() -> Result<String, std::io::Error> {
    panic!("the sync tool blew up")
}

fn registry() -> Registry {
    Registry::new()
        .tool_impl(repeat::tool())
        .tool_impl(distance::tool())
        .tool_impl(divide::tool())
        .tool_impl(explode::tool())
}

/// Runs a one-agent tactic offering every tool on the scripted `replies`;
/// gives the record as JSON.
async fn run(replies: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("script.yaml", replies);
    write(
        "tactic.yaml",
        "tactic_type: tools\n\
         providers: {mock: {script: script.yaml}}\n\
         agent_configs:\n  \
           - name: worker\n    \
             model_name: mock/script\n    \
             system_prompt: Use the tools.\n    \
             tools: [repeat, distance, safe_divide, explode]\n",
    );
    let config = lllm::config::load(&dir.path().join("tactic.yaml")).unwrap();
    let tactic = Tactic::build_with(config, &|_| None, &registry()).unwrap();
    let record = tactic.run(Task::new("Go.")).await;
    assert_eq!(
        record.delivery.as_deref(),
        Some("done"),
        "{:?}",
        record.error
    );
    serde_json::to_value(&record).unwrap()
}

/// The calls of the first tool round, and every message's text.
fn calls_and_texts(record: &Value) -> (Vec<Value>, Vec<String>) {
    let calls = record["agent_calls"][0]["interrupts"][0]["calls"]
        .as_array()
        .unwrap()
        .clone();
    let texts = record["dialogs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|dialog| dialog["messages"].as_array().unwrap())
        .filter_map(|message| message["content"].as_str().map(str::to_string))
        .collect();
    (calls, texts)
}

#[tokio::test]
async fn a_plain_two_argument_sync_function_is_a_tool_an_agent_calls() {
    let record = run(r#"replies:
  - tool_calls: [{name: repeat, arguments: {word: owl, times: 3}}]
  - text: done
"#)
    .await;
    let (calls, texts) = calls_and_texts(&record);
    assert_eq!(calls[0]["name"], "repeat");
    assert_eq!(calls[0]["result"], "owl owl owl", "{calls:#?}");
    assert!(
        texts
            .iter()
            .any(|text| text.contains("Return of calling function repeat")
                && text.contains("owl owl owl")),
        "the result reaches the dialog: {texts:#?}"
    );
    // A sync tool runs on the blocking pool, never on the runtime's thread
    // (this test's runtime has one thread: the test's).
    let ran_on = REPEAT_THREAD.lock().unwrap().expect("repeat ran");
    assert_ne!(ran_on, std::thread::current().id());
    // Still an ordinary function.
    assert_eq!(repeat("hoot", 2), "hoot hoot");
}

#[tokio::test]
async fn an_async_function_taking_structs_is_a_tool() {
    let record = run(r#"replies:
  - tool_calls: [{name: distance, arguments: {from: {x: 0, y: 0}, to: {x: 3, y: 4}}}]
  - text: done
"#)
    .await;
    let (calls, texts) = calls_and_texts(&record);
    assert_eq!(calls[0]["result"], "5.0", "{calls:#?}");
    assert!(texts.iter().any(|text| text.contains("5.0")), "{texts:#?}");
}

#[tokio::test]
async fn an_err_a_panic_and_misfit_arguments_reach_the_model_as_tool_errors() {
    let record = run(r#"replies:
  - tool_calls:
      - {name: safe_divide, arguments: {dividend: 7, divisor: 0}}
      - {name: safe_divide, arguments: {dividend: 7, divisor: 2}}
      - {name: explode, arguments: {}}
      - {name: repeat, arguments: {word: owl}}
  - text: done
"#)
    .await;
    let (calls, texts) = calls_and_texts(&record);
    assert_eq!(
        calls[0]["error_message"], "cannot divide 7 by zero",
        "{calls:#?}"
    );
    assert_eq!(calls[1]["result"], "3");
    assert_eq!(
        calls[2]["error_message"],
        "the tool `explode` panicked: the sync tool blew up"
    );
    let misfit = calls[3]["error_message"].as_str().unwrap();
    assert!(
        misfit.starts_with("the arguments of `repeat` do not fit its parameters")
            && misfit.contains("missing field `times`"),
        "{misfit}"
    );
    assert!(
        texts
            .iter()
            .any(|text| text.contains("cannot divide 7 by zero")),
        "the error reaches the dialog: {texts:#?}"
    );
}

#[test]
fn the_schema_has_each_argument_with_its_type_and_doc() {
    let repeat = repeat::tool();
    let spec = repeat.spec();
    assert_eq!(spec.name, "repeat");
    assert_eq!(spec.description, "Repeat a word.");
    assert_eq!(
        spec.parameters,
        json!({
            "type": "object",
            "properties": {
                "word": {"type": "string", "description": "The word to repeat."},
                "times": {"type": "integer", "format": "uint", "minimum": 0, "description": "How many times."},
            },
            "required": ["word", "times"],
        })
    );

    // Docs from `# Arguments`; the name from the attribute; the
    // description stops at the first heading.
    let divide = divide::tool();
    let spec = divide.spec();
    assert_eq!(spec.name, "safe_divide");
    assert_eq!(spec.description, "Divide one whole number by another.");
    let properties = &spec.parameters["properties"];
    assert_eq!(properties["dividend"]["description"], "The number divided.");
    assert_eq!(
        properties["divisor"]["description"],
        "The number it is divided by; never zero."
    );
    assert_eq!(properties["divisor"]["type"], "integer");
    assert_eq!(spec.parameters["required"], json!(["dividend", "divisor"]));

    // A struct argument through `lllm::JsonSchema`, inlined.
    let distance = distance::tool();
    let from = &distance.spec().parameters["properties"]["from"];
    assert_eq!(from["type"], "object");
    assert_eq!(from["description"], "A point in the plane.");
    assert_eq!(from["properties"]["y"]["description"], "Up.");
    assert_eq!(from["required"], json!(["x", "y"]));

    // No arguments: an object (of nothing).
    let explode = explode::tool();
    assert_eq!(explode.spec().parameters, json!({"type": "object"}));
}

/// `lllm::JsonSchema` gives what schemars' own derive gives, attributes
/// (serde's and schemars') and all.
#[test]
fn the_derive_through_lllm_matches_schemars_own() {
    use lllm::schemars::{self, JsonSchema};

    /// A shape.
    #[derive(Deserialize, lllm::JsonSchema)]
    #[serde(rename_all = "camelCase", default)]
    #[allow(dead_code)]
    struct Ours {
        /// Its colour.
        fill_colour: String,
        #[schemars(range(min = 1))]
        side_count: u32,
        kind: Kind,
    }

    /// A shape.
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase", default)]
    #[schemars(rename = "Ours")]
    #[allow(dead_code)]
    struct Theirs {
        /// Its colour.
        fill_colour: String,
        #[schemars(range(min = 1))]
        side_count: u32,
        kind: Kind,
    }

    impl Default for Ours {
        fn default() -> Ours {
            Ours {
                fill_colour: "red".into(),
                side_count: 3,
                kind: Kind::Flat,
            }
        }
    }

    impl Default for Theirs {
        fn default() -> Theirs {
            Theirs {
                fill_colour: "red".into(),
                side_count: 3,
                kind: Kind::Flat,
            }
        }
    }

    #[derive(Deserialize, lllm::JsonSchema)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Kind {
        /// Drawn on paper.
        Flat,
        Solid {
            faces: u8,
        },
    }

    /// Two of a kind.
    #[derive(Deserialize, lllm::JsonSchema)]
    #[allow(dead_code)]
    struct Pair<T> {
        first: T,
        /// The other.
        second: Option<T>,
    }

    /// Two of a kind.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(rename = "Pair")]
    #[allow(dead_code)]
    struct TheirPair<T> {
        first: T,
        /// The other.
        second: Option<T>,
    }

    assert_eq!(
        schemars::schema_for!(Pair<Kind>),
        schemars::schema_for!(TheirPair<Kind>)
    );
    assert_eq!(<Pair<u8> as JsonSchema>::schema_name(), "Pair");

    let ours = schemars::schema_for!(Ours);
    let theirs = schemars::schema_for!(Theirs);
    assert_eq!(ours, theirs);
    assert_eq!(ours.get("title"), Some(&json!("Ours")));
    assert_eq!(
        ours.get("properties").unwrap()["fillColour"]["default"],
        "red",
        "the container's default is the item's `Default`"
    );
    assert_eq!(<Kind as JsonSchema>::schema_name(), "Kind");
    assert!(ours.as_value().to_string().contains("Drawn on paper."));
}

#[test]
fn a_tool_registered_twice_is_refused_by_name() {
    let refused = std::panic::catch_unwind(|| registry().tool_impl(repeat::tool()));
    let message = *refused.unwrap_err().downcast::<String>().unwrap();
    assert_eq!(message, "tool `repeat` is registered twice");
}
