# The gateway's stores (internal/quota, the request records, the response cache)
# share one shape: a string partition key `pk` (no sort key) and an epoch-seconds
# TTL attribute `expires_at`. Every write is a single-item conditional write.
#
#   quota    - counters per scope and window (reserve / settle)
#   requests - request records: idempotency, owner lease, checkpointed text, outcome
#   cache    - the shared response cache for deterministic requests
locals {
  tables = toset(["quota", "requests", "cache"])
}

resource "aws_dynamodb_table" "this" {
  for_each = local.tables

  name         = "${var.name}-${each.key}"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"

  deletion_protection_enabled = var.deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  ttl {
    enabled        = true
    attribute_name = "expires_at"
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }

  tags = merge(var.tags, { Name = "${var.name}-${each.key}" })
}
