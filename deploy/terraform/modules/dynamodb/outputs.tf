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

output "members_table_name" {
  description = "Name of the fleet membership table (JETWAY_MEMBERS_TABLE)."
  value       = aws_dynamodb_table.this["members"].name
}

output "members_table_arn" {
  description = "ARN of the fleet membership table (the task reads and writes members only, and scans it)."
  value       = aws_dynamodb_table.this["members"].arn
}

output "requests_by_server_index_arn" {
  description = "ARN of the requests table's by_server index (server, ended_ms; keys only), which the task queries for a dead server's records."
  value       = "${aws_dynamodb_table.this["requests"].arn}/index/${local.requests_by_server.name}"
}

output "config_table_name" {
  description = "Name of the config table (JETWAY_CONFIG_TABLE)."
  value       = aws_dynamodb_table.this["config"].name
}

output "config_table_arn" {
  description = "ARN of the config table (the task reads and writes its documents and audit entries, with its own permissions)."
  value       = aws_dynamodb_table.this["config"].arn
}

output "config_audit_index_arns" {
  description = "ARNs of the config table's audit_tenant and audit_all indexes (keys only), which the task queries for the audit trail."
  value       = [for i in local.config_audit : "${aws_dynamodb_table.this["config"].arn}/index/${i.name}"]
}

output "table_names" {
  description = "All table names by role (quota, requests, cache, members, config)."
  value       = { for k, t in aws_dynamodb_table.this : k => t.name }
}

output "table_arns" {
  description = "The ARNs of the quota, requests and cache tables by role (members and config: members_table_arn and config_table_arn, each with its own permissions)."
  value       = { for k, t in aws_dynamodb_table.this : k => t.arn if contains(["quota", "requests", "cache"], k) }
}
