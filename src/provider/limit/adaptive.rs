//! The adaptive concurrency limit of a local server that does not say how
//! many requests it serves at once (Ollama, vLLM, llama.cpp without
//! `/props`): in the spirit of TCP Vegas and Netflix's gradient limiter, it
//! adds concurrency while that adds throughput and stops where more requests
//! at once would only wait in the server's queue. It only decides the
//! number; `Limiter` enforces it, and halves it on a 429 or a 503 as it does
//! for every provider.
//!
//! The signal is a request's latency per output token (a reply of 500
//! tokens takes longer than one of 5 without any queueing). The lowest seen
//! is the server's speed without a queue (Vegas' base RTT: the first
//! request of a burst that a server queues first-come first-served waits for
//! nobody). Every window of `limit` replies (8 at least) compares its
//! median with it: `limit × (1 − base / median)` is how many of the window's
//! requests the server held in its queue rather than served (Vegas'
//! estimate), the throughput lost to concurrency that did not add any.
//! Below [`GROW_BELOW`] the limit grows (doubling until the first sign of a
//! queue, then one at a time) if the window used it; above
//! [`SHRINK_ABOVE`] it drops to what the server served; in between it holds.
//! A window whose median reply came within [`NOTICEABLE`] counts as no queue:
//! waits that short are not worth throttling a run for, and a test server
//! answering in microseconds never measures noise as queueing.

use std::time::Duration;

/// The limit before anything is measured: llama.cpp's slots when
/// `--parallel` is left to it, and Ollama's `OLLAMA_NUM_PARALLEL` of old.
pub const INITIAL: usize = 4;

/// The fewest replies a window compares (a median of fewer is noise:
/// replies of different lengths wait the same time in a queue).
const MIN_WINDOW: usize = 8;

/// Fewer requests than this waiting in the server: concurrency still adds
/// throughput, so the limit grows. Just under one: one request waiting
/// (the server never idles between two) is where it stops.
pub const GROW_BELOW: f64 = 0.9;

/// More requests than this waiting in the server: the limit drops to what
/// it served, and one.
pub const SHRINK_ABOVE: f64 = 1.5;

/// A window whose median reply took less than this shows no queue worth
/// acting on.
pub const NOTICEABLE: Duration = Duration::from_millis(250);

/// One reply: how long its request took, how many tokens it wrote, how
/// many requests were in flight when it was sent (itself included), and
/// the limit's [`generation`](Adaptive::generation) then.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub latency: Duration,
    pub output_tokens: u64,
    pub in_flight: usize,
    pub generation: u64,
}

#[derive(Debug)]
pub struct Adaptive {
    limit: usize,
    /// Seconds per output token without a queue: the lowest seen.
    base: Option<f64>,
    /// This window's replies: (seconds per token, seconds).
    window: Vec<(f64, f64)>,
    /// Whether the window's requests used the whole limit at some point:
    /// a limit nobody reaches says nothing about a larger one.
    saturated: bool,
    /// Doubling, until the first window that shows a queue.
    slow_start: bool,
    /// Counts the limit's changes: a window holds only replies to requests
    /// sent under the current limit (those sent under a larger one waited
    /// in a queue that is gone).
    generation: u64,
}

impl Default for Adaptive {
    fn default() -> Adaptive {
        Adaptive {
            limit: INITIAL,
            base: None,
            window: Vec::new(),
            saturated: false,
            slow_start: true,
            generation: 0,
        }
    }
}

impl Adaptive {
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The current limit's number, for the requests sent under it.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Starts again from `limit` (the limiter halved it on a 429 or a
    /// 503): the window measured at the old one is dropped, and growth is
    /// one at a time from here.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.max(1);
        self.window.clear();
        self.saturated = false;
        self.slow_start = false;
        self.generation += 1;
    }

    /// Takes one reply; at the end of a window, the new limit when it
    /// changes.
    pub fn sample(&mut self, sample: Sample) -> Option<usize> {
        let seconds = sample.latency.as_secs_f64();
        let per_token = seconds / sample.output_tokens.max(1) as f64;
        if !per_token.is_finite() {
            return None;
        }
        self.base = Some(self.base.map_or(per_token, |base| base.min(per_token)));
        if sample.generation != self.generation {
            return None;
        }
        self.saturated |= sample.in_flight >= self.limit;
        self.window.push((per_token, seconds));
        if self.window.len() < self.limit.max(MIN_WINDOW) {
            return None;
        }
        let per_token = median(self.window.iter().map(|(per_token, _)| *per_token));
        let latency = median(self.window.iter().map(|(_, seconds)| *seconds));
        let base = self.base.unwrap_or(per_token);
        let limit = self.limit as f64;
        let queued = if latency < NOTICEABLE.as_secs_f64() || per_token <= 0.0 {
            0.0
        } else {
            limit * (1.0 - base / per_token)
        };
        let next = if queued < GROW_BELOW {
            match (self.saturated, self.slow_start) {
                (false, _) => self.limit,
                (true, true) => self.limit.saturating_mul(2),
                (true, false) => self.limit.saturating_add(1),
            }
        } else {
            self.slow_start = false;
            if queued > SHRINK_ABOVE {
                // What the server served of the window's requests, and one
                // to wait in its queue so that it never idles between them.
                ((limit - queued).round().max(0.0) as usize).saturating_add(1)
            } else {
                self.limit
            }
        };
        self.window.clear();
        self.saturated = false;
        if next == self.limit {
            return None;
        }
        self.limit = next;
        self.generation += 1;
        Some(next)
    }
}

