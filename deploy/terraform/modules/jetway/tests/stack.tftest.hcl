# `terraform test` for the whole stack, run by `go test ./deploy/terraform`
# offline with the stand-in AWS provider (deploy/terraform/check): every run
# is a real plan against the AWS provider 6.25.0 schemas. The first run plans
# this module as envs/dev calls it; the others plan one module each with its
# defaults, so their assertions can read the resources themselves.

variables {
  name            = "jetway-test"
  image_tag       = "v0.1.0"
  domain_name     = "jetway.test.example.com"
  route53_zone_id = "Z0123456789ABCDEFGHIJ"
  apps = {
    "contoso/support-assistant"    = { callback_urls = ["http://localhost:5173/callback"], allow_password_auth = true }
    "contoso/developer-assistant"  = {}
    "contoso/knowledge-bot"        = {}
    "fabrikam/document-summarizer" = {}
  }
  bedrock_model_ids             = ["amazon.nova-micro-v1:0", "amazon.nova-lite-v1:0"]
  bedrock_inference_profile_ids = ["us.anthropic.claude-3-5-haiku-20241022-v1:0"]
  config_template_file          = "../../envs/dev/jetway.yaml.tftpl"
  alarm_emails                  = ["alerts@example.com"]
}

run "stack" {
  command = plan

  # Two tenants' application inference profiles (cost per tenant in AWS
  # billing): one copies a system inference profile, one a foundation model.
  variables {
    tags = { Owner = "platform" }
    tenant_inference_profiles = {
      "contoso-claude-haiku" = {
        tenant     = "contoso"
        model      = "claude-haiku"
        source_arn = "arn:aws:bedrock:us-east-1:111111111111:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0"
        tags       = { CostCenter = "cc-contoso" }
      }
      "fabrikam-nova-lite" = {
        tenant     = "fabrikam"
        model      = "nova-lite"
        source_arn = "arn:aws:bedrock:us-west-2::foundation-model/amazon.nova-lite-v1:0"
      }
    }
  }

  assert {
    condition     = length(module.cognito.app_client_ids) == length(var.apps) && alltrue([for k in keys(var.apps) : contains(keys(module.cognito.app_client_ids), k)])
    error_message = "want exactly one Cognito app client per configured app"
  }
  assert {
    condition     = toset(keys(aws_bedrock_inference_profile.tenant)) == toset(["contoso-claude-haiku", "fabrikam-nova-lite"])
    error_message = "want one application inference profile per entry of tenant_inference_profiles"
  }
  assert {
    condition = aws_bedrock_inference_profile.tenant["contoso-claude-haiku"].tags == tomap({
      "jetway:tenant" = "contoso", "jetway:model" = "claude-haiku", CostCenter = "cc-contoso", Owner = "platform"
      }) && aws_bedrock_inference_profile.tenant["fabrikam-nova-lite"].tags == tomap({
      "jetway:tenant" = "fabrikam", "jetway:model" = "nova-lite", Owner = "platform"
    })
    error_message = "each profile is tagged jetway:tenant and jetway:model (cost allocation), plus the environment's and its own tags"
  }
  assert {
    condition     = alltrue([for k, p in aws_bedrock_inference_profile.tenant : p.name == "jetway-test-${k}" && p.model_source[0].copy_from == var.tenant_inference_profiles[k].source_arn])
    error_message = "each profile is named <name>-<key> and copies from its source_arn"
  }
  assert {
    condition     = aws_bedrock_inference_profile.tenant["contoso-claude-haiku"].region == "us-east-1" && aws_bedrock_inference_profile.tenant["fabrikam-nova-lite"].region == "us-west-2"
    error_message = "a profile is made in the region of what it copies from"
  }
  assert {
    condition     = toset(keys(output.tenant_bedrock_profiles)) == toset(["contoso", "fabrikam"]) && keys(output.tenant_bedrock_profiles["contoso"]) == ["claude-haiku"] && keys(output.tenant_bedrock_profiles["fabrikam"]) == ["nova-lite"]
    error_message = "tenant_bedrock_profiles maps each tenant to {model -> profile ARN}, the shape of bedrock_profiles"
  }
}

run "tenant_inference_profiles_validation" {
  command = plan

  variables {
    tenant_inference_profiles = {
      "contoso-a" = { tenant = "contoso", model = "claude-haiku", source_arn = "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0" }
      "contoso-b" = { tenant = "contoso", model = "claude-haiku", source_arn = "arn:aws:s3:::not-a-model" }
    }
  }

  expect_failures = [var.tenant_inference_profiles]
}

