data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  partition = data.aws_partition.current.partition
  region    = data.aws_region.current.region
  account   = data.aws_caller_identity.current.account_id

  database_name = replace("${var.name}_analytics", "-", "_")
  table_name    = "usage"
  usage_prefix  = "usage/"

  # The usage record (internal/telemetry.UsageRecord), one column per JSON
  # field, in struct order. A test compares this list with
  # telemetry.UsageColumns(); change both together.
  usage_columns = [
    { name = "request_id", type = "string" },
    { name = "session_id", type = "string" },
    { name = "ts", type = "string" },
    { name = "tenant", type = "string" },
    { name = "app", type = "string" },
    { name = "user", type = "string" },
    { name = "client_id", type = "string" },
    { name = "model", type = "string" },
    { name = "fallback_from", type = "string" },
    { name = "cached", type = "boolean" },
    { name = "outcome", type = "string" },
    { name = "status", type = "int" },
    { name = "input_tokens", type = "bigint" },
    { name = "output_tokens", type = "bigint" },
    { name = "reserved_tokens", type = "bigint" },
    { name = "cost_usd", type = "double" },
    { name = "ttft_ms", type = "bigint" },
    { name = "latency_ms", type = "bigint" },
    { name = "chunks", type = "int" },
    { name = "server", type = "string" },
    { name = "door", type = "string" },
    { name = "images", type = "int" },
    { name = "documents", type = "int" },
    { name = "tool_calls", type = "int" },
    { name = "cache_read_input_tokens", type = "bigint" },
    { name = "cache_write_input_tokens", type = "bigint" },
    { name = "cache_saved_usd", type = "double" },
    { name = "trace_id", type = "string" },
    { name = "record_id", type = "string" },
    # Placements and cost per tenant (issue 35): where the call was served
    # (region or region/account), the application inference profile ARN,
    # the service tier.
    { name = "placement", type = "string" },
    { name = "bedrock_profile", type = "string" },
    { name = "service_tier", type = "string" },
  ]

  # Zero-padded like telemetry.UsageRecord.PartitionPath (year=2026/month=01/...).
  partition_columns = [
    { name = "year", type = "string" },
    { name = "month", type = "string" },
    { name = "day", type = "string" },
    { name = "hour", type = "string" },
  ]
}

# ---------------------------------------------------------------- S3

resource "aws_s3_bucket" "usage" {
  bucket_prefix = "${var.name}-usage-"
  force_destroy = var.force_destroy

  tags = var.tags
}

