//! `--vs-fio`: run fio on the same file size, prealloc and write pattern,
//! interleaved with Keel's own runs, and report Keel's commits/s as a ratio
//! of fio's. fio is the reference implementation of "one write + one sync";
//! a ratio near 1.0 says Keel's bench measures the disk, not itself.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};
use keel::io::{Vfs, WriteMethod};
use serde::Serialize;

use super::run::prepare_file;
use super::{Outcome, Plan, RunSpec};
use crate::bench::report::{BenchFile, Machine};

/// The fio job equivalent to a method (with `--rw=write --bs=<size>`), or
/// `None` when fio has no equivalent.
pub fn fio_flags(method: WriteMethod) -> Option<&'static [&'static str]> {
    match method {
        WriteMethod::Fdatasync => Some(&["--ioengine=psync", "--fdatasync=1"]),
        WriteMethod::OdirectDsync => Some(&["--ioengine=psync", "--direct=1", "--sync=dsync"]),
        WriteMethod::Odsync => Some(&["--ioengine=psync", "--sync=dsync"]),
        _ => None,
    }
}

/// Keel against fio for one (method, prealloc), over all rounds.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub method: &'static str,
    pub prealloc: &'static str,
    /// The fio flags that define the job (besides file, size and output).
    pub fio_flags: String,
    /// Per round; `null` where that run failed.
    pub keel_commits_per_s: Vec<Option<f64>>,
    pub fio_commits_per_s: Vec<Option<f64>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl Comparison {
    pub fn keel_median(&self) -> Option<f64> {
        median(&self.keel_commits_per_s)
    }

    pub fn fio_median(&self) -> Option<f64> {
        median(&self.fio_commits_per_s)
    }

    /// Keel's commits/s over fio's in each round where both ran.
    pub fn round_ratios(&self) -> Vec<Option<f64>> {
        self.keel_commits_per_s
            .iter()
            .zip(&self.fio_commits_per_s)
            .map(|(k, f)| Some((*k)? / (*f)?))
            .collect()
    }

    /// The median of the per-round ratios. Each round's two runs are
    /// adjacent in time, so their ratio cancels the drift of a shared
    /// machine (±20 % between runs here) that a ratio of the two medians
    /// would keep.
    pub fn ratio(&self) -> Option<f64> {
        median(&self.round_ratios())
    }
}

/// The median of the runs that succeeded (the mean of the middle two for
/// an even count).
fn median(values: &[Option<f64>]) -> Option<f64> {
    let ok: Vec<f64> = values.iter().flatten().copied().collect();
    crate::bench::report::median(&ok)
}

/// Run `plan.rounds` rounds; in each, every comparable spec runs once under
/// Keel and once under fio, alternating which goes first so that drift of
/// the shared machine does not favour either.
pub fn compare(
    vfs: &dyn Vfs,
    plan: &Plan,
    machine: &Machine,
) -> anyhow::Result<(Vec<Outcome>, Vec<Comparison>)> {
    check_fio_installed()?;
    if plan.splits != [1] {
        bail!("--vs-fio compares one write per commit; drop --split / --writes-per-commit");
    }
    let specs: Vec<RunSpec> = plan
        .runs()
        .into_iter()
        .filter(|s| fio_flags(s.method).is_some())
        .collect();
    let mut comparisons: Vec<Comparison> = specs.iter().map(new_comparison).collect();
    let mut outcomes = Vec::new();
    for round in 0..plan.rounds {
        for (spec, cmp) in specs.iter().zip(&mut comparisons) {
            let keel_first = round % 2 == 0;
            let mut fio_result = None;
            if !keel_first {
                fio_result = Some(run_fio(vfs, plan, spec));
            }
            let outcome = Outcome::run(vfs, plan, spec, Some(round + 1), machine);
            if keel_first {
                fio_result = Some(run_fio(vfs, plan, spec));
            }
            let fio_result = fio_result.expect("fio ran");
            cmp.keel_commits_per_s.push(
                outcome
                    .result
                    .as_ref()
                    .ok()
                    .map(|m| m.figures.commits_per_s),
            );
            match fio_result {
                Ok(rate) => cmp.fio_commits_per_s.push(Some(rate)),
                Err(e) => {
                    let message = format!("fio round {}: {e:#}", round + 1);
                    eprintln!("{}: error: {message}", spec.label());
                    cmp.errors.push(message);
                    cmp.fio_commits_per_s.push(None);
                }
            }
            outcomes.push(outcome);
        }
    }
    Ok((outcomes, comparisons))
}

fn new_comparison(spec: &RunSpec) -> Comparison {
    Comparison {
        method: spec.method.name(),
        prealloc: spec.prealloc.name(),
        fio_flags: format!(
            "--rw=write --bs={} {}",
            spec.size_bytes,
            fio_flags(spec.method).unwrap_or_default().join(" ")
        ),
        keel_commits_per_s: Vec::new(),
        fio_commits_per_s: Vec::new(),
        errors: Vec::new(),
    }
}

