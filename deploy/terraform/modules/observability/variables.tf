variable "name" {
  description = "Name of the dashboard and prefix of the alarms and topics (for example jetway-dev)."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the gateway's EMF metrics (dimension sets [Server], [] and [Tenant, App])."
  type        = string
  default     = "Jetway"
}

variable "cluster_name" {
  description = "ECS cluster of the service."
  type        = string
}

variable "service_name" {
  description = "ECS service of the gateway."
  type        = string
}

variable "alb_arn_suffix" {
  description = "LoadBalancer dimension of the AWS/ApplicationELB metrics."
  type        = string
}

variable "target_group_arn_suffix" {
  description = "TargetGroup dimension of the AWS/ApplicationELB metrics."
  type        = string
}

variable "web_acl_name" {
  description = "Name of the WAF web ACL (WebACL dimension of AWS/WAFV2)."
  type        = string
}

variable "log_group_name" {
  description = "Log group of the gateway (Logs Insights widgets)."
  type        = string
}

variable "table_names" {
  description = "DynamoDB tables of the gateway (throttle widgets and alarms)."
  type        = list(string)
}

variable "bedrock_model_ids" {
  description = "Bedrock model and inference profile ids in use (ModelId dimension of AWS/Bedrock)."
  type        = list(string)
}

variable "firehose_stream_name" {
  description = "Delivery stream of the usage records."
  type        = string
}

variable "alarm_emails" {
  description = "Addresses subscribed to the alarm topic (each must confirm by mail)."
  type        = list(string)
  default     = []
}

variable "quota_alert_emails" {
  description = "Addresses subscribed to the quota alerts topic (each must confirm by mail); every tenant's events reach them."
  type        = list(string)
  default     = []
}

variable "min_healthy_tasks" {
  description = "Alarm when fewer tasks than this pass the /readyz health check."
  type        = number
  default     = 1
}

variable "alb_5xx_threshold" {
  description = "Alarm when the load balancer and targets return more 5xx than this in 5 minutes (upgrade failures: clients never got a socket)."
  type        = number
  default     = 20
}

variable "errors_threshold" {
  description = "Alarm when requests end with status >= 500 more than this many times in 5 minutes (Jetway Errors)."
  type        = number
  default     = 50
}

variable "ttft_p95_threshold_ms" {
  description = "Alarm when the fleet-wide TTFT p95 stays above this for 15 minutes."
  type        = number
  default     = 5000
}

variable "sessions_moved_per_minute_threshold" {
  description = "Alarm when the fleet asks more sessions than this to move in a minute, three minutes in a row (a balancing storm)."
  type        = number
  default     = 600

  validation {
    condition     = var.sessions_moved_per_minute_threshold > 0
    error_message = "sessions_moved_per_minute_threshold must be above 0."
  }
}

variable "cpu_threshold" {
  description = "Alarm when the service's average CPU stays above this percentage for 15 minutes (autoscaling is at its maximum or too slow)."
  type        = number
  default     = 85
}

variable "dynamodb_throttle_threshold" {
  description = "Alarm when a table throttles more than this many requests in 5 minutes."
  type        = number
  default     = 10
}

variable "bedrock_throttle_threshold" {
  description = "Alarm when a model throttles more than this many invocations in 5 minutes (then fallbacks carry the load)."
  type        = number
  default     = 20
}

variable "firehose_freshness_threshold_seconds" {
  description = "Alarm when the oldest undelivered usage record is older than this."
  type        = number
  default     = 900
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
