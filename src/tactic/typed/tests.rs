use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::TypedError;
use crate::tactic::{Ctx, Flow, FlowResult, RunState, Tactic, Task};
use crate::{Registry, SessionRecord};

#[derive(Debug, PartialEq, Deserialize, schemars::JsonSchema)]
struct Verdict {
    accept: bool,
    reason: String,
}

/// A tactic from `yaml` over `mock/script` replying `replies` in order.
fn tactic(dir: &Path, yaml: &str, replies: &[&str], registry: &Registry) -> Tactic {
    let script = json!({ "replies": replies });
    std::fs::write(dir.join("s.yaml"), script.to_string()).unwrap();
    let yaml = format!("providers: {{mock: {{script: s.yaml}}}}\n{yaml}");
    Tactic::from_yaml(&yaml, dir, registry).unwrap()
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The run `call_typed::<_, Out>` makes, as its record.
fn typed_run<Out>(tactic: &Tactic, task: &str) -> SessionRecord
where
    Out: serde::de::DeserializeOwned + schemars::JsonSchema,
{
    let mut typed = tactic.clone();
    typed.output = Some(tactic.output_reading::<Out>().unwrap());
    block_on(typed.run(Task::new(task)))
}

/// Every repair of the run's calls, as `(agent, error)`.
fn repairs(record: &SessionRecord) -> Vec<(String, String)> {
    record
        .agent_calls
        .iter()
        .flat_map(|call| {
            call.exception_retries
                .iter()
                .map(|repair| (call.agent.clone(), repair.error.clone()))
        })
        .collect()
}

const NOT_A_VERDICT: &str = r#"{"accept": "yes"}"#;
const VERDICT: &str = r#"{"accept": true, "reason": "sound"}"#;
const PLAIN: &str = "agent_configs: [{name: judge, model_name: mock/script}]";

#[test]
fn a_yaml_tactic_returns_the_struct_after_one_repair() {
    let dir = tempfile::tempdir().unwrap();
    let replies = [NOT_A_VERDICT, VERDICT];
    let tactic = tactic(dir.path(), PLAIN, &replies, &Registry::new());
    let verdict: Verdict = block_on(tactic.call_typed("Judge: 2 + 2 = 4")).unwrap();
    assert_eq!(
        verdict,
        Verdict {
            accept: true,
            reason: "sound".into()
        }
    );

    let record = typed_run::<Verdict>(&tactic, "Judge: 2 + 2 = 4");
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
    let repairs = repairs(&record);
    assert_eq!(repairs.len(), 1, "{repairs:?}");
    // The repair says what was wrong, and the model was asked again with it.
    assert!(repairs[0].1.contains("\"yes\""), "{}", repairs[0].1);
    let call = &record.agent_calls[0];
    assert_eq!(call.invokes.len(), 2);
    assert!(
        sent(&record)
            .iter()
            .any(|text| text.contains("is not of type \"boolean\"")),
        "the repair went to the model: {:?}",
        sent(&record)
    );
    // The request asked the provider for a structured reply.
    assert!(call.invokes[0].request.format);
}

/// The texts of the run's user turns, in every dialog (repairs included).
fn sent(record: &SessionRecord) -> Vec<String> {
    record
        .dialogs
        .iter()
        .flat_map(|dialog| &dialog.messages)
        .filter(|message| message.role == crate::dialog::Role::User)
        .map(|message| message.content.clone())
        .collect()
}

#[test]
fn an_object_input_is_the_task_and_its_arguments() {
    #[derive(Serialize)]
    struct Claim<'a> {
        claim: &'a str,
    }
    let dir = tempfile::tempdir().unwrap();
    let yaml = "agent_configs: [{name: judge, model_name: mock/script}]\n\
                flow: [{step: judge, agent: judge, text: 'Judge: {{ claim }}'}]";
    let tactic = tactic(dir.path(), yaml, &[VERDICT], &Registry::new());
    let verdict: Verdict = block_on(tactic.call_typed(Claim { claim: "2 + 2 = 4" })).unwrap();
    assert!(verdict.accept);
    let record = typed_run::<Verdict>(&tactic, "unused");
    assert_eq!(
        record.state,
        RunState::Failure,
        "the template needs `claim`"
    );

    let mut typed = tactic.clone();
    typed.output = Some(tactic.output_reading::<Verdict>().unwrap());
    let task = super::typed_task(&Claim { claim: "2 + 2 = 4" }).unwrap();
    assert_eq!(task.args["claim"], "2 + 2 = 4");
    assert_eq!(task.text(), r#"{"claim":"2 + 2 = 4"}"#);
    let record = block_on(typed.run(task));
    let sent = sent(&record);
    assert!(
        !sent.is_empty() && sent.iter().all(|text| text == "Judge: 2 + 2 = 4"),
        "{sent:?}"
    );
}

#[test]
fn an_input_that_is_no_object_nor_string_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tactic = tactic(dir.path(), PLAIN, &[VERDICT], &Registry::new());
    for (input, kind) in [
        (json!(4), "a number"),
        (json!([1]), "a list"),
        (json!(null), "null"),
    ] {
        let error = block_on(tactic.call_typed::<_, Verdict>(input)).unwrap_err();
        assert!(matches!(error, TypedError::Input(_)), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with(&format!("the input of a typed call is {kind};")),
            "{error}"
        );
        assert!(error.record().is_none());
    }
    // Nothing ran: the script's one reply is still there for a real call.
    let verdict: Verdict = block_on(tactic.call_typed("judge")).unwrap();
    assert!(verdict.accept);
}

