//! `keel bench …`: each subcommand reproduces one durable-write experiment.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {}

pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
