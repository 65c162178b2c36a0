data "aws_region" "current" {}

locals {
  region = data.aws_region.current.region
  ns     = var.metric_namespace

  ecs_dims = { ClusterName = var.cluster_name, ServiceName = var.service_name }
  alb_dims = { LoadBalancer = var.alb_arn_suffix }
  tg_dims  = { LoadBalancer = var.alb_arn_suffix, TargetGroup = var.target_group_arn_suffix }

  # The "control tower": one widget per question an operator asks first.
  # Widgets are laid out two per row in this order.
  widgets = [
    {
      title  = "Open WebSocket sessions (total and per task)"
      stat   = "Sum"
      period = 60
      metrics = [
        [local.ns, "ActiveSessions", { label = "all tasks", stat = "Sum" }],
        [{ expression = "SEARCH('{${local.ns},Server} MetricName=\"ActiveSessions\"', 'Average', 60)", id = "pertask", label = "" }],
      ]
    },
    {
      title  = "Model calls in flight (total and per task)"
      stat   = "Sum"
      period = 60
      metrics = [
        [local.ns, "InFlight", { label = "all tasks", stat = "Sum" }],
        [{ expression = "SEARCH('{${local.ns},Server} MetricName=\"InFlight\"', 'Average', 60)", id = "pertask", label = "" }],
      ]
    },
    {
      # Sessions stay on the task they landed on unless a busy task asks idle
      # ones to move (issue 22): busiest / mean near 1 means the fleet is spread.
      title  = "Session spread across tasks (busiest, mean, quietest)"
      stat   = "Average"
      period = 60
      metrics = [
        [{ expression = "SEARCH('{${local.ns},Server} MetricName=\"ActiveSessions\"', 'Average', 60)", id = "pertask", label = "", visible = false }],
        [{ expression = "MAX(pertask)", id = "busiest", label = "busiest task" }],
        [{ expression = "AVG(pertask)", id = "mean", label = "mean per task" }],
        [{ expression = "MIN(pertask)", id = "quietest", label = "quietest task" }],
        [{ expression = "IF(mean > 0, busiest / mean, 1)", id = "ratio", label = "busiest / mean", yAxis = "right" }],
      ]
    },
    {
      title  = "Sessions moved per minute, takeovers of dead servers' requests"
      stat   = "Sum"
      period = 60
      metrics = [
        [local.ns, "SessionsMoved", { label = "sessions moved (all tasks)" }],
        [{ expression = "SEARCH('{${local.ns},Server} MetricName=\"SessionsMoved\"', 'Sum', 60)", id = "movedby", label = "" }],
        [local.ns, "Takeovers", { label = "takeovers (a server died)", color = "#d62728", yAxis = "right" }],
      ]
    },
    {
      title  = "Time to first token (ms)"
      stat   = "p50"
      period = 60
      metrics = [
        [local.ns, "TTFT", { label = "p50", stat = "p50" }],
        [local.ns, "TTFT", { label = "p95", stat = "p95" }],
        [local.ns, "Latency", { label = "latency p95", stat = "p95", yAxis = "right" }],
      ]
    },
    {
      title  = "Requests, errors (>= 500) and quota rejections (429)"
      stat   = "Sum"
      period = 60
      metrics = [
        [local.ns, "Requests", { label = "requests" }],
        [local.ns, "Errors", { label = "errors", color = "#d62728" }],
        [local.ns, "QuotaRejections", { label = "429 quota", color = "#ff7f0e" }],
      ]
    },
    {
      title  = "Errors and 429s by tenant/app"
      stat   = "Sum"
      period = 300
      metrics = [
        [{ expression = "SEARCH('{${local.ns},App,Tenant} MetricName=\"Errors\"', 'Sum', 300)", id = "errors", label = "errors" }],
        [{ expression = "SEARCH('{${local.ns},App,Tenant} MetricName=\"QuotaRejections\"', 'Sum', 300)", id = "quota", label = "429" }],
      ]
    },
    {
      # Prompt caching (docs/configuration.md): the share of input tokens
      # read from the models' caches, and what that saved.
      title  = "Prompt cache: hit ratio (% of input tokens) and USD saved"
      stat   = "Sum"
      period = 300
      metrics = [
        [local.ns, "InputTokens", { id = "uncached", visible = false }],
        [local.ns, "CacheReadTokens", { id = "read", visible = false }],
        [local.ns, "CacheWriteTokens", { id = "write", visible = false }],
        [local.ns, "CacheSavedMicroUSD", { id = "saved", visible = false }],
        [{ expression = "IF(uncached + read + write > 0, 100 * read / (uncached + read + write), 0)", id = "hit", label = "cache hit %" }],
        [{ expression = "saved / 1000000", id = "usd", label = "USD saved", yAxis = "right" }],
      ]
    },
    {
      title   = "DynamoDB throttled requests"
      stat    = "Sum"
      period  = 60
      metrics = flatten([for t in var.table_names : [["AWS/DynamoDB", "ReadThrottleEvents", "TableName", t], ["AWS/DynamoDB", "WriteThrottleEvents", "TableName", t]]])
    },
    {
      title   = "Bedrock throttles and server errors"
      stat    = "Sum"
      period  = 60
      metrics = flatten([for m in var.bedrock_model_ids : [["AWS/Bedrock", "InvocationThrottles", "ModelId", m], ["AWS/Bedrock", "InvocationServerErrors", "ModelId", m]]])
    },
    {
      title  = "Usage delivery (Firehose)"
      stat   = "Sum"
      period = 300
      metrics = [
        ["AWS/Firehose", "FailedConversion.Records", "DeliveryStreamName", var.firehose_stream_name, { label = "failed Parquet conversion" }],
        ["AWS/Firehose", "ThrottledRecords", "DeliveryStreamName", var.firehose_stream_name, { label = "throttled records" }],
        ["AWS/Firehose", "DeliveryToS3.DataFreshness", "DeliveryStreamName", var.firehose_stream_name, { label = "data freshness (s)", stat = "Maximum", yAxis = "right" }],
      ]
    },
    {
      title  = "Tasks: CPU, memory, running"
      stat   = "Average"
      period = 60
      metrics = [
        ["AWS/ECS", "CPUUtilization", "ClusterName", var.cluster_name, "ServiceName", var.service_name, { label = "CPU %" }],
        ["AWS/ECS", "MemoryUtilization", "ClusterName", var.cluster_name, "ServiceName", var.service_name, { label = "memory %" }],
        ["ECS/ContainerInsights", "RunningTaskCount", "ClusterName", var.cluster_name, "ServiceName", var.service_name, { label = "running tasks", yAxis = "right" }],
      ]
    },
    {
      title  = "Load balancer: connections, 5xx, healthy targets"
      stat   = "Sum"
      period = 60
      metrics = [
        ["AWS/ApplicationELB", "ActiveConnectionCount", "LoadBalancer", var.alb_arn_suffix, { label = "active connections" }],
        ["AWS/ApplicationELB", "NewConnectionCount", "LoadBalancer", var.alb_arn_suffix, { label = "new connections" }],
        ["AWS/ApplicationELB", "HTTPCode_ELB_5XX_Count", "LoadBalancer", var.alb_arn_suffix, { label = "ELB 5xx", yAxis = "right" }],
        ["AWS/ApplicationELB", "HTTPCode_Target_5XX_Count", "LoadBalancer", var.alb_arn_suffix, { label = "target 5xx", yAxis = "right" }],
        ["AWS/ApplicationELB", "HealthyHostCount", "TargetGroup", var.target_group_arn_suffix, "LoadBalancer", var.alb_arn_suffix, { label = "healthy tasks", stat = "Minimum", yAxis = "right" }],
      ]
    },
    {
      title  = "WAF: blocked and allowed requests"
      stat   = "Sum"
      period = 300
      metrics = [
        [{ expression = "SEARCH('{AWS/WAFV2,Region,Rule,WebACL} WebACL=\"${var.web_acl_name}\" MetricName=\"BlockedRequests\"', 'Sum', 300)", id = "blocked", label = "" }],
        ["AWS/WAFV2", "AllowedRequests", "WebACL", var.web_acl_name, "Region", local.region, "Rule", "ALL", { label = "allowed" }],
      ]
    },
  ]

  metric_widgets = [
    for i, w in local.widgets : {
      type   = "metric"
      x      = (i % 2) * 12
      y      = floor(i / 2) * 6
      width  = 12
      height = 6
      properties = {
        title   = w.title
        region  = local.region
        view    = "timeSeries"
        stacked = false
        stat    = w.stat
        period  = w.period
        metrics = w.metrics
      }
    }
  ]

  log_widgets = [
    {
      type   = "log"
      x      = 0
      y      = ceil(length(local.widgets) / 2) * 6
      width  = 24
      height = 6
      properties = {
        title  = "Gateway errors by message (Logs Insights)"
        region = local.region
        view   = "table"
        query  = "SOURCE '${var.log_group_name}' | filter level = 'error' | stats count(*) as n by msg | sort n desc | limit 20"
      }
    },
  ]
}

