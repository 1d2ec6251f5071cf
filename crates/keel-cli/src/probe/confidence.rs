//! The budget part of the probe's report: what the calibration measured,
//! which counts the budget cut and by how much, and what that costs in
//! confidence — how many operations each figure rests on, rough 95 %
//! intervals of the medians and means, and whether the method choice is
//! still outside the noise.

use serde::Serialize;

use super::budget::{Decision, Planner, Quantity, Step};
use super::calibrate::Calibration;
use super::steps::{self, Quantities};
use super::{Probe, ProbeArgs};
use crate::bench::report::{number, Align, LatencyRecorder, Table};
use crate::bench::{methods, sizes};
use crate::util::{format_size, format_size_approx};

/// How one scalable quantity was used.
#[derive(Clone, Debug, Serialize)]
pub struct QuantityUse {
    pub step: Step,
    pub name: &'static str,
    pub unit: &'static str,
    pub nominal: f64,
    /// The smallest and largest value the step's runs used.
    pub used_min: f64,
    pub used_max: f64,
    /// `used_min / nominal`.
    pub share: f64,
    /// Given on the command line, so not cut.
    pub explicit: bool,
}

/// What a step was predicted to take at the counts it ran, and took.
#[derive(Clone, Debug, Serialize)]
pub struct StepTime {
    pub step: Step,
    pub runs: usize,
    pub predicted_s: f64,
    pub elapsed_s: f64,
}

/// The `budget` object of the JSON report.
#[derive(Clone, Debug, Serialize)]
pub struct BudgetReport {
    pub budget_s: f64,
    pub calibration: Calibration,
    /// Predicted seconds of every step at the default counts (and the
    /// user's), from the calibration.
    pub predicted_full_s: f64,
    /// Predicted seconds at the least the budget may cut to.
    pub predicted_least_s: f64,
    /// The scale planned at the start: 1 = nothing cut.
    pub planned_scale: f64,
    /// Whether, at the start, even the least counts were predicted not to
    /// fit the budget (the probe then runs at those and says so).
    pub predicted_over_budget: bool,
    /// Whether any count was cut below its default.
    pub cut: bool,
    /// Flags given on the command line, which the budget does not cut.
    pub explicit_flags: Vec<&'static str>,
    pub quantities: Vec<QuantityUse>,
    pub steps: Vec<StepTime>,
    pub elapsed_s: f64,
    pub over_budget: bool,
    pub notes: Vec<String>,
}

impl BudgetReport {
    pub fn new(
        args: &ProbeArgs,
        calibration: Calibration,
        planner: &Planner,
        first: Decision,
    ) -> BudgetReport {
        BudgetReport {
            budget_s: args.budget.as_secs_f64(),
            calibration,
            predicted_full_s: planner.predicted_s(1.0),
            predicted_least_s: planner.predicted_s(0.0),
            planned_scale: first.scale,
            predicted_over_budget: first.over_budget,
            cut: first.scale < 1.0,
            explicit_flags: args.explicit_flags(),
            quantities: Vec::new(),
            steps: Vec::new(),
            elapsed_s: 0.0,
            over_budget: false,
            notes: Vec::new(),
        }
    }

    /// One line for stderr before the steps run.
    pub fn plan_sentence(&self) -> String {
        let counts = if self.explicit_flags.is_empty() {
            "the default counts"
        } else {
            "the counts given and the default others"
        };
        if self.planned_scale >= 1.0 {
            format!(
                "at {counts} the probe is predicted to take ~{:.0} s, within its {:.0} s budget: \
                 nothing is cut",
                self.predicted_full_s, self.budget_s
            )
        } else {
            format!(
                "at {counts} the probe would take ~{:.0} s; counts are cut to ~{:.0} % to fit its \
                 {:.0} s budget (--budget)",
                self.predicted_full_s,
                self.planned_scale.max(0.0) * 100.0,
                self.budget_s
            )
        }
    }

