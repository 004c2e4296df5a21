# Every input of the reference-run stack. Defaults reproduce the published reference setup:
# two i4i.16xlarge data nodes and four load generators in one cluster placement group.

variable "region" {
  description = "AWS region to deploy into. The reference run used ap-southeast-2 (Sydney)."
  type        = string
  default     = "ap-southeast-2"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must look like an AWS region name, e.g. ap-southeast-2."
  }
}

variable "availability_zone" {
  description = "Availability zone for the single subnet. Empty: the first zone (by name) that offers data_node_instance_type."
  type        = string
  default     = ""

  validation {
    condition     = var.availability_zone == "" || can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]$", var.availability_zone))
    error_message = "availability_zone must be empty or a zone name such as ap-southeast-2a."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name and tag, so several stacks can share an account."
  type        = string
  default     = "corelog"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}$", var.name_prefix))
    error_message = "name_prefix must be 2-31 characters: lower-case letters, digits and '-', starting with a letter."
  }
}

variable "tags" {
  description = "Extra tags put on every resource (merged into the provider's default tags)."
  type        = map(string)
  default     = {}
}

variable "vpc_cidr" {
  description = "CIDR block of the benchmark VPC."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrnetmask(var.vpc_cidr))
    error_message = "vpc_cidr must be an IPv4 CIDR block such as 10.42.0.0/16."
  }
}

variable "subnet_cidr" {
  description = "CIDR block of the single subnet; must lie inside vpc_cidr. The data nodes get its 10th and 11th host addresses."
  type        = string
  default     = "10.42.1.0/24"

  validation {
    condition     = can(cidrnetmask(var.subnet_cidr)) && tonumber(split("/", var.subnet_cidr)[1]) <= 28
    error_message = "subnet_cidr must be an IPv4 CIDR block of /28 or larger, such as 10.42.1.0/24."
  }
}

variable "admin_cidr" {
  description = "The operator's address range (e.g. your workstation's public IP as a.b.c.d/32). Only it may reach the metrics port, and SSH when enable_ssh is true."
  type        = string

  validation {
    condition     = can(cidrnetmask(var.admin_cidr)) && var.admin_cidr != "0.0.0.0/0"
    error_message = "admin_cidr must be an IPv4 CIDR block and must not be 0.0.0.0/0."
  }
}

variable "enable_ssh" {
  description = "Open TCP 22 from admin_cidr to every node. Off by default; infra/scripts/run-sweep.sh then reaches the load generators through SSM Session Manager (needs enable_ssm and the AWS CLI session plugin)."
  type        = bool
  default     = false
}

variable "enable_ssm" {
  description = "Attach an instance profile with AmazonSSMManagedInstanceCore so nodes are reachable through SSM Session Manager (also used as an SSH transport without an open port 22)."
  type        = bool
  default     = true
}

variable "ssh_key_name" {
  description = "Name of an existing EC2 key pair for the nodes. Empty: use ssh_public_key, or no key pair at all if that is empty too."
  type        = string
  default     = ""

  validation {
    condition     = length(var.ssh_key_name) <= 255
    error_message = "ssh_key_name must be at most 255 characters."
  }
}

variable "ssh_public_key" {
  description = "OpenSSH public key to register as a new key pair when ssh_key_name is empty (e.g. the contents of ~/.ssh/id_ed25519.pub)."
  type        = string
  default     = ""

  validation {
    condition     = var.ssh_public_key == "" || can(regex("^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+", var.ssh_public_key))
    error_message = "ssh_public_key must be empty or an OpenSSH public key line (ssh-ed25519 / ssh-rsa / ecdsa-sha2-*)."
  }
}

variable "ssh_user" {
  description = "Login user of the AMI, used in the printed commands and by run-sweep.sh (ubuntu for Ubuntu, admin for Debian)."
  type        = string
  default     = "ubuntu"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.ssh_user))
    error_message = "ssh_user must be a valid Unix user name."
  }
}

variable "ami_id" {
  description = "AMI for every node. Empty: the latest Canonical Ubuntu 24.04 LTS amd64 AMI of the region (its kernel ships the tls module for kTLS, its images ship the SSM agent)."
  type        = string
  default     = ""

  validation {
    condition     = var.ami_id == "" || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must be empty or an AMI id such as ami-0123456789abcdef0."
  }
}

variable "data_node_instance_type" {
  description = "Instance type of the two data nodes. Reference: i4i.16xlarge (64 vCPU, 4 x 3,750 GB NVMe). Cheap configuration: i4i.large (2 vCPU, 1 x 468 GB NVMe). Must have NVMe instance storage."
  type        = string
  default     = "i4i.16xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.data_node_instance_type))
    error_message = "data_node_instance_type must be an EC2 instance type name such as i4i.16xlarge."
  }
}

variable "loadgen_instance_type" {
  description = "Instance type of the load generators. Each holds a quarter of the connections (9,000 at the 36,000 step) with mTLS; c7i.4xlarge (16 vCPU) has headroom for that. Cheap configuration: c7i.large."
  type        = string
  default     = "c7i.4xlarge"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.loadgen_instance_type))
    error_message = "loadgen_instance_type must be an EC2 instance type name such as c7i.4xlarge."
  }
}

variable "loadgen_count" {
  description = "Number of load-generator nodes. The reference run used four."
  type        = number
  default     = 4

  validation {
    condition     = var.loadgen_count >= 1 && var.loadgen_count <= 16 && floor(var.loadgen_count) == var.loadgen_count
    error_message = "loadgen_count must be a whole number from 1 to 16."
  }
}

