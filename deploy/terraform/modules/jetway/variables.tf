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

variable "bedrock_regions" {
  description = "Regions besides this one where placements (the tenants file's models[].placements without role_arn) call Bedrock: the task role may invoke every model and inference profile above in each. Empty: this region only."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for r in var.bedrock_regions : can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]+$", r))])
    error_message = "bedrock_regions: each must be a region name (for example the one this environment runs in)."
  }
}

variable "bedrock_assume_role_arns" {
  description = "IAM roles in other accounts that placements name as role_arn: the task role may sts:AssumeRole exactly these (each must trust the task role: docs/deploy.md, \"Placements in other accounts\"). Empty: no AssumeRole permission."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.bedrock_assume_role_arns : can(regex("^arn:[a-z-]+:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", a))])
    error_message = "bedrock_assume_role_arns: each must be one IAM role ARN (arn:<partition>:iam::<account>:role/<name>), no wildcard."
  }
}

variable "tenant_inference_profiles" {
  description = "Application inference profiles for cost per tenant in AWS billing, keyed by a name (lower case letters, digits, dashes; the profile is <name>-<key>): tenant and model (the gateway's ids), source_arn (the foundation model or system inference profile ARN it copies from; the profile is made in that ARN's region), extra tags. Each gets the tags jetway:tenant and jetway:model. Put the ARNs (output tenant_bedrock_profiles) into the tenants' bedrock_profiles."
  type = map(object({
    tenant     = string
    model      = string
    source_arn = string
    tags       = optional(map(string), {})
  }))
  default = {}

  validation {
    condition     = alltrue([for k in keys(var.tenant_inference_profiles) : can(regex("^[a-z0-9]+(-[a-z0-9]+)*$", k)) && length(k) <= 40])
    error_message = "tenant_inference_profiles: each key is at most 40 lower case letters or digits, single dashes between them (the profile name <name>-<key> must fit Bedrock's 64 characters)."
  }
  validation {
    condition     = alltrue([for p in var.tenant_inference_profiles : can(regex("^arn:[a-z-]+:bedrock:[a-z0-9-]+:[0-9]*:(foundation-model|inference-profile)/[A-Za-z0-9._:-]+$", p.source_arn))])
    error_message = "tenant_inference_profiles: source_arn must be a Bedrock foundation model ARN (arn:<partition>:bedrock:<region>::foundation-model/<model id>) or a system inference profile ARN (arn:<partition>:bedrock:<region>:<account>:inference-profile/<us.|eu.|global....>)."
  }
  validation {
    condition     = alltrue([for p in var.tenant_inference_profiles : can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", p.tenant)) && can(regex("^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", p.model))])
    error_message = "tenant_inference_profiles: tenant and model must be the gateway's ids of a tenant and a model (docs/configuration.md)."
  }
  validation {
    condition     = length(distinct([for p in var.tenant_inference_profiles : "${p.tenant}/${p.model}"])) == length(var.tenant_inference_profiles)
    error_message = "tenant_inference_profiles: one profile per tenant and model (bedrock_profiles maps each model to one ARN)."
  }
  validation {
    condition     = alltrue([for p in var.tenant_inference_profiles : !contains(keys(p.tags), "jetway:tenant") && !contains(keys(p.tags), "jetway:model")])
    error_message = "tenant_inference_profiles: tags may not set jetway:tenant or jetway:model; they come from tenant and model."
  }
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
