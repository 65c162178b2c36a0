output "websocket_url" {
  description = "Where clients connect."
  value       = "wss://${var.domain_name}/v1/ws"
}

output "alb_dns_name" {
  description = "DNS name of the load balancer (point domain_name here when DNS is managed elsewhere)."
  value       = module.alb.dns_name
}

output "ecr_repository_url" {
  description = "Push the gateway image here."
  value       = module.ecr.repository_url
}

output "image" {
  description = "The image the service runs."
  value       = "${module.ecr.repository_url}:${var.image_tag}"
}

output "user_pool_id" {
  description = "Cognito user pool (create users and add them to tenant:<id> groups here)."
  value       = module.cognito.user_pool_id
}

output "issuer" {
  description = "JETWAY_AUTH_ISSUER of the tasks."
  value       = module.cognito.issuer
}

output "app_client_ids" {
  description = "Cognito app client id per \"<tenant>/<app>\"."
  value       = module.cognito.app_client_ids
}

output "tenant_groups" {
  description = "The tenant:<id> groups."
  value       = module.cognito.tenant_groups
}

output "cluster_name" {
  description = "ECS cluster."
  value       = module.ecs.cluster_name
}

output "service_name" {
  description = "ECS service."
  value       = module.ecs.service_name
}

output "task_definition_arn" {
  description = "Current task definition revision."
  value       = module.ecs.task_definition_arn
}

output "log_group_name" {
  description = "Gateway log group."
  value       = module.ecs.log_group_name
}

output "table_names" {
  description = "DynamoDB tables by role."
  value       = module.dynamodb.table_names
}

output "config_table_name" {
  description = "The config table (JETWAY_CONFIG_TABLE of the tasks)."
  value       = module.dynamodb.config_table_name
}

output "firehose_stream_name" {
  description = "Usage delivery stream."
  value       = module.analytics.firehose_stream_name
}

output "usage_bucket" {
  description = "Bucket of the Parquet usage records and Athena results."
  value       = module.analytics.bucket_name
}

output "athena_workgroup" {
  description = "Athena workgroup with the named usage queries."
  value       = module.analytics.athena_workgroup
}

output "glue_database" {
  description = "Glue database of the usage table."
  value       = module.analytics.glue_database_name
}

output "dashboard_url" {
  description = "The control tower dashboard."
  value       = module.observability.dashboard_url
}

output "alarm_topic_arn" {
  description = "SNS topic of every alarm."
  value       = module.observability.alarm_topic_arn
}

output "quota_alert_topic_arn" {
  description = "SNS topic of the quota threshold events (JETWAY_ALERT_SNS_TOPIC_ARN of the tasks; subscribe here)."
  value       = module.observability.quota_alert_topic_arn
}

output "web_acl_arn" {
  description = "WAF web ACL in front of the load balancer."
  value       = module.waf.web_acl_arn
}

output "nat_public_ips" {
  description = "Egress addresses of the tasks."
  value       = module.network.nat_public_ips
}

output "tenant_inference_profile_arns" {
  description = "ARN of each application inference profile of tenant_inference_profiles, by its key."
  value       = { for k, p in aws_bedrock_inference_profile.tenant : k => p.arn }
}

output "tenant_bedrock_profiles" {
  description = "The same ARNs as each tenant's bedrock_profiles (tenant id -> {model id -> ARN}), ready to paste into the tenants file or the admin API."
  value = {
    for t in distinct([for p in var.tenant_inference_profiles : p.tenant]) : t => {
      for k, p in var.tenant_inference_profiles : p.model => aws_bedrock_inference_profile.tenant[k].arn if p.tenant == t
    }
  }
}

output "task_role_arn" {
  description = "The gateway's task role: the principal that placement roles in other accounts trust (docs/deploy.md, \"Placements in other accounts\")."
  value       = module.iam.task_role_arn
}
