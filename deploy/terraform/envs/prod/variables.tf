variable "region" {
  description = "AWS region of the environment (Bedrock must offer the models there)."
  type        = string
}

variable "allowed_account_ids" {
  description = "The only AWS account(s) this environment may be applied to."
  type        = list(string)
}

variable "image_tag" {
  description = "Gateway image tag in the environment's ECR repository."
  type        = string
}

variable "domain_name" {
  description = "Host name clients connect to (wss://<domain_name>/v1/ws)."
  type        = string
}

variable "route53_zone_id" {
  description = "Hosted zone of domain_name; null if DNS is managed elsewhere (then set certificate_arn)."
  type        = string
  default     = null
}

variable "certificate_arn" {
  description = "Existing ACM certificate for domain_name; null: requested and DNS-validated here."
  type        = string
  default     = null
}

variable "bedrock_model_ids" {
  description = "Foundation model ids used by the tenants file."
  type        = list(string)
  default     = []
}

variable "bedrock_inference_profile_ids" {
  description = "Inference profile ids used by the tenants file."
  type        = list(string)
  default     = []
}

variable "bedrock_guardrail_ids" {
  description = "Guardrail ids used by the tenants file."
  type        = list(string)
  default     = []
}

variable "bedrock_regions" {
  description = "Other regions where placements without role_arn call Bedrock (the task role may invoke the models above there too); empty: this region only."
  type        = list(string)
  default     = []
}

variable "bedrock_assume_role_arns" {
  description = "Roles in other accounts that placements name as role_arn (sts:AssumeRole on exactly these); empty: none."
  type        = list(string)
  default     = []
}

variable "tenant_inference_profiles" {
  description = "Application inference profiles for cost per tenant in AWS billing, keyed by a name: tenant, model (the gateway's ids), source_arn (foundation model or system inference profile ARN), tags (optional). See docs/deploy.md, \"Cost per tenant in AWS billing\"."
  type = map(object({
    tenant     = string
    model      = string
    source_arn = string
    tags       = optional(map(string), {})
  }))
  default = {}
}

variable "apps" {
  description = "Cognito app clients keyed \"<tenant>/<app>\"; every key the tenants file template uses must be here."
  type = map(object({
    callback_urls       = optional(list(string), [])
    logout_urls         = optional(list(string), [])
    allow_password_auth = optional(bool, false)
  }))
}

variable "allowed_origins" {
  description = "Browser origins allowed to open a WebSocket."
  type        = list(string)
  default     = []
}

variable "alarm_emails" {
  description = "Addresses that receive alarm notifications."
  type        = list(string)
  default     = []
}

variable "quota_alert_emails" {
  description = "Addresses that receive every tenant's quota threshold events."
  type        = list(string)
  default     = []
}

variable "tracing_enabled" {
  description = "Send the gateway's traces to X-Ray through the collector sidecar (mirror its image first: docs/operations.md, \"Tracing\")."
  type        = bool
  default     = false
}

variable "trace_sample_ratio" {
  description = "Share of new traces sampled when tracing is on."
  type        = number
  default     = 0.05
}