    /// The note when flags the budget may not cut were given, or when even
    /// the least counts do not fit.
    pub fn predicted_over_note(&self, first: Decision) -> Option<String> {
        let flags = self.explicit_flags.join(", ");
        if first.over_budget && !flags.is_empty() {
            Some(format!(
                "{flags} kept as given (the budget does not cut them): with every other count at \
                 its least the probe is predicted to take ~{:.0} s, over its {:.0} s budget",
                self.predicted_least_s, self.budget_s
            ))
        } else if first.over_budget {
            Some(format!(
                "even at the least counts the probe is predicted to take ~{:.0} s, over its {:.0} s \
                 budget; it runs at those counts",
                self.predicted_least_s, self.budget_s
            ))
        } else if !flags.is_empty() {
            Some(format!(
                "{flags} kept as given (the budget does not cut them, so it may be exceeded); the \
                 other counts fit the rest of the {:.0} s budget",
                self.budget_s
            ))
        } else {
            None
        }
    }

    /// What the planner did, once every step has run.
    pub fn record(&mut self, planner: &Planner, q: &Quantities) {
        // Each quantity as the runs used it: whole counts, whole blocks.
        type Used = fn(Quantity, f64) -> f64;
        let count: Used = |q, f| q.count_at(f) as f64;
        let bytes: Used = |q, f| steps::blocks(q.at(f)) as f64;
        let uses: [(Step, &'static str, &'static str, Quantity, Used); 7] = [
            (
                Step::DurableFloor,
                "count",
                "commits per run",
                q.floor_count,
                count,
            ),
            (
                Step::Sizes,
                "total",
                "bytes per size and mode",
                q.total_bytes,
                bytes,
            ),
            (
                Step::Scaling,
                "total",
                "bytes per run",
                q.total_bytes,
                bytes,
            ),
            (
                Step::Mixed,
                "mixed_duration",
                "seconds per variant",
                q.mixed_s,
                |q, f| q.at(f),
            ),
            (
                Step::Mixed,
                "set_size",
                "bytes of files",
                q.mixed_set_bytes,
                |q, f| steps::mixed_set_bytes(q, f) as f64,
            ),
            (
                Step::Mmap,
                "transactions",
                "per variant",
                q.transactions,
                count,
            ),
            (
                Step::Mmap,
                "region",
                "bytes",
                q.mmap_region_bytes,
                |q, f| steps::mmap_region_bytes(q, f) as f64,
            ),
        ];
        self.quantities = uses
            .into_iter()
            .filter_map(|(step, name, unit, quantity, used_at)| {
                let used: Vec<f64> = planner
                    .done
                    .iter()
                    .filter(|d| d.step == step)
                    .map(|d| used_at(quantity, d.scale))
                    .collect();
                let used_min = used.iter().copied().min_by(f64::total_cmp)?;
                let used_max = used.iter().copied().max_by(f64::total_cmp)?;
                Some(QuantityUse {
                    step,
                    name,
                    unit,
                    nominal: quantity.nominal,
                    used_min,
                    used_max,
                    share: used_min / quantity.nominal,
                    explicit: quantity.explicit.is_some(),
                })
            })
            .collect();
        self.cut = self
            .quantities
            .iter()
            .any(|u| !u.explicit && u.used_min < u.nominal);
        self.steps = [
            Step::DurableFloor,
            Step::Sizes,
            Step::Scaling,
            Step::Mixed,
            Step::Mmap,
        ]
        .into_iter()
        .map(|step| {
            let runs: Vec<_> = planner.done.iter().filter(|d| d.step == step).collect();
            StepTime {
                step,
                runs: runs.len(),
                predicted_s: runs.iter().map(|d| d.predicted_s).sum(),
                elapsed_s: runs.iter().map(|d| d.actual_s).sum(),
            }
        })
        .collect();
    }

    /// The probe is over, after `elapsed_s`.
    pub fn finish(&mut self, elapsed_s: f64) {
        self.elapsed_s = elapsed_s;
        self.over_budget = elapsed_s > self.budget_s;
        if self.over_budget {
            self.notes.push(self.over_budget_note());
        }
    }