#[test]
fn a_run_whose_replies_never_fit_is_an_error_holding_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "agent_configs: [{name: judge, model_name: mock/script, max_exception_retry: 1}]";
    let replies = [NOT_A_VERDICT, "no JSON at all"];
    let tactic = tactic(dir.path(), yaml, &replies, &Registry::new());
    let error = block_on(tactic.call_typed::<_, Verdict>("judge")).unwrap_err();
    let record = error.record().expect("the run's record");
    assert_eq!(record.state, RunState::Failure);
    assert_eq!(repairs(record).len(), 1);
    assert!(
        error.to_string().contains("still does not parse"),
        "{error}"
    );
}

#[test]
fn a_declared_schema_holds_the_run_and_the_type_reads_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "{PLAIN}\noutput_schema: {{type: object, required: [accept], \
         properties: {{accept: {{type: boolean}}}}}}"
    );
    // Fits the schema, not `Verdict` (no `reason`): repaired too.
    let replies = [NOT_A_VERDICT, r#"{"accept": true}"#, VERDICT];
    let tactic = tactic(dir.path(), &yaml, &replies, &Registry::new());
    let record = typed_run::<Verdict>(&tactic, "judge");
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
    let repairs = repairs(&record);
    assert_eq!(repairs.len(), 2, "{repairs:?}");
    assert!(repairs[0].1.contains("JSON schema"), "{}", repairs[0].1);
    assert!(
        repairs[1]
            .1
            .contains("does not read as `Verdict`: missing field `reason`"),
        "{}",
        repairs[1].1
    );
    assert!(record.agent_calls[0].invokes[0].request.format);

    // A plain run of the same tactic holds its delivery to the schema only.
    let record = block_on(tactic.run(Task::new("judge")));
    assert_eq!(record.delivery.as_deref(), Some(r#"{"accept": true}"#));
    assert_eq!(self::repairs(&record).len(), 1);
}

#[test]
fn only_the_last_step_of_a_flow_is_held_to_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "agent_configs: [{name: judge, model_name: mock/script}]\n\
                output_schema: {type: object, required: [accept]}\n\
                flow:\n\
                - {step: think, agent: judge, text: 'Think about {{ task }}'}\n\
                - {loop: {max: 1}, steps: [{step: decide, agent: judge, text: 'Decide.'}]}";
    let replies = ["prose is fine here", "still prose", VERDICT];
    let tactic = tactic(dir.path(), yaml, &replies, &Registry::new());
    let record = block_on(tactic.run(Task::new("2 + 2 = 4")));
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
    assert_eq!(record.delivery.as_deref(), Some(VERDICT));
    let repairs = repairs(&record);
    assert_eq!(repairs.len(), 1, "{repairs:?}");
    assert!(!record.agent_calls[0].invokes[0].request.format);
    assert!(record.agent_calls[1].invokes[0].request.format);
}

#[test]
fn a_result_template_that_does_not_fit_fails_the_run_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "agent_configs: [{name: judge, model_name: mock/script}]\n\
                output_schema: {type: object, required: [accept]}\n\
                flow: [{step: think, agent: judge, text: '{{ task }}'}]\n\
                result: 'verdict: {{ think.content }}'";
    let tactic = tactic(dir.path(), yaml, &[VERDICT], &Registry::new());
    let record = block_on(tactic.run(Task::new("judge")));
    assert_eq!(record.state, RunState::Failure);
    let error = record.error.unwrap();
    assert!(
        error.starts_with("the delivery does not fit the output schema: reply is not valid JSON"),
        "{error}"
    );
    assert!(!error.contains('\n'), "{error}");
}

