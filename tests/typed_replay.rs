//! A run of `Tactic::call_typed` re-runs from its record (issue 29): the
//! schema derived from the output type is recorded as the tactic's
//! `output_schema`, and `lllm::replay::rerun` holds the re-run to it, so the
//! re-run asks what the run asked and repairs what it repaired.

use lllm::{Registry, Tactic, TypedError};
use serde::Deserialize;

#[derive(Debug, Deserialize, lllm::JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    accept: bool,
    reason: String,
}

#[tokio::test]
async fn a_typed_run_re_runs_identically_from_its_record() {
    let dir = tempfile::tempdir().unwrap();
    // Never a verdict: the run repairs three times and fails.
    std::fs::write(
        dir.path().join("s.yaml"),
        r#"replies: ['{"accept": "yes"}', 'no JSON', '{"accept": true}', '[]']"#,
    )
    .unwrap();
    let path = dir.path().join("judge.yaml");
    std::fs::write(
        &path,
        "agent_configs: [{name: judge, model_name: mock/script}]\n\
         providers: {mock: {script: s.yaml}}\n",
    )
    .unwrap();
    let tactic = Tactic::load(&path, &Registry::new()).unwrap();
    let error = tactic.call_typed::<_, Verdict>("judge").await.unwrap_err();
    let TypedError::Run(error) = error else {
        panic!("a run: {error:?}")
    };
    let record = error.into_record();
    assert_eq!(record.agent_calls[0].exception_retries.len(), 3);
    let schema = record.tactic.output_schema.clone().expect("recorded");
    assert_eq!(schema["required"], serde_json::json!(["accept", "reason"]));

    // Written and read back, as `lllm replay` reads it.
    let written = dir.path().join("r.json");
    record.write(&written).unwrap();
    let back = lllm::replay::load(&written, None).unwrap();
    assert_eq!(back.tactic.output_schema, Some(schema));
    let registry = Registry::new();
    let rerun = lllm::replay::rerun(&back, &registry)
        .tactic(&path)
        .await
        .unwrap();
    assert!(
        rerun.is_identical(),
        "the re-run asks for the same schema and repairs the same replies: {:?}",
        rerun.difference()
    );

    // A run that is not typed records no schema.
    let plain = tactic.run("judge".into()).await;
    assert_eq!(plain.tactic.output_schema, None);
}
