//! `corelog serve` settings from three places besides their defaults, with the
//! precedence **flag > environment > file > default**:
//!
//! - a flag on the command line (`--ack-timeout-ms 5000`);
//! - an environment variable `CORELOG_<FLAG>`: the flag's name in capitals, `-` as `_`
//!   (`CORELOG_ACK_TIMEOUT_MS=5000`; switches take `true`/`false`/`1`/`0`; lists a
//!   comma-separated value);
//! - a TOML file given with `--config FILE` (or `CORELOG_CONFIG`): top-level keys named
//!   like the flags (`ack-timeout-ms = 5000`, `_` accepted for `-`; switches `true`;
//!   lists an array or a comma-separated string). An unknown key is an error.
//!
//! Settings from the environment and the file become flags before clap parses, so every
//! check applies to them alike. `--print-config` shows each setting with where it came
//! from. Only `serve` reads them: client tools keep their flags.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use clap::ArgAction;

/// Where a setting came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    File,
    Default,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Env => "env",
            Source::File => "file",
            Source::Default => "default",
        }
    }
}

/// Settings that are not read from the environment or the file.
const NOT_SETTINGS: &[&str] = &["config", "print-config", "help"];

/// One settable flag of `serve`: its long name and whether it is a switch.
struct Flag {
    long: String,
    switch: bool,
}

fn flags(serve: &clap::Command) -> Vec<Flag> {
    serve
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?.to_string();
            (!NOT_SETTINGS.contains(&long.as_str()))
                .then(|| Flag { long, switch: matches!(a.get_action(), ArgAction::SetTrue) })
        })
        .collect()
}