    /// Why the probe took longer than its budget.
    pub fn over_budget_note(&self) -> String {
        let why = if !self.explicit_flags.is_empty() {
            format!("{} kept as given", self.explicit_flags.join(", "))
        } else if self.predicted_least_s > self.budget_s {
            "even the least counts do not fit it here".to_string()
        } else {
            let worst = self.steps.iter().max_by(|a, b| {
                (a.elapsed_s - a.predicted_s).total_cmp(&(b.elapsed_s - b.predicted_s))
            });
            match worst {
                Some(s) => format!(
                    "the machine was slower than the calibration said ({} took {:.1} s against \
                     {:.1} s planned)",
                    s.step.name(),
                    s.elapsed_s,
                    s.predicted_s
                ),
                None => "the machine was slower than the calibration said".to_string(),
            }
        };
        format!(
            "the probe took {:.1} s, over its {:.0} s budget: {why}",
            self.elapsed_s, self.budget_s
        )
    }
}

/// How far one figure can be trusted.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    pub step: Step,
    pub run: String,
    /// Operations the figure rests on.
    pub samples: u64,
    pub mean_us: f64,
    /// Rough 95 % interval of the mean (± 1.96 standard errors).
    pub mean_ci95_us: Option<[f64; 2]>,
    pub p50_us: f64,
    /// Rough 95 % interval of the median from the order statistics;
    /// `null` where the samples cannot give a bound.
    pub p50_ci95_us: [Option<f64>; 2],
    pub p99_us: f64,
    /// Operations slower than the p99: what it rests on (0: the p99 is the
    /// slowest operation, fewer than 100 were made).
    pub p99_tail_samples: u64,
    pub p99_ci95_us: [Option<f64>; 2],
}

impl Figure {
    pub fn new(step: Step, run: String, l: &LatencyRecorder) -> Figure {
        let s = l.summary();
        let n = l.len();
        let (p50_lo, p50_hi) = l.quantile_ci95_us(0.5);
        let (p99_lo, p99_hi) = l.quantile_ci95_us(0.99);
        Figure {
            step,
            run,
            samples: n,
            mean_us: s.mean_us,
            mean_ci95_us: l.mean_ci95_us().map(|(lo, hi)| [lo, hi]),
            p50_us: s.p50_us,
            p50_ci95_us: [p50_lo, p50_hi],
            p99_us: s.p99_us,
            p99_tail_samples: n - (n as f64 * 0.99).ceil() as u64,
            p99_ci95_us: [p99_lo, p99_hi],
        }
    }

    /// Half the median's interval over the median, when both bounds exist.
    pub fn p50_relative_half_width(&self) -> Option<f64> {
        match self.p50_ci95_us {
            [Some(lo), Some(hi)] if self.p50_us > 0.0 => Some((hi - lo) / 2.0 / self.p50_us),
            _ => None,
        }
    }

    fn mean_relative_half_width(&self) -> Option<f64> {
        self.mean_ci95_us
            .filter(|_| self.mean_us > 0.0)
            .map(|[lo, hi]| (hi - lo) / 2.0 / self.mean_us)
    }
}

/// Every latency figure of the floor, the sizes and the scaling steps.
pub fn figures(p: &Probe) -> Vec<Figure> {
    let mut out: Vec<Figure> = p
        .floor
        .iter()
        .filter_map(|o| {
            let m = o.result.as_ref().ok()?;
            Some(Figure::new(Step::DurableFloor, floor_label(o), &m.latency))
        })
        .collect();
    let sized = |step, runs: &[sizes::Outcome]| -> Vec<Figure> {
        runs.iter()
            .filter(|o| o.run.mode == sizes::Mode::Durable)
            .filter_map(|o| {
                let l = o.latency.as_ref()?;
                Some(Figure::new(step, o.run.label(), l))
            })
            .collect()
    };
    out.extend(sized(Step::Sizes, &p.sizes));
    out.extend(sized(Step::Scaling, &p.scaling));
    out
}

