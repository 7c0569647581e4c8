//! `rdmacam`: a virtual RoCEv2 camera, a test sender for host teams, and a capture inspector.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use rdmacam::inspect;

/// rdmacam: the camera side of RDMA streaming, in software.
#[derive(Parser, Debug)]
#[command(name = "rdmacam", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check every RoCE packet of a pcap/pcapng capture: one line per packet with its ICRC verdict.
    ///
    /// Exit status: 0 when every RoCE packet's ICRC is good, 1 when any is bad, 2 when the file
    /// cannot be read.
    Inspect {
        /// The capture (pcap or pcapng; Ethernet, Linux cooked v1/v2 or raw IP link types).
        file: PathBuf,
        /// UDP destination port that marks RoCEv2 traffic.
        #[arg(long, default_value_t = 4791)]
        port: u16,
        /// Print JSON lines instead of text (fields documented in the README).
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Inspect { file, port, json } => inspect::run(&file, port, json),
    }
}
