variable "name" {
  description = "Name prefix of the tables (for example jetway-dev gives jetway-dev-quota, jetway-dev-requests, jetway-dev-cache, jetway-dev-members, jetway-dev-config)."
  type        = string
}

variable "point_in_time_recovery" {
  description = "Continuous backups (restore to any second of the last 35 days) of the quota, requests, cache and config tables. The members table never has them: its items describe running servers."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Refuse to delete the tables (prod: true)."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "Customer managed KMS key for encryption at rest. Null: the AWS managed key (aws/dynamodb)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
