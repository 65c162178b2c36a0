# The role ARNs wait for their policies, so ECS never starts a task whose role
# exists but cannot yet pull its image or write its logs.
output "task_role_arn" {
  description = "ARN of the gateway's task role."
  value       = aws_iam_role.task.arn
  depends_on  = [aws_iam_role_policy.task]
}

output "task_role_name" {
  description = "Name of the gateway's task role."
  value       = aws_iam_role.task.name
}

output "execution_role_arn" {
  description = "ARN of the ECS execution role."
  value       = aws_iam_role.execution.arn
  depends_on  = [aws_iam_role_policy.execution]
}
