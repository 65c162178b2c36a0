variable "name" {
  description = "Name prefix of every resource (for example jetway-dev). The load balancer and target group names are cut to 32 characters."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the load balancer and its targets."
  type        = string
}

variable "vpc_cidr_block" {
  description = "CIDR of the VPC: the load balancer may only send to the tasks' ports inside it."
  type        = string
}

variable "public_subnet_ids" {
  description = "Public subnets of the load balancer (at least two AZs)."
  type        = list(string)
}

variable "certificate_arn" {
  description = "ACM certificate of the HTTPS listener (same region as the load balancer)."
  type        = string
}

variable "ssl_policy" {
  description = "TLS policy of the HTTPS listener."
  type        = string
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"
}

variable "ingress_cidrs" {
  description = "IPv4 ranges allowed to reach ports 80 and 443."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "app_port" {
  description = "Container port of the main listener (JETWAY_LISTEN: WebSocket GET /v1/ws)."
  type        = number
  default     = 8080
}

variable "admin_port" {
  description = "Container port of the admin listener (JETWAY_ADMIN_LISTEN: /healthz, /readyz, /metrics). The health check goes here; clients never do."
  type        = number
  default     = 9090
}

variable "health_check_path" {
  description = "Health check path on the admin port. /readyz fails at once when a task starts draining, so the load balancer stops sending it new sessions."
  type        = string
  default     = "/readyz"
}

variable "health_check_interval" {
  description = "Seconds between health checks. The task learns it (JETWAY_HEALTH_CHECK_INTERVAL): when checks stop for JETWAY_SELF_DRAIN_MISSES intervals, the load balancer has deregistered it, and it drains."
  type        = number
  default     = 10

  validation {
    condition     = var.health_check_interval >= 5 && var.health_check_interval <= 300
    error_message = "health_check_interval must be between 5 and 300 seconds."
  }
}

variable "idle_timeout" {
  description = "Seconds a connection may be idle. Must stay above two heartbeats (JETWAY_HEARTBEAT 25 s) so a quiet WebSocket is never cut by the load balancer."
  type        = number
  default     = 120

  validation {
    condition     = var.idle_timeout > 50 && var.idle_timeout <= 4000
    error_message = "idle_timeout must be above 50 s (two 25 s heartbeats) and at most 4000 s."
  }
}

variable "deregistration_delay" {
  description = "Seconds a deregistered task keeps its open connections: the task's detection of the deregistration ((JETWAY_SELF_DRAIN_MISSES + 1) x health_check_interval = 40 s) plus its drain (JETWAY_DRAIN_TIMEOUT 110 s) plus 10 s. The load balancer ends it early once the drained task's sockets are closed."
  type        = number
  default     = 160

  validation {
    condition     = var.deregistration_delay >= 0 && var.deregistration_delay <= 3600
    error_message = "deregistration_delay must be between 0 and 3600 seconds."
  }
}

variable "deletion_protection" {
  description = "Refuse to delete the load balancer (prod: true)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
