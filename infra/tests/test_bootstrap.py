"""Node bootstrap: the user-data template renders to a valid, small script; the one-place CLIs
(corelog-serve.sh, run-sweep.sh) produce the documented command lines; tune.sh writes the
settings; the systemd units restart on failure. The RAID part runs for real in test_vm.py."""
import gzip
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import BOOTSTRAP, INFRA, locals_of, need, one

TEMPLATE = BOOTSTRAP / "user-data.sh.tftpl"
FAKE_PEM = "-----BEGIN CERTIFICATE-----\n" + "QUJD" * 150 + "\n-----END CERTIFICATE-----"
FAKE_KEY = "-----BEGIN PRIVATE KEY-----\n" + "QUJD" * 40 + "\n-----END PRIVATE KEY-----"


def template_vars(root):
    """The variables instances.tf passes to the template, with the real file contents."""
    files = one(locals_of(root)["bootstrap_files"])
    out = {}
    for key, expr in files.items():
        path = re.search(r'/([^/"]+(?:/[^/"]+)?)"\)', str(expr)).group(1)
        out[key] = (BOOTSTRAP / path).read_text().rstrip("\n")
    env = "\n".join([
        "CORELOG_ROLE=leader", "CORELOG_DATA_DIR=/var/lib/corelog", "CORELOG_FS=xfs",
        "CORELOG_CLIENT_PORT=9400", "CORELOG_REPL_PORT_BASE=9500", "CORELOG_METRICS_PORT=9300",
        "CORELOG_FOLLOWER_ADDR=10.42.1.11:9500", "CORELOG_CORES=0", "CORELOG_TLS_NAME=node",
        "CORELOG_TLS_OWNER=corelog", "CORELOG_GIT_URL=https://example.invalid/corelog.git",
        "CORELOG_GIT_REV=main", "CORELOG_RELEASE_URL=", "CORELOG_RELEASE_SHA256=", "RUST_TOOLCHAIN=stable",
    ])
    out.update(role="leader", env_file=env, ca_cert=FAKE_PEM, cert=FAKE_PEM, key=FAKE_KEY)
    return out


