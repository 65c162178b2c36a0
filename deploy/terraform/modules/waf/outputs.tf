output "web_acl_arn" {
  description = "ARN of the web ACL."
  value       = aws_wafv2_web_acl.this.arn
}

output "web_acl_name" {
  description = "Name of the web ACL (the WebACL dimension of AWS/WAFV2 metrics)."
  value       = aws_wafv2_web_acl.this.name
}

output "log_group_name" {
  description = "Log group of the WAF logs."
  value       = aws_cloudwatch_log_group.waf.name
}
