//! `spillway`: protect any HTTP service as a sidecar or gateway.

use clap::{Parser, Subcommand};
use spillway_server::{config, demo, Server};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "spillway",
    version,
    about = "Flow control and overload protection for any HTTP service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy with a configuration file.
    Serve {
        /// The configuration (TOML).
        #[arg(long, short, default_value = "spillway.toml")]
        config: PathBuf,
    },
    /// Check a configuration file and exit: 0 if it is good, 1 with the errors if not.
    Check {
        /// The configuration (TOML).
        #[arg(long, short, default_value = "spillway.toml")]
        config: PathBuf,
    },
    /// An upstream, the proxy with example rules and a load generator, with a live table.
    Demo {
        /// How long to run.
        #[arg(long, default_value_t = 15)]
        seconds: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Check { config } => match config::load(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        },
        Command::Serve { config } => {
            let config = match config::load(&config) {
                Ok(config) => config,
                Err(err) => {
                    eprintln!("error: {err}");
                    return ExitCode::FAILURE;
                }
            };
            runtime.block_on(async {
                let server = match Server::bind(&config, spillway::Spillway::new()).await {
                    Ok(server) => server,
                    Err(err) => {
                        eprintln!("error: cannot listen on {}: {err}", config.listener.listen);
                        return ExitCode::FAILURE;
                    }
                };
                if let Ok(addr) = server.local_addr() {
                    println!("spillway: proxying on http://{addr}");
                }
                let shutdown = async {
                    let _ = tokio::signal::ctrl_c().await;
                    println!("spillway: shutting down, draining requests in flight");
                };
                match server.run(shutdown).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("error: {err}");
                        ExitCode::FAILURE
                    }
                }
            })
        }
        Command::Demo { seconds } => match runtime.block_on(demo::run(seconds)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        },
    }
}
