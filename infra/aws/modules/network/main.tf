# One VPC, one public subnet in a single AZ, an internet gateway (the nodes fetch the toolchain,
# the source and OS packages at boot), and the VPC's default security group locked down.

variable "name_prefix" {
  description = "Prefix for resource names."
  type        = string
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC."
  type        = string
}

variable "subnet_cidr" {
  description = "CIDR block of the single subnet (inside vpc_cidr)."
  type        = string
}

variable "availability_zone" {
  description = "The single availability zone of the subnet."
  type        = string
}

resource "aws_vpc" "this" {
  #checkov:skip=CKV2_AWS_11:Short-lived benchmark VPC torn down after the run; flow logs would cost more than the run and record nothing of interest.
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = { Name = "${var.name_prefix}-vpc" }
}

# Nothing may use the default security group: no rules at all.
resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id

  tags = { Name = "${var.name_prefix}-default-deny" }
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id

  tags = { Name = "${var.name_prefix}-igw" }
}

resource "aws_subnet" "this" {
  vpc_id                  = aws_vpc.this.id
  cidr_block              = var.subnet_cidr
  availability_zone       = var.availability_zone
  map_public_ip_on_launch = false # public addresses are asked for per instance

  tags = { Name = "${var.name_prefix}-subnet" }
}

resource "aws_route_table" "this" {
  vpc_id = aws_vpc.this.id

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this.id
  }

  tags = { Name = "${var.name_prefix}-rt" }
}

resource "aws_route_table_association" "this" {
  subnet_id      = aws_subnet.this.id
  route_table_id = aws_route_table.this.id
}

output "vpc_id" {
  description = "ID of the VPC."
  value       = aws_vpc.this.id
}

output "subnet_id" {
  description = "ID of the single subnet."
  value       = aws_subnet.this.id
}
