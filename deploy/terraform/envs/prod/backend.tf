# State lives in S3 with a DynamoDB lock table. The settings are a partial
# configuration so no bucket, account or region is written in code: copy
# backend.hcl.example to backend.hcl, fill it in, and run
#   terraform init -backend-config=backend.hcl
# (go run ./cmd/deploy does this for you). See README.md in this directory.
terraform {
  backend "s3" {}
}
