//! The `custodian` command line: serve, migrate, and the operator's subcommands.
//! Exit codes: 0 success, 1 failure, 2 bad usage or configuration.

mod args;
mod custody;
mod oauth;
mod user_admin;

pub use args::*;

use std::{io::Read, process::ExitCode};

use anyhow::Context;
use clap::Parser;
use serde_json::json;

use crate::{
    config::{Config, Overrides},
    identity::{tokens, users},
    AppState,
};

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut overrides = Overrides {
        listen: match &cli.command {
            Command::Serve { listen, .. } => listen.clone(),
            _ => None,
        },
        role: match &cli.command {
            Command::Serve { role, .. } => role.clone(),
            _ => None,
        },
        database_url: cli.global.database.clone(),
        environment: cli.global.environment.clone(),
        secret_key_file: cli.global.secret_key_file.clone(),
        chains: Default::default(),
    };
    if let Command::Serve { chain, .. } = &cli.command {
        if let Err(e) = chain.iter().try_for_each(|flag| overrides.chain(flag)) {
            eprintln!("custodian: {e}");
            return ExitCode::from(2);
        }
    }
    let config = match Config::load(cli.global.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("custodian: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    if let Command::Openapi { markdown } = cli.command {
        let text = match markdown {
            true => crate::http::reference_markdown(),
            false => crate::http::openapi_json() + "\n",
        };
        // A reader that stops early (`| head`) is not an error of ours.
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("custodian: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli.command, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("custodian: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if config.log_format == "json" { builder.json().try_init() } else { builder.try_init() };
}

/// `serve`: refuses a public address in a defaulted test environment (docs/decisions.md#brute-force-limits), then runs
/// the HTTP API and the delivery engine until SIGINT or SIGTERM.
async fn serve(config: Config) -> anyhow::Result<()> {
    let production = config.environment == crate::config::Environment::Production;
    let listen = config.listen;
    if !production {
        // The test environment accepts OTP 000000 and grants `all`: never by accident
        // on an address other machines can reach (docs/decisions.md#brute-force-limits).
        if !listen.ip().is_loopback() && !config.environment_explicit {
            anyhow::bail!(
                "refusing to serve the test environment (OTP 000000 accepted) on {listen}: \
                 choose it explicitly with --environment test, or use --environment production"
            );
        }
        tracing::warn!(
            "TEST ENVIRONMENT: one-time password 000000 is accepted and sessions hold scope `all`; \
             never use it with real users or money (--environment production)"
        );
    }
    let state = AppState::new(config).await?;
    let shutdown = crate::shutdown_signal();
    let listener =
        tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, production, role = ?state.config.role, "custodian listening");
    if state.config.role != crate::config::Role::Worker {
        tracing::info!("console: http://{address}/console  API reference: http://{address}/docs");
    }
    crate::serve(listener, state, shutdown).await
}

/// An operator command against a SQLite file a busy server holds waits for the write lock, up
/// to `cli_lock_wait` seconds, and says so, rather than failing after the server's busy
/// timeout; its own statements then wait as long (docs/decisions.md#faults-and-floods).
async fn wait_for_database(config: &mut Config) -> anyhow::Result<()> {
    if !config.database_url.starts_with("sqlite:") {
        return Ok(());
    }
    let bound = std::time::Duration::from_secs(config.cli_lock_wait);
    crate::store::sqlite::wait_for_write_lock(&config.database_url, bound, || {
        eprintln!(
            "waiting for the database: another process (a running server?) is writing; up to {} s (cli_lock_wait)",
            bound.as_secs()
        )
    })
    .await?;
    config.sqlite_busy_timeout = config.cli_lock_wait;
    Ok(())
}

/// `wallet import`: imports a JSON array or NDJSON of §2.1 records with a progress bar, then
/// prints the summary (JSON with `--json`).
async fn import_wallets(
    config: &Config,
    file: &std::path::Path,
    json: bool,
    opts: crate::wallets::import::ImportOptions,
) -> anyhow::Result<()> {
    let text = read_file_or_stdin(file)?;
    let store = crate::store::open(config).await?;
    let bar = progress_bar();
    let summary = crate::wallets::import::import_with(&store, &text, opts, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .await;
    bar.finish_and_clear();
    let summary = summary?;
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "imported {}, updated {}, rejected {}",
            summary.imported,
            summary.updated,
            summary.rejected.len()
        );
        for r in &summary.rejected {
            let at = match (r.index, r.line) {
                (Some(i), _) => format!("record {i}"),
                (_, Some(l)) => format!("line {l}"),
                _ => String::new(),
            };
            println!("  rejected {at}{}:", r.id.as_deref().map(|i| format!(" ({i})")).unwrap_or_default());
            for v in &r.violations {
                let field = if v.field.is_empty() { String::new() } else { format!("{}: ", v.field) };
                println!("    {field}{}", v.reason);
            }
        }
    }
    Ok(())
}

