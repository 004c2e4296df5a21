# Who may talk to whom:
#   client ports (9400-9499)       data nodes  <- load generators only (9400 + per-shard 9400+1+s)
#   replication ports (9500-9755)  data nodes  <- data nodes only (leader dials follower)
#   metrics port (9300)            data nodes  <- admin_cidr only
#   SSH (22, optional)             all nodes   <- admin_cidr only, and only if enable_ssh
# Egress is limited to what the nodes need: the cluster ports above, and HTTP/HTTPS for OS
# packages, the Rust toolchain, crates and the source (and SSM). DNS, NTP and instance metadata
# go to link-local AWS services that security groups do not filter.

resource "aws_security_group" "data" {
  name        = "${var.name_prefix}-data"
  description = "corelog data nodes (leader and follower)"
  vpc_id      = module.network.vpc_id

  tags = { Name = "${var.name_prefix}-data" }
}

resource "aws_security_group" "loadgen" {
  name        = "${var.name_prefix}-loadgen"
  description = "corelog load generators"
  vpc_id      = module.network.vpc_id

  tags = { Name = "${var.name_prefix}-loadgen" }
}

# ----------------------------------------------------------------- data node ingress

resource "aws_vpc_security_group_ingress_rule" "data_client_from_loadgen" {
  security_group_id            = aws_security_group.data.id
  description                  = "corelog client port and per-shard direct ports, from the load generators only"
  ip_protocol                  = "tcp"
  from_port                    = var.client_port
  to_port                      = local.client_port_last
  referenced_security_group_id = aws_security_group.loadgen.id
}

resource "aws_vpc_security_group_ingress_rule" "data_replication_from_data" {
  security_group_id            = aws_security_group.data.id
  description                  = "corelog replication ports (base + shard), between the data nodes only"
  ip_protocol                  = "tcp"
  from_port                    = var.replication_port_base
  to_port                      = local.replication_port_last
  referenced_security_group_id = aws_security_group.data.id
}

resource "aws_vpc_security_group_ingress_rule" "data_metrics_from_admin" {
  security_group_id = aws_security_group.data.id
  description       = "Prometheus metrics and health, from the admin CIDR only"
  ip_protocol       = "tcp"
  from_port         = var.metrics_port
  to_port           = var.metrics_port
  cidr_ipv4         = var.admin_cidr
}

resource "aws_vpc_security_group_ingress_rule" "ssh_from_admin" {
  for_each = var.enable_ssh ? {
    data    = aws_security_group.data.id
    loadgen = aws_security_group.loadgen.id
  } : {}

  security_group_id = each.value
  description       = "SSH from the admin CIDR (enable_ssh)"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = var.admin_cidr
}

# ----------------------------------------------------------------- egress

resource "aws_vpc_security_group_egress_rule" "data_replication_to_data" {
  security_group_id            = aws_security_group.data.id
  description                  = "leader to follower replication ports"
  ip_protocol                  = "tcp"
  from_port                    = var.replication_port_base
  to_port                      = local.replication_port_last
  referenced_security_group_id = aws_security_group.data.id
}

resource "aws_vpc_security_group_egress_rule" "loadgen_client_to_data" {
  security_group_id            = aws_security_group.loadgen.id
  description                  = "load generators to the corelog client ports"
  ip_protocol                  = "tcp"
  from_port                    = var.client_port
  to_port                      = local.client_port_last
  referenced_security_group_id = aws_security_group.data.id
}

locals {
  internet_egress = merge(
    {
      "data-https"    = { sg = aws_security_group.data.id, port = 443, what = "HTTPS (packages, toolchain, source, SSM)" }
      "data-http"     = { sg = aws_security_group.data.id, port = 80, what = "HTTP (OS package mirrors)" }
      "loadgen-https" = { sg = aws_security_group.loadgen.id, port = 443, what = "HTTPS (packages, toolchain, source, SSM)" }
      "loadgen-http"  = { sg = aws_security_group.loadgen.id, port = 80, what = "HTTP (OS package mirrors)" }
    },
    local.git_over_ssh ? {
      "data-git-ssh"    = { sg = aws_security_group.data.id, port = 22, what = "git over SSH (corelog_git_url)" }
      "loadgen-git-ssh" = { sg = aws_security_group.loadgen.id, port = 22, what = "git over SSH (corelog_git_url)" }
    } : {},
  )
}

resource "aws_vpc_security_group_egress_rule" "internet" {
  for_each = local.internet_egress

  security_group_id = each.value.sg
  description       = each.value.what
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = "0.0.0.0/0"
}
