//! `--max-cost USD`: the run never starts a task that could take it over the
//! budget. Before a task starts, an estimate of its cost is reserved; when it
//! ends, the reservation is replaced by what it really cost.
//!
//! The estimate is the highest cost of any task finished so far: until the
//! first task has finished nothing is known, so only one task runs. A task
//! costlier than every one before it can still exceed its reservation (a
//! budget smaller than one task's cost cannot be kept at all); tasks of one
//! tactic usually cost about the same, which is what this relies on.

#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    max: f64,
    spent: f64,
    reserved: f64,
    in_flight: u64,
    /// The highest cost of a finished task; `None` before the first.
    estimate: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reservation {
    /// Start the task; settle this amount when it ends.
    Granted(f64),
    /// Wait for a running task to end (its real cost may leave room).
    Wait,
    /// Nothing is running and the next task does not fit: stop scheduling.
    Exhausted,
}

impl Budget {
    /// `spent`: what earlier runs in the same output directory cost.
    pub fn new(max: f64, spent: f64) -> Budget {
        Budget {
            max,
            spent,
            reserved: 0.0,
            in_flight: 0,
            estimate: None,
        }
    }

    pub fn reserve(&mut self) -> Reservation {
        let estimate = match self.estimate {
            Some(estimate) => estimate,
            None if self.in_flight > 0 => return Reservation::Wait,
            None => 0.0,
        };
        // A task that may cost nothing still needs some room left.
        if self.spent + self.reserved + estimate > self.max || self.spent >= self.max {
            return if self.in_flight > 0 {
                Reservation::Wait
            } else {
                Reservation::Exhausted
            };
        }
        self.reserved += estimate;
        self.in_flight += 1;
        Reservation::Granted(estimate)
    }

    /// A task ended; `cost` is `None` when it was cancelled before finishing.
    pub fn settle(&mut self, reserved: f64, cost: Option<f64>) {
        self.reserved = (self.reserved - reserved).max(0.0);
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(cost) = cost {
            self.spent += cost;
            self.estimate = Some(self.estimate.unwrap_or(0.0).max(cost));
        }
    }

    pub fn spent(&self) -> f64 {
        self.spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Reservation::*;

    #[test]
    fn one_probe_then_reserves_the_highest_cost_seen() {
        let mut budget = Budget::new(1.0, 0.0);
        assert_eq!(budget.reserve(), Granted(0.0));
        assert_eq!(
            budget.reserve(),
            Wait,
            "nothing known before the first task ends"
        );
        budget.settle(0.0, Some(0.3));
        assert_eq!(budget.reserve(), Granted(0.3));
        assert_eq!(budget.reserve(), Granted(0.3));
        // 0.3 spent + 0.6 reserved + 0.3 > 1.0
        assert_eq!(budget.reserve(), Wait);
        budget.settle(0.3, Some(0.1));
        budget.settle(0.3, Some(0.1));
        // 0.5 spent: one more fits, then nothing.
        assert_eq!(budget.reserve(), Granted(0.3));
        budget.settle(0.3, Some(0.3));
        assert_eq!(budget.reserve(), Exhausted);
        assert!(budget.spent() <= 1.0);
    }

    #[test]
    fn earlier_spend_counts() {
        let mut budget = Budget::new(1.0, 1.0);
        assert_eq!(budget.reserve(), Exhausted);
    }
}