/// `wallet set-balance`: sets the balances given (base units), through the same domain
/// function as the HTTP route, as the operator.
async fn set_balance(config: Config, cmd: WalletCommand) -> anyhow::Result<()> {
    let WalletCommand::SetBalance { id, balance, confirmed, spendable, staking, reward, withdraw_hold_usd } =
        cmd
    else {
        anyhow::bail!("not a set-balance command");
    };
    let mut body = serde_json::Map::new();
    for (k, v) in [
        ("balanceString", balance),
        ("confirmedBalanceString", confirmed),
        ("spendableBalanceString", spendable),
        ("stakingBalanceString", staking),
        ("rewardBalanceString", reward),
        ("withdrawHoldAmountUsdString", withdraw_hold_usd),
    ] {
        if let Some(v) = v {
            body.insert(k.into(), serde_json::Value::String(v));
        }
    }
    let state = AppState::new(config).await?;
    crate::wallets::set_balances(&state.wallets, None, &id, &serde_json::Value::Object(body)).await?;
    println!("balances of {id} updated");
    Ok(())
}

async fn add_address(
    config: Config,
    wallet: crate::types::WalletId,
    address: String,
    label: Option<String>,
) -> anyhow::Result<()> {
    let state = AppState::new(config).await?;
    let added = crate::chain::add_address(&state.chains, None, &wallet, &address, label).await?;
    println!("{} now watches {} on {}", wallet, added.address, added.chain.as_str());
    Ok(())
}

/// `wallet fee-alerts`: sets both thresholds (one left out is off).
async fn fee_alerts(
    config: Config,
    wallet: crate::types::WalletId,
    alerts: crate::model::chain::FeeAlerts,
) -> anyhow::Result<()> {
    let state = AppState::new(config).await?;
    let set = crate::chain::set_fee_alerts(&state.chains, None, &wallet, alerts).await?;
    let show = |b: Option<crate::types::BaseUnits>| b.map_or("off".to_string(), |b| format!("below {b} wei"));
    let (fee, balance) = (show(set.low_fee), show(set.low_fee_address_balance));
    println!("{wallet}: lowFee {fee}, lowFeeAddressBalance {balance}");
    Ok(())
}

async fn chain(config: Config, cmd: ChainCommand) -> anyhow::Result<()> {
    let state = AppState::new(config).await?;
    match cmd {
        ChainCommand::Status { json } => {
            let all = crate::chain::status(&state.chains).await?;
            if all.is_empty() {
                println!("no chain is configured ([chains.<coin>] in the config file)");
            }
            for s in all {
                let at = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
                if json {
                    println!(
                        "{}",
                        serde_json::json!({ "coin": s.chain, "height": s.height, "nodeHead": s.node_head,
                            "lag": s.lag(), "halted": s.halted, "lastReorgDepth": s.last_reorg_depth,
                            "blocksPerSecond": s.blocks_per_second, "error": s.error })
                    );
                } else {
                    println!(
                        "{}: block {} of {} (lag {}), {} blocks/s, last reorg depth {}{}{}",
                        s.chain,
                        at(s.height),
                        at(s.node_head),
                        s.lag(),
                        s.blocks_per_second.map(|r| format!("{r:.1}")).unwrap_or_else(|| "-".into()),
                        at(s.last_reorg_depth),
                        s.halted.map(|h| format!(", HALTED: {h}")).unwrap_or_default(),
                        s.error.map(|e| format!(", last error: {e}")).unwrap_or_default()
                    );
                }
            }
            Ok(())
        }
        ChainCommand::Resync { coin, from } => {
            crate::chain::resync(&state.chains, &coin, from).await?;
            println!("{coin} resumes at block {from} at the watcher's next round");
            Ok(())
        }
    }
}

