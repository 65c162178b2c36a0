data "aws_region" "current" {}

locals {
  container_name = "jetway"
  config_dir     = "/etc/jetway"
  config_path    = "${local.config_dir}/jetway.yaml"

  # The gateway's settings (docs/configuration.md). A test checks that every
  # name here is documented there, and the listen ports against the load balancer.
  environment = {
    JETWAY_LISTEN                = "0.0.0.0:${var.app_port}"
    JETWAY_ADMIN_LISTEN          = "0.0.0.0:${var.admin_port}"
    JETWAY_CONFIG                = local.config_path
    JETWAY_AUTH_ISSUER           = var.auth_issuer
    JETWAY_ALLOWED_ORIGINS       = join(",", var.allowed_origins)
    JETWAY_DRAIN_TIMEOUT         = "${var.drain_timeout_seconds}s"
    JETWAY_HEALTH_CHECK_INTERVAL = "${var.health_check_interval}s"
    JETWAY_SELF_DRAIN_MISSES     = tostring(var.self_drain_misses)
    # Explicit, though it is the gateway's default: the ALB's checks always
    # send this prefix and only they may arm self-drain.
    JETWAY_HEALTH_CHECK_USER_AGENT = var.health_check_user_agent
    JETWAY_LOG_LEVEL               = var.log_level
    JETWAY_QUOTA_TABLE             = var.quota_table_name
    JETWAY_REQUESTS_TABLE          = var.requests_table_name
    JETWAY_CACHE_TABLE             = var.cache_table_name
    JETWAY_MEMBERS_TABLE           = var.members_table_name
    JETWAY_CONFIG_TABLE            = var.config_table_name
    JETWAY_ALERT_SNS_TOPIC_ARN     = var.quota_alert_topic_arn
    JETWAY_FIREHOSE_STREAM         = var.firehose_stream_name
    JETWAY_USAGE_SPOOL_DIR         = local.usage_spool_dir
    JETWAY_USAGE_SPOOL_BYTES       = tostring(var.usage_spool_gib * 1073741824)
    JETWAY_EMF                     = "stdout"
    JETWAY_MAX_INFLIGHT            = tostring(var.max_inflight)
    AWS_REGION                     = data.aws_region.current.region
    # The Go runtime's soft memory limit, 70% of the task's memory (the
    # collector sidecar and the page cache share the rest): without it the
    # heap may grow to twice what is live, and a task streaming to 200
    # sessions (70 answers a second) reached 945 MiB of RSS in 10 minutes as
    # answers filled the resume window's budget (docs/benchmarks.md, "Soak
    # at 200 sessions").
    GOMEMLIMIT = "${floor(var.memory * 0.7)}MiB"
    # Tracing (docs/operations.md, "Tracing"): spans go to the collector
    # sidecar on the task's loopback; an empty endpoint leaves tracing off.
    OTEL_EXPORTER_OTLP_ENDPOINT = local.tracing ? "http://127.0.0.1:4318" : ""
    OTEL_TRACES_SAMPLER         = "parentbased_traceidratio"
    OTEL_TRACES_SAMPLER_ARG     = tostring(var.trace_sample_ratio)
  }

  tracing = var.otel_collector_image != ""

  # The usage spool (docs/operations.md, "Usage records through a Firehose
  # outage") on a task-scoped volume, which Fargate keeps on the task's
  # ephemeral storage: it survives a restart of the gateway container, not
  # the task.
  usage_spool_dir = "/var/spool/jetway-usage"

  # The AWS Distro for OpenTelemetry collector: OTLP/HTTP in on loopback,
  # X-Ray out. The request id, tenant and app become X-Ray annotations
  # (searchable: annotation.jetway_request_id = "...").
  collector_config = <<-EOT
    receivers:
      otlp:
        protocols:
          http:
            endpoint: 127.0.0.1:4318
    processors:
      batch:
        timeout: 1s
    exporters:
      awsxray:
        indexed_attributes: [jetway.request_id, jetway.tenant, jetway.app, jetway.outcome]
    service:
      pipelines:
        traces:
          receivers: [otlp]
          processors: [batch]
          exporters: [awsxray]
  EOT

  collector = local.tracing ? [
    {
      name                   = "otel-collector"
      image                  = var.otel_collector_image
      essential              = false # the gateway serves on without traces
      readonlyRootFilesystem = true
      environment            = [{ name = "AOT_CONFIG_CONTENT", value = local.collector_config }]
      logConfiguration       = { logDriver = "awslogs", options = merge(local.log_options, { awslogs-stream-prefix = "otel-collector" }) }
    },
  ] : []

  log_options = {
    awslogs-group         = aws_cloudwatch_log_group.this.name
    awslogs-region        = data.aws_region.current.region
    mode                  = "non-blocking"
    max-buffer-size       = "25m"
    awslogs-stream-prefix = local.container_name
  }
}

resource "aws_cloudwatch_log_group" "this" {
  name              = "/ecs/${var.name}"
  retention_in_days = var.log_retention_days

  tags = var.tags
}

resource "aws_ecs_cluster" "this" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = var.container_insights
  }

  tags = var.tags
}