def render(template: str, values: dict) -> str:
    """The subset of Terraform's templatefile the template uses: ${name} and the $${ escape."""
    assert "%{" not in template, "template directives are not emulated here"

    def sub(m):
        name = m.group(1)
        assert name in values, f"template uses ${{{name}}} that instances.tf does not pass"
        return values[name]

    out = re.sub(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", sub, template)
    return out.replace("$${", "${")


def test_template_uses_exactly_the_passed_variables(root):
    used = set(re.findall(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", TEMPLATE.read_text()))
    passed = set(template_vars(root))
    assert used == passed, f"used only: {used - passed}, passed but unused: {passed - used}"
    text = (INFRA / "aws" / "instances.tf").read_text()
    for extra in ("role", "env_file", "ca_cert", "cert", "key"):
        assert re.search(rf"\b{extra}\s*=", text), f"instances.tf does not pass {extra}"


def test_rendered_user_data_is_valid_and_fits(root, tmp_path):
    script = render(TEMPLATE.read_text(), template_vars(root))
    # Heredoc delimiters must not occur inside the embedded files.
    for key in ("raid_sh", "tune_sh", "install_sh", "serve_sh"):
        assert "CORELOG_EOF" not in template_vars(root)[key]
    size = len(gzip.compress(script.encode(), 9))
    assert size < 16 * 1024, f"gzip'd user data is {size} bytes; EC2 allows 16 KiB"
    f = tmp_path / "user-data.sh"
    f.write_text(script)
    subprocess.run(["bash", "-n", str(f)], check=True)
    need("shellcheck")
    r = subprocess.run(["shellcheck", "-s", "bash", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def serve(role_args, env_extra):
    env = {"PATH": os.environ["PATH"], "CORELOG_DRY_RUN": "1", "CORELOG_ENV_FILE": "/nonexistent",
           "CORELOG_CORES": "8", **env_extra}
    return subprocess.run(["bash", str(BOOTSTRAP / "corelog-serve.sh"), *role_args], env=env,
                          capture_output=True, text=True)


def test_serve_command_line_leader():
    r = serve(["leader"], {"CORELOG_FOLLOWER_ADDR": "10.42.1.11:9500"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [
        "/usr/local/bin/corelog", "serve", "--data-dir", "/var/lib/corelog", "--listen", "0.0.0.0:9400",
        "--role", "leader", "--repl-listen", "0.0.0.0:9500",
        "--cert", "/etc/corelog/tls/node.crt", "--key", "/etc/corelog/tls/node.key",
        "--client-ca", "/etc/corelog/tls/ca.crt", "--metrics-listen", "0.0.0.0:9300", "--cores", "8",
        "--follower-addr", "10.42.1.11:9500"]
    r = serve(["leader"], {"CORELOG_FOLLOWER_ADDR": "10.42.1.11:9500", "CORELOG_CORES": "0"})
    assert r.stdout.split()[r.stdout.split().index("--cores") + 1] == str(os.cpu_count()), "0 = every vCPU"


def test_serve_command_line_follower_and_errors():
    r = serve(["follower"], {"CORELOG_FOLLOWER_ADDR": "ignored:1", "CORELOG_LEADER_ADDR": "10.42.1.10:9400"})
    assert r.returncode == 0, r.stderr
    assert "--role follower" in r.stdout and "--follower-addr" not in r.stdout
    assert r.stdout.split()[-2:] == ["--leader-addr", "10.42.1.10:9400"]
    r = serve(["leader"], {"CORELOG_FOLLOWER_ADDR": "f:9500", "CORELOG_FOLLOWER_NAME": "follower.corelog.internal"})
    assert r.stdout.split()[-4:] == ["--follower-addr", "f:9500", "--follower-name", "follower.corelog.internal"]
    assert serve(["leader"], {}).returncode == 2, "leader without follower address must fail"
    assert serve(["primary"], {}).returncode == 2


def test_tune_writes_the_settings(tmp_path):
    env = {"PATH": os.environ["PATH"], "CORELOG_ROOT": str(tmp_path)}
    subprocess.run(["bash", str(BOOTSTRAP / "tune.sh")], env=env, check=True, capture_output=True)
    sysctl = (tmp_path / "etc/sysctl.d/90-corelog.conf").read_text()
    settings = dict(re.findall(r"^([a-z0-9_.-]+) = (.+)$", sysctl, re.M))
    assert int(settings["net.core.somaxconn"]) >= 65535
    assert int(settings["fs.file-max"]) >= 1048576
    assert settings["net.ipv4.ip_local_port_range"] == "1024 65535"
    assert settings["net.ipv4.tcp_tw_reuse"] == "1"
    for k in ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
        assert k in settings
    assert "9400" in settings["net.ipv4.ip_local_reserved_ports"]
    assert (tmp_path / "etc/modules-load.d/corelog-tls.conf").read_text().strip() == "tls"
    limits = (tmp_path / "etc/security/limits.d/90-corelog.conf").read_text()
    assert re.search(r"nofile\s+1048576", limits)


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_service_units(role):
    unit = (BOOTSTRAP / "systemd" / f"corelog-{role}.service").read_text()
    assert "Restart=on-failure" in unit
    assert re.search(r"^LimitNOFILE=\d{6,}$", unit, re.M)
    assert f"ExecStart=/opt/corelog/bin/corelog-serve.sh {role}" in unit
    assert "Requires=corelog-storage.service" in unit
    assert "User=corelog" in unit
    storage = (BOOTSTRAP / "systemd" / "corelog-storage.service").read_text()
    assert "ExecStart=/opt/corelog/bin/raid.sh" in storage and "Type=oneshot" in storage


def test_run_sweep_dry_run_splits_connections(tmp_path):
    env_file = tmp_path / "cluster.env"
    env_file.write_text("LOADGEN_HOSTS=1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4\nSSH_TRANSPORT=direct\n"
                        "SSH_USER=ubuntu\nTARGET=10.42.1.10:9400\n")
    env = {"PATH": os.environ["PATH"]}
    r = subprocess.run(["bash", str(INFRA / "scripts" / "run-sweep.sh"), "--env-file", str(env_file),
                        "--dry-run", "--out", str(tmp_path / "out")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    runs = [l for l in r.stdout.splitlines() if l.startswith("ssh ") and " sweep " in l]
    assert len(runs) == 5 * 4, "5 steps x 4 load generators"
    per = [int(re.search(r"--connections (\d+)", l).group(1)) for l in runs]
    assert per == [250] * 4 + [1000] * 4 + [2250] * 4 + [4500] * 4 + [9000] * 4
    for l in runs:
        assert "--target 10.42.1.10:9400" in l and "--duration 30s" in l
        for flag in ("--json /var/lib/corelog-loadgen/step-", "--ca /etc/corelog/tls/ca.crt",
                     "--cert /etc/corelog/tls/client.crt", "--key /etc/corelog/tls/client.key"):
            assert flag in l
    fetches = [l for l in r.stdout.splitlines() if l.startswith("scp ")]
    assert len(fetches) == 20
    assert not (tmp_path / "out").exists(), "a dry run writes nothing"


def test_summarize_sweep(tmp_path):
    for i, (tp, p99) in enumerate([(80000, 200000), (82000, 190000)], 1):
        d = tmp_path / f"loadgen-{i}"
        d.mkdir()
        (d / "step-36000.json").write_text(
            '{"steps": [{"connections": 18000, "acked_writes_per_s": %d, "latency_us": {"p50": 9e4, "p99": %d}}]}'
            % (tp, p99))
    r = subprocess.run(["python3", str(INFRA / "scripts" / "summarize-sweep.py"), str(tmp_path)],
                       capture_output=True, text=True, check=True)
    assert "acked_writes_per_s=162,000" in r.stdout
    assert "latency_us.p99=200,000" in r.stdout
    assert "connections=36,000" in r.stdout
