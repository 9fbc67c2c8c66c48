//! `aware node serve`: a paired node exposing this machine's Claude Code transcripts (04 §2.2).

#[derive(clap::Args, Debug)]
pub struct NodeServeArgs {}

pub fn run(_args: NodeServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("aware node serve is not built yet")
}
