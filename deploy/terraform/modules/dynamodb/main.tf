# The gateway's stores (internal/quota, the request records, the response cache,
# fleet membership, the runtime configuration) share one shape: a string
# partition key `pk` (no sort key) and an epoch-seconds TTL attribute
# `expires_at`. Every write of the first four is a single-item conditional write.
#
#   quota    - counters per scope and window (reserve / settle)
#   requests - request records: idempotency, owner lease, checkpointed text, outcome;
#              index by_server finds a dead server's records (server, ended_ms)
#   cache    - the shared response cache for deterministic requests
#   members  - one item per running server: heartbeat and load, renewed on its
#              own schedule; the TTL removes a dead server's item. Nothing in it
#              outlives a server, so it has no point-in-time recovery.
#   config   - the runtime configuration (JETWAY_CONFIG_TABLE): versioned tenant,
#              app, user override and model documents written through the admin
#              API, and their audit entries; indexes audit_tenant and audit_all
#              list the entries in time order, per tenant and fleet-wide
locals {
  tables = toset(["quota", "requests", "cache", "members", "config"])

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

  # The config table's audit trail (GET /v1/admin/audit): an audit entry
  # carries audit_tenant and audit_all, each with audit_at, so one tenant's
  # entries and every entry are each one Query in time order. Only the keys
  # are projected; the reader gets each entry itself.
  config_audit = [
    { name = "audit_tenant", hash_key = "audit_tenant", range_key = "audit_at" },
    { name = "audit_all", hash_key = "audit_all", range_key = "audit_at" },
  ]

  # Each table's indexes, and the attributes their keys declare (beside pk).
  indexes = {
    requests = [local.requests_by_server]
    config   = local.config_audit
  }
  index_attributes = {
    requests = { (local.requests_by_server.hash_key) = "S", (local.requests_by_server.range_key) = "N" }
    config   = { audit_tenant = "S", audit_all = "S", audit_at = "S" }
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
    for_each = lookup(local.index_attributes, each.key, {})

    content {
      name = attribute.key
      type = attribute.value
    }
  }

  dynamic "global_secondary_index" {
    for_each = lookup(local.indexes, each.key, [])

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
