//! The limiter's buckets, pauses and concurrency, on tokio's paused clock.

use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    super::super::http::headers(pairs.iter().copied()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn rpm_is_the_provider_s_token_bucket() {
    let limiter = Limiter::new(Limits {
        rpm: Some(120),
        ..Limits::default()
    });
    let started = Instant::now();
    let mut times = Vec::new();
    for _ in 0..124 {
        let _permit = limiter.acquire(0).await;
        times.push(started.elapsed());
    }
    // The minute's 120 at once, as the provider's bucket holds them,
    // then two a second as it refills.
    assert_eq!(times[119], Duration::ZERO);
    assert_eq!(times[120], Duration::from_millis(500));
    assert_eq!(times[123], Duration::from_millis(2000));
}

#[tokio::test(start_paused = true)]
async fn a_configured_bucket_refills_from_the_end_of_the_first_request() {
    let limiter = Limiter::new(Limits {
        rpm: Some(60),
        ..Limits::default()
    });
    let held: Vec<_> = futures_util::future::join_all((0..60).map(|_| limiter.acquire(0))).await;
    // The server's bucket starts at the first request's arrival, which
    // may be late (a new connection): ours waits for an answer.
    tokio::time::advance(Duration::from_secs(10)).await;
    let started = Instant::now();
    let ((), elapsed) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(held);
        },
        async {
            drop(limiter.acquire(0).await);
            started.elapsed()
        }
    );
    assert_eq!(elapsed, Duration::from_secs(6), "one a second from then");
}

#[tokio::test(start_paused = true)]
async fn tpm_budgets_tokens() {
    let limiter = Limiter::new(Limits {
        tpm: Some(60_000),
        ..Limits::default()
    });
    let estimate = Estimate {
        input: 10_000,
        output: 20_000,
    };
    let started = Instant::now();
    drop(limiter.acquire(estimate).await);
    drop(limiter.acquire(estimate).await);
    assert_eq!(started.elapsed(), Duration::ZERO, "the minute's 60,000");
    drop(limiter.acquire(1000).await);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(1),
        "then 1,000 tokens per second"
    );
    // A reply that used more than its estimate is charged the rest; one
    // that used less refunds nothing (the server counted the estimate).
    limiter.on_success(40_000, Estimate::from(1000));
    limiter.on_success(0, estimate);
    let started = Instant::now();
    drop(limiter.acquire(0).await);
    assert_eq!(started.elapsed(), Duration::from_secs(39));
}

#[tokio::test]
async fn retries_sleeping_out_their_back_off_are_a_reason_once_they_are_most() {
    let limiter = Limiter::new(Limits::default());
    assert_eq!(limiter.waiting(), None);
    let first = limiter.retrying();
    assert_eq!(limiter.waiting(), Some(Waiting::Retry));
    let (one, two) = (limiter.acquire(0).await, limiter.acquire(0).await);
    assert_eq!(
        limiter.waiting(),
        None,
        "more requests in flight than retrying"
    );
    let second = limiter.retrying();
    assert_eq!(limiter.waiting(), Some(Waiting::Retry));
    drop((one, two, first, second));
    assert_eq!(limiter.waiting(), None);
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_capped_and_halves_on_429() {
    let limiter = Limiter::new(Limits {
        max_concurrency: Some(4),
        ..Limits::default()
    });
    let permits: Vec<_> = futures_util::future::join_all((0..4).map(|_| limiter.acquire(0))).await;
    assert_eq!(limiter.waiting(), Some(Waiting::Concurrency));
    limiter.on_rate_limited();
    limiter.pause(Duration::from_secs(2));
    drop(permits);
    assert_eq!(limiter.allowed(), 2);
    assert_eq!(limiter.waiting(), Some(Waiting::BackOff));
    let started = Instant::now();
    drop(limiter.acquire(0).await);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(2),
        "Retry-After pauses everyone"
    );
    for _ in 0..10 {
        limiter.on_success(0, Estimate::default());
    }
    assert_eq!(
        limiter.allowed(),
        4,
        "recovers gradually to the configured cap"
    );
}

