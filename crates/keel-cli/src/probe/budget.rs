//! `keel probe --budget`: how many commits, bytes, seconds and transactions
//! each step may spend so that the whole probe ends within its time budget.
//!
//! Every run of every step has a predicted cost: a fixed part (creating and
//! syncing its file) plus, per scalable [`Quantity`] (commits, bytes,
//! seconds), a cost per unit derived from the calibration's [`Rates`].
//! Before each run the [`Planner`] finds the largest scale `f` (0 to 1 of
//! every nominal quantity, each bounded below by its minimum) at which the
//! runs still to come fit the time left. Predictions are corrected by what
//! the runs so far actually took, so a model that is wrong here (a device
//! that scales with writers, a machine that slows down halfway) is caught
//! after one run rather than at the end. Pure arithmetic over a clock the
//! caller reads, so every rule is unit-tested.

use std::time::{Duration, Instant};

use serde::Serialize;

/// Share of the time left that the plan may use; the rest absorbs the
/// error of the next prediction.
const HEADROOM_SHARE: f64 = 0.9;
/// Time kept after the last run: the report, the cleanup, stdout.
const RESERVE_S: f64 = 0.25;
/// Corrections (actual / predicted time) are believed only within this
/// range: one run disturbed by a neighbour's build must not make the plan
/// absurd.
const CORRECTION_RANGE: (f64, f64) = (0.25, 4.0);

/// The steps of the probe, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    DurableFloor,
    Sizes,
    Scaling,
    Mixed,
    Mmap,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::DurableFloor => "durable_floor",
            Step::Sizes => "sizes",
            Step::Scaling => "scaling",
            Step::Mixed => "mixed",
            Step::Mmap => "mmap",
        }
    }
}

/// A quantity the budget scales: `f × nominal`, never below `min`, unless
/// the user gave it (`explicit`), which wins.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantity {
    pub nominal: f64,
    pub min: f64,
    pub explicit: Option<f64>,
}

impl Quantity {
    pub fn new(nominal: f64, min: f64, explicit: Option<f64>) -> Quantity {
        debug_assert!(0.0 < min && min <= nominal, "{min} {nominal}");
        Quantity {
            nominal,
            min,
            explicit,
        }
    }

    /// The amount at scale `f` (0..=1).
    pub fn at(&self, f: f64) -> f64 {
        self.explicit
            .unwrap_or_else(|| (f * self.nominal).clamp(self.min, self.nominal))
    }

    /// The amount at scale `f`, as a whole count.
    pub fn count_at(&self, f: f64) -> u64 {
        self.at(f).round().max(1.0) as u64
    }
}

/// One scalable part of a run's cost: `per_unit_s` seconds per unit of
/// `quantity`.
#[derive(Clone, Copy, Debug)]
pub struct Term {
    pub per_unit_s: f64,
    pub quantity: Quantity,
}

/// The predicted cost of one run.
#[derive(Clone, Debug)]
pub struct RunCost {
    pub step: Step,
    pub fixed_s: f64,
    pub terms: Vec<Term>,
}

impl RunCost {
    /// Seconds at scale `f`, before any correction.
    pub fn at(&self, f: f64) -> f64 {
        self.fixed_s
            + self
                .terms
                .iter()
                .map(|t| t.per_unit_s * t.quantity.at(f))
                .sum::<f64>()
    }
}

/// What the calibration measured, as the cost model's unit prices.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Rates {
    /// One durable write (a device round trip with a flush or FUA).
    pub sync_s: f64,
    /// One plain `O_DIRECT` write, no flush.
    pub plain_s: f64,
    /// Bytes per second of writing and syncing a file (zero-fill).
    pub fill_bytes_per_s: f64,
}

impl Rates {
    /// Creating a file, syncing it and its directory, removing it.
    pub fn file_s(&self) -> f64 {
        3.0 * self.sync_s + 1e-3
    }

    /// Moving `bytes` through the file layer.
    pub fn bytes_s(&self, bytes: f64) -> f64 {
        bytes / self.fill_bytes_per_s
    }
}

/// The scale the next run uses and what the planner expected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub scale: f64,
    /// Whether even the minimum of every quantity is predicted not to fit.
    pub over_budget: bool,
}

/// One finished run: its step, the predicted and the measured seconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Done {
    pub step: Step,
    pub scale: f64,
    pub predicted_s: f64,
    pub actual_s: f64,
}

