//! `corelog serve` settings from flags, CORELOG_<FLAG> environment variables and a TOML
//! `--config` file, against the real binary:
//!
//! - `--print-config` shows flag > env > file > default, each setting with its source;
//! - a node started from the file and the environment alone (no flag but the file)
//!   serves on the address they give, takes appends, and stops on SIGTERM with exit 0;
//! - an unknown key in the file and a bad value in the environment are clear errors.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use corelog_client::{Client, ClientConfig};

fn corelog(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let o = Command::new(BIN).args(args).envs(env.iter().copied()).output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (o.status.code().unwrap_or(-1), s(&o.stdout), s(&o.stderr))
}

#[test]
fn flag_beats_env_beats_file_beats_default() {
    let dir = TempDir::new("config-print");
    let f = dir.path().join("corelog.toml");
    std::fs::write(
        &f,
        "data-dir = \"/nonexistent/d\"\nrole = \"standalone\"\ninsecure = true\nack_timeout_ms = 111\nmax-producers = 7\nsegment-bytes = 8388608\nshards = [0, 1]\nshard-count = 2\n",
    )
    .unwrap();
    let fs = f.to_str().unwrap();
    let env = [("CORELOG_ACK_TIMEOUT_MS", "222"), ("CORELOG_MAX_PRODUCERS", "333")];
    let (code, out, err) = corelog(&["serve", "--config", fs, "--max-producers", "444", "--print-config"], &env);
    assert_eq!(code, 0, "{err}");
    for line in [
        "max-producers = 444  # flag",
        "ack-timeout-ms = 222  # env",
        "segment-bytes = 8388608  # file",
        "data-dir = \"/nonexistent/d\"  # file",
        "insecure = true  # file",
        "shards = [0, 1]  # file",
        "repl-timeout-ms = 5000  # default",
        "# retain-bytes = (unset)",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in:\n{out}");
    }
    // The output is itself a config file that gives the same settings.
    let g = dir.path().join("printed.toml");
    std::fs::write(&g, &out).unwrap();
    let (code, again, err) = corelog(&["serve", "--config", g.to_str().unwrap(), "--print-config"], &[]);
    assert_eq!(code, 0, "{err}");
    let values = |s: &str| -> Vec<String> {
        s.lines().filter(|l| !l.starts_with('#')).map(|l| l.split("  #").next().unwrap().to_string()).collect()
    };
    assert_eq!(values(&again), values(&out));

    // Errors: an unknown key; a value clap refuses, naming where it came from.
    std::fs::write(&f, "ack-timout-ms = 1\n").unwrap();
    let (code, _, err) = corelog(&["serve", "--config", fs, "--print-config"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown setting \"ack-timout-ms\""), "{err}");
    std::fs::write(&f, "data-dir = \"/x\"\nrole = \"standalone\"\ninsecure = true\n").unwrap();
    let (code, _, err) = corelog(&["serve", "--config", fs, "--print-config"], &[("CORELOG_ACK_TIMEOUT_MS", "soon")]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid value 'soon'") && err.contains("CORELOG_ACK_TIMEOUT_MS"), "{err}");
}

#[test]
fn a_node_runs_from_file_and_environment_alone() {
    let dir = TempDir::new("config-run");
    let ports = ports();
    let data = dir.path().join("data");
    let f = dir.path().join("corelog.toml");
    std::fs::write(
        &f,
        format!(
            "data_dir = {:?}\nrole = \"standalone\"\ninsecure = true\nshard-count = 1\nlisten = \"127.0.0.1:1\"\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    // The environment overrides the file's (unusable) port.
    let listen = format!("127.0.0.1:{}", ports.client);
    let metrics = format!("127.0.0.1:{}", ports.metrics);
    let log = dir.path().join("node.log");
    let mut child = Command::new(BIN)
        .arg("serve")
        .env("CORELOG_CONFIG", &f)
        .env("CORELOG_LISTEN", &listen)
        .env("CORELOG_METRICS_LISTEN", &metrics)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let rt = runtime();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let pos = loop {
        let r = rt.block_on(async {
            let c = Client::connect(&listen, &ClientConfig::insecure()).await?;
            c.append(b"configured").await
        });
        match r {
            Ok(p) => break p,
            Err(e) => {
                let exited = child.try_wait().unwrap();
                assert!(
                    exited.is_none() && std::time::Instant::now() < deadline,
                    "{e}: {exited:?}\n{}",
                    std::fs::read_to_string(&log).unwrap()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert_eq!(pos.offset, 0);
    assert!(data.join("shard-0").is_dir(), "the file's data dir is used");
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{}", std::fs::read_to_string(&log).unwrap());
}