run "cognito" {
  command = plan
  module {
    source = "../cognito"
  }

  assert {
    condition     = toset(keys(aws_cognito_user_pool_client.app)) == toset(keys(var.apps))
    error_message = "want one Cognito app client per configured app, keyed <tenant>/<app>"
  }
  assert {
    condition     = alltrue([for c in aws_cognito_user_pool_client.app : !c.generate_secret && c.enable_token_revocation])
    error_message = "app clients are public (no secret) and revoke tokens"
  }
}

run "waf" {
  command = plan
  module {
    source = "../waf"
  }
  variables {
    alb_arn = "test-alb-arn"
  }

  assert {
    condition     = aws_wafv2_web_acl_association.alb.resource_arn == var.alb_arn
    error_message = "the web ACL must be attached to the load balancer"
  }
  assert {
    condition = toset(flatten([for r in aws_wafv2_web_acl.this.rule : [for s in r.statement : [for m in s.managed_rule_group_statement : m.name]]])) == toset([
      "AWSManagedRulesAmazonIpReputationList", "AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet",
    ])
    error_message = "want the IP reputation, common and known-bad-inputs managed rule groups"
  }
  assert {
    condition     = length([for r in aws_wafv2_web_acl.this.rule : r if length(flatten([for s in r.statement : [for b in s.rate_based_statement : b if b.aggregate_key_type == "IP" && b.limit == var.rate_limit]])) == 1 && length(flatten([for a in r.action : a.block])) == 1]) == 1
    error_message = "want one rate-based rule per IP that blocks"
  }
}

run "alb" {
  command = plan
  module {
    source = "../alb"
  }
  variables {
    vpc_id            = "vpc-test"
    vpc_cidr_block    = "10.0.0.0/16"
    public_subnet_ids = ["subnet-a", "subnet-b"]
    certificate_arn   = "test-certificate-arn"
  }

  # The gateway's heartbeat (JETWAY_HEARTBEAT, docs/configuration.md) is 25 s;
  # it closes a connection silent for two of them.
  assert {
    condition     = aws_lb.this.idle_timeout > 2 * 25
    error_message = "the ALB idle timeout must be above two heartbeats (50 s), or quiet WebSockets are cut"
  }
  assert {
    condition     = aws_lb_target_group.app.health_check[0].path == "/readyz" && aws_lb_target_group.app.health_check[0].port == "9090"
    error_message = "the health check must call /readyz on the admin port: the gateway watches it to notice its deregistration"
  }
}

