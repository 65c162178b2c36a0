locals {
  # Every tenant with an app, plus the extra ones; each gets group tenant:<id>
  # (the tenants file's auth.tenant_group_prefix default).
  tenants = toset(concat([for k in keys(var.apps) : split("/", k)[0]], var.extra_tenants))
}

resource "aws_cognito_user_pool" "this" {
  name                = var.name
  user_pool_tier      = var.user_pool_tier
  deletion_protection = var.deletion_protection ? "ACTIVE" : "INACTIVE"

  username_attributes      = ["email"]
  auto_verified_attributes = ["email"]
  mfa_configuration        = var.mfa_configuration

  dynamic "software_token_mfa_configuration" {
    for_each = var.mfa_configuration == "OFF" ? [] : [true]

    content {
      enabled = software_token_mfa_configuration.value
    }
  }

  # Users are created by operators (docs/deploy.md), never by self sign-up.
  admin_create_user_config {
    allow_admin_create_user_only = true
  }

  password_policy {
    minimum_length                   = 12
    require_lowercase                = true
    require_uppercase                = true
    require_numbers                  = true
    require_symbols                  = false
    temporary_password_validity_days = 7
  }

  account_recovery_setting {
    recovery_mechanism {
      name     = "verified_email"
      priority = 1
    }
  }

  dynamic "user_pool_add_ons" {
    for_each = var.advanced_security_mode == "OFF" ? [] : [var.advanced_security_mode]

    content {
      advanced_security_mode = user_pool_add_ons.value
    }
  }

  tags = var.tags

  lifecycle {
    precondition {
      condition     = var.advanced_security_mode == "OFF" || var.user_pool_tier == "PLUS"
      error_message = "advanced_security_mode AUDIT or ENFORCED needs user_pool_tier PLUS."
    }
  }
}

resource "aws_cognito_user_group" "tenant" {
  for_each = local.tenants

  user_pool_id = aws_cognito_user_pool.this.id
  name         = "tenant:${each.key}"
  description  = "Members belong to tenant ${each.key} in Jetway"
}

resource "aws_cognito_user_pool_client" "app" {
  for_each = var.apps

  user_pool_id = aws_cognito_user_pool.this.id
  name         = replace(each.key, "/", "-")

  # Public clients (browsers, CLIs): no secret; SRP sign-in and refresh.
  generate_secret = false
  explicit_auth_flows = concat(
    ["ALLOW_USER_SRP_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"],
    each.value.allow_password_auth ? ["ALLOW_USER_PASSWORD_AUTH"] : [],
  )

  access_token_validity  = var.access_token_minutes
  id_token_validity      = var.id_token_minutes
  refresh_token_validity = var.refresh_token_days

  token_validity_units {
    access_token  = "minutes"
    id_token      = "minutes"
    refresh_token = "days"
  }

  enable_token_revocation       = true
  prevent_user_existence_errors = "ENABLED"

  allowed_oauth_flows_user_pool_client = length(each.value.callback_urls) > 0
  allowed_oauth_flows                  = length(each.value.callback_urls) > 0 ? ["code"] : []
  allowed_oauth_scopes                 = length(each.value.callback_urls) > 0 ? ["openid", "email", "profile"] : []
  callback_urls                        = each.value.callback_urls
  logout_urls                          = each.value.logout_urls
  supported_identity_providers         = ["COGNITO"]
}

resource "aws_cognito_user_pool_domain" "this" {
  count = var.domain_prefix == null ? 0 : 1

  domain       = var.domain_prefix
  user_pool_id = aws_cognito_user_pool.this.id
}
