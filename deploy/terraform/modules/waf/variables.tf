variable "name" {
  description = "Name prefix of every resource (for example jetway-dev)."
  type        = string
}

variable "alb_arn" {
  description = "ARN of the load balancer the web ACL protects."
  type        = string
}

variable "rate_limit" {
  description = "Requests one client IP may make per evaluation window before it is blocked. Each WebSocket counts once (the upgrade), not per frame."
  type        = number
  default     = 1000

  validation {
    condition     = var.rate_limit >= 10
    error_message = "rate_limit must be at least 10 (the WAF minimum)."
  }
}

variable "rate_limit_window" {
  description = "Evaluation window of the rate-based rule in seconds (60, 120, 300 or 600)."
  type        = number
  default     = 300

  validation {
    condition     = contains([60, 120, 300, 600], var.rate_limit_window)
    error_message = "rate_limit_window must be 60, 120, 300 or 600."
  }
}

variable "max_uri_path_bytes" {
  description = "Requests whose URI path is longer are blocked."
  type        = number
  default     = 1024
}

variable "max_query_string_bytes" {
  description = "Requests whose query string is longer are blocked (Jetway only takes session_id there)."
  type        = number
  default     = 1024
}

variable "max_body_bytes" {
  description = "Requests whose body is larger are blocked (a WebSocket upgrade has none; frames after it are not inspected by WAF)."
  type        = number
  default     = 8192
}

variable "common_rules_count_only" {
  description = "Rules of AWSManagedRulesCommonRuleSet switched from block to count (for example SizeRestrictions_BODY) when they prove to block real traffic."
  type        = list(string)
  default     = []
}

variable "log_retention_days" {
  description = "Retention of the WAF log group."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