run "ecs" {
  command = plan
  module {
    source = "../ecs"
  }
  variables {
    image                 = "test-image:v0.1.0"
    vpc_id                = "vpc-test"
    private_subnet_ids    = ["subnet-a", "subnet-b"]
    alb_security_group_id = "sg-test"
    target_group_arn      = "test-target-group-arn"
    execution_role_arn    = "test-execution-role-arn"
    task_role_arn         = "test-task-role-arn"
    auth_issuer           = "https://issuer.test"
    quota_table_name      = "q"
    requests_table_name   = "r"
    cache_table_name      = "c"
    members_table_name    = "m"
    config_table_name     = "cfg"
    quota_alert_topic_arn = "test-quota-alerts-arn"
    firehose_stream_name  = "f"
    config_yaml           = "models: []"
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.this.container_definitions)[1].stopTimeout <= 120 && tonumber(trimsuffix({ for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_DRAIN_TIMEOUT"], "s")) < jsondecode(aws_ecs_task_definition.this.container_definitions)[1].stopTimeout
    error_message = "the drain (JETWAY_DRAIN_TIMEOUT) must end before ECS kills the task (stopTimeout, at most 120 s on Fargate)"
  }
  assert {
    condition     = { for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_HEALTH_CHECK_INTERVAL"] == "${var.health_check_interval}s"
    error_message = "the task must know the health check interval"
  }
  assert {
    condition     = { for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_HEALTH_CHECK_USER_AGENT"] == "ELB-HealthChecker/"
    error_message = "the task must be told, explicitly, the User-Agent prefix of the ALB's health checks (only they arm self-drain)"
  }
  assert {
    condition     = { for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_MEMBERS_TABLE"] == "m"
    error_message = "the task must get the members table"
  }
  assert {
    condition     = { for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_CONFIG_TABLE"] == "cfg"
    error_message = "the task must get the config table"
  }
  assert {
    condition     = { for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_ALERT_SNS_TOPIC_ARN"] == "test-quota-alerts-arn"
    error_message = "the task must get the quota alerts topic"
  }
  # Deregistration: the ALB stops health checks; the task notices within
  # (misses + 1) intervals, then drains; the ALB keeps its sockets that long.
  # modules/jetway passes the target group's interval and delay to this
  # module (checked by the HCL tests); these are its defaults.
  assert {
    condition = var.deregistration_delay >= (
      (tonumber({ for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_SELF_DRAIN_MISSES"]) + 1) * var.health_check_interval
      + tonumber(trimsuffix({ for e in jsondecode(aws_ecs_task_definition.this.container_definitions)[1].environment : e.name => e.value }["JETWAY_DRAIN_TIMEOUT"], "s"))
    )
    error_message = "the deregistration delay must cover the task's detection of its deregistration plus its drain"
  }
}

run "autoscaling" {
  command = plan
  module {
    source = "../autoscaling"
  }
  variables {
    cluster_name = "c"
    service_name = "s"
  }

  assert {
    condition     = aws_appautoscaling_policy.sessions.target_tracking_scaling_policy_configuration[0].customized_metric_specification[0].metric_name == "ActiveSessions"
    error_message = "want target tracking on the gateway's active sessions per task"
  }
  assert {
    condition     = aws_appautoscaling_policy.cpu.policy_type == "TargetTrackingScaling"
    error_message = "want target tracking on CPU too"
  }
}

run "dynamodb" {
  command = plan
  module {
    source = "../dynamodb"
  }

  assert {
    condition     = toset(keys(aws_dynamodb_table.this)) == toset(["quota", "requests", "cache", "members", "config"])
    error_message = "want the quota, requests, cache, members and config tables"
  }
  assert {
    condition     = alltrue([for k, t in aws_dynamodb_table.this : t.point_in_time_recovery[0].enabled == (k != "members")])
    error_message = "every table but members (which only describes running servers) has point-in-time recovery"
  }
  assert {
    condition     = aws_dynamodb_table.this["members"].ttl[0].enabled && aws_dynamodb_table.this["members"].ttl[0].attribute_name == "expires_at" && aws_dynamodb_table.this["members"].hash_key == "pk"
    error_message = "the members table is keyed by pk and expires a dead server's item by TTL on expires_at"
  }
  assert {
    condition     = [for i in aws_dynamodb_table.this["requests"].global_secondary_index : [i.name, i.hash_key, i.range_key, i.projection_type]] == [["by_server", "server", "ended_ms", "KEYS_ONLY"]] && alltrue([for k, t in aws_dynamodb_table.this : length(t.global_secondary_index) == 0 if !contains(["requests", "config"], k)])
    error_message = "the requests table has the by_server index (server, ended_ms; keys only); only it and the config table have indexes"
  }
  assert {
    condition = toset([for i in aws_dynamodb_table.this["config"].global_secondary_index : [i.name, i.hash_key, i.range_key, i.projection_type]]) == toset([
      ["audit_tenant", "audit_tenant", "audit_at", "KEYS_ONLY"], ["audit_all", "audit_all", "audit_at", "KEYS_ONLY"],
    ])
    error_message = "the config table has the audit_tenant (audit_tenant, audit_at) and audit_all (audit_all, audit_at) indexes, keys only"
  }
  assert {
    condition     = toset([for a in aws_dynamodb_table.this["config"].attribute : [a.name, a.type]]) == toset([["pk", "S"], ["audit_tenant", "S"], ["audit_all", "S"], ["audit_at", "S"]])
    error_message = "the config table declares pk and its indexes' keys, all strings"
  }
  assert {
    condition     = aws_dynamodb_table.this["config"].hash_key == "pk" && aws_dynamodb_table.this["config"].billing_mode == "PAY_PER_REQUEST" && aws_dynamodb_table.this["config"].ttl[0].enabled && aws_dynamodb_table.this["config"].ttl[0].attribute_name == "expires_at" && aws_dynamodb_table.this["config"].server_side_encryption[0].enabled
    error_message = "the config table has the shape of the others: pk, on-demand, TTL on expires_at, encrypted"
  }
  assert {
    condition     = aws_dynamodb_table.this["requests"].ttl[0].enabled && aws_dynamodb_table.this["requests"].ttl[0].attribute_name == "expires_at"
    error_message = "the requests table expires records by TTL on expires_at"
  }
}

run "analytics" {
  command = plan
  module {
    source = "../analytics"
  }

  assert {
    condition     = aws_kinesis_firehose_delivery_stream.usage.destination == "extended_s3" && aws_kinesis_firehose_delivery_stream.usage.extended_s3_configuration[0].data_format_conversion_configuration[0].schema_configuration[0].table_name == aws_glue_catalog_table.usage.name
    error_message = "Firehose writes to S3 in the Glue table's schema"
  }
  # The usage record's columns (internal/telemetry.UsageColumns; a Go test
  # checks the full list and types).
  assert {
    condition = length(setsubtract(["request_id", "tenant", "app", "user", "model", "outcome", "input_tokens", "output_tokens", "cost_usd", "ttft_ms", "latency_ms", "placement", "bedrock_profile", "service_tier"],
    [for c in aws_glue_catalog_table.usage.storage_descriptor[0].columns : c.name])) == 0
    error_message = "the Glue table lacks usage columns"
  }
}

run "iam" {
  command = plan
  module {
    source = "../iam"
  }
  variables {
    bedrock_model_ids            = ["amazon.nova-micro-v1:0"]
    dynamodb_table_arns          = ["test-table-arn"]
    members_table_arn            = "test-members-arn"
    requests_by_server_index_arn = "test-requests-arn/index/by_server"
    config_table_arn             = "test-config-arn"
    config_audit_index_arns      = ["test-config-arn/index/audit_tenant", "test-config-arn/index/audit_all"]
    quota_alert_topic_arn        = "test-quota-alerts-arn"
    firehose_stream_arn          = "test-firehose-arn"
    log_group_arn                = "test-log-group-arn"
    ecr_repository_arn           = "test-ecr-arn"
  }

  assert {
    condition = alltrue(flatten([for d in [data.aws_iam_policy_document.task, data.aws_iam_policy_document.execution, data.aws_iam_policy_document.ecs_tasks_assume] :
    [for s in d.statement : [for a in coalesce(s.actions, []) : !strcontains(a, "*")]]]))
    error_message = "no IAM action may contain a wildcard"
  }
  assert {
    condition     = alltrue([for d in [data.aws_iam_policy_document.task, data.aws_iam_policy_document.execution] : alltrue([for s in d.statement : length(coalesce(s.not_actions, [])) == 0])])
    error_message = "no NotAction statements (they grant everything else)"
  }
  assert {
    condition     = [for s in data.aws_iam_policy_document.task.statement : [toset(s.actions), toset(s.resources)] if length([for a in s.actions : a if startswith(a, "sns:")]) > 0] == [[toset(["sns:Publish"]), toset([var.quota_alert_topic_arn])]]
    error_message = "the task role may only publish, and only to the quota alerts topic"
  }
  assert {
    condition = [for s in data.aws_iam_policy_document.task.statement : [toset(s.actions), toset(s.resources)] if contains(s.resources, var.config_table_arn) || length(setintersection(s.resources, var.config_audit_index_arns)) > 0] == [
      [toset(["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:Scan", "dynamodb:BatchGetItem"]), toset([var.config_table_arn])],
      [toset(["dynamodb:Query"]), toset(var.config_audit_index_arns)],
    ]
    error_message = "the config table: exactly GetItem, PutItem, UpdateItem, DeleteItem, Query, Scan, BatchGetItem; its audit indexes: Query only"
  }
  assert {
    condition     = length([for s in data.aws_iam_policy_document.task.statement : s if length([for a in s.actions : a if startswith(a, "sts:")]) > 0]) == 0
    error_message = "without bedrock_assume_role_arns the task role may assume no role"
  }
  assert {
    condition = alltrue(flatten([for s in data.aws_iam_policy_document.task.statement : [
      for r in s.resources : contains([data.aws_region.current.region, "*"], split(":", r)[3])
    ] if contains(s.actions, "bedrock:InvokeModelWithResponseStream")]))
    error_message = "by default the models and profiles are allowed in this region only (a cross-region profile's model wherever it routes)"
  }
}

# The tenants' application inference profiles, placements in another region
# and in another account: the policy names each profile and what it copies
# from, the models in every listed region, and assumes exactly the roles.
run "iam_placements_and_profiles" {
  command = plan
  module {
    source = "../iam"
  }
  variables {
    bedrock_model_ids             = ["amazon.nova-micro-v1:0"]
    bedrock_inference_profile_ids = ["us.anthropic.claude-3-5-haiku-20241022-v1:0"]
    bedrock_regions               = ["us-west-2"]
    bedrock_assume_role_arns      = ["arn:aws:iam::333333333333:role/jetway-bedrock"]
    bedrock_tenant_profile_arns = [
      "arn:aws:bedrock:us-east-1:111111111111:application-inference-profile/contoso0claude",
      "arn:aws:bedrock:us-west-2:111111111111:application-inference-profile/fabrikam0nova",
    ]
    bedrock_profile_source_arns = [
      "arn:aws:bedrock:us-east-1:111111111111:inference-profile/global.anthropic.claude-sonnet-4-5-20250929-v1:0",
      "arn:aws:bedrock:us-west-2::foundation-model/amazon.nova-lite-v1:0",
    ]
    dynamodb_table_arns          = ["test-table-arn"]
    members_table_arn            = "test-members-arn"
    requests_by_server_index_arn = "test-requests-arn/index/by_server"
    config_table_arn             = "test-config-arn"
    config_audit_index_arns      = ["test-config-arn/index/audit_tenant", "test-config-arn/index/audit_all"]
    quota_alert_topic_arn        = "test-quota-alerts-arn"
    firehose_stream_arn          = "test-firehose-arn"
    log_group_arn                = "test-log-group-arn"
    ecr_repository_arn           = "test-ecr-arn"
  }

  assert {
    condition = [for s in data.aws_iam_policy_document.task.statement : [toset(s.actions), toset(s.resources)] if contains(s.actions, "bedrock:InvokeModelWithResponseStream")] == [[
      toset(["bedrock:InvokeModelWithResponseStream"]),
      toset(concat(
        [for r in [data.aws_region.current.region, "us-west-2"] : "arn:${data.aws_partition.current.partition}:bedrock:${r}::foundation-model/amazon.nova-micro-v1:0"],
        [for r in [data.aws_region.current.region, "us-west-2"] : "arn:${data.aws_partition.current.partition}:bedrock:${r}:${data.aws_caller_identity.current.account_id}:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0"],
        [
          "arn:${data.aws_partition.current.partition}:bedrock:*::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0",
          "arn:${data.aws_partition.current.partition}:bedrock:*::foundation-model/anthropic.claude-sonnet-4-5-20250929-v1:0",
        ],
        var.bedrock_profile_source_arns,
        var.bedrock_tenant_profile_arns,
      )),
    ]]
    error_message = "one Bedrock statement: the models and profiles in this region and bedrock_regions, each tenant profile with what it copies from (a system profile's model in every region)"
  }
  assert {
    condition     = [for s in data.aws_iam_policy_document.task.statement : [toset(s.actions), toset(s.resources)] if length([for a in s.actions : a if startswith(a, "sts:")]) > 0] == [[toset(["sts:AssumeRole"]), toset(var.bedrock_assume_role_arns)]]
    error_message = "the task role may assume exactly bedrock_assume_role_arns"
  }
}

run "analytics_iam" {
  command = plan
  module {
    source = "../analytics"
  }

  assert {
    condition = alltrue(flatten([for d in [data.aws_iam_policy_document.firehose, data.aws_iam_policy_document.firehose_assume, data.aws_iam_policy_document.bucket] :
    [for s in d.statement : [for a in coalesce(s.actions, []) : !strcontains(a, "*")]]]))
    error_message = "no IAM action may contain a wildcard"
  }
}

run "observability" {
  command = plan
  module {
    source = "../observability"
  }
  variables {
    cluster_name            = "c"
    service_name            = "s"
    alb_arn_suffix          = "app/test/0123"
    target_group_arn_suffix = "targetgroup/test/0123"
    web_acl_name            = "w"
    log_group_name          = "/ecs/test"
    table_names             = ["t"]
    bedrock_model_ids       = ["amazon.nova-micro-v1:0"]
    firehose_stream_name    = "f"
    quota_alert_emails      = ["quota@example.com"]
  }

  assert {
    condition     = aws_sns_topic.quota_alerts.kms_master_key_id == "alias/aws/sns"
    error_message = "the quota alerts topic is encrypted at rest, with the AWS managed key alias/aws/sns"
  }
  assert {
    condition     = [for s in aws_sns_topic_subscription.quota_alert_email : [s.protocol, s.endpoint]] == [["email", "quota@example.com"]]
    error_message = "want one email subscription per quota_alert_emails address"
  }
}
