//! `--slots N`: a server that serves at most N model requests at once, as
//! llama-server does with `--parallel N`, and says so at `GET /props`
//! (`total_slots`) unless `--no-props` hides it (Ollama, vLLM).
//!
//! What llama-server does, read in ggml-org/llama.cpp's `tools/server`: a
//! request that finds every slot busy is deferred, not refused
//! (`server-context.cpp`: "if no slot is available, we defer this task for
//! processing later"); the deferred queue is an unbounded deque, and a slot
//! that frees takes its first task (`server_queue::pop_deferred_task`): first
//! come, first served, with no timeout of its own, so the time a request
//! waits there counts only against the client's timeout. A client that gives
//! up leaves the queue. Here the queue is tokio's semaphore, which is
//! first-come first-served as well, and a request whose connection closes
//! leaves it when hyper drops its handler.
//!
//! Each request's line in the log says what it met: `"queued"`, whether it
//! found no slot free and waited, and `"busy"`, the slots busy once it had
//! one, itself included. A client that fits the server never has
//! `"queued": true`.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ServerError;

/// The most slots a server may have.
pub const MAX_SLOTS: usize = 100_000;

/// How one request was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// No slot was free when it arrived: it waited in the queue.
    pub queued: bool,
    /// Slots busy once it had one, itself included.
    pub busy: usize,
}

#[derive(Debug, Default)]
struct Counts {
    serving: usize,
    waiting: usize,
}

/// The slots and the queue before them.
#[derive(Debug)]
pub struct Slots {
    total: usize,
    free: Arc<Semaphore>,
    counts: Arc<Mutex<Counts>>,
}

/// A slot held for one request; dropping it frees the slot.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    counts: Arc<Mutex<Counts>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.counts).serving -= 1;
    }
}

fn lock(counts: &Mutex<Counts>) -> std::sync::MutexGuard<'_, Counts> {
    counts
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Slots {
    /// `total` slots, 1 to [`MAX_SLOTS`].
    pub fn new(total: usize) -> Result<Slots, ServerError> {
        if !(1..=MAX_SLOTS).contains(&total) {
            return Err(ServerError::Slots(total));
        }
        Ok(Slots {
            total,
            free: Arc::new(Semaphore::new(total)),
            counts: Arc::new(Mutex::new(Counts::default())),
        })
    }

    /// Waits for a slot, first come first served.
    pub async fn take(&self) -> (Slot, Admission) {
        // Counted when it arrives, as waiting until it has a slot: a request
        // behind others waits even when a slot has just freed for the first.
        let queued = {
            let mut counts = lock(&self.counts);
            let queued = counts.serving + counts.waiting >= self.total;
            counts.waiting += 1;
            queued
        };
        // Leaves the queue when dropped here (the client gave up).
        let mut waiting = Waiting {
            counts: self.counts.clone(),
            admitted: false,
        };
        // The semaphore is never closed: `acquire_owned` cannot fail.
        let permit = loop {
            if let Ok(permit) = self.free.clone().acquire_owned().await {
                break permit;
            }
        };
        let busy = {
            let mut counts = lock(&self.counts);
            counts.waiting -= 1;
            counts.serving += 1;
            waiting.admitted = true;
            counts.serving
        };
        let slot = Slot {
            _permit: permit,
            counts: self.counts.clone(),
        };
        (slot, Admission { queued, busy })
    }

    /// llama-server's `GET /props`, the fields a client reads of it.
    pub fn props(&self) -> Value {
        json!({
            "total_slots": self.total,
            "model_path": "lllm-mock",
            "build_info": concat!("lllm-mock ", env!("CARGO_PKG_VERSION")),
        })
    }
}

/// A request in the queue; dropped before its slot came (the handler was
/// dropped: the client gave up), it takes itself out of the counts.
struct Waiting {
    counts: Arc<Mutex<Counts>>,
    admitted: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.admitted {
            lock(&self.counts).waiting -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_beyond_the_slots_wait_first_come_first_served() {
        let slots = Arc::new(Slots::new(2).unwrap());
        let (first, one) = slots.take().await;
        let (second, two) = slots.take().await;
        let free = |busy| Admission {
            queued: false,
            busy,
        };
        assert_eq!((one, two), (free(1), free(2)));
        // Three more arrive, in order, and wait.
        let (order, mut served) = tokio::sync::mpsc::unbounded_channel();
        let mut held = Vec::new();
        for n in 0..3 {
            let shared = slots.clone();
            let order = order.clone();
            held.push(tokio::spawn(async move {
                let (slot, admission) = shared.take().await;
                let _ = order.send((n, admission));
                // Held until the test ends.
                std::future::pending::<()>().await;
                drop(slot);
            }));
            while lock(&slots.counts).waiting < n + 1 {
                tokio::task::yield_now().await;
            }
        }
        // One that gives up leaves the queue.
        let impatient = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take().await }
        });
        while lock(&slots.counts).waiting < 4 {
            tokio::task::yield_now().await;
        }
        impatient.abort();
        let _ = impatient.await;
        assert_eq!(lock(&slots.counts).waiting, 3);
        // Each slot that frees goes to the one that came first.
        let queued = |busy| Admission { queued: true, busy };
        drop(first);
        assert_eq!(served.recv().await, Some((0, queued(2))));
        drop(second);
        assert_eq!(served.recv().await, Some((1, queued(2))));
        assert_eq!(lock(&slots.counts).waiting, 1);
        for task in &held[..2] {
            task.abort();
        }
        assert_eq!(served.recv().await.map(|(n, _)| n), Some(2));
        assert!(matches!(Slots::new(0), Err(ServerError::Slots(0))));
        assert_eq!(slots.props()["total_slots"], 2);
    }
}
