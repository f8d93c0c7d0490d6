//! The `custodian` command line: serve, migrate, and the operator's subcommands.
//! Exit codes: 0 success, 1 failure, 2 bad usage or configuration.

mod operator;

use std::{io::Read, path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::{
    config::{Config, Overrides},
    identity::{tokens, users},
    types::{EnterpriseId, WalletId},
    AppState,
};

#[derive(Debug, Parser)]
#[command(name = "custodian", version, about = "Wallet-custody service API")]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Settings every subcommand takes (flags > environment > file > defaults).
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// TOML configuration file.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Database URL, e.g. sqlite://data/custodian.db [env: CUSTODIAN_DATABASE_URL].
    #[arg(long, global = true, value_name = "URL")]
    pub database: Option<String>,
    /// test or production [env: CUSTODIAN_ENVIRONMENT].
    #[arg(long, global = true, value_name = "ENV")]
    pub environment: Option<String>,
    /// File with the 32-byte master key as 64 hex characters [env: CUSTODIAN_SECRET_KEY_FILE].
    #[arg(long, global = true, value_name = "FILE")]
    pub secret_key_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API.
    Serve {
        /// Address to listen on [env: CUSTODIAN_LISTEN] [default: 127.0.0.1:3080].
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// api (HTTP API only), worker (webhook delivery, with /health and /metrics) or all
        /// [env: CUSTODIAN_ROLE] [default: all].
        #[arg(long, value_name = "ROLE")]
        role: Option<String>,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Print the OpenAPI 3.1 document.
    Openapi,
    /// Manage users.
    #[command(subcommand)]
    User(UserCommand),
    /// Manage enterprises.
    #[command(subcommand)]
    Enterprise(EnterpriseCommand),
    /// Manage wallet records.
    #[command(subcommand)]
    Wallet(WalletCommand),
    /// Ingest events from upstream systems (chain indexers, the wallet platform).
    #[command(subcommand)]
    Event(EventCommand),
    /// Manage access token templates.
    #[command(subcommand, name = "token-template")]
    TokenTemplate(TemplateCommand),
    /// Check the audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Revoke or list access tokens (emergencies, audits).
    #[command(subcommand)]
    Token(operator::TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the hash chain: prints `ok N entries`, or the first broken link and exits 1.
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user with a password and a new TOTP seed.
    Create {
        #[arg(long)]
        email: String,
        /// "First Last".
        #[arg(long)]
        name: Option<String>,
        /// Read the password from standard input instead of a no-echo prompt.
        #[arg(long)]
        password_stdin: bool,
        /// Make the user a service employee holding the service-admin permission.
        #[arg(long)]
        service_admin: bool,
        /// Print one JSON object {id, email, totpSecret, otpauthUri} and nothing else.
        #[arg(long)]
        json: bool,
    },
    /// Refuse the user's logins and revoke every token of theirs.
    Deactivate {
        #[arg(long)]
        email: String,
    },
    /// Let a deactivated user log in again.
    Activate {
        #[arg(long)]
        email: String,
    },
    /// Give the user a new TOTP secret; codes of the old one stop working at once.
    ResetOtp {
        #[arg(long)]
        email: String,
        /// Print one JSON object {id, email, totpSecret, otpauthUri}.
        #[arg(long)]
        json: bool,
    },
    /// Set the user's password.
    SetPassword {
        #[arg(long)]
        email: String,
        /// Read the password from standard input instead of a no-echo prompt.
        #[arg(long)]
        password_stdin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum EnterpriseCommand {
    /// Create an enterprise.
    Create {
        #[arg(long)]
        name: String,
        /// Keep an existing id (32 hex), e.g. when migrating; a new one is generated otherwise.
        #[arg(long)]
        id: Option<EnterpriseId>,
        /// Print {id, name} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a user to an enterprise (or change their admin flag).
    AddUser {
        #[arg(long)]
        enterprise: EnterpriseId,
        #[arg(long)]
        email: String,
        /// Make the user an admin of the enterprise.
        #[arg(long)]
        admin: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum WalletCommand {
    /// Import §2.1 wallet records from a JSON array or NDJSON file ("-" for standard input).
    Import {
        file: PathBuf,
        /// Print the summary as one JSON object {imported, updated, rejected}.
        #[arg(long)]
        json: bool,
        /// Refuse fields the wallet record of §2.1 does not list (by default they are kept).
        #[arg(long)]
        strict: bool,
        /// Let a record change the coin or type of an existing wallet (audited).
        #[arg(long)]
        allow_identity_change: bool,
    },
    /// Set balances of a wallet (base units, decimal digits; only the ones given change).
    SetBalance {
        /// Wallet id.
        #[arg(long)]
        id: WalletId,
        #[arg(long, value_name = "BASE_UNITS")]
        balance: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        confirmed: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        spendable: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        staking: Option<String>,
        #[arg(long, value_name = "BASE_UNITS")]
        reward: Option<String>,
        /// USD cents.
        #[arg(long, value_name = "CENTS")]
        withdraw_hold_usd: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Fan one event out to every matching webhook, as POST /api/v2/internal/events does.
    Emit {
        /// File holding the event JSON object ("-" for standard input).
        #[arg(long, value_name = "FILE")]
        json_file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// Create a template from a JSON object of access token fields (§4.3).
    Create {
        /// File holding the JSON object ("-" for standard input).
        #[arg(long, value_name = "FILE")]
        json_file: PathBuf,
        /// Print {id, fields} as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let overrides = Overrides {
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
    };
    let config = match Config::load(cli.global.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("custodian: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    if matches!(cli.command, Command::Openapi) {
        println!("{}", crate::http::openapi_json());
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

/// `serve`: refuses a public address in a defaulted test environment (issue 9 §9), then runs
/// the HTTP API and the delivery engine until SIGINT or SIGTERM.
async fn serve(config: Config) -> anyhow::Result<()> {
    let production = config.environment == crate::config::Environment::Production;
    let listen = config.listen;
    if !production {
        // The test environment accepts OTP 000000 and grants `all`: never by accident
        // on an address other machines can reach (issue 9 §9).
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
    tracing::info!(address = %listener.local_addr()?, production, role = ?state.config.role, "custodian listening");
    crate::serve(listener, state, shutdown).await
}

/// An operator command against a SQLite file a busy server holds waits for the write lock, up
/// to `cli_lock_wait` seconds, and says so, rather than failing after the server's busy
/// timeout; its own statements then wait as long (issue 21 §4).
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

async fn run(command: Command, mut config: Config) -> anyhow::Result<()> {
    if !matches!(command, Command::Serve { .. } | Command::Openapi) {
        wait_for_database(&mut config).await?;
    }
    match command {
        Command::Serve { .. } => serve(config).await,
        Command::Migrate => {
            crate::store::open(&config).await?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Openapi => Ok(()),
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
        Command::Event(EventCommand::Emit { json_file }) => {
            let text = read_file_or_stdin(&json_file)?;
            // The same check as the events route: repeated keys are refused, not last-wins.
            if let Err(crate::error::JsonProblem::Invalid(e)) = crate::error::check_json(text.as_bytes()) {
                return Err(e.into());
            }
            let body: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not valid JSON", json_file.display()))?;
            let state = AppState::new(config).await?;
            let result = crate::webhooks::events::ingest(&state.webhooks, body).await?;
            println!("{}", serde_json::to_string(&result)?);
            Ok(())
        }
        Command::User(cmd) => operator::user_command(config, cmd).await,
        Command::Token(cmd) => operator::token_command(config, cmd).await,
        Command::Audit(AuditCommand::Verify) => operator::audit_verify(config).await,
        Command::TokenTemplate(TemplateCommand::Create { json_file, json }) => {
            create_template(&config, &json_file, json).await
        }
    }
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
