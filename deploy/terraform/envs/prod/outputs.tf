output "websocket_url" {
  description = "Where clients connect."
  value       = module.jetway.websocket_url
}

output "alb_dns_name" {
  description = "DNS name of the load balancer."
  value       = module.jetway.alb_dns_name
}

output "ecr_repository_url" {
  description = "Push the gateway image here."
  value       = module.jetway.ecr_repository_url
}

output "image" {
  description = "The image the service runs."
  value       = module.jetway.image
}

output "user_pool_id" {
  description = "Cognito user pool."
  value       = module.jetway.user_pool_id
}

output "issuer" {
  description = "Token issuer the gateway trusts."
  value       = module.jetway.issuer
}

output "app_client_ids" {
  description = "Cognito app client id per \"<tenant>/<app>\"."
  value       = module.jetway.app_client_ids
}

output "tenant_groups" {
  description = "The tenant:<id> groups."
  value       = module.jetway.tenant_groups
}

output "cluster_name" {
  description = "ECS cluster."
  value       = module.jetway.cluster_name
}

output "service_name" {
  description = "ECS service."
  value       = module.jetway.service_name
}

output "task_definition_arn" {
  description = "Current task definition revision."
  value       = module.jetway.task_definition_arn
}

output "log_group_name" {
  description = "Gateway log group."
  value       = module.jetway.log_group_name
}

output "table_names" {
  description = "DynamoDB tables by role."
  value       = module.jetway.table_names
}

output "usage_bucket" {
  description = "Parquet usage records and Athena results."
  value       = module.jetway.usage_bucket
}

output "athena_workgroup" {
  description = "Athena workgroup with the named usage queries."
  value       = module.jetway.athena_workgroup
}

output "dashboard_url" {
  description = "The control tower dashboard."
  value       = module.jetway.dashboard_url
}

output "alarm_topic_arn" {
  description = "SNS topic of every alarm."
  value       = module.jetway.alarm_topic_arn
}

output "quota_alert_topic_arn" {
  description = "SNS topic of the quota threshold events (subscribe here)."
  value       = module.jetway.quota_alert_topic_arn
}

output "tenant_inference_profile_arns" {
  description = "ARN of each application inference profile of tenant_inference_profiles, by its key."
  value       = module.jetway.tenant_inference_profile_arns
}

output "tenant_bedrock_profiles" {
  description = "Tenant id -> {model id -> application inference profile ARN}: paste as each tenant's bedrock_profiles."
  value       = module.jetway.tenant_bedrock_profiles
}

output "task_role_arn" {
  description = "The gateway's task role: the principal that placement roles in other accounts trust (docs/deploy.md, \"Placements in other accounts\")."
  value       = module.jetway.task_role_arn
}
