# Prod: three AZs, a NAT gateway per AZ plus interface endpoints, at least two
# tasks, Cognito threat protection enforced, everything protected from destroy.
module "jetway" {
  source = "../../modules/jetway"

  name                 = "jetway-prod"
  image_tag            = var.image_tag
  domain_name          = var.domain_name
  route53_zone_id      = var.route53_zone_id
  certificate_arn      = var.certificate_arn
  config_template_file = "${path.module}/jetway.yaml.tftpl"

  vpc_cidr           = "10.50.0.0/16"
  az_count           = 3
  single_nat_gateway = false

  bedrock_model_ids             = var.bedrock_model_ids
  bedrock_inference_profile_ids = var.bedrock_inference_profile_ids
  bedrock_guardrail_ids         = var.bedrock_guardrail_ids
  bedrock_regions               = var.bedrock_regions
  bedrock_assume_role_arns      = var.bedrock_assume_role_arns
  tenant_inference_profiles     = var.tenant_inference_profiles
  apps                          = var.apps
  allowed_origins               = var.allowed_origins

  log_level   = "info"
  task_cpu    = 1024
  task_memory = 2048
  min_tasks   = 3
  max_tasks   = 30

  cognito_user_pool_tier         = "PLUS"
  cognito_advanced_security_mode = "ENFORCED"

  alarm_emails       = var.alarm_emails
  quota_alert_emails = var.quota_alert_emails
  tracing_enabled    = var.tracing_enabled
  trace_sample_ratio = var.trace_sample_ratio
  protect_data       = true
  log_retention_days = 90
}