resource "aws_cloudwatch_dashboard" "this" {
  dashboard_name = var.name
  dashboard_body = jsonencode({ widgets = concat(local.metric_widgets, local.log_widgets) })
}

# ---------------------------------------------------------------- alarms

resource "aws_sns_topic" "alarms" {
  name = "${var.name}-alarms"

  tags = var.tags
}

resource "aws_sns_topic_subscription" "email" {
  for_each = toset(var.alarm_emails)

  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = each.value
}

locals {
  actions = [aws_sns_topic.alarms.arn]
}

# ---------------------------------------------------------------- quota alerts

# The gateway publishes each quota threshold event (jetway.quota.threshold:
# a scope's use in a window first reaching a limit's alert percentage) here,
# once per scope, window and threshold across the fleet. Only the task role
# publishes, so the topic can be encrypted with the AWS managed key, whose
# policy lets the account's principals use it through SNS (CloudWatch alarms
# cannot, which is why the alarms topic above is not encrypted).
resource "aws_sns_topic" "quota_alerts" {
  name              = "${var.name}-quota-alerts"
  kms_master_key_id = "alias/aws/sns"

  tags = var.tags
}

resource "aws_sns_topic_subscription" "quota_alert_email" {
  for_each = toset(var.quota_alert_emails)

  topic_arn = aws_sns_topic.quota_alerts.arn
  protocol  = "email"
  endpoint  = each.value
}