variable "root_volume_size_gb" {
  description = "Size of each node's encrypted gp3 root volume in GiB (holds the OS and, when building from source, the Rust toolchain and build)."
  type        = number
  default     = 64

  validation {
    condition     = var.root_volume_size_gb >= 16 && var.root_volume_size_gb <= 1024
    error_message = "root_volume_size_gb must be between 16 and 1024."
  }
}

variable "client_port" {
  description = "corelog client (append/read) port on the data nodes; reachable only from the load generators."
  type        = number
  default     = 9400

  validation {
    condition     = var.client_port >= 1024 && var.client_port <= 65535
    error_message = "client_port must be between 1024 and 65535."
  }
}

variable "client_direct_ports" {
  description = "Per-shard client ports opened besides client_port: corelog's shard s also listens on client_port + 1 + s (its direct port), so the load generators may reach client_port .. client_port + client_direct_ports. 99 covers up to 99 shards with the default ports (9400-9499)."
  type        = number
  default     = 99

  validation {
    condition     = var.client_direct_ports >= 0 && var.client_direct_ports <= 1024 && floor(var.client_direct_ports) == var.client_direct_ports
    error_message = "client_direct_ports must be a whole number from 0 to 1024."
  }
}

variable "replication_port_base" {
  description = "First replication port; shard i of the follower listens on replication_port_base + i. Reachable only between the two data nodes."
  type        = number
  default     = 9500

  validation {
    condition     = var.replication_port_base >= 1024 && var.replication_port_base <= 65279
    error_message = "replication_port_base must be between 1024 and 65279 (the range must end by 65535)."
  }
}

variable "max_shards" {
  description = "Size of the replication port range opened between the data nodes (replication_port_base .. replication_port_base + max_shards - 1). 256 gives 9500-9755."
  type        = number
  default     = 256

  validation {
    condition     = var.max_shards >= 1 && var.max_shards <= 1024 && floor(var.max_shards) == var.max_shards
    error_message = "max_shards must be a whole number from 1 to 1024."
  }
}

variable "metrics_port" {
  description = "Prometheus metrics port (/metrics, /health) on the data nodes; reachable only from admin_cidr."
  type        = number
  default     = 9300

  validation {
    condition     = var.metrics_port >= 1024 && var.metrics_port <= 65535
    error_message = "metrics_port must be between 1024 and 65535."
  }
}

variable "server_cores" {
  description = "Cores (one shard each) the corelog server uses on a data node. 0: all vCPUs of the instance."
  type        = number
  default     = 0

  validation {
    condition     = var.server_cores >= 0 && var.server_cores <= 256 && floor(var.server_cores) == var.server_cores
    error_message = "server_cores must be a whole number from 0 to 256 (the replication port range is sized by max_shards)."
  }
}

variable "data_fs_type" {
  description = "Filesystem created on the RAID0 of instance-store drives (xfs or ext4)."
  type        = string
  default     = "xfs"

  validation {
    condition     = contains(["xfs", "ext4"], var.data_fs_type)
    error_message = "data_fs_type must be xfs or ext4."
  }
}

variable "corelog_git_url" {
  description = "Git repository the nodes build corelog from (cargo install --git). Used when corelog_release_url is empty."
  type        = string
  default     = ""

  validation {
    condition     = var.corelog_git_url == "" || can(regex("^(https://|ssh://|git@)[^ ]+$", var.corelog_git_url))
    error_message = "corelog_git_url must be empty or an https://, ssh:// or git@ repository URL."
  }

  validation {
    condition     = var.corelog_git_url != "" || var.corelog_release_url != ""
    error_message = "Set corelog_git_url (build on the nodes) or corelog_release_url (download binaries)."
  }
}

variable "corelog_git_rev" {
  description = "Commit, tag or branch of corelog_git_url to build. Pin a commit to reproduce a published run."
  type        = string
  default     = "main"

  validation {
    condition     = can(regex("^[A-Za-z0-9._/-]{1,100}$", var.corelog_git_rev))
    error_message = "corelog_git_rev must be a commit hash, tag or branch name."
  }
}

variable "corelog_release_url" {
  description = "Alternative to building: https URL of a .tar.gz holding the corelog and corelog-loadgen binaries (x86_64 Linux). Takes precedence over corelog_git_url."
  type        = string
  default     = ""

  validation {
    condition     = var.corelog_release_url == "" || can(regex("^https://[^ ]+$", var.corelog_release_url))
    error_message = "corelog_release_url must be empty or an https:// URL."
  }
}

variable "corelog_release_sha256" {
  description = "SHA-256 of the corelog_release_url archive; required when that URL is set."
  type        = string
  default     = ""

  validation {
    condition     = var.corelog_release_sha256 == "" || can(regex("^[0-9a-f]{64}$", var.corelog_release_sha256))
    error_message = "corelog_release_sha256 must be empty or 64 lower-case hex digits."
  }

  validation {
    condition     = var.corelog_release_url == "" || var.corelog_release_sha256 != ""
    error_message = "corelog_release_sha256 is required when corelog_release_url is set."
  }
}

variable "rust_toolchain" {
  description = "Rust toolchain rustup installs on the nodes when building from source."
  type        = string
  default     = "stable"

  validation {
    condition     = can(regex("^[a-z0-9.-]+$", var.rust_toolchain))
    error_message = "rust_toolchain must be a rustup toolchain name such as stable or 1.83.0."
  }
}

variable "cert_validity_hours" {
  description = "Validity of the generated CA and certificates, in hours (a benchmark cluster is short-lived)."
  type        = number
  default     = 720

  validation {
    condition     = var.cert_validity_hours >= 24 && var.cert_validity_hours <= 8760
    error_message = "cert_validity_hours must be between 24 and 8760."
  }
}
