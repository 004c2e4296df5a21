# corelog reference-run stack: two data nodes (leader + follower) and the load generators in one
# cluster placement group, in one subnet of one AZ. See infra/README.md and docs/aws.md.

data "aws_ec2_instance_type_offerings" "data" {
  location_type = "availability-zone"

  filter {
    name   = "instance-type"
    values = [var.data_node_instance_type]
  }
}

data "aws_ec2_instance_type_offerings" "loadgen" {
  location_type = "availability-zone"

  filter {
    name   = "instance-type"
    values = [var.loadgen_instance_type]
  }
}

# Used to check that the data node type has local NVMe instance storage.
data "aws_ec2_instance_type" "data" {
  instance_type = var.data_node_instance_type
}

# Latest Canonical Ubuntu 24.04 LTS (amd64, gp3 root) when ami_id is empty.
data "aws_ami" "ubuntu" {
  count       = var.ami_id == "" ? 1 : 0
  most_recent = true
  owners      = ["099720109477"] # Canonical

  filter {
    name   = "name"
    values = ["ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"]
  }

  filter {
    name   = "virtualization-type"
    values = ["hvm"]
  }

  filter {
    name   = "architecture"
    values = ["x86_64"]
  }
}

locals {
  # Zones offering both instance types, by name; the first is used unless one is given.
  candidate_azs = sort(tolist(setintersection(
    toset(data.aws_ec2_instance_type_offerings.data.locations),
    toset(data.aws_ec2_instance_type_offerings.loadgen.locations),
  )))
  availability_zone = var.availability_zone != "" ? var.availability_zone : try(local.candidate_azs[0], "")

  ami_id = var.ami_id != "" ? var.ami_id : data.aws_ami.ubuntu[0].id

  key_name = var.ssh_key_name != "" ? var.ssh_key_name : (var.ssh_public_key != "" ? aws_key_pair.this[0].key_name : null)

  # Fixed private addresses for the data nodes, so their certificates can name them.
  leader_ip   = cidrhost(var.subnet_cidr, 10)
  follower_ip = cidrhost(var.subnet_cidr, 11)

  client_port_last      = var.client_port + var.client_direct_ports
  replication_port_last = var.replication_port_base + var.max_shards - 1

  # Shards the server will run: server_cores, or one per vCPU of the data node type.
  server_shards = var.server_cores > 0 ? var.server_cores : data.aws_ec2_instance_type.data.default_vcpus

  # The three port ranges must not overlap.
  ports_disjoint = (
    (local.client_port_last < var.replication_port_base || var.client_port > local.replication_port_last) &&
    (var.metrics_port < var.client_port || var.metrics_port > local.client_port_last) &&
    (var.metrics_port < var.replication_port_base || var.metrics_port > local.replication_port_last)
  )

  # Git over SSH needs outbound TCP 22; https needs only 443.
  git_over_ssh = can(regex("^(ssh://|git@)", var.corelog_git_url))
}

module "network" {
  source = "./modules/network"

  name_prefix       = var.name_prefix
  vpc_cidr          = var.vpc_cidr
  subnet_cidr       = var.subnet_cidr
  availability_zone = local.availability_zone
}

module "pki" {
  source = "./modules/pki"

  name_prefix    = var.name_prefix
  node_ips       = { leader = local.leader_ip, follower = local.follower_ip }
  validity_hours = var.cert_validity_hours
}

resource "aws_key_pair" "this" {
  count      = var.ssh_key_name == "" && var.ssh_public_key != "" ? 1 : 0
  key_name   = "${var.name_prefix}-key"
  public_key = var.ssh_public_key
}

# All nodes in one cluster placement group: the reference numbers assume a low-latency,
# high-bandwidth network between clients, leader and follower.
resource "aws_placement_group" "this" {
  name     = "${var.name_prefix}-cluster"
  strategy = "cluster"
}

# run-sweep.sh logs in to the load generators with SSH (directly, or tunnelled through SSM).
check "ssh_key_for_run_sweep" {
  assert {
    condition     = var.ssh_key_name != "" || var.ssh_public_key != ""
    error_message = "No SSH key: set ssh_public_key or ssh_key_name, or infra/scripts/run-sweep.sh cannot log in to the load generators (SSM shell access still works)."
  }
}