fn floor_label(o: &methods::Outcome) -> String {
    format!("{} {}", o.spec.label(), format_size(o.spec.size_bytes))
}

/// The chosen method at 16 KiB against the fastest other durable one:
/// whether their means' intervals are apart.
#[derive(Clone, Debug, Serialize)]
pub struct MethodChoice {
    pub chosen: Figure,
    pub runner_up: Figure,
    /// The two intervals overlap: the order of the two is within the noise
    /// of this run.
    pub within_noise: bool,
}

pub fn method_choice(p: &Probe) -> Option<MethodChoice> {
    let (method, prealloc) = (p.verdict.method?, p.verdict.prealloc?);
    let at_16k: Vec<&methods::Outcome> = p
        .floor
        .iter()
        .filter(|o| o.durable && o.spec.size_bytes == 16 << 10 && o.result.is_ok())
        .collect();
    let figure = |o: &methods::Outcome| {
        let m = o.result.as_ref().expect("filtered");
        Figure::new(Step::DurableFloor, floor_label(o), &m.latency)
    };
    let is_chosen = |o: &&&methods::Outcome| {
        o.spec.method.name() == method && o.spec.prealloc.name() == prealloc
    };
    let chosen = figure(at_16k.iter().find(is_chosen)?);
    let runner_up = at_16k
        .iter()
        .filter(|o| !is_chosen(o))
        .map(|o| figure(o))
        .min_by(|a, b| a.mean_us.total_cmp(&b.mean_us))?;
    let within_noise = match (chosen.mean_ci95_us, runner_up.mean_ci95_us) {
        (Some([a_lo, a_hi]), Some([b_lo, b_hi])) => a_lo <= b_hi && b_lo <= a_hi,
        _ => true,
    };
    Some(MethodChoice {
        chosen,
        runner_up,
        within_noise,
    })
}

/// The `## Budget and confidence` section.
pub fn markdown(p: &Probe) -> String {
    let b = &p.budget;
    let mut out = format!(
        "\n## Budget and confidence\n\nBudget {:.0} s (`--budget`); the probe took {:.1} s. \
         Calibration: {}. At the default counts the probe was predicted to take ~{:.0} s",
        b.budget_s,
        b.elapsed_s,
        b.calibration.describe(),
        b.predicted_full_s
    );
    if b.cut {
        out.push_str(
            ", so counts were cut (each step's counts are set when it starts, and lowered \
             only if it falls behind):\n\n",
        );
    } else {
        out.push_str(": nothing was cut.\n\n");
    }
    out.push_str(&quantity_table(b).render());
    for note in &b.notes {
        out.push_str(&format!("\n**Note:** {note}\n"));
    }
    out.push_str("\nWhat the figures rest on (fewer operations, wider intervals):\n\n");
    for line in confidence_lines(p) {
        out.push_str(&format!("* {line}\n"));
    }
    out
}

fn quantity_table(b: &BudgetReport) -> Table {
    let mut t = Table::new(&[
        ("step", Align::Left),
        ("quantity", Align::Left),
        ("default", Align::Right),
        ("used", Align::Right),
        ("share", Align::Right),
        ("took s", Align::Right),
    ]);
    let show = |unit: &str, v: f64| {
        if unit.starts_with("bytes") {
            format_size_approx(v as u64)
        } else if unit.starts_with("seconds") {
            format!("{v:.2} s")
        } else {
            number(v, 0)
        }
    };
    for u in &b.quantities {
        let used = if u.used_min == u.used_max {
            show(u.unit, u.used_min)
        } else {
            format!("{}–{}", show(u.unit, u.used_min), show(u.unit, u.used_max))
        };
        let took = b
            .steps
            .iter()
            .find(|s| s.step == u.step)
            .map_or(0.0, |s| s.elapsed_s);
        t.push(vec![
            u.step.name().into(),
            format!("{} ({})", u.name, u.unit),
            show(u.unit, u.nominal),
            format!("{used}{}", if u.explicit { " (given)" } else { "" }),
            if u.share < 0.1 {
                format!("{:.1} %", u.share * 100.0)
            } else {
                format!("{:.0} %", u.share * 100.0)
            },
            format!("{took:.1}"),
        ]);
    }
    t
}

