output "cluster_name" {
  description = "Name of the ECS cluster."
  value       = aws_ecs_cluster.this.name
}

output "cluster_arn" {
  description = "ARN of the ECS cluster."
  value       = aws_ecs_cluster.this.arn
}

output "service_name" {
  description = "Name of the ECS service."
  value       = aws_ecs_service.this.name
}

output "task_definition_arn" {
  description = "ARN of the current task definition revision (the rollback target is the previous one)."
  value       = aws_ecs_task_definition.this.arn
}

output "container_name" {
  description = "Name of the gateway container."
  value       = local.container_name
}

output "log_group_name" {
  description = "Log group of the gateway (application logs and EMF metric lines)."
  value       = aws_cloudwatch_log_group.this.name
}

output "log_group_arn" {
  description = "ARN of the gateway's log group."
  value       = aws_cloudwatch_log_group.this.arn
}

output "security_group_id" {
  description = "Security group of the tasks."
  value       = aws_security_group.task.id
}
