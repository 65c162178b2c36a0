output "dashboard_name" {
  description = "Name of the CloudWatch dashboard."
  value       = aws_cloudwatch_dashboard.this.dashboard_name
}

output "dashboard_url" {
  description = "Console URL of the dashboard."
  value       = "https://${local.region}.console.aws.amazon.com/cloudwatch/home?region=${local.region}#dashboards/dashboard/${aws_cloudwatch_dashboard.this.dashboard_name}"
}

output "alarm_topic_arn" {
  description = "SNS topic every alarm notifies (subscribe pagers or chat here)."
  value       = aws_sns_topic.alarms.arn
}

output "quota_alert_topic_arn" {
  description = "SNS topic of the gateway's quota threshold events (JETWAY_ALERT_SNS_TOPIC_ARN; the task role may publish to it)."
  value       = aws_sns_topic.quota_alerts.arn
}