resource "aws_security_group" "task" {
  name_prefix = "${var.name}-task-"
  description = "Jetway tasks: main and admin ports from the load balancer only"
  vpc_id      = var.vpc_id

  tags = merge(var.tags, { Name = "${var.name}-task" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "app" {
  security_group_id            = aws_security_group.task.id
  description                  = "WebSocket traffic from the load balancer"
  referenced_security_group_id = var.alb_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = var.app_port
  to_port                      = var.app_port
}

resource "aws_vpc_security_group_ingress_rule" "admin" {
  security_group_id            = aws_security_group.task.id
  description                  = "Health checks (/readyz) from the load balancer"
  referenced_security_group_id = var.alb_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = var.admin_port
  to_port                      = var.admin_port
}

resource "aws_vpc_security_group_egress_rule" "https" {
  security_group_id = aws_security_group.task.id
  description       = "HTTPS to AWS APIs (Bedrock, DynamoDB, Firehose, ECR, Logs) and the Cognito JWKS"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_ecs_task_definition" "this" {
  family                   = var.name
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  execution_role_arn       = var.execution_role_arn
  task_role_arn            = var.task_role_arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  ephemeral_storage {
    size_in_gib = var.ephemeral_storage_gib
  }

  # Task-scoped scratch volumes: the root filesystem is read-only.
  volume {
    name = "config"
  }

  volume {
    name = "usage-spool"
  }

  volume {
    name = "tmp"
  }

  container_definitions = jsonencode(concat([
    {
      # Writes the tenants file into the shared volume, then exits; the gateway
      # starts only after it succeeded. The file travels base64-encoded as an
      # argument so no shell quoting can alter it.
      name                   = "config"
      image                  = var.config_init_image
      essential              = false
      readonlyRootFilesystem = true
      command                = ["sh", "-c", "printf '%s' \"$0\" | base64 -d > ${local.config_path}", base64encode(var.config_yaml)]
      mountPoints            = [{ sourceVolume = "config", containerPath = local.config_dir, readOnly = false }]
      logConfiguration       = { logDriver = "awslogs", options = merge(local.log_options, { awslogs-stream-prefix = "config" }) }
    },
    {
      name                   = local.container_name
      image                  = var.image
      essential              = true
      user                   = var.container_user
      readonlyRootFilesystem = true
      stopTimeout            = var.stop_timeout
      dependsOn = concat([{ containerName = "config", condition = "SUCCESS" }],
      local.tracing ? [{ containerName = "otel-collector", condition = "START" }] : [])

      portMappings = [
        { name = "http", containerPort = var.app_port, protocol = "tcp" },
        { name = "admin", containerPort = var.admin_port, protocol = "tcp" },
      ]

      ulimits = [{ name = "nofile", softLimit = var.nofile_limit, hardLimit = var.nofile_limit }]

      environment = [for k in sort(keys(local.environment)) : { name = k, value = local.environment[k] }]

      mountPoints = [
        { sourceVolume = "config", containerPath = local.config_dir, readOnly = true },
        { sourceVolume = "tmp", containerPath = "/tmp", readOnly = false },
        { sourceVolume = "usage-spool", containerPath = local.usage_spool_dir, readOnly = false },
      ]

      logConfiguration = { logDriver = "awslogs", options = local.log_options }
    },
  ], local.collector))

  tags = var.tags

  lifecycle {
    precondition {
      condition     = var.usage_spool_gib <= var.ephemeral_storage_gib - 10
      error_message = "usage_spool_gib must leave 10 GiB of ephemeral_storage_gib to the image and the scratch volumes."
    }
    precondition {
      condition     = var.drain_timeout_seconds < var.stop_timeout
      error_message = "drain_timeout_seconds must be below stop_timeout, or ECS kills the task before its drain ends."
    }
    precondition {
      condition     = var.self_drain_misses == 0 || var.deregistration_delay >= (var.self_drain_misses + 1) * var.health_check_interval + var.drain_timeout_seconds + 10
      error_message = "deregistration_delay must cover the task's detection of the deregistration ((self_drain_misses + 1) x health_check_interval) plus drain_timeout_seconds plus 10 s, or the load balancer cuts sockets before the drain ends."
    }
  }
}

resource "aws_ecs_service" "this" {
  name             = var.name
  cluster          = aws_ecs_cluster.this.id
  task_definition  = aws_ecs_task_definition.this.arn
  desired_count    = var.desired_count
  launch_type      = "FARGATE"
  platform_version = "LATEST"

  health_check_grace_period_seconds  = var.health_check_grace_period
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  enable_ecs_managed_tags            = true
  propagate_tags                     = "SERVICE"

  # A deployment whose tasks never become healthy is stopped and the previous
  # task definition is restored.
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.private_subnet_ids
    security_groups  = [aws_security_group.task.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = var.target_group_arn
    container_name   = local.container_name
    container_port   = var.app_port
  }

  tags = var.tags

  lifecycle {
    # The autoscaling module owns the running count after creation.
    ignore_changes = [desired_count]
  }
}
