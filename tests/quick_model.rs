//! `quick`'s model: `.model(…)`, else `LLLM_MODEL`, else one clear error (no
//! silent paid default). One test in its own binary: it sets the process's
//! environment, which no other test may see change.

use lllm::quick::Error;

#[tokio::test]
async fn the_model_comes_from_the_call_or_lllm_model_and_never_by_default() {
    // SAFETY: this binary's only test; nothing else reads the environment at once.
    unsafe { std::env::remove_var("LLLM_MODEL") };
    let error = lllm::quick("hi").await.unwrap_err();
    assert!(matches!(error, Error::NoModel), "{error:?}");
    assert_eq!(
        error.to_string(),
        "`quick` needs a model: call `.model(\"provider/model\")` or set LLLM_MODEL"
    );
    let error = lllm::Agent::builder("").build().err().unwrap();
    assert!(matches!(error, Error::NoModel), "{error:?}");

    // SAFETY: as above.
    unsafe { std::env::set_var("LLLM_MODEL", "") };
    let error = lllm::quick("hi").await.unwrap_err();
    assert!(matches!(error, Error::NoModel), "an empty name is none");

    // SAFETY: as above.
    unsafe { std::env::set_var("LLLM_MODEL", "mock/echo") };
    assert_eq!(
        lllm::quick("from the variable").await.unwrap().content,
        "from the variable"
    );
    assert!(lllm::Agent::builder("").build().is_ok());

    // `.model` wins over the variable.
    // SAFETY: as above.
    unsafe { std::env::set_var("LLLM_MODEL", "nope/x") };
    assert_eq!(
        lllm::quick("named")
            .model("mock/echo")
            .await
            .unwrap()
            .content,
        "named"
    );
    let error = lllm::quick("hi").await.unwrap_err().to_string();
    assert!(error.contains("unknown provider `nope`"), "{error}");
}
