"""Shape of the Terraform root module (parsed with python-hcl2; providers cannot be downloaded
here, so `terraform validate` is impossible and these tests stand in for the parts that matter)."""
from conftest import AWS, BOOTSTRAP, load_dir, locals_of, named_blocks, one, ref, resources
import re


def variables(doc):
    return named_blocks(doc, "variable")


def test_every_variable_and_output_has_a_description(module_dirs):
    for d in module_dirs:
        doc = load_dir(d)
        for name, body in variables(doc).items():
            desc = one(body.get("description", ""))
            assert isinstance(desc, str) and len(desc) > 10, f"{d.name}: variable {name} has no description"
        for name, body in named_blocks(doc, "output").items():
            assert one(body.get("description", "")), f"{d.name}: output {name} has no description"


def test_validations_where_they_make_sense(root):
    v = variables(root)
    must_validate = ["region", "availability_zone", "name_prefix", "vpc_cidr", "subnet_cidr", "admin_cidr",
                     "ami_id", "data_node_instance_type", "loadgen_instance_type", "loadgen_count",
                     "client_port", "replication_port_base", "max_shards", "metrics_port", "server_cores",
                     "data_fs_type", "corelog_git_url", "corelog_release_url", "corelog_release_sha256",
                     "ssh_public_key", "root_volume_size_gb"]
    for name in must_validate:
        assert name in v, f"variable {name} missing"
        assert v[name].get("validation"), f"variable {name} has no validation"


def test_defaults_reproduce_the_reference_run(root):
    v = variables(root)
    d = {k: one(b.get("default")) for k, b in v.items()}
    assert d["region"] == "ap-southeast-2"
    assert d["data_node_instance_type"] == "i4i.16xlarge"
    assert d["loadgen_count"] == 4
    assert d["client_port"] == 9400
    assert d["replication_port_base"] == 9500
    assert d["replication_port_base"] + d["max_shards"] - 1 == 9755
    assert d["metrics_port"] == 9300
    assert d["enable_ssh"] is False, "SSH must be off by default"
    assert d["ami_id"] == "", "empty AMI means: look the latest Ubuntu 24.04 up"
    assert "default" not in v["admin_cidr"], "admin_cidr must be given by the operator"
    assert "i4i.large" in one(v["data_node_instance_type"]["description"]), "cheap configuration documented"


def test_two_data_nodes_and_four_load_generators(root):
    inst = resources(root, "aws_instance")
    assert set(inst) == {"data", "loadgen"}
    assert ref(inst["data"]["for_each"]) == "local.data_nodes"
    nodes = one(locals_of(root)["data_nodes"])
    assert set(nodes) == {"leader", "follower"}
    assert ref(inst["loadgen"]["count"]) == "var.loadgen_count"
    assert one(variables(root)["loadgen_count"]["default"]) == 4
    assert ref(inst["data"]["instance_type"]) == "var.data_node_instance_type"
    assert ref(inst["loadgen"]["instance_type"]) == "var.loadgen_instance_type"


def test_one_subnet_one_az_cluster_placement_group(root):
    net = load_dir(AWS / "modules" / "network")
    assert len(resources(net, "aws_subnet")) == 1
    assert len(resources(net, "aws_vpc")) == 1
    pg = resources(root, "aws_placement_group")
    assert len(pg) == 1 and one(next(iter(pg.values()))["strategy"]) == "cluster"
    for name, body in resources(root, "aws_instance").items():
        assert ref(body["placement_group"]) == "aws_placement_group.this.id", name
        assert ref(body["subnet_id"]) == "module.network.subnet_id", name


def test_instances_are_hardened(root):
    for name, body in resources(root, "aws_instance").items():
        md = one(body["metadata_options"])
        assert one(md["http_tokens"]) == "required", f"{name}: IMDSv2 required"
        rbd = one(body["root_block_device"])
        assert one(rbd["encrypted"]) is True, f"{name}: root volume encrypted"
        assert str(one(body["user_data_base64"])).startswith("${base64gzip(local."), f"{name}: gzip user data"


def _ingress(root):
    return resources(root, "aws_vpc_security_group_ingress_rule")


