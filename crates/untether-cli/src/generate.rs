//! `untether generate` (hidden): the man pages and shell completions, generated from the
//! command line's own clap definitions, for `make install` and the Debian package.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Subcommand, ValueEnum};

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug, Clone)]
enum What {
    /// Man pages (section 1): untether.1 and one per command (untether-host.1, …) in DIR.
    Man {
        /// Folder to write them into (created if missing).
        dir: PathBuf,
    },
    /// A shell's completion script in DIR: bash → untether.bash, zsh → _untether, fish →
    /// untether.fish.
    Completions {
        shell: Shell,
        /// Folder to write it into (created if missing).
        dir: PathBuf,
    },
}

/// The shells `make install` installs completions for.
#[derive(ValueEnum, Debug, Clone, Copy)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Writes what `args` asks for; prints each file written on standard error.
pub fn run(args: GenerateArgs) -> Result<()> {
    match args.what {
        What::Man { dir } => {
            create(&dir)?;
            clap_mangen::generate_to(crate::Cli::command(), &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
            eprintln!("untether: man pages written to {}", dir.display());
        }
        What::Completions { shell, dir } => {
            create(&dir)?;
            let mut cmd = crate::Cli::command();
            let path = match shell {
                Shell::Bash => write(clap_complete::Shell::Bash, &mut cmd, &dir)?,
                Shell::Zsh => write(clap_complete::Shell::Zsh, &mut cmd, &dir)?,
                Shell::Fish => write(clap_complete::Shell::Fish, &mut cmd, &dir)?,
            };
            eprintln!(
                "untether: {shell:?} completions written to {}",
                path.display()
            );
        }
    }
    Ok(())
}

fn create(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

fn write(shell: clap_complete::Shell, cmd: &mut clap::Command, dir: &Path) -> Result<PathBuf> {
    clap_complete::generate_to(shell, cmd, "untether", dir).with_context(|| {
        format!(
            "cannot write the {shell} completions into {}",
            dir.display()
        )
    })
}
