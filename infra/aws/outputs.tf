output "availability_zone" {
  description = "The availability zone everything runs in."
  value       = local.availability_zone
}

output "ami_id" {
  description = "AMI of every node."
  value       = local.ami_id
}

output "leader_private_ip" {
  description = "Private address of the leader (the load generators' target)."
  value       = local.leader_ip
}

output "follower_private_ip" {
  description = "Private address of the follower."
  value       = local.follower_ip
}

output "target" {
  description = "host:port the load generators append to."
  value       = "${local.leader_ip}:${var.client_port}"
}

output "data_node_public_ips" {
  description = "Public addresses of the data nodes, by role."
  value       = { for role, i in aws_instance.data : role => i.public_ip }
}

output "data_node_instance_ids" {
  description = "Instance ids of the data nodes, by role."
  value       = { for role, i in aws_instance.data : role => i.id }
}

output "loadgen_public_ips" {
  description = "Public addresses of the load generators."
  value       = aws_instance.loadgen[*].public_ip
}

output "loadgen_instance_ids" {
  description = "Instance ids of the load generators."
  value       = aws_instance.loadgen[*].id
}

output "metrics_urls" {
  description = "Prometheus endpoints of the data nodes (reachable from admin_cidr)."
  value       = { for role, i in aws_instance.data : role => "http://${i.public_ip}:${var.metrics_port}/metrics" }
}

output "ca_cert_pem" {
  description = "CA certificate of the cluster (public)."
  value       = module.pki.ca_cert_pem
}

# Read by infra/scripts/run-sweep.sh (`terraform -chdir=infra/aws output -raw sweep_env`).
output "sweep_env" {
  description = "KEY=VALUE lines describing the cluster for infra/scripts/run-sweep.sh."
  value = join("\n", [
    "LOADGEN_HOSTS=${join(",", var.enable_ssh ? aws_instance.loadgen[*].public_ip : aws_instance.loadgen[*].id)}",
    "SSH_TRANSPORT=${var.enable_ssh ? "direct" : "ssm"}",
    "SSH_USER=${var.ssh_user}",
    "AWS_REGION=${var.region}",
    "TARGET=${local.leader_ip}:${var.client_port}",
    "METRICS_URL=http://${aws_instance.data["leader"].public_ip}:${var.metrics_port}/metrics",
    "FOLLOWER_METRICS_URL=http://${aws_instance.data["follower"].public_ip}:${var.metrics_port}/metrics",
    "DATA_NODE_TYPE=${var.data_node_instance_type}",
    "LOADGEN_TYPE=${var.loadgen_instance_type}",
  ])
}

output "next_steps" {
  description = "What to run next."
  value       = <<-EOT
    1. Wait for the nodes to finish bootstrapping (building from source takes ~5-15 min):
         curl -s http://${aws_instance.data["leader"].public_ip}:${var.metrics_port}/health
    2. Run the sweep from the root of the corelog repository:
         infra/scripts/run-sweep.sh          # reads `terraform -chdir=infra/aws output -raw sweep_env`
       (transport: ${var.enable_ssh ? "ssh to the public addresses" : "ssh over SSM Session Manager; needs the AWS CLI and its session-manager-plugin"}; user ${var.ssh_user})
    3. Results land in infra/results/<timestamp>/ (one JSON per load generator and step, metrics snapshots).
    4. Tear everything down:
         terraform -chdir=infra/aws destroy
  EOT
}