resource "aws_s3_bucket_ownership_controls" "usage" {
  bucket = aws_s3_bucket.usage.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "usage" {
  bucket = aws_s3_bucket.usage.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "usage" {
  bucket = aws_s3_bucket.usage.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_versioning" "usage" {
  bucket = aws_s3_bucket.usage.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "usage" {
  bucket = aws_s3_bucket.usage.id

  rule {
    id     = "usage"
    status = "Enabled"

    filter {
      prefix = local.usage_prefix
    }

    transition {
      days          = var.infrequent_access_after_days
      storage_class = "STANDARD_IA"
    }

    expiration {
      days = var.usage_retention_days
    }

    noncurrent_version_expiration {
      noncurrent_days = 30
    }
  }

  rule {
    id     = "errors"
    status = "Enabled"

    filter {
      prefix = "errors/"
    }

    expiration {
      days = 30
    }
  }

  rule {
    id     = "athena-results"
    status = "Enabled"

    filter {
      prefix = "athena-results/"
    }

    expiration {
      days = var.athena_results_retention_days
    }

    noncurrent_version_expiration {
      noncurrent_days = 1
    }
  }

  rule {
    id     = "abort-incomplete-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }

  depends_on = [aws_s3_bucket_versioning.usage]
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid    = "DenyInsecureTransport"
    effect = "Deny"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:ListBucket",
    ]
    resources = [aws_s3_bucket.usage.arn, "${aws_s3_bucket.usage.arn}/*"]

    principals {
      type        = "AWS"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "usage" {
  bucket = aws_s3_bucket.usage.id
  policy = data.aws_iam_policy_document.bucket.json

  depends_on = [aws_s3_bucket_public_access_block.usage]
}

# ---------------------------------------------------------------- Glue

resource "aws_glue_catalog_database" "this" {
  name        = local.database_name
  description = "Jetway usage analytics (${var.name})"
}

resource "aws_glue_catalog_table" "usage" {
  database_name = aws_glue_catalog_database.this.name
  name          = local.table_name
  description   = "One row per request (internal/telemetry.UsageRecord), Parquet written by Firehose"
  table_type    = "EXTERNAL_TABLE"

  parameters = {
    EXTERNAL              = "TRUE"
    "classification"      = "parquet"
    "parquet.compression" = "SNAPPY"

    # Partition projection: Athena computes the partitions from these rules,
    # so no crawler or MSCK REPAIR is ever needed. digits=2 matches the
    # zero-padded month/day/hour of the S3 prefix.
    "projection.enabled"        = "true"
    "projection.year.type"      = "integer"
    "projection.year.range"     = "2025,2045"
    "projection.year.digits"    = "4"
    "projection.month.type"     = "integer"
    "projection.month.range"    = "1,12"
    "projection.month.digits"   = "2"
    "projection.day.type"       = "integer"
    "projection.day.range"      = "1,31"
    "projection.day.digits"     = "2"
    "projection.hour.type"      = "integer"
    "projection.hour.range"     = "0,23"
    "projection.hour.digits"    = "2"
    "storage.location.template" = "s3://${aws_s3_bucket.usage.id}/${local.usage_prefix}year=$${year}/month=$${month}/day=$${day}/hour=$${hour}/"
  }

  dynamic "partition_keys" {
    for_each = local.partition_columns

    content {
      name = partition_keys.value.name
      type = partition_keys.value.type
    }
  }

  storage_descriptor {
    location      = "s3://${aws_s3_bucket.usage.id}/${local.usage_prefix}"
    input_format  = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
    output_format = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"

    ser_de_info {
      name                  = "parquet"
      serialization_library = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"

      parameters = {
        "serialization.format" = "1"
      }
    }

    dynamic "columns" {
      for_each = local.usage_columns

      content {
        name = columns.value.name
        type = columns.value.type
      }
    }
  }
}

# ---------------------------------------------------------------- Firehose

resource "aws_cloudwatch_log_group" "firehose" {
  name              = "/aws/kinesisfirehose/${var.name}-usage"
  retention_in_days = var.log_retention_days

  tags = var.tags
}

resource "aws_cloudwatch_log_stream" "firehose" {
  name           = "DestinationDelivery"
  log_group_name = aws_cloudwatch_log_group.firehose.name
}

data "aws_iam_policy_document" "firehose_assume" {
  statement {
    sid     = "FirehoseAssume"
    effect  = "Allow"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["firehose.amazonaws.com"]
    }

    # Firehose passes the account id as the external id (confused-deputy guard).
    condition {
      test     = "StringEquals"
      variable = "sts:ExternalId"
      values   = [local.account]
    }
  }
}

resource "aws_iam_role" "firehose" {
  name               = "${var.name}-firehose"
  description        = "Firehose: write Parquet usage files, read the Glue schema, log delivery errors"
  assume_role_policy = data.aws_iam_policy_document.firehose_assume.json

  tags = var.tags
}

data "aws_iam_policy_document" "firehose" {
  statement {
    sid    = "WriteUsage"
    effect = "Allow"
    actions = [
      "s3:AbortMultipartUpload",
      "s3:GetBucketLocation",
      "s3:GetObject",
      "s3:ListBucket",
      "s3:ListBucketMultipartUploads",
      "s3:PutObject",
    ]
    resources = [aws_s3_bucket.usage.arn, "${aws_s3_bucket.usage.arn}/*"]
  }

  statement {
    sid    = "ReadSchema"
    effect = "Allow"
    actions = [
      "glue:GetTable",
      "glue:GetTableVersion",
      "glue:GetTableVersions",
    ]
    resources = [
      "arn:${local.partition}:glue:${local.region}:${local.account}:catalog",
      aws_glue_catalog_database.this.arn,
      aws_glue_catalog_table.usage.arn,
    ]
  }

  statement {
    sid       = "DeliveryLogs"
    effect    = "Allow"
    actions   = ["logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.firehose.arn}:log-stream:*"]
  }
}

resource "aws_iam_role_policy" "firehose" {
  name   = "jetway-usage-delivery"
  role   = aws_iam_role.firehose.id
  policy = data.aws_iam_policy_document.firehose.json
}

resource "aws_kinesis_firehose_delivery_stream" "usage" {
  name        = "${var.name}-usage"
  destination = "extended_s3"

  server_side_encryption {
    enabled  = true
    key_type = "AWS_OWNED_CMK"
  }

  extended_s3_configuration {
    role_arn   = aws_iam_role.firehose.arn
    bucket_arn = aws_s3_bucket.usage.arn

    # Same layout as telemetry.UsageRecord.PartitionPath, from the arrival hour (UTC).
    prefix              = "${local.usage_prefix}year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/"
    error_output_prefix = "errors/!{firehose:error-output-type}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/"

    buffering_size     = var.buffer_size_mb
    buffering_interval = var.buffer_interval_seconds
    compression_format = "UNCOMPRESSED" # Parquet compresses itself (SNAPPY)

    cloudwatch_logging_options {
      enabled         = true
      log_group_name  = aws_cloudwatch_log_group.firehose.name
      log_stream_name = aws_cloudwatch_log_stream.firehose.name
    }

    data_format_conversion_configuration {
      enabled = true

      input_format_configuration {
        deserializer {
          open_x_json_ser_de {}
        }
      }

      output_format_configuration {
        serializer {
          parquet_ser_de {
            compression = "SNAPPY"
          }
        }
      }

      schema_configuration {
        role_arn      = aws_iam_role.firehose.arn
        database_name = aws_glue_catalog_database.this.name
        table_name    = aws_glue_catalog_table.usage.name
        version_id    = "LATEST"
      }
    }
  }

  tags = var.tags

  depends_on = [aws_iam_role_policy.firehose]
}

# ---------------------------------------------------------------- Athena

resource "aws_athena_workgroup" "this" {
  name          = var.name
  description   = "Jetway usage queries (${var.name})"
  force_destroy = var.force_destroy

  configuration {
    enforce_workgroup_configuration    = true
    publish_cloudwatch_metrics_enabled = true
    bytes_scanned_cutoff_per_query     = var.athena_bytes_scanned_cutoff

    result_configuration {
      output_location = "s3://${aws_s3_bucket.usage.id}/athena-results/"

      encryption_configuration {
        encryption_option = "SSE_S3"
      }
    }
  }

  tags = var.tags
}

locals {
  table = "\"${local.database_name}\".\"${local.table_name}\""

  # Every query constrains year with a plain IN list first, so partition
  # projection only has to consider one or two years of hourly partitions.
  # Rates use DOUBLE literals (1e0): a literal like 1.0 is a DECIMAL on
  # Athena, and avg keeps its one decimal place. deploy/terraform's
  # TestNamedQueriesOnGatewayRecords runs each query on DuckDB.
  #
  # Each query counts a record once: Firehose may store one twice (a batch
  # resent after a lost answer, a spooled record drained after a timeout),
  # and every copy carries the same record_id, so the inner query keeps one
  # row per record_id (delivery = 1) of the partitions asked for. The test
  # delivers some records twice and checks no answer counts them twice.
  named_queries = {
    tokens-by-tenant-app-day = {
      description = "Tokens, requests and cost per tenant and app per day (last 30 days)"
      query       = <<-SQL
        SELECT year || '-' || month || '-' || day AS day, tenant, app,
               count(*) AS requests,
               sum(input_tokens) AS input_tokens,
               sum(output_tokens) AS output_tokens,
               round(sum(cost_usd), 4) AS cost_usd
        FROM (
          SELECT *, row_number() OVER (PARTITION BY record_id) AS delivery
          FROM ${local.table}
          WHERE year IN (date_format(current_date, '%Y'), date_format(current_date - interval '30' day, '%Y'))
            AND year || month || day >= date_format(current_date - interval '30' day, '%Y%m%d')
        )
        WHERE delivery = 1
        GROUP BY 1, 2, 3
        ORDER BY 1 DESC, cost_usd DESC
      SQL
    }
    ttft-latency-by-model = {
      description = "TTFT and latency percentiles per model, answered requests, last 24 hours"
      query       = <<-SQL
        SELECT model,
               count(*) AS requests,
               approx_percentile(ttft_ms, 0.5) AS ttft_p50_ms,
               approx_percentile(ttft_ms, 0.95) AS ttft_p95_ms,
               approx_percentile(latency_ms, 0.5) AS latency_p50_ms,
               approx_percentile(latency_ms, 0.95) AS latency_p95_ms
        FROM (
          SELECT *, row_number() OVER (PARTITION BY record_id) AS delivery
          FROM ${local.table}
          WHERE year IN (date_format(current_date, '%Y'), date_format(current_date - interval '1' day, '%Y'))
            AND year || month || day >= date_format(current_date - interval '1' day, '%Y%m%d')
            AND from_iso8601_timestamp(ts) > now() - interval '24' hour
            AND outcome = 'done' AND NOT cached
        )
        WHERE delivery = 1
        GROUP BY model
        ORDER BY requests DESC
      SQL
    }
    outcomes-by-hour = {
      description = "Requests per hour and outcome (done, quota_exceeded, busy, model_unavailable, ...), last 48 hours"
      query       = <<-SQL
        SELECT year || '-' || month || '-' || day || 'T' || hour AS hour, outcome, status,
               count(*) AS requests
        FROM (
          SELECT *, row_number() OVER (PARTITION BY record_id) AS delivery
          FROM ${local.table}
          WHERE year IN (date_format(current_date, '%Y'), date_format(current_date - interval '2' day, '%Y'))
            AND year || month || day >= date_format(current_date - interval '2' day, '%Y%m%d')
        )
        WHERE delivery = 1
        GROUP BY 1, 2, 3
        ORDER BY 1 DESC, requests DESC
      SQL
    }
    top-users-by-cost = {
      description = "The 50 users with the highest cost this month"
      query       = <<-SQL
        SELECT tenant, app, "user",
               count(*) AS requests,
               sum(input_tokens + output_tokens) AS tokens,
               round(sum(cost_usd), 4) AS cost_usd
        FROM (
          SELECT *, row_number() OVER (PARTITION BY record_id) AS delivery
          FROM ${local.table}
          WHERE year = date_format(current_date, '%Y') AND month = date_format(current_date, '%m')
        )
        WHERE delivery = 1
        GROUP BY 1, 2, 3
        ORDER BY cost_usd DESC
        LIMIT 50
      SQL
    }
    fallbacks-cache-interruptions = {
      description = "Fallback rate, cache-hit rate and interrupted requests per tenant and app, last 7 days"
      query       = <<-SQL
        SELECT tenant, app,
               count(*) AS requests,
               round(avg(CASE WHEN fallback_from <> '' THEN 1e0 ELSE 0e0 END), 4) AS fallback_rate,
               round(avg(CASE WHEN cached THEN 1e0 ELSE 0e0 END), 4) AS cache_hit_rate,
               sum(CASE WHEN outcome = 'interrupted' THEN 1 ELSE 0 END) AS interrupted
        FROM (
          SELECT *, row_number() OVER (PARTITION BY record_id) AS delivery
          FROM ${local.table}
          WHERE year IN (date_format(current_date, '%Y'), date_format(current_date - interval '7' day, '%Y'))
            AND year || month || day >= date_format(current_date - interval '7' day, '%Y%m%d')
        )
        WHERE delivery = 1
        GROUP BY 1, 2
        ORDER BY requests DESC
      SQL
    }
  }
}

resource "aws_athena_named_query" "this" {
  for_each = local.named_queries

  name        = each.key
  description = each.value.description
  workgroup   = aws_athena_workgroup.this.id
  database    = aws_glue_catalog_database.this.name
  query       = each.value.query
}
