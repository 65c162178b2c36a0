output "arn" {
  description = "ARN of the load balancer (the WAF association)."
  value       = aws_lb.this.arn
}

output "arn_suffix" {
  description = "ARN suffix of the load balancer (the LoadBalancer dimension of AWS/ApplicationELB metrics)."
  value       = aws_lb.this.arn_suffix
}

output "dns_name" {
  description = "DNS name of the load balancer (alias target of the service's domain)."
  value       = aws_lb.this.dns_name
}

output "zone_id" {
  description = "Hosted zone of the load balancer (for Route 53 alias records)."
  value       = aws_lb.this.zone_id
}

output "target_group_arn" {
  description = "Target group the ECS service registers its tasks in."
  value       = aws_lb_target_group.app.arn
  # ECS refuses a target group that no listener forwards to yet.
  depends_on = [aws_lb_listener.https]
}

output "target_group_arn_suffix" {
  description = "ARN suffix of the target group (the TargetGroup dimension of AWS/ApplicationELB metrics)."
  value       = aws_lb_target_group.app.arn_suffix
}

output "security_group_id" {
  description = "Security group of the load balancer; the tasks accept traffic from it only."
  value       = aws_security_group.alb.id
}

output "https_listener_arn" {
  description = "ARN of the HTTPS listener."
  value       = aws_lb_listener.https.arn
}

output "health_check_user_agent" {
  description = "User-Agent prefix of the target group's health checks, fixed by AWS (the task's JETWAY_HEALTH_CHECK_USER_AGENT: only these checks arm self-drain)."
  value       = local.health_check_user_agent
}

output "health_check_interval" {
  description = "Seconds between health checks (the task's JETWAY_HEALTH_CHECK_INTERVAL)."
  value       = aws_lb_target_group.app.health_check[0].interval
}

output "deregistration_delay" {
  description = "Seconds a deregistered task keeps its open connections."
  value       = var.deregistration_delay
}