// Long: one arm per command, each a call into the domain; the table of commands reads top to bottom.
async fn run(command: Command, mut config: Config) -> anyhow::Result<()> {
    if !matches!(command, Command::Serve { .. } | Command::Openapi { .. }) {
        wait_for_database(&mut config).await?;
    }
    match command {
        Command::Serve { .. } => serve(config).await,
        Command::Migrate => {
            crate::store::open(&config).await?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Openapi { .. } => Ok(()),
        Command::User(UserCommand::Create { email, name, password_stdin, service_admin, json }) => {
            let password = read_password(password_stdin)?;
            let state = AppState::new(config).await?;
            let created = users::create_user(
                &state.store,
                &state.identity.key,
                &email,
                name.as_deref(),
                &password,
                service_admin,
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string(&created)?);
            } else {
                println!("Created user {} ({})", created.email, created.id);
                println!(
                    "Scan this code with an authenticator app, or enter the secret {}:",
                    created.totp_secret
                );
                println!("{}", qr(&created.otpauth_uri));
                println!("{}", created.otpauth_uri);
            }
            Ok(())
        }
        Command::Enterprise(EnterpriseCommand::Create { name, id, json }) => {
            let store = crate::store::open(&config).await?;
            let e = users::create_enterprise(&store, &name, id).await?;
            if json {
                println!("{}", json!({ "id": e.id, "name": e.name }));
            } else {
                println!("Created enterprise {} ({})", e.name, e.id);
            }
            Ok(())
        }
        Command::Enterprise(EnterpriseCommand::AddUser { enterprise, email, admin }) => {
            let store = crate::store::open(&config).await?;
            let (e, user) = users::add_member(&store, &enterprise, &email, admin).await?;
            println!("{} is now {} of {}", user.email, if admin { "an admin" } else { "a member" }, e.name);
            Ok(())
        }
        Command::Wallet(WalletCommand::Import { file, json, strict, allow_identity_change }) => {
            let opts = crate::wallets::import::ImportOptions { strict, allow_identity_change };
            import_wallets(&config, &file, json, opts).await
        }
        Command::Wallet(cmd @ WalletCommand::SetBalance { .. }) => set_balance(config, cmd).await,
        Command::Wallet(WalletCommand::AddAddress { wallet, address, label }) => {
            add_address(config, wallet, address, label).await
        }
        Command::Wallet(WalletCommand::FeeAlerts { wallet, low_fee, low_fee_address_balance }) => {
            let alerts = crate::model::chain::FeeAlerts { low_fee, low_fee_address_balance };
            fee_alerts(config, wallet, alerts).await
        }
        Command::Chain(cmd) => chain(config, cmd).await,
        Command::Wallet(WalletCommand::Create {
            custodial,
            coin,
            enterprise,
            label,
            approvals_required,
            json,
        }) => {
            let new = custody::new_wallet(coin, enterprise, label, approvals_required);
            custody::create_wallet(config, custodial, new, json).await
        }
        Command::Wallet(WalletCommand::Unfreeze { wallet }) => custody::unfreeze(config, wallet).await,
        Command::Withdrawal(cmd) => custody::withdrawal(config, cmd).await,
        Command::Keys(cmd) => custody::keys(config, cmd).await,
        Command::Price(cmd) => custody::price(config, cmd).await,
        Command::Event(EventCommand::Emit { json_file }) => emit_event(config, &json_file).await,
        Command::User(cmd) => user_admin::user_command(config, cmd).await,
        Command::Token(cmd) => user_admin::token_command(config, cmd).await,
        Command::Audit(AuditCommand::Verify) => user_admin::audit_verify(config).await,
        Command::OAuthClient(cmd) => oauth::oauth_client(config, cmd).await,
        Command::Oidc(cmd) => oauth::oidc(config, cmd).await,
        Command::Ecdh(EcdhCommand::ShowXpub) => show_xpub(config).await,
        Command::TokenTemplate(TemplateCommand::Create { json_file, json }) => {
            create_template(&config, &json_file, json).await
        }
    }
}

/// `event emit`: one event from a JSON file, fanned out as the events route does.
async fn emit_event(config: Config, json_file: &std::path::Path) -> anyhow::Result<()> {
    let text = read_file_or_stdin(json_file)?;
    // The same check as the events route: repeated keys are refused, not last-wins.
    if let Err(crate::error::JsonProblem::Invalid(e)) = crate::error::check_json(text.as_bytes()) {
        return Err(e.into());
    }
    let body: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", json_file.display()))?;
    let state = AppState::new(config).await?;
    let result = crate::webhooks::events::ingest(&state.webhooks, body).await?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// `token-template create`: a template from a JSON object of §4.3 fields.
async fn create_template(config: &Config, json_file: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let text = read_file_or_stdin(json_file)?;
    let fields: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", json_file.display()))?;
    let store = crate::store::open(config).await?;
    let t = tokens::create_template(&store, fields).await?;
    if json {
        println!("{}", json!({ "id": t.id, "fields": t.fields }));
    } else {
        println!("Created access token template {}", t.id);
    }
    Ok(())
}

/// A progress bar on a terminal; hidden otherwise.
pub(crate) fn progress_bar() -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} records ({eta})") {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    }
}

fn read_file_or_stdin(path: &std::path::Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    }
}

pub(crate) fn read_password(from_stdin: bool) -> anyhow::Result<String> {
    let password = if from_stdin {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).context("reading the password from standard input")?;
        line.trim_end_matches(['\r', '\n']).to_string()
    } else {
        let first = rpassword::prompt_password("Password: ")
            .context("no terminal to prompt for a password: use --password-stdin")?;
        let again = rpassword::prompt_password("Repeat password: ")?;
        if first != again {
            anyhow::bail!("the passwords do not match");
        }
        first
    };
    Ok(password)
}

pub(crate) fn qr(uri: &str) -> String {
    use qrcode::render::unicode::Dense1x2;
    match qrcode::QrCode::new(uri.as_bytes()) {
        Ok(code) => code
            .render::<Dense1x2>()
            .dark_color(Dense1x2::Light)
            .light_color(Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
        Err(_) => String::new(),
    }
}

/// `ecdh show-xpub`.
async fn show_xpub(config: Config) -> anyhow::Result<()> {
    let state = AppState::new(config).await?;
    println!("{}", crate::identity::ecdh::server_xpub(&state.store, &state.identity.key).await?);
    Ok(())
}
