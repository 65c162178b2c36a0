data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  partition = data.aws_partition.current.partition
  region    = data.aws_region.current.region
  account   = data.aws_caller_identity.current.account_id

  # The regions the gateway calls Bedrock in with its own credentials: this
  # one (models without placements) and those of the placements.
  bedrock_regions = distinct(concat([local.region], var.bedrock_regions))

  # The system inference profiles application inference profiles copy from.
  source_profile_ids = [for arn in var.bedrock_profile_source_arns : split("/", arn)[1] if strcontains(arn, ":inference-profile/")]

  # An inference profile id is a geography prefix plus a model id
  # (us.anthropic.claude-...); the profile routes to that model in several regions.
  profile_model_ids = distinct([for id in concat(var.bedrock_inference_profile_ids, local.source_profile_ids) : replace(id, "/^[a-z]+\\./", "")])

  # Every model and profile in every region above; an application inference
  # profile (a tenant's, for cost allocation) with the foundation model or
  # system profile it copies from, which AWS checks too.
  bedrock_resources = concat(
    flatten([for r in local.bedrock_regions : [for id in var.bedrock_model_ids : "arn:${local.partition}:bedrock:${r}::foundation-model/${id}"]]),
    flatten([for r in local.bedrock_regions : [for id in var.bedrock_inference_profile_ids : "arn:${local.partition}:bedrock:${r}:${local.account}:inference-profile/${id}"]]),
    [for id in local.profile_model_ids : "arn:${local.partition}:bedrock:*::foundation-model/${id}"],
    var.bedrock_profile_source_arns,
    var.bedrock_tenant_profile_arns,
  )

  guardrail_arns = [for id in var.bedrock_guardrail_ids : "arn:${local.partition}:bedrock:${local.region}:${local.account}:guardrail/${id}"]

  log_streams = "${var.log_group_arn}:log-stream:*"
}

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    sid     = "EcsTasksAssume"
    effect  = "Allow"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }

    # Confused-deputy guard: only ECS acting for this account may assume the roles.
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:ecs:${local.region}:${local.account}:*"]
    }
  }
}

# The task role: what the gateway process itself may do. Nothing else.
resource "aws_iam_role" "task" {
  name               = "${var.name}-task"
  description        = "Jetway gateway task: stream from the configured Bedrock models, its five tables, its delivery stream, its alert topic, its log group"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json

  tags = var.tags
}

data "aws_iam_policy_document" "task" {
  statement {
    sid       = "BedrockStream"
    effect    = "Allow"
    actions   = ["bedrock:InvokeModelWithResponseStream"]
    resources = local.bedrock_resources
  }

  # Placements in other accounts: the gateway assumes exactly these roles
  # (each trusts this task role); no statement at all without them.
  dynamic "statement" {
    for_each = length(var.bedrock_assume_role_arns) > 0 ? [1] : []

    content {
      sid       = "PlacementRoles"
      effect    = "Allow"
      actions   = ["sts:AssumeRole"]
      resources = var.bedrock_assume_role_arns
    }
  }

  dynamic "statement" {
    for_each = length(local.guardrail_arns) > 0 ? [1] : []

    content {
      sid       = "BedrockGuardrails"
      effect    = "Allow"
      actions   = ["bedrock:ApplyGuardrail"]
      resources = local.guardrail_arns
    }
  }

  statement {
    sid    = "Tables"
    effect = "Allow"
    actions = [
      "dynamodb:DescribeTable",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:Query",
    ]
    resources = var.dynamodb_table_arns
  }

  # Membership: each server writes and deletes its own item and reads the
  # fleet's with a Scan (a handful of items). Nothing else on that table.
  statement {
    sid    = "Members"
    effect = "Allow"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:Scan",
    ]
    resources = [var.members_table_arn]
  }

  # A survivor finds a dead server's request records through the index.
  statement {
    sid       = "RequestsByServer"
    effect    = "Allow"
    actions   = ["dynamodb:Query"]
    resources = [var.requests_by_server_index_arn]
  }

  # The config table (JETWAY_CONFIG_TABLE): the admin API's versioned
  # documents and their audit entries, read and written by every server.
  statement {
    sid    = "Config"
    effect = "Allow"
    actions = [
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:UpdateItem",
      "dynamodb:DeleteItem",
      "dynamodb:Query",
      "dynamodb:Scan",
      "dynamodb:BatchGetItem",
    ]
    resources = [var.config_table_arn]
  }

  # The audit trail is read through the config table's two indexes.
  statement {
    sid       = "ConfigAudit"
    effect    = "Allow"
    actions   = ["dynamodb:Query"]
    resources = var.config_audit_index_arns
  }

  # Quota threshold events (jetway.quota.threshold) to the alert topic.
  statement {
    sid       = "QuotaAlerts"
    effect    = "Allow"
    actions   = ["sns:Publish"]
    resources = [var.quota_alert_topic_arn]
  }

  statement {
    sid       = "UsageStream"
    effect    = "Allow"
    actions   = ["firehose:PutRecord", "firehose:PutRecordBatch"]
    resources = [var.firehose_stream_arn]
  }

  statement {
    sid       = "OwnLogGroup"
    effect    = "Allow"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = [var.log_group_arn, local.log_streams]
  }

  # The OpenTelemetry collector sidecar (ADOT) sends the gateway's spans to
  # X-Ray: its awsxray exporter needs these two, which have no
  # resource-level permissions. Only when tracing is on.
  dynamic "statement" {
    for_each = var.tracing ? [1] : []

    content {
      sid       = "XRayTraces"
      effect    = "Allow"
      actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
      resources = ["*"]
    }
  }
}

resource "aws_iam_role_policy" "task" {
  name   = "jetway-gateway"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task.json

  lifecycle {
    precondition {
      condition     = length(local.bedrock_resources) > 0
      error_message = "Set bedrock_model_ids, bedrock_inference_profile_ids or application inference profiles: the gateway needs at least one model."
    }
  }
}

# The execution role: what ECS needs to start the task (pull the image, ship logs).
resource "aws_iam_role" "execution" {
  name               = "${var.name}-execution"
  description        = "ECS agent for the Jetway task: pull its image, write its log group"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json

  tags = var.tags
}

data "aws_iam_policy_document" "execution" {
  # GetAuthorizationToken has no resource-level permissions.
  statement {
    sid       = "EcrLogin"
    effect    = "Allow"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"]
  }

  statement {
    sid    = "EcrPull"
    effect = "Allow"
    actions = [
      "ecr:BatchCheckLayerAvailability",
      "ecr:BatchGetImage",
      "ecr:GetDownloadUrlForLayer",
    ]
    resources = compact([var.ecr_repository_arn, var.collector_repository_arn])
  }

  statement {
    sid       = "Logs"
    effect    = "Allow"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = [var.log_group_arn, local.log_streams]
  }
}

resource "aws_iam_role_policy" "execution" {
  name   = "jetway-execution"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}
