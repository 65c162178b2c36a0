variable "name" {
  description = "Name prefix of every resource (for example jetway-dev)."
  type        = string
}

variable "buffer_size_mb" {
  description = "Firehose buffer size before a Parquet file is written (64 to 128 MiB with format conversion)."
  type        = number
  default     = 128

  validation {
    condition     = var.buffer_size_mb >= 64 && var.buffer_size_mb <= 128
    error_message = "buffer_size_mb must be between 64 and 128 when converting to Parquet."
  }
}

variable "buffer_interval_seconds" {
  description = "Longest a record waits in the Firehose buffer (60 to 900 s)."
  type        = number
  default     = 300
}

variable "usage_retention_days" {
  description = "Days usage records are kept in S3."
  type        = number
  default     = 730
}

variable "infrequent_access_after_days" {
  description = "Days after which usage objects move to STANDARD_IA."
  type        = number
  default     = 30
}

variable "athena_results_retention_days" {
  description = "Days Athena query results are kept."
  type        = number
  default     = 30
}

variable "athena_bytes_scanned_cutoff" {
  description = "Largest scan one Athena query of the workgroup may do (bytes)."
  type        = number
  default     = 10737418240
}

variable "log_retention_days" {
  description = "Retention of Firehose's error log group."
  type        = number
  default     = 30
}

variable "force_destroy" {
  description = "Allow destroying the bucket while it still holds objects (dev only)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
