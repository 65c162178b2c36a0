output "resource_id" {
  description = "Application Auto Scaling resource id of the service."
  value       = aws_appautoscaling_target.this.resource_id
}

output "policy_names" {
  description = "Names of the target tracking policies (CPU, sessions)."
  value       = [aws_appautoscaling_policy.cpu.name, aws_appautoscaling_policy.sessions.name]
}
