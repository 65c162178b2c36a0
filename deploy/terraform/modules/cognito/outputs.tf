output "user_pool_id" {
  description = "ID of the user pool."
  value       = aws_cognito_user_pool.this.id
}

output "user_pool_arn" {
  description = "ARN of the user pool."
  value       = aws_cognito_user_pool.this.arn
}

output "issuer" {
  description = "Token issuer (JETWAY_AUTH_ISSUER): https://cognito-idp.<region>.amazonaws.com/<user pool id>."
  value       = "https://${aws_cognito_user_pool.this.endpoint}"
}

output "app_client_ids" {
  description = "App client id per \"<tenant>/<app>\" (apps[].client_ids in the tenants file)."
  value       = { for k, c in aws_cognito_user_pool_client.app : k => c.id }
}

output "tenant_groups" {
  description = "The tenant:<id> group names."
  value       = sort([for g in aws_cognito_user_group.tenant : g.name])
}

output "hosted_login_domain" {
  description = "Prefix of the hosted login domain, if any."
  value       = one(aws_cognito_user_pool_domain.this[*].domain)
}
