# One Jetway environment: every module wired together. envs/<env> call this
# module with their own values; nothing here knows which environment it is.

locals {
  create_certificate = var.certificate_arn == null
  certificate_arn    = local.create_certificate ? aws_acm_certificate_validation.this[0].certificate_arn : var.certificate_arn

  # Each inference profile's id is also its ModelId in AWS/Bedrock metrics.
  bedrock_ids = concat(var.bedrock_model_ids, var.bedrock_inference_profile_ids)

  # With endpoints instead of NAT, the collector reaches X-Ray through one too.
  interface_endpoints = concat(var.interface_endpoints, var.tracing_enabled && length(var.interface_endpoints) > 0 ? ["xray"] : [])
}

module "network" {
  source = "../network"

  name                = var.name
  vpc_cidr            = var.vpc_cidr
  az_count            = var.az_count
  enable_nat_gateway  = var.enable_nat_gateway
  single_nat_gateway  = var.single_nat_gateway
  interface_endpoints = local.interface_endpoints
  tags                = var.tags
}

# ---------------------------------------------------------------- certificate and DNS

resource "aws_acm_certificate" "this" {
  count = local.create_certificate ? 1 : 0

  domain_name       = var.domain_name
  validation_method = "DNS"

  tags = var.tags

  lifecycle {
    create_before_destroy = true

    precondition {
      condition     = var.route53_zone_id != null
      error_message = "Without certificate_arn, route53_zone_id is needed to validate a new certificate."
    }
  }
}

resource "aws_route53_record" "validation" {
  for_each = {
    for o in flatten([for c in aws_acm_certificate.this : c.domain_validation_options]) : o.domain_name => o
  }

  zone_id         = var.route53_zone_id
  name            = each.value.resource_record_name
  type            = each.value.resource_record_type
  records         = [each.value.resource_record_value]
  ttl             = 300
  allow_overwrite = true
}

resource "aws_acm_certificate_validation" "this" {
  count = local.create_certificate ? 1 : 0

  certificate_arn         = aws_acm_certificate.this[0].arn
  validation_record_fqdns = [for r in aws_route53_record.validation : r.fqdn]
}

resource "aws_route53_record" "alias" {
  count = var.route53_zone_id == null ? 0 : 1

  zone_id = var.route53_zone_id
  name    = var.domain_name
  type    = "A"

  alias {
    name                   = module.alb.dns_name
    zone_id                = module.alb.zone_id
    evaluate_target_health = true
  }
}

# ---------------------------------------------------------------- edge

module "alb" {
  source = "../alb"

  name                = var.name
  vpc_id              = module.network.vpc_id
  vpc_cidr_block      = module.network.vpc_cidr_block
  public_subnet_ids   = module.network.public_subnet_ids
  certificate_arn     = local.certificate_arn
  deletion_protection = var.protect_data
  tags                = var.tags
}

module "waf" {
  source = "../waf"

  name               = var.name
  alb_arn            = module.alb.arn
  rate_limit         = var.waf_rate_limit
  log_retention_days = var.log_retention_days
  tags               = var.tags
}

# ---------------------------------------------------------------- identity and state

module "cognito" {
  source = "../cognito"

  name                   = var.name
  apps                   = var.apps
  user_pool_tier         = var.cognito_user_pool_tier
  advanced_security_mode = var.cognito_advanced_security_mode
  domain_prefix          = var.cognito_domain_prefix
  deletion_protection    = var.protect_data
  tags                   = var.tags
}

module "dynamodb" {
  source = "../dynamodb"

  name                = var.name
  deletion_protection = var.protect_data
  tags                = var.tags
}

module "analytics" {
  source = "../analytics"

  name               = var.name
  force_destroy      = !var.protect_data
  log_retention_days = var.log_retention_days
  tags               = var.tags
}

# ---------------------------------------------------------------- cost per tenant

# Application inference profiles: the gateway calls a tenant's profile
# instead of the model (bedrock_profiles in the tenants file or the admin
# API), so AWS billing splits Bedrock's cost by the profile's tags
# (docs/deploy.md, "Cost per tenant in AWS billing"). A profile lives in the
# region of what it copies from.
resource "aws_bedrock_inference_profile" "tenant" {
  for_each = var.tenant_inference_profiles

  name        = "${var.name}-${each.key}"
  description = substr(replace("Jetway ${var.name} tenant ${each.value.tenant} model ${each.value.model}", "/[ _-]{2,}/", "-"), 0, 200)
  region      = split(":", each.value.source_arn)[3]

  model_source {
    copy_from = each.value.source_arn
  }

  # The provider's default tags (Project, Environment, ManagedBy) are added too.
  tags = merge(var.tags, each.value.tags, {
    "jetway:tenant" = each.value.tenant
    "jetway:model"  = each.value.model
  })
}

# ---------------------------------------------------------------- compute

