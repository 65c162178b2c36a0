variable "name" {
  description = "Repository name (for example jetway)."
  type        = string
}

variable "image_tag_mutability" {
  description = "IMMUTABLE: a tag always names the same image, so a task definition revision is reproducible and rollback is exact."
  type        = string
  default     = "IMMUTABLE"

  validation {
    condition     = contains(["IMMUTABLE", "MUTABLE"], var.image_tag_mutability)
    error_message = "image_tag_mutability must be IMMUTABLE or MUTABLE."
  }
}

variable "scan_on_push" {
  description = "Scan every pushed image for known vulnerabilities."
  type        = bool
  default     = true
}

variable "keep_images" {
  description = "Tagged images kept; older ones expire (keep enough to roll back)."
  type        = number
  default     = 30
}

variable "force_delete" {
  description = "Allow destroying the repository while it still holds images (dev only)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
