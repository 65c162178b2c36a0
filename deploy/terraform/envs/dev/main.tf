# Dev: one NAT gateway and no interface endpoints (cheaper), one task minimum,
# nothing protected from destroy.
module "jetway" {
  source = "../../modules/jetway"

  name                 = "jetway-dev"
  image_tag            = var.image_tag
  domain_name          = var.domain_name
  route53_zone_id      = var.route53_zone_id
  certificate_arn      = var.certificate_arn
  config_template_file = "${path.module}/jetway.yaml.tftpl"

  vpc_cidr            = "10.40.0.0/16"
  az_count            = 2
  single_nat_gateway  = true
  interface_endpoints = []

  bedrock_model_ids             = var.bedrock_model_ids
  bedrock_inference_profile_ids = var.bedrock_inference_profile_ids
  bedrock_guardrail_ids         = var.bedrock_guardrail_ids
  bedrock_regions               = var.bedrock_regions
  bedrock_assume_role_arns      = var.bedrock_assume_role_arns
  tenant_inference_profiles     = var.tenant_inference_profiles
  apps                          = var.apps
  allowed_origins               = var.allowed_origins

  log_level   = "debug"
  task_cpu    = 512
  task_memory = 1024
  min_tasks   = 1
  max_tasks   = 3

  alarm_emails       = var.alarm_emails
  quota_alert_emails = var.quota_alert_emails
  tracing_enabled    = var.tracing_enabled
  trace_sample_ratio = var.trace_sample_ratio
  protect_data       = false
  log_retention_days = 14
}
