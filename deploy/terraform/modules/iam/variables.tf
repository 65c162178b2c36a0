variable "name" {
  description = "Name prefix of the roles (for example jetway-dev)."
  type        = string
}

variable "bedrock_model_ids" {
  description = "Bedrock foundation model ids the gateway may stream from in this region (for example anthropic.claude-3-5-haiku-20241022-v1:0)."
  type        = list(string)
  default     = []
}

variable "bedrock_inference_profile_ids" {
  description = "Cross-region inference profile ids the gateway may use (for example us.anthropic.claude-sonnet-4-20250514-v1:0). The profile and its foundation model in every region it routes to are allowed."
  type        = list(string)
  default     = []
}

variable "bedrock_regions" {
  description = "Regions besides this one where the gateway calls Bedrock with the task's own credentials (placements without role_arn): every configured model and inference profile is allowed in each. Empty: this region only."
  type        = list(string)
  default     = []
}

variable "bedrock_tenant_profile_arns" {
  description = "ARNs of the application inference profiles the gateway calls (the tenants' bedrock_profiles)."
  type        = list(string)
  default     = []
}

variable "bedrock_profile_source_arns" {
  description = "ARNs of the foundation models and system inference profiles those application inference profiles copy from (AWS checks the caller may invoke them too; a system profile's model is allowed in every region it routes to)."
  type        = list(string)
  default     = []
}

variable "bedrock_assume_role_arns" {
  description = "IAM roles in other accounts the gateway assumes for placements with role_arn (sts:AssumeRole on exactly these). Empty: no AssumeRole permission at all."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.bedrock_assume_role_arns : can(regex("^arn:[a-z-]+:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", a))])
    error_message = "bedrock_assume_role_arns: each must be one IAM role ARN (arn:<partition>:iam::<account>:role/<name>), no wildcard."
  }
}

variable "bedrock_guardrail_ids" {
  description = "Bedrock guardrail ids the apps use (apps[].guardrail in the tenants file); empty: no guardrail permission."
  type        = list(string)
  default     = []
}

variable "dynamodb_table_arns" {
  description = "ARNs of the quota, requests and cache tables."
  type        = list(string)
}

variable "members_table_arn" {
  description = "ARN of the fleet membership table (GetItem, PutItem, UpdateItem, DeleteItem and Scan only)."
  type        = string
}

variable "requests_by_server_index_arn" {
  description = "ARN of the requests table's by_server index (Query only)."
  type        = string
}

variable "config_table_arn" {
  description = "ARN of the config table (GetItem, PutItem, UpdateItem, DeleteItem, Query, Scan and BatchGetItem only)."
  type        = string
}

variable "config_audit_index_arns" {
  description = "ARNs of the config table's audit_tenant and audit_all indexes (Query only)."
  type        = list(string)
}

variable "quota_alert_topic_arn" {
  description = "ARN of the SNS topic of quota alerts (Publish only)."
  type        = string
}

variable "firehose_stream_arn" {
  description = "ARN of the usage delivery stream."
  type        = string
}

variable "log_group_arn" {
  description = "ARN of the task's own log group (without the :* suffix)."
  type        = string
}

variable "ecr_repository_arn" {
  description = "ARN of the image repository the execution role pulls from."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "tracing" {
  description = "The task runs the OpenTelemetry collector sidecar: the task role may send traces to X-Ray."
  type        = bool
  default     = false
}

variable "collector_repository_arn" {
  description = "ECR repository of the mirrored collector image the execution role may pull (empty: none)."
  type        = string
  default     = ""
}
