//! `gcp-emulator` binary: serves the emulated Google Cloud APIs on one port until Ctrl-C.

use clap::Parser;
use gcp_emulator::{Config, Emulator};
use std::net::SocketAddr;

#[derive(Parser, Debug)]
#[command(
    name = "gcp-emulator",
    version,
    about = "Local emulator of Cloud TPU v2, Dataproc v1, Vertex AI v1 and Cloud Storage"
)]
struct Args {
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:8085", env = "GCP_EMULATOR_LISTEN")]
    listen: SocketAddr,
    /// Emulated seconds per real second (60 = a 3-minute TPU create takes 3 real seconds).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Start with a manual clock at this RFC 3339 time (or "now"); move it with the admin API.
    #[arg(long)]
    manual_clock: Option<String>,
    /// JSON configuration file (see README: durations, projectNumbers, ...).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let config: Config = match &args.config {
        Some(p) => serde_json::from_str(
            &std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))?,
        )
        .map_err(|e| format!("parsing {}: {e}", p.display()))?,
        None => Config::default(),
    };
    let mut b = Emulator::builder()
        .listen(args.listen)
        .config(config)
        .time_scale(args.time_scale);
    if let Some(t) = &args.manual_clock {
        let start = if t == "now" {
            chrono::Utc::now()
        } else {
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|e| format!("--manual-clock {t}: {e}"))?
                .with_timezone(&chrono::Utc)
        };
        b = b.manual_clock(start);
    }
    let emu = b.start().await?;
    println!("gcp-emulator listening on {}", emu.url());
    println!(
        "  TPU      {}/tpu        Dataproc {}/dataproc",
        emu.url(),
        emu.url()
    );
    println!(
        "  Vertex   {}/vertex     Storage  {}/storage/v1",
        emu.url(),
        emu.url()
    );
    println!("  Admin    {}/emulator/v1/", emu.url());
    tokio::signal::ctrl_c().await?;
    emu.shutdown().await;
    Ok(())
}