fn check_fio_installed() -> anyhow::Result<()> {
    match Command::new("fio").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        _ => {
            bail!("--vs-fio needs fio: install it (./scripts/test does, or `apt-get install fio`)")
        }
    }
}

/// One fio run on a file prepared exactly like Keel's (same prealloc code),
/// returning fio's commits (writes) per second.
fn run_fio(vfs: &dyn Vfs, plan: &Plan, spec: &RunSpec) -> anyhow::Result<f64> {
    let flags = fio_flags(spec.method).context("no fio equivalent")?;
    let name = format!(
        "keel-fio-{}-{}-{}.dat",
        std::process::id(),
        spec.method,
        spec.prealloc.name()
    );
    let file = BenchFile::new(plan.dir.join(name))?;
    prepare_file(vfs, file.path(), spec)?;
    let out = Command::new("fio")
        .args(fio_args(file.path(), spec))
        .args(flags)
        .output()
        .context("cannot run fio")?;
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_fio_commits_per_s(&String::from_utf8_lossy(&out.stdout), spec.count)
}

/// The job: `count` sequential writes of `size` into a file fio must not lay
/// out again (it exists with the right size, or is empty for
/// `--prealloc none` and grows, as Keel's does).
fn fio_args(path: &Path, spec: &RunSpec) -> Vec<String> {
    vec![
        "--name=keel-vs-fio".into(),
        format!("--filename={}", path.display()),
        "--rw=write".into(),
        format!("--bs={}", spec.size_bytes),
        format!("--filesize={}", spec.file_size_bytes),
        format!("--io_size={}", spec.size_bytes * spec.count),
        "--fallocate=none".into(),
        "--output-format=json".into(),
    ]
}

/// fio's write IOPS from its JSON report: completed writes over the job's
/// runtime, which includes the time of each write's sync. (fio does not sync
/// after its very last write; over thousands of writes that is noise.)
fn parse_fio_commits_per_s(stdout: &str, expected_ios: u64) -> anyhow::Result<f64> {
    // fio may print warnings before the JSON object.
    let start = stdout.find('{').context("fio printed no JSON report")?;
    let report: serde_json::Value =
        serde_json::from_str(&stdout[start..]).context("cannot parse fio's JSON report")?;
    let job = &report["jobs"][0];
    let error = job["error"].as_i64().unwrap_or(0);
    if error != 0 {
        bail!("fio job failed with error {error}");
    }
    let ios = job["write"]["total_ios"]
        .as_u64()
        .context("fio report lacks write.total_ios")?;
    let runtime_ms = job["write"]["runtime"]
        .as_f64()
        .context("fio report lacks write.runtime")?;
    if ios != expected_ios {
        bail!("fio completed {ios} writes, expected {expected_ios}");
    }
    Ok(ios as f64 / (runtime_ms.max(1.0) / 1_000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[Some(3.0), None, Some(1.0), Some(2.0)]), Some(2.0));
        assert_eq!(median(&[Some(4.0), Some(2.0)]), Some(3.0));
        assert_eq!(median(&[None]), None);
    }

    #[test]
    fn ratio_pairs_rounds() {
        let c = Comparison {
            method: "fdatasync",
            prealloc: "fallocate",
            fio_flags: String::new(),
            keel_commits_per_s: vec![Some(100.0), Some(50.0), None, Some(300.0)],
            fio_commits_per_s: vec![Some(100.0), Some(40.0), Some(9.0), Some(200.0)],
            errors: Vec::new(),
        };
        assert_eq!(c.round_ratios(), [Some(1.0), Some(1.25), None, Some(1.5)]);
        assert_eq!(c.ratio(), Some(1.25));
        assert_eq!(c.keel_median(), Some(100.0));
    }

    #[test]
    fn parses_fio_json() {
        let out = "fio: some warning\n{\"jobs\":[{\"error\":0,\"write\":{\"total_ios\":2048,\"runtime\":512}}]}";
        assert_eq!(parse_fio_commits_per_s(out, 2048).unwrap(), 4000.0);
        assert!(parse_fio_commits_per_s(out, 16).is_err());
        assert!(parse_fio_commits_per_s("no json", 1).is_err());
        let failed = "{\"jobs\":[{\"error\":5,\"write\":{\"total_ios\":0,\"runtime\":0}}]}";
        assert!(parse_fio_commits_per_s(failed, 1).is_err());
    }

    #[test]
    fn only_three_methods_compare() {
        let comparable: Vec<_> = WriteMethod::ALL
            .into_iter()
            .filter(|m| fio_flags(*m).is_some())
            .collect();
        assert_eq!(
            comparable,
            [
                WriteMethod::Fdatasync,
                WriteMethod::Odsync,
                WriteMethod::OdirectDsync
            ]
        );
    }
}
