# Two data nodes (leader, follower) and var.loadgen_count load generators. Each boots with user
# data rendered from infra/bootstrap/ (gzip-compressed: cloud-init unpacks it).

locals {
  bootstrap_dir = "${path.module}/../bootstrap"

  bootstrap_files = {
    raid_sh       = chomp(file("${local.bootstrap_dir}/raid.sh"))
    tune_sh       = chomp(file("${local.bootstrap_dir}/tune.sh"))
    install_sh    = chomp(file("${local.bootstrap_dir}/install.sh"))
    serve_sh      = chomp(file("${local.bootstrap_dir}/corelog-serve.sh"))
    storage_unit  = chomp(file("${local.bootstrap_dir}/systemd/corelog-storage.service"))
    leader_unit   = chomp(file("${local.bootstrap_dir}/systemd/corelog-leader.service"))
    follower_unit = chomp(file("${local.bootstrap_dir}/systemd/corelog-follower.service"))
  }

  common_env = {
    CORELOG_DATA_DIR       = "/var/lib/corelog"
    CORELOG_FS             = var.data_fs_type
    CORELOG_CLIENT_PORT    = var.client_port
    CORELOG_REPL_PORT_BASE = var.replication_port_base
    CORELOG_METRICS_PORT   = var.metrics_port
    CORELOG_RESERVED_PORTS = "${var.metrics_port},${var.client_port}-${local.client_port_last},${var.replication_port_base}-${local.replication_port_last}"
    CORELOG_CORES          = var.server_cores
    CORELOG_TLS_DIR        = "/etc/corelog/tls"
    CORELOG_GIT_URL        = var.corelog_git_url
    CORELOG_GIT_REV        = var.corelog_git_rev
    CORELOG_RELEASE_URL    = var.corelog_release_url
    CORELOG_RELEASE_SHA256 = var.corelog_release_sha256
    RUST_TOOLCHAIN         = var.rust_toolchain
    CORELOG_LEADER_ADDR    = "${local.leader_ip}:${var.client_port}"
  }

  # The two data nodes: fixed addresses, one certificate each.
  data_nodes = {
    leader = {
      private_ip = local.leader_ip
      env = {
        CORELOG_ROLE          = "leader"
        CORELOG_FOLLOWER_ADDR = "${local.follower_ip}:${var.replication_port_base}"
        CORELOG_FOLLOWER_NAME = "follower.corelog.internal"
      }
    }
    follower = {
      private_ip = local.follower_ip
      env = {
        CORELOG_ROLE          = "follower"
        CORELOG_FOLLOWER_ADDR = ""
        CORELOG_FOLLOWER_NAME = ""
      }
    }
  }

  data_user_data = {
    for role, node in local.data_nodes : role => templatefile("${local.bootstrap_dir}/user-data.sh.tftpl", merge(local.bootstrap_files, {
      role = role
      env_file = join("\n", [for k, v in merge(local.common_env, node.env, {
        CORELOG_TLS_NAME  = "node"
        CORELOG_TLS_OWNER = "corelog"
      }) : "${k}=${v}"])
      ca_cert = chomp(module.pki.ca_cert_pem)
      cert    = chomp(module.pki.certs[role].cert_pem)
      key     = chomp(module.pki.certs[role].key_pem)
    }))
  }

  loadgen_user_data = templatefile("${local.bootstrap_dir}/user-data.sh.tftpl", merge(local.bootstrap_files, {
    role = "loadgen"
    env_file = join("\n", [for k, v in merge(local.common_env, {
      CORELOG_ROLE          = "loadgen"
      CORELOG_FOLLOWER_ADDR = ""
      CORELOG_TLS_NAME      = "client"
      CORELOG_TLS_OWNER     = var.ssh_user
    }) : "${k}=${v}"])
    ca_cert = chomp(module.pki.ca_cert_pem)
    cert    = chomp(module.pki.certs["client"].cert_pem)
    key     = chomp(module.pki.certs["client"].key_pem)
  }))
}

resource "aws_instance" "data" {
  #checkov:skip=CKV_AWS_88:The nodes need egress to fetch packages, the Rust toolchain and the source; a public address (inbound still limited by the security groups) is cheaper than a NAT gateway for a short-lived benchmark.
  for_each = local.data_nodes

  ami                         = local.ami_id
  instance_type               = var.data_node_instance_type
  subnet_id                   = module.network.subnet_id
  private_ip                  = each.value.private_ip
  vpc_security_group_ids      = [aws_security_group.data.id]
  placement_group             = aws_placement_group.this.id
  associate_public_ip_address = true
  key_name                    = local.key_name
  iam_instance_profile        = var.enable_ssm ? aws_iam_instance_profile.node[0].name : null
  monitoring                  = true
  ebs_optimized               = true
  user_data_base64            = base64gzip(local.data_user_data[each.key])
  user_data_replace_on_change = true

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size_gb
    encrypted             = true
    delete_on_termination = true
  }

  tags = {
    Name = "${var.name_prefix}-${each.key}"
    Role = each.key
  }

  lifecycle {
    precondition {
      condition     = data.aws_ec2_instance_type.data.instance_storage_supported
      error_message = "data_node_instance_type must have local NVMe instance storage (i4i, i3en, im4gn, ...): corelog's data directory is a RAID0 of those drives."
    }
    precondition {
      condition     = local.availability_zone != ""
      error_message = "No availability zone of the region offers both the data node and the load generator instance types; set availability_zone or pick other types."
    }
    precondition {
      condition     = local.server_shards <= var.max_shards && local.server_shards <= var.client_direct_ports
      error_message = "The server's shard count (server_cores, or the data node's vCPUs) exceeds max_shards or client_direct_ports: each shard needs a replication port and a direct client port."
    }
    precondition {
      condition     = local.ports_disjoint
      error_message = "The client (client_port .. + client_direct_ports), replication (replication_port_base .. + max_shards - 1) and metrics port ranges overlap."
    }
  }
}

resource "aws_instance" "loadgen" {
  #checkov:skip=CKV_AWS_88:Load generators need egress to fetch packages and the toolchain, and run-sweep.sh reaches them over SSH; inbound is limited to admin_cidr by the security group.
  count = var.loadgen_count

  ami                         = local.ami_id
  instance_type               = var.loadgen_instance_type
  subnet_id                   = module.network.subnet_id
  vpc_security_group_ids      = [aws_security_group.loadgen.id]
  placement_group             = aws_placement_group.this.id
  associate_public_ip_address = true
  key_name                    = local.key_name
  iam_instance_profile        = var.enable_ssm ? aws_iam_instance_profile.node[0].name : null
  monitoring                  = true
  ebs_optimized               = true
  user_data_base64            = base64gzip(local.loadgen_user_data)
  user_data_replace_on_change = true

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size_gb
    encrypted             = true
    delete_on_termination = true
  }

  tags = {
    Name = "${var.name_prefix}-loadgen-${count.index + 1}"
    Role = "loadgen"
  }

  # Start the load generators after the data nodes so their boots do not race for capacity
  # in the placement group with the larger instances.
  depends_on = [aws_instance.data]
}
