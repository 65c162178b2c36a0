variable "name" {
  description = "Name of the cluster, service and task family (for example jetway-dev)."
  type        = string
}

variable "image" {
  description = "Gateway image, repository URL and tag (for example <repository_url>:v1.2.3)."
  type        = string
}

variable "cpu" {
  description = "Task CPU units (1024 = 1 vCPU)."
  type        = number
  default     = 1024
}

variable "memory" {
  description = "Task memory in MiB."
  type        = number
  default     = 2048
}

variable "cpu_architecture" {
  description = "ARM64 (Graviton, cheaper) or X86_64; the image must be built for it."
  type        = string
  default     = "ARM64"

  validation {
    condition     = contains(["ARM64", "X86_64"], var.cpu_architecture)
    error_message = "cpu_architecture must be ARM64 or X86_64."
  }
}

variable "desired_count" {
  description = "Tasks at creation; afterwards autoscaling owns the count."
  type        = number
  default     = 2
}

variable "vpc_id" {
  description = "VPC of the tasks."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets the tasks run in."
  type        = list(string)
}

variable "alb_security_group_id" {
  description = "Security group of the load balancer: the only source allowed to reach the tasks."
  type        = string
}

variable "target_group_arn" {
  description = "Target group the service registers its tasks in."
  type        = string
}

variable "app_port" {
  description = "Main listener port (JETWAY_LISTEN: WebSocket GET /v1/ws)."
  type        = number
  default     = 8080
}

variable "admin_port" {
  description = "Admin listener port (JETWAY_ADMIN_LISTEN: /healthz, /readyz, /metrics)."
  type        = number
  default     = 9090
}

variable "execution_role_arn" {
  description = "Role ECS uses to pull the image and write logs."
  type        = string
}

variable "task_role_arn" {
  description = "Role of the gateway process."
  type        = string
}

variable "auth_issuer" {
  description = "Cognito issuer (JETWAY_AUTH_ISSUER): https://cognito-idp.<region>.amazonaws.com/<user pool id>."
  type        = string

  validation {
    condition     = startswith(var.auth_issuer, "https://")
    error_message = "auth_issuer must be an https URL; an empty issuer would start the gateway in dev mode."
  }
}

variable "allowed_origins" {
  description = "Browser origins allowed to open a WebSocket (JETWAY_ALLOWED_ORIGINS), for example https://chat.example.com."
  type        = list(string)
  default     = []
}

variable "log_level" {
  description = "JETWAY_LOG_LEVEL: debug, info, warn or error."
  type        = string
  default     = "info"

  validation {
    condition     = contains(["debug", "info", "warn", "error"], var.log_level)
    error_message = "log_level must be debug, info, warn or error."
  }
}

variable "drain_timeout_seconds" {
  description = "JETWAY_DRAIN_TIMEOUT: once a drain starts (health checks stopped, or SIGTERM), how long requests in flight may take to finish. Must be below stop_timeout."
  type        = number
  default     = 110
}

variable "health_check_interval" {
  description = "JETWAY_HEALTH_CHECK_INTERVAL: the target group's health check interval in seconds (pass the alb module's output)."
  type        = number
  default     = 10
}

variable "health_check_user_agent" {
  description = "JETWAY_HEALTH_CHECK_USER_AGENT: the User-Agent prefix of the load balancer's health checks (pass the alb module's output; an ALB always sends ELB-HealthChecker/2.0, AWS offers no setting). Only /readyz requests carrying it arm self-drain."
  type        = string
  default     = "ELB-HealthChecker/"

  validation {
    condition     = length(var.health_check_user_agent) > 0
    error_message = "health_check_user_agent must not be empty."
  }
}

variable "self_drain_misses" {
  description = "JETWAY_SELF_DRAIN_MISSES: health check intervals without a check after which the task drains (deregistered); 0 turns it off."
  type        = number
  default     = 3

  validation {
    condition     = var.self_drain_misses >= 0
    error_message = "self_drain_misses must be 0 (off) or more."
  }
}

variable "deregistration_delay" {
  description = "The target group's deregistration delay in seconds (pass the alb module's output): checked to cover detection plus the drain."
  type        = number
  default     = 160
}

