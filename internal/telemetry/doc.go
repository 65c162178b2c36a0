// Package telemetry is how Jetway accounts for every request and reports on
// itself: the zap logger, the usage record (one per request, whatever its
// outcome) and its sinks (local NDJSON files, Amazon Data Firehose), the
// Prometheus metrics served on the admin listener, the CloudWatch Embedded
// Metric Format aggregator, and the local usage report.
//
// The usage record is defined once, as UsageRecord. Its JSON form is what the
// sinks write and what Athena reads; UsageColumns derives the Glue columns
// from the same struct, so code and table cannot drift (docs/analytics.md).
//
// Nothing here blocks a request: Sink.Record and every Metrics method return
// at once; a full buffer drops the record and counts it.
package telemetry