module "ecr" {
  source = "../ecr"

  name         = var.name
  force_delete = !var.protect_data
  tags         = var.tags
}

# The collector sidecar's image, mirrored from public.ecr.aws at an exact
# tag (docs/operations.md, "Tracing"): tasks pull it from here, through the
# ECR endpoints, like the gateway's own image.
module "collector_ecr" {
  count  = var.tracing_enabled ? 1 : 0
  source = "../ecr"

  name         = "${var.name}-otel-collector"
  keep_images  = 5
  force_delete = !var.protect_data
  tags         = var.tags
}

module "iam" {
  source = "../iam"

  name                          = var.name
  bedrock_model_ids             = var.bedrock_model_ids
  bedrock_inference_profile_ids = var.bedrock_inference_profile_ids
  bedrock_guardrail_ids         = var.bedrock_guardrail_ids
  bedrock_regions               = var.bedrock_regions
  bedrock_assume_role_arns      = var.bedrock_assume_role_arns
  bedrock_profile_source_arns   = distinct([for p in var.tenant_inference_profiles : p.source_arn])
  bedrock_tenant_profile_arns   = [for p in aws_bedrock_inference_profile.tenant : p.arn]
  dynamodb_table_arns           = values(module.dynamodb.table_arns)
  members_table_arn             = module.dynamodb.members_table_arn
  requests_by_server_index_arn  = module.dynamodb.requests_by_server_index_arn
  config_table_arn              = module.dynamodb.config_table_arn
  config_audit_index_arns       = module.dynamodb.config_audit_index_arns
  quota_alert_topic_arn         = module.observability.quota_alert_topic_arn
  firehose_stream_arn           = module.analytics.firehose_stream_arn
  log_group_arn                 = module.ecs.log_group_arn
  ecr_repository_arn            = module.ecr.repository_arn
  tracing                       = var.tracing_enabled
  collector_repository_arn      = var.tracing_enabled ? module.collector_ecr[0].repository_arn : ""
  tags                          = var.tags
}

module "ecs" {
  source = "../ecs"

  name                    = var.name
  image                   = "${module.ecr.repository_url}:${var.image_tag}"
  cpu                     = var.task_cpu
  memory                  = var.task_memory
  cpu_architecture        = var.cpu_architecture
  desired_count           = var.min_tasks
  vpc_id                  = module.network.vpc_id
  private_subnet_ids      = module.network.private_subnet_ids
  alb_security_group_id   = module.alb.security_group_id
  target_group_arn        = module.alb.target_group_arn
  health_check_interval   = module.alb.health_check_interval
  health_check_user_agent = module.alb.health_check_user_agent
  deregistration_delay    = module.alb.deregistration_delay
  execution_role_arn      = module.iam.execution_role_arn
  task_role_arn           = module.iam.task_role_arn
  auth_issuer             = module.cognito.issuer
  allowed_origins         = var.allowed_origins
  log_level               = var.log_level
  max_inflight            = var.max_inflight
  quota_table_name        = module.dynamodb.quota_table_name
  requests_table_name     = module.dynamodb.requests_table_name
  cache_table_name        = module.dynamodb.cache_table_name
  members_table_name      = module.dynamodb.members_table_name
  config_table_name       = module.dynamodb.config_table_name
  quota_alert_topic_arn   = module.observability.quota_alert_topic_arn
  firehose_stream_name    = module.analytics.firehose_stream_name
  config_yaml             = templatefile(var.config_template_file, { client_ids = module.cognito.app_client_ids })
  log_retention_days      = var.log_retention_days
  otel_collector_image    = var.tracing_enabled ? "${module.collector_ecr[0].repository_url}:${var.otel_collector_version}" : ""
  trace_sample_ratio      = var.trace_sample_ratio
  tags                    = var.tags
}

module "autoscaling" {
  source = "../autoscaling"

  cluster_name             = module.ecs.cluster_name
  service_name             = module.ecs.service_name
  min_capacity             = var.min_tasks
  max_capacity             = var.max_tasks
  cpu_target               = var.cpu_target
  sessions_per_task_target = var.sessions_per_task_target
}

module "observability" {
  source = "../observability"

  name                    = var.name
  cluster_name            = module.ecs.cluster_name
  service_name            = module.ecs.service_name
  alb_arn_suffix          = module.alb.arn_suffix
  target_group_arn_suffix = module.alb.target_group_arn_suffix
  web_acl_name            = module.waf.web_acl_name
  log_group_name          = module.ecs.log_group_name
  table_names             = values(module.dynamodb.table_names)
  bedrock_model_ids       = local.bedrock_ids
  firehose_stream_name    = module.analytics.firehose_stream_name
  alarm_emails            = var.alarm_emails
  quota_alert_emails      = var.quota_alert_emails
  min_healthy_tasks       = var.min_tasks
  tags                    = var.tags
}