/// Chooses the scale of each run as the probe goes.
#[derive(Debug)]
pub struct Planner {
    deadline: Instant,
    pending: Vec<RunCost>,
    /// The scale of the current step's latest run: later runs of the same
    /// step may go lower (when the step falls behind), never higher, so a
    /// step's runs rest on the same counts whenever the plan holds.
    step_scale: Option<(Step, f64)>,
    running: Option<(Instant, Decision, RunCost)>,
    pub done: Vec<Done>,
}

impl Planner {
    pub fn new(deadline: Instant) -> Planner {
        Planner {
            deadline,
            pending: Vec::new(),
            step_scale: None,
            running: None,
            done: Vec::new(),
        }
    }

    /// Replace the runs still to come (the model of a later step can change
    /// once an earlier one has measured, e.g. the preallocation chosen).
    pub fn set_pending(&mut self, runs: Vec<RunCost>) {
        self.pending = runs;
    }

    /// Seconds the runs still to come would take at scale `f`, corrected
    /// by what the finished runs took.
    pub fn predicted_s(&self, f: f64) -> f64 {
        self.pending
            .iter()
            .map(|r| r.at(f) * self.correction(r.step))
            .sum()
    }

    /// Actual over predicted time of the finished runs of `step`; for a
    /// step that has not run yet, the largest such ratio of the steps that
    /// have (the budget errs on the long side: a model that was pessimistic
    /// for one step says nothing of the next); 1 before any run.
    pub fn correction(&self, step: Step) -> f64 {
        let ratio = |s: Step| {
            let (p, a) = self
                .done
                .iter()
                .filter(|d| d.step == s)
                .fold((0.0, 0.0), |(p, a), d| (p + d.predicted_s, a + d.actual_s));
            (p > 0.0).then(|| (a / p).clamp(CORRECTION_RANGE.0, CORRECTION_RANGE.1))
        };
        ratio(step)
            .or_else(|| {
                self.done
                    .iter()
                    .filter_map(|d| ratio(d.step))
                    .max_by(f64::total_cmp)
            })
            .unwrap_or(1.0)
    }

