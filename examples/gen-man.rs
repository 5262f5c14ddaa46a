//! Writes the man pages and shell completions of `ipsec` and `tunneld`, generated from their
//! clap definitions (`ipsec::cli`: `Cli` and `TunneldArgs`), into a directory:
//!
//! ```sh
//! cargo run --release --example gen-man -- out/man
//! # out/man/man1/ipsec.1, ipsec-seal.1, ...; out/man/man8/tunneld.8
//! # out/man/completions/{ipsec,tunneld}.bash, _ipsec, _tunneld (zsh), *.fish
//! ```
//!
//! scripts/packaging/make-deb.sh puts them into the Debian package.

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

fn man(cmd: &clap::Command, dir: &Path, section: &str) -> std::io::Result<()> {
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone()).section(section).render(&mut out)?;
    std::fs::write(dir.join(format!("{name}.{section}")), out)?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let full = format!("{name}-{}", sub.get_name());
        // clap names are &'static str (no "string" feature): a generator may leak a few.
        let sub = sub
            .clone()
            .name(&*Box::leak(full.clone().into_boxed_str()))
            .bin_name(full.replace('-', " "));
        man(&sub, dir, section)?;
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "out/man".into()));
    let comp_dir = dir.join("completions");
    std::fs::create_dir_all(&comp_dir)?;
    // `ipsec` is a user command (section 1; strongSwan's starter owns ipsec(8)), tunneld a
    // daemon (section 8).
    for (mut cmd, section) in [
        (ipsec::cli::Cli::command(), "1"),
        (ipsec::cli::TunneldArgs::command(), "8"),
    ] {
        let man_dir = dir.join(format!("man{section}"));
        std::fs::create_dir_all(&man_dir)?;
        cmd.build();
        man(&cmd, &man_dir, section)?;
        let name = cmd.get_name().to_string();
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            clap_complete::generate_to(shell, &mut cmd, &name, &comp_dir)?;
        }
    }
    println!(
        "man pages in {}/man1 and man8, completions in {}",
        dir.display(),
        comp_dir.display()
    );
    Ok(())
}