#[tokio::test(start_paused = true)]
async fn windows_learned_from_the_headers_pace_requests_before_the_wall() {
    let limiter = Limiter::new(Limits::default());
    let first = limiter.acquire(0).await;
    let second = limiter.acquire(0).await;
    // 600 a minute, 10 a second; 12 left when the first reply left the
    // server, which may not have counted the second yet.
    first.observe(&headers(&[
        ("x-ratelimit-limit-requests", "600"),
        ("x-ratelimit-remaining-requests", "12"),
        ("x-ratelimit-reset-requests", "58.8s"),
    ]));
    drop((first, second));
    let started = Instant::now();
    let mut times = Vec::new();
    for _ in 0..13 {
        drop(limiter.acquire(0).await);
        times.push(started.elapsed());
    }
    assert_eq!(times[10], Duration::ZERO, "12, less the one in flight");
    assert_eq!(times[11], Duration::from_millis(100), "then 10 a second");
    assert_eq!(limiter.waiting(), Some(Waiting::RateLimit));
    // A smaller limit in the headers paces below a configured one.
    let limiter = Limiter::new(Limits {
        tpm: Some(600_000),
        ..Limits::default()
    });
    let permit = limiter.acquire(Estimate::from(100)).await;
    permit.observe(&headers(&[
        ("anthropic-ratelimit-tokens-limit", "6000"),
        ("anthropic-ratelimit-tokens-remaining", "100"),
        ("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:00Z"),
    ]));
    drop(permit);
    let started = Instant::now();
    drop(limiter.acquire(Estimate::from(200)).await);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(1),
        "100 a second from 100"
    );
    // A later reply lowers what is left (another client uses the key),
    // never raises it.
    tokio::time::advance(Duration::from_secs(60)).await;
    for remaining in ["0", "6000"] {
        let permit = limiter.acquire(0).await;
        permit.observe(&headers(&[
            ("anthropic-ratelimit-tokens-limit", "6000"),
            ("anthropic-ratelimit-tokens-remaining", remaining),
        ]));
        drop(permit);
    }
    let started = Instant::now();
    drop(limiter.acquire(Estimate::from(101)).await);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(1),
        "from 0 left (and 1 for the server's rounding), 100 a second"
    );
}