def _only_ingress_from(root, from_port: str) -> dict:
    """The one ingress rule opening ``from_port`` (a reference such as var.client_port),
    on the data nodes' security group."""
    rules = [r for r in _ingress(root).values() if ref(r["from_port"]) == from_port]
    assert len(rules) == 1, f"{len(rules)} ingress rules from {from_port}"
    r = rules[0]
    assert ref(r["security_group_id"]) == "aws_security_group.data.id"
    return r


def _port_range_end(root, local: str) -> str:
    """The expression of a port range's last port, white space removed."""
    return re.sub(r"\s", "", ref(locals_of(root)[local]))


def test_client_port_only_from_load_generators(root):
    r = _only_ingress_from(root, "var.client_port")
    assert ref(r["to_port"]) == "local.client_port_last"
    assert _port_range_end(root, "client_port_last") == "var.client_port+var.client_direct_ports"
    v = variables(root)
    assert one(v["client_port"]["default"]) + one(v["client_direct_ports"]["default"]) < one(v["replication_port_base"]["default"])
    assert ref(r["referenced_security_group_id"]) == "aws_security_group.loadgen.id"
    assert "cidr_ipv4" not in r and "cidr_ipv6" not in r


def test_replication_ports_only_between_data_nodes(root):
    r = _only_ingress_from(root, "var.replication_port_base")
    assert ref(r["referenced_security_group_id"]) == "aws_security_group.data.id"
    assert ref(r["to_port"]) == "local.replication_port_last"
    assert _port_range_end(root, "replication_port_last") == "var.replication_port_base+var.max_shards-1"
    assert "cidr_ipv4" not in r


def test_metrics_only_from_admin_cidr(root):
    r = _only_ingress_from(root, "var.metrics_port")
    assert ref(r["cidr_ipv4"]) == "var.admin_cidr"
    assert "referenced_security_group_id" not in r


def test_ssh_optional_and_only_from_admin(root):
    ssh = [r for r in _ingress(root).values() if str(one(r["from_port"])) == "22"]
    assert len(ssh) == 1
    r = ssh[0]
    assert ref(r["cidr_ipv4"]) == "var.admin_cidr"
    assert str(one(r["for_each"])).startswith("${var.enable_ssh ?"), "SSH rule must depend on enable_ssh"


def test_no_other_ingress_and_nothing_open_to_the_world(root):
    assert len(_ingress(root)) == 4, f"unexpected ingress rules: {sorted(_ingress(root))}"
    for name, r in _ingress(root).items():
        assert one(r.get("cidr_ipv4", "")) != "0.0.0.0/0", name
        assert one(r.get("description")), f"{name} has no description"
    for name, sg in resources(root, "aws_security_group").items():
        assert "ingress" not in sg and "egress" not in sg, f"{name}: use separate rule resources"
    egress = resources(root, "aws_vpc_security_group_egress_rule")
    for name, r in egress.items():
        assert str(one(r.get("ip_protocol"))) != "-1", f"egress {name} allows every protocol"


def test_user_data_comes_from_repo_scripts(root):
    files = one(locals_of(root)["bootstrap_files"])
    for key, expr in files.items():
        m = re.search(r'file\("\$\{local\.bootstrap_dir\}/([^"]+)"\)', str(expr))
        assert m, f"{key} is not read from a file"
        assert (BOOTSTRAP / m.group(1)).is_file(), f"{m.group(1)} missing"
    text = (AWS / "instances.tf").read_text()
    assert "user-data.sh.tftpl" in text and "base64gzip(" in text


def test_pki_is_ecdsa_p256(root):
    pki = load_dir(AWS / "modules" / "pki")
    keys = resources(pki, "tls_private_key")
    assert keys
    for name, k in keys.items():
        assert one(k["algorithm"]) == "ECDSA" and one(k["ecdsa_curve"]) == "P256", name


def test_ami_lookup_when_empty(root):
    ami = named_blocks(root, "data")["aws_ami"]["ubuntu"]
    assert ref(ami["count"]).replace(" ", "") == 'var.ami_id==""?1:0'
    names = str(ami["filter"])
    assert "ubuntu-noble-24.04-amd64-server" in names
