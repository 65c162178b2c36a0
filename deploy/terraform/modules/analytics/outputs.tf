output "firehose_stream_name" {
  description = "Delivery stream of the usage records (JETWAY_FIREHOSE_STREAM)."
  value       = aws_kinesis_firehose_delivery_stream.usage.name
}

output "firehose_stream_arn" {
  description = "ARN of the delivery stream (the task role may put records to it only)."
  value       = aws_kinesis_firehose_delivery_stream.usage.arn
}

output "bucket_name" {
  description = "Bucket of the Parquet usage files (usage/), delivery errors (errors/) and Athena results (athena-results/)."
  value       = aws_s3_bucket.usage.id
}

output "glue_database_name" {
  description = "Glue database of the usage table."
  value       = aws_glue_catalog_database.this.name
}

output "glue_table_name" {
  description = "Glue table of the usage records."
  value       = aws_glue_catalog_table.usage.name
}

output "athena_workgroup" {
  description = "Athena workgroup with the named queries."
  value       = aws_athena_workgroup.this.name
}
