variable "name" {
  description = "Name prefix of every resource (for example jetway-dev)."
  type        = string
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC. Public subnets take the first /20s, private subnets start at the ninth /20."
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be a valid IPv4 CIDR of /20 or larger."
  }
}

variable "az_count" {
  description = "Number of availability zones (2 or 3). Each gets one public and one private subnet."
  type        = number
  default     = 2

  validation {
    condition     = var.az_count >= 2 && var.az_count <= 3
    error_message = "az_count must be 2 or 3."
  }
}

variable "enable_nat_gateway" {
  description = "Create NAT gateways so tasks reach the internet (Cognito JWKS, public images). With false, only the VPC endpoints are reachable."
  type        = bool
  default     = true
}

variable "single_nat_gateway" {
  description = "One NAT gateway shared by every AZ (cheaper, dev) instead of one per AZ (prod)."
  type        = bool
  default     = false
}

variable "interface_endpoints" {
  description = "AWS services reached through interface VPC endpoints (private DNS) instead of the NAT gateway."
  type        = list(string)
  default     = ["bedrock-runtime", "firehose", "ecr.api", "ecr.dkr", "logs"]
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