variable "stop_timeout" {
  description = "ECS stopTimeout: seconds between SIGTERM and SIGKILL (Fargate allows at most 120)."
  type        = number
  default     = 120

  validation {
    condition     = var.stop_timeout >= 2 && var.stop_timeout <= 120
    error_message = "stop_timeout must be between 2 and 120 seconds (the Fargate maximum)."
  }
}

variable "ephemeral_storage_gib" {
  description = "Fargate ephemeral storage of a task in GiB (21 to 200; 20 without the setting): the image, the scratch volumes and the usage spool share it."
  type        = number
  default     = 30

  validation {
    condition     = var.ephemeral_storage_gib >= 21 && var.ephemeral_storage_gib <= 200
    error_message = "ephemeral_storage_gib must be between 21 and 200 (the Fargate range)."
  }
}

variable "usage_spool_gib" {
  description = "JETWAY_USAGE_SPOOL_BYTES in GiB: the usage records a task keeps on its ephemeral storage through a Firehose outage (about 1.5 million records a GiB, over 4 hours at 100 requests/s); when full the oldest are dropped and the usage-records-dropped alarm fires. At most ephemeral_storage_gib - 10."
  type        = number
  default     = 8

  validation {
    condition     = var.usage_spool_gib >= 1
    error_message = "usage_spool_gib must be at least 1."
  }
}

variable "max_inflight" {
  description = "JETWAY_MAX_INFLIGHT: model calls in flight per task before new requests get busy."
  type        = number
  default     = 2000
}

variable "quota_table_name" {
  description = "JETWAY_QUOTA_TABLE."
  type        = string
}

variable "requests_table_name" {
  description = "JETWAY_REQUESTS_TABLE."
  type        = string
}

variable "cache_table_name" {
  description = "JETWAY_CACHE_TABLE."
  type        = string
}

variable "members_table_name" {
  description = "JETWAY_MEMBERS_TABLE: the fleet membership table."
  type        = string
}

variable "config_table_name" {
  description = "JETWAY_CONFIG_TABLE: the config table (tenants, apps, user overrides and models as data, changed through the admin API)."
  type        = string
}

variable "quota_alert_topic_arn" {
  description = "JETWAY_ALERT_SNS_TOPIC_ARN: the SNS topic the gateway publishes quota threshold events to."
  type        = string
}

variable "firehose_stream_name" {
  description = "JETWAY_FIREHOSE_STREAM."
  type        = string
}

variable "config_yaml" {
  description = "The tenants file (models, tenants, apps, limits). An init container writes it to the task's config volume; the gateway reads it from JETWAY_CONFIG."
  type        = string
}

variable "config_init_image" {
  description = "Image of the init container that writes the tenants file (needs sh and base64). Mirror it to ECR when tasks have no NAT."
  type        = string
  default     = "public.ecr.aws/docker/library/busybox:1.37"
}

variable "container_user" {
  description = "uid:gid the gateway runs as (never root)."
  type        = string
  default     = "65532:65532"

  validation {
    condition     = !startswith(var.container_user, "0:") && var.container_user != "0" && var.container_user != "root"
    error_message = "The gateway must not run as root."
  }
}

variable "nofile_limit" {
  description = "Open files per task (every WebSocket is one file descriptor)."
  type        = number
  default     = 65536
}

variable "health_check_grace_period" {
  description = "Seconds after a task starts before failed load balancer health checks count."
  type        = number
  default     = 30
}

variable "container_insights" {
  description = "Container Insights on the cluster: enhanced, enabled or disabled."
  type        = string
  default     = "enabled"
}

variable "log_retention_days" {
  description = "Retention of the gateway's log group (application logs and EMF metrics lines)."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "otel_collector_image" {
  description = "Image of the OpenTelemetry collector sidecar (AWS Distro for OpenTelemetry) that sends the gateway's traces to X-Ray, pinned to an exact tag and mirrored to ECR; empty: no sidecar, tracing off."
  type        = string
  default     = ""
}

variable "trace_sample_ratio" {
  description = "Share of new traces sampled (OTEL_TRACES_SAMPLER_ARG of parentbased_traceidratio); a client's sampled traceparent is always followed."
  type        = number
  default     = 0.05

  validation {
    condition     = var.trace_sample_ratio >= 0 && var.trace_sample_ratio <= 1
    error_message = "trace_sample_ratio must be between 0 and 1."
  }
}