fn confidence_lines(p: &Probe) -> Vec<String> {
    let figs = figures(p);
    let mut lines = Vec::new();
    let floor: Vec<&Figure> = figs
        .iter()
        .filter(|f| f.step == Step::DurableFloor)
        .collect();
    if let (Some(least), Some(most)) = (
        floor.iter().map(|f| f.samples).min(),
        floor.iter().map(|f| f.samples).max(),
    ) {
        let mut widths: Vec<f64> = floor
            .iter()
            .filter_map(|f| f.p50_relative_half_width())
            .collect();
        widths.sort_by(f64::total_cmp);
        let width = match (widths.get(widths.len() / 2), widths.last()) {
            (Some(typical), Some(widest)) => format!(
                "±{:.0} % in the typical run, ±{:.0} % in the widest",
                typical * 100.0,
                widest * 100.0
            ),
            _ => "unknown (too few writes)".into(),
        };
        let tail = floor.iter().map(|f| f.p99_tail_samples).min().unwrap_or(0);
        let p99 = if tail == 0 {
            "a p99 of fewer than 100 writes is the slowest write".to_string()
        } else {
            format!("each p99 rests on the {tail} slowest write(s) at least")
        };
        lines.push(format!(
            "durable floor: {} writes per run; the 95 % interval of a median is {width}; {p99}",
            if least == most {
                number(least as f64, 0)
            } else {
                format!("{least}–{most}")
            },
        ));
    }
    if let Some(c) = method_choice(p) {
        let ci = |f: &Figure| {
            f.mean_ci95_us.map_or("?".into(), |[lo, hi]| {
                format!("{}–{}", number(lo, 0), number(hi, 0))
            })
        };
        lines.push(format!(
            "method choice: {} {} µs mean (95 % interval {} µs, ±{:.0} %), the next durable \
             one, {}, {} µs ({} µs): {}",
            c.chosen.run,
            number(c.chosen.mean_us, 0),
            ci(&c.chosen),
            c.chosen.mean_relative_half_width().unwrap_or(f64::NAN) * 100.0,
            c.runner_up.run,
            number(c.runner_up.mean_us, 0),
            ci(&c.runner_up),
            if c.within_noise {
                "the intervals overlap, so which of the two is faster here is within the noise \
                 of this run (a larger --budget or --count settles it)"
            } else {
                "the intervals are apart"
            }
        ));
    }
    for (step, what) in [
        (
            Step::Sizes,
            "write sizes: durable writes per size (the fewest at the largest size; a \
                       p50 of fewer than 10 writes is a rough figure)",
        ),
        (Step::Scaling, "parallel scaling: writes per run"),
    ] {
        let n: Vec<u64> = figs
            .iter()
            .filter(|f| f.step == step)
            .map(|f| f.samples)
            .collect();
        if let (Some(lo), Some(hi)) = (n.iter().min(), n.iter().max()) {
            lines.push(format!("{what}: {lo}–{hi}"));
        }
    }
    let requests: Vec<String> = p
        .mixed
        .iter()
        .filter_map(|o| {
            let m = o.result.as_ref().ok()?;
            Some(format!("{} {}", o.variant.name(), m.reads + m.writes))
        })
        .collect();
    if !requests.is_empty() {
        lines.push(format!(
            "mixed load: {:.2} s per variant, requests made: {}",
            p.mixed_plan.duration_s,
            requests.join(", ")
        ));
    }
    let tx: Vec<String> = p
        .mmap
        .iter()
        .map(|o| format!("{} {}", o.variant.name(), o.transactions))
        .collect();
    lines.push(format!(
        "fill random: transactions per variant: {}",
        tx.join(", ")
    ));
    lines
}