/// The median of `values` (the lower middle of an even count).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_unstable_by(f64::total_cmp);
    values
        .get(values.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server of `slots` slots serving first come, first served (as
    /// llama-server's queue of deferred tasks and Ollama's do), a request
    /// taking `service` seconds per token alone and `slowdown` times as long
    /// when every slot is busy (batched decoding shares the hardware).
    struct Server {
        slots: usize,
        service: f64,
        slowdown: f64,
    }

    /// One request: when it was sent, when it ends (once started), its
    /// tokens and the requests in flight when it was sent.
    struct Request {
        sent: f64,
        ends: f64,
        tokens: u64,
        in_flight: usize,
        generation: u64,
    }

    impl Server {
        fn duration(&self, tokens: u64, busy: usize) -> f64 {
            let share = (busy.saturating_sub(1)) as f64 / (self.slots.max(2) - 1) as f64;
            self.service * tokens as f64 * (1.0 + (self.slowdown - 1.0) * share.min(1.0))
        }

        /// A client keeping `min(limit, demand)` requests in flight, the
        /// limiter fed each reply as it comes back, on a simulated clock:
        /// the limits it went through in `replies` replies. Replies are of
        /// 80 to 120 tokens, not all alike.
        fn run(&self, adaptive: &mut Adaptive, replies: usize, demand: usize) -> Vec<usize> {
            let mut limits = vec![adaptive.limit()];
            let (mut now, mut sent) = (0.0, 0u64);
            let mut serving: Vec<Request> = Vec::new();
            let mut queue: std::collections::VecDeque<Request> = Default::default();
            for _ in 0..replies {
                while serving.len() + queue.len() < adaptive.limit().min(demand) {
                    let tokens = 80 + (sent * 7) % 41;
                    sent += 1;
                    let mut request = Request {
                        sent: now,
                        ends: f64::INFINITY,
                        tokens,
                        in_flight: serving.len() + queue.len() + 1,
                        generation: adaptive.generation(),
                    };
                    if serving.len() < self.slots {
                        request.ends = now + self.duration(tokens, serving.len() + 1);
                        serving.push(request);
                    } else {
                        queue.push_back(request);
                    }
                }
                let next = (0..serving.len())
                    .min_by(|a, b| serving[*a].ends.total_cmp(&serving[*b].ends))
                    .unwrap();
                let done = serving.swap_remove(next);
                now = done.ends;
                if let Some(mut waiting) = queue.pop_front() {
                    waiting.ends = now + self.duration(waiting.tokens, serving.len() + 1);
                    serving.push(waiting);
                }
                let sample = Sample {
                    latency: Duration::from_secs_f64(now - done.sent),
                    output_tokens: done.tokens,
                    in_flight: done.in_flight,
                    generation: done.generation,
                };
                if let Some(limit) = adaptive.sample(sample) {
                    limits.push(limit);
                }
            }
            limits
        }
    }

    #[track_caller]
    fn settles(server: Server, demand: usize, expected: std::ops::RangeInclusive<usize>) {
        let mut adaptive = Adaptive::default();
        let limits = server.run(&mut adaptive, 2000, demand);
        assert!(
            expected.contains(&adaptive.limit()),
            "settled at {} (expected {expected:?}, {} slots); went through {limits:?}",
            adaptive.limit(),
            server.slots
        );
        // Settled: the last few hundred replies moved it by one at most.
        let mut late = Adaptive::default();
        let before = server.run(&mut late, 1700, demand);
        let after = server.run(&mut late, 300, demand);
        let (low, high) = after.iter().fold((usize::MAX, 0), |(low, high), &limit| {
            (low.min(limit), high.max(limit))
        });
        assert!(
            high - low <= 1,
            "still moving ({} slots): {before:?} then {after:?}",
            server.slots
        );
    }

    #[test]
    fn it_stops_where_more_at_once_would_only_queue() {
        // llama.cpp on a CPU: four slots, each a third slower when all are busy.
        settles(
            Server {
                slots: 4,
                service: 0.02,
                slowdown: 1.5,
            },
            16,
            4..=5,
        );
        // A GPU hardly slows down when batching: one more than the slots,
        // so the server never waits for the next request.
        settles(
            Server {
                slots: 4,
                service: 0.01,
                slowdown: 1.05,
            },
            16,
            4..=5,
        );
        // Two slots that share a little: it may go back and forth by one.
        settles(
            Server {
                slots: 2,
                service: 0.02,
                slowdown: 1.2,
            },
            16,
            2..=3,
        );
        // Ollama with `OLLAMA_NUM_PARALLEL=1`.
        settles(
            Server {
                slots: 1,
                service: 0.02,
                slowdown: 1.0,
            },
            16,
            1..=2,
        );
        // vLLM: more than the run ever asks for; every request goes at once.
        settles(
            Server {
                slots: 256,
                service: 0.01,
                slowdown: 1.1,
            },
            16,
            16..=32,
        );
    }

    /// A reply of `tokens` tokens after `millis`, sent with `in_flight`
    /// requests in flight under the limit `adaptive` has now.
    fn reply(adaptive: &Adaptive, millis: u64, tokens: u64, in_flight: usize) -> Sample {
        Sample {
            latency: Duration::from_millis(millis),
            output_tokens: tokens,
            in_flight,
            generation: adaptive.generation(),
        }
    }

    #[test]
    fn a_burst_queued_by_the_server_shows_its_base_speed_and_shrinks_the_limit() {
        let mut adaptive = Adaptive::default();
        // Eight requests at once on a one-slot server taking 2 s a request:
        // they finish one after another, the first having waited for nobody.
        adaptive.set_limit(8);
        let burst: Vec<_> = (1..=8)
            .map(|n| {
                let sample = reply(&adaptive, 2000 * n, 100, 8);
                adaptive.sample(sample)
            })
            .collect();
        // The median reply took four times as long as the first: six of
        // the eight were waiting. The limit drops to the two served, and one.
        assert_eq!(burst[..7], [None; 7]);
        assert_eq!(burst[7], Some(3));
        // A reply to a request sent under the old limit is not counted.
        let late = Sample {
            generation: 0,
            ..reply(&adaptive, 60_000, 100, 8)
        };
        assert_eq!(adaptive.sample(late), None);
        // Three at a time: each waits for the two ahead of it.
        let steady: Vec<_> = (0..7)
            .map(|_| {
                let sample = reply(&adaptive, 6000, 100, 3);
                adaptive.sample(sample)
            })
            .collect();
        assert_eq!(steady, [None; 7], "a window holds eight at least");
        assert_eq!(adaptive.sample(reply(&adaptive, 6000, 100, 3)), Some(2));
        // Two at a time: one served, one waiting; where it stays.
        for _ in 0..40 {
            assert_eq!(adaptive.sample(reply(&adaptive, 4000, 100, 2)), None);
        }
        assert_eq!(adaptive.limit(), 2);
    }

    #[test]
    fn it_grows_only_while_the_limit_is_used_and_fast_replies_show_no_queue() {
        let mut adaptive = Adaptive::default();
        // Two at a time of four allowed, slower and slower: nothing learned
        // about five, and nothing waits in a queue at two.
        for round in 0..40 {
            assert_eq!(
                adaptive.sample(reply(&adaptive, 900 + round * 10, 10, 2)),
                None
            );
        }
        assert_eq!(adaptive.limit(), INITIAL);
        // Replies within `NOTICEABLE` never look like a queue, however they
        // vary: a test server is never throttled by its scheduling noise.
        let mut fast = Adaptive::default();
        for round in 0..64u64 {
            let sample = reply(&fast, 1 + (round % 7) * 30, 10, fast.limit());
            fast.sample(sample);
        }
        assert!(fast.limit() >= 16, "{}", fast.limit());
    }

    #[test]
    fn a_cut_from_outside_restarts_one_step_at_a_time() {
        let mut adaptive = Adaptive::default();
        adaptive.set_limit(0);
        assert_eq!(adaptive.limit(), 1, "never below one");
        adaptive.set_limit(3);
        for _ in 0..MIN_WINDOW {
            adaptive.sample(reply(&adaptive, 10, 1, 3));
        }
        assert_eq!(adaptive.limit(), 4, "no doubling after a cut");
    }
}
