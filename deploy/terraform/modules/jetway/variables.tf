variable "name" {
  description = "Name of the environment's resources (for example jetway-dev): lower case letters, digits and dashes."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,22}$", var.name))
    error_message = "name must be 2-23 lower case letters, digits or dashes, starting with a letter."
  }
}

variable "image_tag" {
  description = "Tag of the gateway image in the environment's ECR repository (push it before the full apply)."
  type        = string
}

variable "domain_name" {
  description = "Host name clients connect to (wss://<domain_name>/v1/ws)."
  type        = string
}

variable "route53_zone_id" {
  description = "Route 53 hosted zone of domain_name. Set: the alias record (and, without certificate_arn, the certificate's DNS validation) are managed here. Null: manage DNS yourself."
  type        = string
  default     = null
}

variable "certificate_arn" {
  description = "Existing ACM certificate for domain_name. Null: one is requested and validated through route53_zone_id."
  type        = string
  default     = null
}

variable "vpc_cidr" {
  description = "CIDR of the environment's VPC."
  type        = string
  default     = "10.40.0.0/16"
}

variable "az_count" {
  description = "Availability zones (2 or 3)."
  type        = number
  default     = 2
}

variable "enable_nat_gateway" {
  description = "NAT gateways for the tasks' internet egress (Cognito JWKS, the config init image)."
  type        = bool
  default     = true
}

variable "single_nat_gateway" {
  description = "One NAT gateway for all AZs (dev) instead of one per AZ (prod)."
  type        = bool
  default     = false
}

variable "interface_endpoints" {
  description = "Services reached through interface VPC endpoints (empty: everything through NAT)."
  type        = list(string)
  default     = ["bedrock-runtime", "firehose", "ecr.api", "ecr.dkr", "logs"]
}

variable "bedrock_model_ids" {
  description = "Foundation model ids the tenants file uses (bedrock_id), in this region."
  type        = list(string)
  default     = []
}

variable "bedrock_inference_profile_ids" {
  description = "Cross-region inference profile ids the tenants file uses (bedrock_id)."
  type        = list(string)
  default     = []
}

variable "bedrock_guardrail_ids" {
  description = "Guardrail ids the tenants file uses (apps[].guardrail.id)."
  type        = list(string)
  default     = []
}

variable "apps" {
  description = "Cognito app clients keyed \"<tenant>/<app>\" (see modules/cognito). The tenants file template reads their ids as client_ids[\"<tenant>/<app>\"]."
  type = map(object({
    callback_urls       = optional(list(string), [])
    logout_urls         = optional(list(string), [])
    allow_password_auth = optional(bool, false)
  }))
}

variable "config_template_file" {
  description = "Path of the tenants file template (templatefile syntax; variable client_ids: map of \"<tenant>/<app>\" to app client id)."
  type        = string
}

variable "allowed_origins" {
  description = "Browser origins allowed to open a WebSocket (JETWAY_ALLOWED_ORIGINS)."
  type        = list(string)
  default     = []
}

variable "log_level" {
  description = "JETWAY_LOG_LEVEL."
  type        = string
  default     = "info"
}

variable "task_cpu" {
  description = "Task CPU units."
  type        = number
  default     = 1024
}

variable "task_memory" {
  description = "Task memory (MiB)."
  type        = number
  default     = 2048
}

variable "cpu_architecture" {
  description = "ARM64 or X86_64 (the image's platform)."
  type        = string
  default     = "ARM64"
}

variable "max_inflight" {
  description = "JETWAY_MAX_INFLIGHT per task."
  type        = number
  default     = 2000
}

variable "min_tasks" {
  description = "Fewest running tasks."
  type        = number
  default     = 2
}

variable "max_tasks" {
  description = "Most running tasks."
  type        = number
  default     = 10
}

variable "cpu_target" {
  description = "Average CPU percentage autoscaling keeps."
  type        = number
  default     = 60
}

variable "sessions_per_task_target" {
  description = "Open sessions per task autoscaling keeps."
  type        = number
  default     = 2000
}

variable "waf_rate_limit" {
  description = "Requests (WebSocket upgrades) per client IP per 5 minutes before WAF blocks it."
  type        = number
  default     = 1000
}

variable "cognito_user_pool_tier" {
  description = "Cognito feature plan (LITE, ESSENTIALS, PLUS)."
  type        = string
  default     = "ESSENTIALS"
}

variable "cognito_advanced_security_mode" {
  description = "Cognito threat protection: OFF, AUDIT or ENFORCED (PLUS tier)."
  type        = string
  default     = "OFF"
}

variable "cognito_domain_prefix" {
  description = "Hosted login domain prefix; null: none."
  type        = string
  default     = null
}

variable "alarm_emails" {
  description = "Addresses subscribed to the alarm topic."
  type        = list(string)
  default     = []
}

variable "quota_alert_emails" {
  description = "Addresses subscribed to the quota alerts topic (every tenant's threshold events)."
  type        = list(string)
  default     = []
}

variable "protect_data" {
  description = "Production safety: deletion protection on the load balancer, tables and user pool; buckets and repositories refuse to be destroyed while not empty."
  type        = bool
  default     = true
}

variable "log_retention_days" {
  description = "Retention of the gateway, WAF and Firehose log groups."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "tracing_enabled" {
  description = "Run the OpenTelemetry collector sidecar and send the gateway's traces to X-Ray (docs/operations.md, \"Tracing\")."
  type        = bool
  default     = false
}

variable "otel_collector_version" {
  description = "Tag of the AWS Distro for OpenTelemetry collector (public.ecr.aws/aws-observability/aws-otel-collector), mirrored to the collector's ECR repository before the apply."
  type        = string
  default     = "v0.42.0"

  validation {
    condition     = can(regex("^v[0-9]+\\.[0-9]+\\.[0-9]+$", var.otel_collector_version))
    error_message = "otel_collector_version must be an exact release tag (vX.Y.Z), never latest."
  }
}

variable "trace_sample_ratio" {
  description = "Share of new traces sampled when tracing is on (a client's sampled traceparent is always followed)."
  type        = number
  default     = 0.05
}