/// A programmed tactic whose writer delivers.
struct Judge;

impl Flow for Judge {
    const NAME: &'static str = "judge";
    const AGENTS: &'static [&'static str] = &["judge"];

    async fn call(&self, cx: &mut Ctx, task: Task) -> FlowResult {
        let judge = cx.agent("judge")?;
        judge.open("main")?;
        judge.receive(format!("Think about {}", task.text()))?;
        let thought = judge.respond().await?.content;
        judge.receive(format!("You thought: {thought}. Decide."))?;
        Ok(cx.delivering("judge")?.respond().await?.content)
    }
}

#[test]
fn a_programmed_tactic_returns_the_struct_after_one_repair() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "tactic_type: judge\nagent_configs: [{name: judge, model_name: mock/script}]";
    let replies = ["a thought", NOT_A_VERDICT, VERDICT];
    let registry = Registry::new().flow(Judge);
    let tactic = tactic(dir.path(), yaml, &replies, &registry);
    let verdict: Verdict = block_on(tactic.call_typed("2 + 2 = 4")).unwrap();
    assert_eq!(verdict.reason, "sound");

    let record = typed_run::<Verdict>(&tactic, "2 + 2 = 4");
    assert_eq!(record.state, RunState::Success, "{:?}", record.error);
    assert_eq!(repairs(&record).len(), 1);
    // The first call was not held: its prose was no misfit.
    assert!(!record.agent_calls[0].invokes[0].request.format);
    assert_eq!(record.agent_calls[1].exception_retries.len(), 1);
}

#[test]
fn a_programmed_flow_that_delivers_another_text_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "tactic_type: judge\nagent_configs: [{name: judge, model_name: mock/script}]";
    struct Ignores;
    impl Flow for Ignores {
        const NAME: &'static str = "judge";
        const AGENTS: &'static [&'static str] = &["judge"];
        async fn call(&self, cx: &mut Ctx, _task: Task) -> FlowResult {
            assert!(cx.output_schema().is_some());
            let judge = cx.delivering("judge")?;
            judge.open("main")?;
            judge.receive("hi")?;
            judge.respond().await?;
            Ok("my own text".into())
        }
    }
    let tactic = tactic(dir.path(), yaml, &[VERDICT], &Registry::new().flow(Ignores));
    let error = block_on(tactic.call_typed::<_, Verdict>("judge")).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("the delivery does not fit the output schema"),
        "{error}"
    );
}

#[test]
fn a_derived_schema_is_closed_as_strict_structured_outputs_need() {
    #[derive(Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Report {
        title: String,
        note: Option<String>,
        scores: std::collections::BTreeMap<String, u8>,
        parts: Vec<Verdict>,
    }
    let dir = tempfile::tempdir().unwrap();
    let tactic = tactic(dir.path(), PLAIN, &[], &Registry::new());
    let output = tactic.output_reading::<Report>().unwrap();
    let schema = output.schema.clone().unwrap();
    assert_eq!(schema.get("$schema"), None);
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(
        schema["required"],
        json!(["title", "note", "scores", "parts"])
    );
    // A map stays open; a nested struct is closed too.
    assert_ne!(
        schema["properties"]["scores"]["additionalProperties"],
        false
    );
    let verdict = &schema["$defs"]["Verdict"];
    assert_eq!(verdict["additionalProperties"], false, "{schema}");
    // `null` reads as `None`: an optional field may be null, not left out.
    let reply = r#"{"title": "t", "note": null, "scores": {"a": 1}, "parts": []}"#;
    assert!(output.parse(reply).is_ok());
    assert!(
        output
            .parse(r#"{"title": "t", "scores": {}, "parts": []}"#)
            .is_err()
    );
}
