variable "name" {
  description = "Name of the user pool (for example jetway-dev)."
  type        = string
}

variable "apps" {
  description = <<-EOT
    One app client per app, keyed "<tenant>/<app>" as in the tenants file. Its
    client id goes into apps[].client_ids there; its tenant becomes the group
    tenant:<tenant>. callback_urls enable the authorization code flow (hosted login).
  EOT
  type = map(object({
    callback_urls       = optional(list(string), [])
    logout_urls         = optional(list(string), [])
    allow_password_auth = optional(bool, false)
  }))

  validation {
    condition     = alltrue([for k in keys(var.apps) : can(regex("^[a-z0-9][a-z0-9-]*/[a-z0-9][a-z0-9-]*$", k))])
    error_message = "apps keys must look like <tenant>/<app> (lower case letters, digits, dashes)."
  }
}

variable "extra_tenants" {
  description = "Tenants that get a tenant:<id> group although no app is declared for them yet."
  type        = list(string)
  default     = []
}

variable "access_token_minutes" {
  description = "Lifetime of access tokens (the gateway's credential; clients refresh with the auth frame)."
  type        = number
  default     = 60
}

variable "id_token_minutes" {
  description = "Lifetime of ID tokens."
  type        = number
  default     = 60
}

variable "refresh_token_days" {
  description = "Lifetime of refresh tokens."
  type        = number
  default     = 30
}

variable "user_pool_tier" {
  description = "Feature plan: LITE, ESSENTIALS or PLUS. Threat protection (advanced security) needs PLUS."
  type        = string
  default     = "ESSENTIALS"

  validation {
    condition     = contains(["LITE", "ESSENTIALS", "PLUS"], var.user_pool_tier)
    error_message = "user_pool_tier must be LITE, ESSENTIALS or PLUS."
  }
}

variable "advanced_security_mode" {
  description = "Threat protection: OFF, AUDIT or ENFORCED (needs user_pool_tier PLUS)."
  type        = string
  default     = "OFF"

  validation {
    condition     = contains(["OFF", "AUDIT", "ENFORCED"], var.advanced_security_mode)
    error_message = "advanced_security_mode must be OFF, AUDIT or ENFORCED."
  }
}

variable "mfa_configuration" {
  description = "OFF, OPTIONAL or ON (TOTP)."
  type        = string
  default     = "OPTIONAL"

  validation {
    condition     = contains(["OFF", "OPTIONAL", "ON"], var.mfa_configuration)
    error_message = "mfa_configuration must be OFF, OPTIONAL or ON."
  }
}

variable "domain_prefix" {
  description = "Prefix of the Cognito-hosted login domain (<prefix>.auth.<region>.amazoncognito.com); null: no hosted login."
  type        = string
  default     = null
}

variable "deletion_protection" {
  description = "Refuse to delete the user pool (prod: true)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