pub fn env_name(long: &str) -> String {
    format!("CORELOG_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// `serve`'s arguments (after the subcommand) completed from `env` and the `--config`
/// file: (arguments for clap, where each injected setting came from).
pub fn expand(
    serve: &clap::Command,
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<OsString>, BTreeMap<String, Source>), String> {
    let given = |long: &str| {
        args.iter().any(|a| {
            let a = a.to_string_lossy();
            a == format!("--{long}") || a.starts_with(&format!("--{long}="))
        })
    };
    let config_path = config_arg(args).or_else(|| env("CORELOG_CONFIG"));
    let file = match &config_path {
        Some(p) => read_file(Path::new(p))?,
        None => BTreeMap::new(),
    };
    let flags = flags(serve);
    for key in file.keys() {
        if !flags.iter().any(|f| f.long == *key) {
            let known: Vec<&str> = flags.iter().map(|f| f.long.as_str()).collect();
            return Err(format!(
                "{}: unknown setting {key:?} (settings are serve's flags without the dashes: {})",
                config_path.unwrap_or_default(),
                known.join(", ")
            ));
        }
    }
    let mut out = args.to_vec();
    let mut sources = BTreeMap::new();
    for f in &flags {
        let (value, source) = if given(&f.long) {
            sources.insert(f.long.clone(), Source::Flag);
            continue;
        } else if let Some(v) = env(&env_name(&f.long)) {
            (v, Source::Env)
        } else if let Some(v) = file.get(&f.long) {
            (v.clone(), Source::File)
        } else {
            continue;
        };
        let what = || match source {
            Source::Env => env_name(&f.long),
            _ => format!("{} in {}", f.long, config_path.clone().unwrap_or_default()),
        };
        if f.switch {
            match value.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => out.push(format!("--{}", f.long).into()),
                "false" | "0" | "no" | "" => {}
                v => return Err(format!("{}: {v:?} is not true or false", what())),
            }
        } else {
            out.push(format!("--{}={value}", f.long).into());
        }
        sources.insert(f.long.clone(), source);
    }
    Ok((out, sources))
}

/// The value of `--config` among the arguments, if any.
fn config_arg(args: &[OsString]) -> Option<String> {
    let mut it = args.iter().map(|a| a.to_string_lossy().to_string());
    while let Some(a) = it.next() {
        if a == "--config" {
            return it.next();
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(v.to_string());
        }
    }
    None
}

/// The file's settings as flag values (keys with `-`).
fn read_file(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let table: toml::Table = text.parse().map_err(|e| format!("--config {}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for (k, v) in table {
        let value = match &v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(a) => a
                .iter()
                .map(|x| match x {
                    toml::Value::String(s) => Ok(s.clone()),
                    toml::Value::Integer(i) => Ok(i.to_string()),
                    _ => Err(format!("--config {}: {k}: list items must be strings or integers", path.display())),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            _ => return Err(format!("--config {}: {k}: tables and dates are not settings", path.display())),
        };
        out.insert(k.replace('_', "-"), value);
    }
    Ok(out)
}

/// `--print-config`: every setting of `serve`, its effective value and its source, as
/// TOML a `--config` file accepts (unset settings commented out).
pub fn print(serve: &clap::Command, m: &clap::ArgMatches, sources: &BTreeMap<String, Source>) -> String {
    let mut out = String::from("# corelog serve: effective configuration (flag > env > file > default)\n");
    for a in serve.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        if NOT_SETTINGS.contains(&long) {
            continue;
        }
        let id = a.get_id().as_str();
        let source = sources.get(long).copied().or_else(|| {
            (m.value_source(id) == Some(clap::parser::ValueSource::DefaultValue)).then_some(Source::Default)
        });
        let raw: Vec<String> =
            m.get_raw(id).map(|v| v.map(|s| s.to_string_lossy().to_string()).collect()).unwrap_or_default();
        let is_switch = matches!(a.get_action(), ArgAction::SetTrue);
        let value = if is_switch {
            m.get_flag(id).to_string()
        } else if raw.is_empty() {
            String::new()
        } else if raw.len() > 1 || a.get_value_delimiter().is_some() {
            format!("[{}]", raw.iter().map(|v| quote(v)).collect::<Vec<_>>().join(", "))
        } else {
            quote(&raw[0])
        };
        match source {
            Some(s) if !value.is_empty() => out += &format!("{long} = {value}  # {}\n", s.name()),
            _ if is_switch => out += &format!("{long} = {value}  # default\n"),
            _ => out += &format!("# {long} = (unset)\n"),
        }
    }
    out
}

/// A TOML value: numbers and booleans bare, anything else a basic string.
fn quote(v: &str) -> String {
    if v.parse::<i64>().is_ok() || v.parse::<f64>().is_ok_and(|f| f.is_finite()) || v == "true" || v == "false" {
        v.to_string()
    } else {
        format!("{:?}", v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> clap::Command {
        clap::Command::new("serve")
            .arg(clap::Arg::new("a").long("ack-timeout-ms").default_value("10"))
            .arg(clap::Arg::new("m").long("max-producers").default_value("5"))
            .arg(clap::Arg::new("s").long("segment-bytes").default_value("7"))
            .arg(clap::Arg::new("i").long("insecure").action(ArgAction::SetTrue))
            .arg(clap::Arg::new("l").long("shards").value_delimiter(','))
            .arg(clap::Arg::new("config").long("config"))
    }

    #[test]
    fn flag_beats_env_beats_file_beats_default() {
        let dir = std::env::temp_dir().join(format!("corelog-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(
            &f,
            "ack-timeout-ms = 1\nmax_producers = 2\nsegment-bytes = 3\ninsecure = true\nshards = [0, 1]\n",
        )
        .unwrap();
        let args: Vec<OsString> = vec!["--config".into(), f.clone().into(), "--max-producers".into(), "9".into()];
        let env = |k: &str| match k {
            "CORELOG_ACK_TIMEOUT_MS" => Some("4".to_string()),
            "CORELOG_MAX_PRODUCERS" => Some("8".to_string()),
            _ => None,
        };
        let (out, src) = expand(&cmd(), &args, &env).unwrap();
        let m = cmd().no_binary_name(true).try_get_matches_from(&out).unwrap();
        assert_eq!(m.get_one::<String>("m").unwrap(), "9");
        assert_eq!(m.get_one::<String>("a").unwrap(), "4");
        assert_eq!(m.get_one::<String>("s").unwrap(), "3");
        assert!(m.get_flag("i"));
        assert_eq!(m.get_many::<String>("l").unwrap().collect::<Vec<_>>(), ["0", "1"]);
        assert_eq!(
            (src["max-producers"], src["ack-timeout-ms"], src["segment-bytes"]),
            (Source::Flag, Source::Env, Source::File)
        );
        let p = print(&cmd(), &m, &src);
        assert!(p.contains("max-producers = 9  # flag\n"), "{p}");
        assert!(p.contains("ack-timeout-ms = 4  # env\n"), "{p}");
        assert!(p.contains("segment-bytes = 3  # file\n"), "{p}");
        assert!(p.contains("shards = [0, 1]  # file\n"), "{p}");
        // Defaults when nothing else says.
        let (out, src) = expand(&cmd(), &[], &|_| None).unwrap();
        let m = cmd().no_binary_name(true).try_get_matches_from(&out).unwrap();
        assert!(print(&cmd(), &m, &src).contains("ack-timeout-ms = 10  # default\n"));
        // An unknown key, a bad switch value: errors naming them.
        std::fs::write(&f, "ack-timout-ms = 1\n").unwrap();
        let e = expand(&cmd(), &args, &|_| None).unwrap_err();
        assert!(e.contains("unknown setting \"ack-timout-ms\""), "{e}");
        let e = expand(&cmd(), &[], &|k| (k == "CORELOG_INSECURE").then(|| "maybe".to_string())).unwrap_err();
        assert!(e.contains("CORELOG_INSECURE: \"maybe\" is not true or false"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
