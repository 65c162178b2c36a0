output "quota_table_name" {
  description = "Name of the quota table (JETWAY_QUOTA_TABLE)."
  value       = aws_dynamodb_table.this["quota"].name
}

output "requests_table_name" {
  description = "Name of the request records table (JETWAY_REQUESTS_TABLE)."
  value       = aws_dynamodb_table.this["requests"].name
}

output "cache_table_name" {
  description = "Name of the response cache table (JETWAY_CACHE_TABLE)."
  value       = aws_dynamodb_table.this["cache"].name
}

output "table_names" {
  description = "All table names by role (quota, requests, cache)."
  value       = { for k, t in aws_dynamodb_table.this : k => t.name }
}

output "table_arns" {
  description = "All table ARNs by role (quota, requests, cache)."
  value       = { for k, t in aws_dynamodb_table.this : k => t.arn }
}