    /// The largest scale at which the pending runs fit `available_s`.
    fn solve(&self, available_s: f64) -> Decision {
        if self.predicted_s(1.0) <= available_s {
            return Decision {
                scale: 1.0,
                over_budget: false,
            };
        }
        if self.predicted_s(0.0) > available_s {
            return Decision {
                scale: 0.0,
                over_budget: true,
            };
        }
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..40 {
            let mid = (lo + hi) / 2.0;
            if self.predicted_s(mid) <= available_s {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Decision {
            scale: lo,
            over_budget: false,
        }
    }

    /// Seconds the plan may still use at `now`.
    pub fn available_s(&self, now: Instant) -> f64 {
        let left = self.deadline.saturating_duration_since(now).as_secs_f64();
        (left * HEADROOM_SHARE - RESERVE_S).max(0.0)
    }

    /// The scale the pending runs would get at `now`, without starting one.
    pub fn preview(&self, now: Instant) -> Decision {
        self.solve(self.available_s(now))
    }

    /// Start the first pending run: its scale (see [`Planner`]).
    pub fn start(&mut self, now: Instant) -> Decision {
        assert!(self.running.is_none(), "finish() the previous run first");
        assert!(!self.pending.is_empty(), "no run is pending");
        let mut d = self.preview(now);
        let step = self.pending[0].step;
        if let Some((s, f)) = self.step_scale.filter(|&(s, _)| s == step) {
            d.scale = d.scale.min(f);
            self.step_scale = Some((s, d.scale));
        } else {
            self.step_scale = Some((step, d.scale));
        }
        let run = self.pending.remove(0);
        self.running = Some((now, d, run));
        d
    }

    /// The run [`start`](Self::start) began has ended at `now`.
    pub fn finish(&mut self, now: Instant) {
        let (started, d, run) = self.running.take().expect("a run was started");
        self.done.push(Done {
            step: run.step,
            scale: d.scale,
            predicted_s: run.at(d.scale),
            actual_s: now.duration_since(started).as_secs_f64(),
        });
    }

    /// Start the first pending run, run `f` with its scale, finish it.
    pub fn run<T>(&mut self, f: impl FnOnce(Decision) -> T) -> T {
        let d = self.start(Instant::now());
        let out = f(d);
        self.finish(Instant::now());
        out
    }
}

/// Seconds as the budget flag gives them, checked.
pub fn check_budget(budget: Duration) -> anyhow::Result<Duration> {
    const MIN: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(24 * 3600);
    if !(MIN..=MAX).contains(&budget) {
        anyhow::bail!(
            "--budget must be between 1 s and 24 h; got {:.3} s",
            budget.as_secs_f64()
        );
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(nominal: f64, min: f64) -> Quantity {
        Quantity::new(nominal, min, None)
    }

    fn run(step: Step, fixed_s: f64, per_unit_s: f64, quantity: Quantity) -> RunCost {
        RunCost {
            step,
            fixed_s,
            terms: vec![Term {
                per_unit_s,
                quantity,
            }],
        }
    }

    #[test]
    fn quantities_scale_between_their_minimum_and_nominal() {
        let c = q(2048.0, 8.0);
        assert_eq!(c.count_at(1.0), 2048);
        assert_eq!(c.count_at(0.5), 1024);
        assert_eq!(c.count_at(0.0), 8);
        let given = Quantity::new(2048.0, 8.0, Some(5000.0));
        assert_eq!(given.count_at(0.1), 5000, "an explicit value wins");
    }

    #[test]
    fn a_plan_that_fits_is_not_cut() {
        let t0 = Instant::now();
        let mut p = Planner::new(t0 + Duration::from_secs(60));
        p.set_pending(vec![run(Step::DurableFloor, 0.0, 0.001, q(2048.0, 8.0))]);
        assert_eq!(p.start(t0).scale, 1.0);
    }

    #[test]
    fn the_scale_makes_the_pending_runs_fit() {
        let t0 = Instant::now();
        let mut p = Planner::new(t0 + Duration::from_secs(10));
        // Two runs of 1 s fixed + 2048 × 4 ms: 18.4 s at full scale.
        let r = run(Step::DurableFloor, 1.0, 0.004, q(2048.0, 8.0));
        p.set_pending(vec![r.clone(), r.clone()]);
        let d = p.start(t0);
        let available = p.available_s(t0);
        assert!(!d.over_budget);
        let total = 2.0 * r.at(d.scale);
        assert!(
            total <= available && total > available * 0.999,
            "{total} {available}"
        );
    }

    #[test]
    fn minima_that_do_not_fit_are_reported() {
        let t0 = Instant::now();
        let mut p = Planner::new(t0 + Duration::from_secs(1));
        p.set_pending(vec![run(Step::Sizes, 0.0, 0.5, q(100.0, 10.0))]);
        let d = p.start(t0);
        assert!(d.over_budget && d.scale == 0.0);
    }

    #[test]
    fn a_slow_first_run_cuts_the_rest_of_its_step_and_later_steps() {
        let t0 = Instant::now();
        let mut p = Planner::new(t0 + Duration::from_secs(100));
        let floor = run(Step::DurableFloor, 0.0, 0.01, q(1000.0, 1.0));
        let mmap = run(Step::Mmap, 0.0, 0.01, q(1000.0, 1.0));
        p.set_pending(vec![floor.clone(), floor, mmap]);
        // 30 s predicted in all: no cut.
        let d = p.start(t0);
        assert_eq!(d.scale, 1.0);
        // The run took 40 s instead of 10: the model is 4× off.
        p.finish(t0 + Duration::from_secs(40));
        assert_eq!(p.correction(Step::DurableFloor), 4.0);
        assert_eq!(p.correction(Step::Mmap), 4.0, "the worst step so far");
        let d = p.start(t0 + Duration::from_secs(40));
        // 60 s left × headroom, two runs of 40 s each at full scale.
        assert!(d.scale < 0.7 && d.scale > 0.6, "{d:?}");
    }

    #[test]
    fn within_a_step_the_scale_never_rises() {
        let t0 = Instant::now();
        let mut p = Planner::new(t0 + Duration::from_secs(10));
        let r = run(Step::DurableFloor, 0.0, 0.01, q(1000.0, 1.0));
        p.set_pending(vec![
            r.clone(),
            r.clone(),
            run(Step::Mixed, 0.0, 0.01, q(1000.0, 1.0)),
        ]);
        let first = p.start(t0).scale;
        assert!(first < 1.0);
        // Much faster than predicted: the step keeps its scale, the next
        // step gets the time saved.
        p.finish(t0 + Duration::from_millis(10));
        assert_eq!(p.start(t0).scale, first);
        p.finish(t0 + Duration::from_millis(20));
        assert!(p.start(t0).scale > first);
    }

    #[test]
    fn budget_limits() {
        assert!(check_budget(Duration::from_millis(500)).is_err());
        assert!(check_budget(Duration::from_secs(60)).is_ok());
        assert!(check_budget(Duration::from_secs(100_000)).is_err());
    }
}