resource "aws_cloudwatch_metric_alarm" "healthy_tasks" {
  alarm_name          = "${var.name}-healthy-tasks"
  alarm_description   = "Fewer than ${var.min_healthy_tasks} tasks pass /readyz behind the load balancer."
  namespace           = "AWS/ApplicationELB"
  metric_name         = "HealthyHostCount"
  dimensions          = local.tg_dims
  statistic           = "Minimum"
  period              = 60
  evaluation_periods  = 3
  comparison_operator = "LessThanThreshold"
  threshold           = var.min_healthy_tasks
  treat_missing_data  = "breaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "alb_5xx" {
  alarm_name          = "${var.name}-alb-5xx"
  alarm_description   = "The load balancer or the tasks answered more than ${var.alb_5xx_threshold} HTTP 5xx in 5 minutes (WebSocket upgrades failing)."
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.alb_5xx_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  metric_query {
    id          = "total"
    expression  = "elb + target"
    label       = "5xx"
    return_data = true
  }

  metric_query {
    id = "elb"

    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_ELB_5XX_Count"
      dimensions  = local.alb_dims
      stat        = "Sum"
      period      = 300
    }
  }

  metric_query {
    id = "target"

    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_Target_5XX_Count"
      dimensions  = local.alb_dims
      stat        = "Sum"
      period      = 300
    }
  }

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "errors" {
  alarm_name          = "${var.name}-request-errors"
  alarm_description   = "More than ${var.errors_threshold} requests ended with status >= 500 in 5 minutes (Jetway Errors, all tasks)."
  namespace           = local.ns
  metric_name         = "Errors"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.errors_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "ttft" {
  alarm_name          = "${var.name}-ttft-p95"
  alarm_description   = "Time to first token p95 above ${var.ttft_p95_threshold_ms} ms for 15 minutes."
  namespace           = local.ns
  metric_name         = "TTFT"
  extended_statistic  = "p95"
  period              = 300
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.ttft_p95_threshold_ms
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

# A takeover is a survivor ending a dead server's request as interrupted and
# settling its quota: it happens only when a server died (SIGKILL, OOM, host
# loss), never on a deploy or a scale-in.
resource "aws_cloudwatch_metric_alarm" "takeovers" {
  alarm_name          = "${var.name}-takeovers"
  alarm_description   = "A server died with requests in flight: survivors took over its request records (Jetway Takeovers > 0 in 5 minutes). Find the stopped task and why (ECS stopped reason, OOM). See docs/operations.md."
  namespace           = local.ns
  metric_name         = "Takeovers"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

# Billing data lost: a task dropped usage records because its spool was full
# (a Firehose outage longer than the spool holds: usage_spool_gib), could
# not be written, or there was no spool and the buffer was full. Any drop
# alarms (docs/operations.md, "Usage records through a Firehose outage").
resource "aws_cloudwatch_metric_alarm" "usage_records_dropped" {
  alarm_name          = "${var.name}-usage-records-dropped"
  alarm_description   = "Usage records (billing data) were dropped (Jetway UsageRecordsDropped > 0 in 5 minutes): the local spool is full or unwritable during a Firehose outage. Check the Firehose stream and the tasks' usage_spool logs. See docs/operations.md."
  namespace           = local.ns
  metric_name         = "UsageRecordsDropped"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

# Busy tasks ask idle sessions to move at a bounded rate; many moves minute
# after minute mean the fleet keeps reshuffling instead of settling.
resource "aws_cloudwatch_metric_alarm" "sessions_moved" {
  alarm_name          = "${var.name}-sessions-moved"
  alarm_description   = "More than ${var.sessions_moved_per_minute_threshold} sessions a minute asked to move, for 3 minutes (Jetway SessionsMoved, all tasks): a balancing storm. See docs/operations.md."
  namespace           = local.ns
  metric_name         = "SessionsMoved"
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.sessions_moved_per_minute_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "cpu" {
  alarm_name          = "${var.name}-cpu"
  alarm_description   = "Service CPU above ${var.cpu_threshold}% for 15 minutes: autoscaling is at its maximum or too slow."
  namespace           = "AWS/ECS"
  metric_name         = "CPUUtilization"
  dimensions          = local.ecs_dims
  statistic           = "Average"
  period              = 300
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.cpu_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "dynamodb_throttles" {
  for_each = toset(var.table_names)

  alarm_name          = "${var.name}-ddb-throttles-${each.key}"
  alarm_description   = "Table ${each.key} throttled more than ${var.dynamodb_throttle_threshold} requests in 5 minutes (quota reserve/settle and resume slow down or fail with busy)."
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.dynamodb_throttle_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  metric_query {
    id          = "throttles"
    expression  = "reads + writes"
    label       = "throttled requests"
    return_data = true
  }

  metric_query {
    id = "reads"

    metric {
      namespace   = "AWS/DynamoDB"
      metric_name = "ReadThrottleEvents"
      dimensions  = { TableName = each.key }
      stat        = "Sum"
      period      = 300
    }
  }

  metric_query {
    id = "writes"

    metric {
      namespace   = "AWS/DynamoDB"
      metric_name = "WriteThrottleEvents"
      dimensions  = { TableName = each.key }
      stat        = "Sum"
      period      = 300
    }
  }

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "bedrock_throttles" {
  for_each = toset(var.bedrock_model_ids)

  alarm_name          = "${var.name}-bedrock-throttles-${replace(each.key, ":", "-")}"
  alarm_description   = "Bedrock throttled ${each.key} more than ${var.bedrock_throttle_threshold} times in 5 minutes; requests fall back or end with model_unavailable. Ask for a quota increase."
  namespace           = "AWS/Bedrock"
  metric_name         = "InvocationThrottles"
  dimensions          = { ModelId = each.key }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.bedrock_throttle_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "firehose_freshness" {
  alarm_name          = "${var.name}-usage-delivery-lag"
  alarm_description   = "Usage records wait more than ${var.firehose_freshness_threshold_seconds} s for delivery to S3."
  namespace           = "AWS/Firehose"
  metric_name         = "DeliveryToS3.DataFreshness"
  dimensions          = { DeliveryStreamName = var.firehose_stream_name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 2
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.firehose_freshness_threshold_seconds
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "firehose_conversion" {
  alarm_name          = "${var.name}-usage-conversion-failures"
  alarm_description   = "Usage records failed the Parquet conversion (the record no longer matches the Glue table?). They land under errors/ in the usage bucket."
  namespace           = "AWS/Firehose"
  metric_name         = "FailedConversion.Records"
  dimensions          = { DeliveryStreamName = var.firehose_stream_name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.actions
  ok_actions          = local.actions

  tags = var.tags
}
