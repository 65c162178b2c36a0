provider "aws" {
  region = var.region

  # Refuse to touch any other account: a wrong profile cannot apply prod elsewhere.
  allowed_account_ids = var.allowed_account_ids

  default_tags {
    tags = {
      Project     = "jetway"
      Environment = "prod"
      ManagedBy   = "terraform"
    }
  }
}