#[tokio::test(start_paused = true)]
async fn no_server_pauses_anyone_longer_than_max_pause() {
    let limiter = Limiter::new(Limits {
        max_pause: Duration::from_secs(5),
        ..Limits::default()
    });
    limiter.pause(Duration::from_secs(999_999));
    assert_eq!(limiter.waiting(), Some(Waiting::BackOff));
    let started = Instant::now();
    drop(limiter.acquire(0).await);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(5),
        "a 429 asking days"
    );
    // A shorter pause never shortens a longer one in force.
    limiter.pause(Duration::from_secs(4));
    limiter.pause(Duration::from_secs(1));
    let started = Instant::now();
    drop(limiter.acquire(0).await);
    assert_eq!(started.elapsed(), Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn zero_rates_from_a_library_caller_wait_instead_of_panicking() {
    let limiter = Limiter::new(Limits {
        rpm: Some(0),
        tpm: Some(0),
        ..Limits::default()
    });
    let started = Instant::now();
    drop(limiter.acquire(u64::MAX).await);
    drop(limiter.acquire(u64::MAX).await);
    assert!(
        started.elapsed() >= Duration::from_secs(60),
        "as 1 per minute"
    );
}

#[tokio::test(start_paused = true)]
async fn an_inflated_usage_puts_a_bucket_one_window_in_debt_at_most() {
    // Configured (`tpm`) and learned from the headers alike: a reply
    // claiming 10^12 tokens costs about a minute of waiting, not forever.
    let configured = Limiter::new(Limits {
        tpm: Some(60_000),
        ..Limits::default()
    });
    let learned = Limiter::new(Limits {
        max_pause: Duration::from_secs(3600),
        ..Limits::default()
    });
    let permit = learned.acquire(0).await;
    permit.observe(&headers(&[
        ("x-ratelimit-limit-tokens", "60000"),
        ("x-ratelimit-remaining-tokens", "60000"),
    ]));
    drop(permit);
    for limiter in [&configured, &learned] {
        drop(limiter.acquire(1000).await);
        limiter.on_success(10u64.pow(12), Estimate::from(1000));
        let waited = tokio::time::timeout(Duration::from_secs(3600), async {
            let started = Instant::now();
            drop(limiter.acquire(1000).await);
            started.elapsed()
        })
        .await;
        assert_eq!(
            waited,
            Ok(Duration::from_secs(61)),
            "60,000 owed and 1,000 asked, at 1,000 a second"
        );
        limiter.on_success(u64::MAX, Estimate::default());
        let started = Instant::now();
        drop(limiter.acquire(0).await);
        assert_eq!(started.elapsed(), Duration::from_secs(60), "no more owed");
    }
}

#[tokio::test(start_paused = true)]
async fn the_server_s_windows_hold_a_request_max_pause_at_most_the_configured_ones_in_full() {
    let limiter = Limiter::new(Limits {
        max_pause: Duration::from_secs(5),
        ..Limits::default()
    });
    let permit = limiter.acquire(0).await;
    // One request a minute, none left: the server asks a minute per request.
    permit.observe(&headers(&[
        ("x-ratelimit-limit-requests", "1"),
        ("x-ratelimit-remaining-requests", "0"),
    ]));
    drop(permit);
    for _ in 0..3 {
        let started = Instant::now();
        let ((), elapsed) = tokio::join!(
            async {
                // Requests ending meanwhile wake the waiter: the cap holds
                // for its whole wait, not for each part of it.
                for _ in 0..4 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    limiter.freed.notify_waiters();
                }
            },
            async {
                drop(limiter.acquire(0).await);
                started.elapsed()
            }
        );
        assert_eq!(
            elapsed,
            Duration::from_secs(5),
            "then it goes, and a 429 says the rest"
        );
    }
    assert_eq!(limiter.waiting(), Some(Waiting::RateLimit));
    // `rpm` is the user's own pace, kept whatever the retry cap.
    let limiter = Limiter::new(Limits {
        rpm: Some(1),
        max_pause: Duration::from_secs(5),
        ..Limits::default()
    });
    drop(limiter.acquire(0).await);
    let started = Instant::now();
    drop(limiter.acquire(0).await);
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

/// A probe that is never sent: these tests hand the limiter its answer.
fn probe() -> Probe {
    let endpoint =
        super::super::http::Endpoint::new("http://127.0.0.1:9/v1/chat/completions", []).unwrap();
    Probe::new(
        "local",
        reqwest::Client::new(),
        &endpoint,
        "/chat/completions",
    )
}

#[tokio::test(start_paused = true)]
async fn the_server_s_slots_cap_it_and_what_holds_it_back_is_named() {
    let limiter = Limiter::new(Limits::default());
    assert_eq!(limiter.limit(), None, "nothing holds it yet");
    limiter.learned(Some(3), &probe());
    let slots = Limit {
        requests: 3,
        bound: Bound::Slots,
    };
    assert_eq!(limiter.limit(), Some(slots));
    assert_eq!(slots.describe("local"), "`local` has 3 slots");
    let permits: Vec<_> = futures_util::future::join_all((0..3).map(|_| limiter.acquire(0))).await;
    assert_eq!(limiter.waiting(), Some(Waiting::Concurrency));
    // A 503 (a full queue) halves it, as a 429 does; it recovers to the slots.
    limiter.on_rate_limited();
    drop(permits);
    let backing_off = limiter.limit().unwrap();
    assert_eq!(backing_off.bound, Bound::BackOff);
    assert_eq!(
        backing_off.describe("local"),
        "`local` backs off to 1 after 429/503"
    );
    for _ in 0..10 {
        limiter.on_success(0, Estimate::default());
    }
    assert_eq!(limiter.limit(), Some(slots), "never above the slots");
}

#[tokio::test(start_paused = true)]
async fn the_user_s_max_concurrency_wins_over_the_server() {
    for (configured, slots) in [(8, 4), (2, 4)] {
        let limiter = Limiter::new(Limits {
            max_concurrency: Some(configured),
            ..Limits::default()
        });
        limiter.learned(Some(slots), &probe());
        let limit = limiter.limit().unwrap();
        assert_eq!(limit.requests, configured);
        assert_eq!(limit.bound, Bound::Configured);
        assert_eq!(
            limit.describe("local"),
            format!("`local` has max_concurrency {configured}")
        );
        // No adaptive limit either when the server does not say.
        let unsaid = Limiter::new(Limits {
            max_concurrency: Some(configured),
            ..Limits::default()
        });
        unsaid.learned(None, &probe());
        assert_eq!(unsaid.limit().unwrap().bound, Bound::Configured);
    }
}

#[tokio::test(start_paused = true)]
async fn a_server_that_does_not_say_gets_the_adaptive_limit() {
    let limiter = Limiter::new(Limits::default());
    limiter.learned(None, &probe());
    let limit = limiter.limit().unwrap();
    assert_eq!(
        limit,
        Limit {
            requests: adaptive::INITIAL,
            bound: Bound::Adaptive,
        }
    );
    assert_eq!(
        limit.describe("local"),
        "`local` queues beyond 4 (adaptive limit)"
    );
    // Requests waiting in the server's queue: the median of eight replies
    // took four times the first one's time per token.
    for position in 1..=8u64 {
        limiter.sampled(Sample {
            latency: Duration::from_secs(position),
            output_tokens: 10,
            in_flight: 4,
            generation: 0,
        });
    }
    assert_eq!(limiter.limit().unwrap().requests, 2);
    // Successes do not grow it by themselves: only its windows do.
    for _ in 0..20 {
        limiter.on_success(0, Estimate::default());
    }
    assert_eq!(limiter.allowed(), 2);
    // A 429 halves it, and it starts again from there.
    let held = limiter.acquire(0).await;
    limiter.on_rate_limited();
    drop(held);
    assert_eq!(limiter.limit().unwrap().requests, 1);
}

#[tokio::test(start_paused = true)]
async fn each_reply_s_time_per_token_feeds_the_adaptive_limit() {
    use crate::dialog::{Message, Role};
    let limiter = Limiter::new(Limits::default());
    limiter.learned(None, &probe());
    let mut reply = Message::new(Role::Assistant, "a", "ten tokens of text");
    reply
        .usage
        .insert("completion_tokens".into(), serde_json::json!(10));
    // Twice four requests at once on a server that serves one at a time,
    // a second each: the replies come one a second.
    for _ in 0..2 {
        let permits: Vec<_> =
            futures_util::future::join_all((0..4).map(|_| limiter.acquire(0))).await;
        for permit in permits {
            tokio::time::advance(Duration::from_secs(1)).await;
            permit.succeeded(&reply);
        }
    }
    // The median reply took twice the first one's time: two of the four
    // were waiting. Two served, and one to wait.
    assert_eq!(
        limiter.limit(),
        Some(Limit {
            requests: 3,
            bound: Bound::Adaptive
        })
    );
}
