variable "cluster_name" {
  description = "ECS cluster of the service."
  type        = string
}

variable "service_name" {
  description = "ECS service to scale."
  type        = string
}

variable "min_capacity" {
  description = "Fewest tasks (at least 2 in prod: one per AZ)."
  type        = number
  default     = 2
}

variable "max_capacity" {
  description = "Most tasks."
  type        = number
  default     = 10

  validation {
    condition     = var.max_capacity >= 1
    error_message = "max_capacity must be at least 1."
  }
}

variable "cpu_target" {
  description = "Average CPU utilization (percent) the service is kept at."
  type        = number
  default     = 60
}

variable "sessions_per_task_target" {
  description = "Open WebSocket sessions per task the service is kept at (Jetway ActiveSessions, average over tasks)."
  type        = number
  default     = 2000
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the gateway's EMF metrics."
  type        = string
  default     = "Jetway"
}

variable "scale_out_cooldown" {
  description = "Seconds after a scale-out before another."
  type        = number
  default     = 60
}

variable "scale_in_cooldown" {
  description = "Seconds after a scale-in before another. Long: every scale-in drains sessions that then reconnect elsewhere."
  type        = number
  default     = 600
}
