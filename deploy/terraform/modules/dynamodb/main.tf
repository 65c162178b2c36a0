# The gateway's stores (internal/quota, the request records, the response cache,
# fleet membership) share one shape: a string partition key `pk` (no sort key)
# and an epoch-seconds TTL attribute `expires_at`. Every write is a single-item
# conditional write.
#
#   quota    - counters per scope and window (reserve / settle)
#   requests - request records: idempotency, owner lease, checkpointed text, outcome;
#              index by_server finds a dead server's records (server, ended_ms)
#   cache    - the shared response cache for deterministic requests
#   members  - one item per running server: heartbeat and load, renewed on its
#              own schedule; the TTL removes a dead server's item. Nothing in it
#              outlives a server, so it has no point-in-time recovery.
locals {
  tables = toset(["quota", "requests", "cache", "members"])

  # Tables without continuous backups: their items describe running processes.
  ephemeral = toset(["members"])

  # The requests table's index of records by owning server, newest end last:
  # a survivor queries it for a dead server's records. Only the keys are
  # projected; the survivor reads each record itself.
  requests_by_server = {
    name      = "by_server"
    hash_key  = "server"
    range_key = "ended_ms"
  }
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

  dynamic "attribute" {
    for_each = each.key == "requests" ? { (local.requests_by_server.hash_key) = "S", (local.requests_by_server.range_key) = "N" } : {}

    content {
      name = attribute.key
      type = attribute.value
    }
  }

  dynamic "global_secondary_index" {
    for_each = each.key == "requests" ? [local.requests_by_server] : []

    content {
      name            = global_secondary_index.value.name
      hash_key        = global_secondary_index.value.hash_key
      range_key       = global_secondary_index.value.range_key
      projection_type = "KEYS_ONLY"
    }
  }

  ttl {
    enabled        = true
    attribute_name = "expires_at"
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery && !contains(local.ephemeral, each.key)
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }

  tags = merge(var.tags, { Name = "${var.name}-${each.key}" })
}
