terraform {
  # 1.9+: variable validations may refer to other variables (see variables.tf).
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40, < 7.0"
    }
    tls = {
      source  = "hashicorp/tls"
      version = ">= 4.0, < 5.0"
    }
  }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge({
      Project   = "corelog"
      Purpose   = "benchmark-reproduction"
      ManagedBy = "terraform"
      Stack     = var.name_prefix
    }, var.tags)
  }
}
