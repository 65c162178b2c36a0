package telemetry

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
)

// UsageRecord is the one record Jetway writes per request, whatever its
// outcome: done, cached, rejected (429, model_not_allowed, busy, ...),
// failed, cancelled or interrupted. Its JSON form (one object per line) is
// what the sinks write and what the Glue table reads; the json tags are the
// column names (see UsageColumns and docs/analytics.md).
//
// Numbers that do not apply are zero: a request rejected before the model
// has no tokens, no TTFT and no chunks.
type UsageRecord struct {
	// RequestID is the client's request_id (the tracking number).
	RequestID string `json:"request_id"`
	// SessionID is the chat session the request arrived on.
	SessionID string `json:"session_id"`
	// TS is when the request arrived. It is written as RFC 3339 with
	// milliseconds in UTC ("2026-01-05T07:04:05.123Z") and decides the
	// record's partition (PartitionPath).
	TS time.Time `json:"ts"`
	// Tenant and App are the configured ids the principal maps to.
	Tenant string `json:"tenant"`
	App    string `json:"app"`
	// User is the token's sub.
	User string `json:"user"`
	// ClientID is the token's Cognito app client id.
	ClientID string `json:"client_id"`
	// Model is the configured model id that answered (or was asked for).
	Model string `json:"model"`
	// FallbackFrom is the model the request asked for when a fallback
	// answered instead; empty otherwise.
	FallbackFrom string `json:"fallback_from"`
	// Cached is true when the answer came from the response cache.
	Cached bool `json:"cached"`
	// Outcome is "done" or the protocol error code (quota_exceeded,
	// model_not_allowed, cancelled, interrupted, ...).
	Outcome string `json:"outcome"`
	// Status is the HTTP-like status of the outcome (200 for done).
	Status int `json:"status"`
	// InputTokens and OutputTokens are the tokens charged.
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// ReservedTokens is what the quota reservation held before the call.
	ReservedTokens int64 `json:"reserved_tokens"`
	// CostUSD is the price of the charged tokens.
	CostUSD float64 `json:"cost_usd"`
	// TTFTMs is the time from arrival to the first chunk sent; 0 when no
	// chunk was sent.
	TTFTMs int64 `json:"ttft_ms"`
	// LatencyMs is the time from arrival to the terminal frame.
	LatencyMs int64 `json:"latency_ms"`
	// Chunks is the number of chunk frames (the last seq).
	Chunks int `json:"chunks"`
	// Server is the task (JETWAY_SERVER_ID) that ran the request.
	Server string `json:"server"`
	// Door is how the request came in: "ws" (the WebSocket protocol),
	// "ai-sdk" (the AI SDK's WebSocketChatTransport), "openai" (the
	// OpenAI-compatible /v1/chat/completions), "anthropic" (the Anthropic
	// Messages /v1/messages) or "responses" (OpenAI's Responses API, over
	// HTTP and WebSocket mode).
	Door string `json:"door"`
	// Images and Documents count the request's attachments (content
	// blocks, tool results' included).
	Images    int `json:"images"`
	Documents int `json:"documents"`
	// ToolCalls counts the tool_use blocks of the answer (the calls the
	// model asked the client to run).
	ToolCalls int `json:"tool_calls"`
	// CacheReadInputTokens and CacheWriteInputTokens are the input tokens
	// read from and written to the model's prompt cache; InputTokens
	// holds the rest. All three are charged, each at its price.
	CacheReadInputTokens  int64 `json:"cache_read_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
	// CacheSavedUSD is what the prompt cache saved: the price with every
	// cached input token at the input price, less CostUSD. Negative when
	// the request wrote to the cache and read less.
	CacheSavedUSD float64 `json:"cache_saved_usd"`
	// TraceID is the request's OpenTelemetry trace id (32 hex digits):
	// the trace of its spans when tracing is on (docs/operations.md,
	// "Tracing"), else the client's traceparent's; empty when neither.
	TraceID string `json:"trace_id"`
	// RecordID identifies this record: a UUID (version 7, time-ordered)
	// made when the record is first encoded (NewRecordID), so every copy
	// Firehose may deliver (a resent batch, a record drained from the
	// spool after a lost answer) has the same id; queries count distinct
	// record ids (docs/analytics.md, "Duplicates").
	RecordID string `json:"record_id"`
	// The columns added with placements (after the older ones, so a
	// table made before them keeps its column order).
	// Placement is the model's placement that answered (its region, or
	// region/account); empty for a model without placements.
	Placement string `json:"placement"`
	// BedrockProfile is the application inference profile ARN the call
	// went to (the tenant's or app's bedrock_profiles); empty for none.
	BedrockProfile string `json:"bedrock_profile"`
	// ServiceTier is the Bedrock service tier that served (as Bedrock
	// reported it, else as asked): default, priority or flex.
	ServiceTier string `json:"service_tier"`
}

// NewRecordID returns a new UsageRecord.RecordID.
func NewRecordID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString() // NewV7 fails only when the random source does
}

// usageTimeLayout is RFC 3339 with milliseconds; TS is always written in UTC.
const usageTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// MarshalJSON writes the record with ts as RFC 3339 with milliseconds, UTC.
// The field order is ts first, then the struct's order.
func (r UsageRecord) MarshalJSON() ([]byte, error) {
	return json.Marshal(r.line())
}

// usageLine is a record as its JSON line has it (see MarshalJSON).
type usageLine struct {
	TS string `json:"ts"`
	plainUsage
}

type plainUsage UsageRecord // no methods: avoids recursion

// line is r in its line's shape: json.Marshal(r.line()) is
// json.Marshal(r) without the second pass encoding/json makes over a
// MarshalJSON's output (its check and compaction).
func (r UsageRecord) line() usageLine {
	return usageLine{TS: r.TS.UTC().Format(usageTimeLayout), plainUsage: plainUsage(r)}
}

// PartitionPath is the record's partition, from TS in UTC, zero padded:
// "year=2026/month=01/day=05/hour=07". It is the S3 prefix layout and the
// local directory layout.
func (r UsageRecord) PartitionPath() string {
	return partitionPath(r.TS)
}

func partitionPath(t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("year=%04d/month=%02d/day=%02d/hour=%02d", t.Year(), int(t.Month()), t.Day(), t.Hour())
}

// Column is one Glue (Hive) column: its name and type.
type Column struct {
	Name string
	Type string
}

// Glue types used by the usage table.
const (
	GlueString  = "string"
	GlueBoolean = "boolean"
	GlueInt     = "int"
	GlueBigint  = "bigint"
	GlueDouble  = "double"
)

// UsageColumns returns the Glue columns of the usage table, in struct order,
// derived by reflection from UsageRecord's json tags and Go types:
// string -> string, bool -> boolean, int -> int (small counters: status,
// chunks, resumes), int64 -> bigint, float64 -> double, and time.Time ->
// string. ts is a string on purpose: an RFC 3339 string is read unchanged by
// the JSON SerDes and by Firehose's Parquet conversion, while a timestamp
// column needs SerDe-specific format settings (Firehose's default parser,
// java.sql.Timestamp.valueOf, rejects "2026-01-05T07:04:05.123Z"); queries
// use from_iso8601_timestamp(ts).
// The partition columns are not included (see UsagePartitionColumns).
//
// It panics if UsageRecord gains a field of a type with no mapping; the
// package tests call it, so that cannot ship.
func UsageColumns() []Column {
	cols, err := columnsOf(reflect.TypeFor[UsageRecord]())
	if err != nil {
		panic(err)
	}
	return cols
}

// UsagePartitionColumns returns the partition keys of the usage table:
// year, month, day, hour, all strings holding zero-padded numbers ("01"), so
// they equal the S3 path segments and compare correctly as strings.
func UsagePartitionColumns() []Column {
	return []Column{
		{Name: "year", Type: GlueString},
		{Name: "month", Type: GlueString},
		{Name: "day", Type: GlueString},
		{Name: "hour", Type: GlueString},
	}
}

var timeType = reflect.TypeFor[time.Time]()

func columnsOf(t reflect.Type) ([]Column, error) {
	cols := make([]Column, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			return nil, fmt.Errorf("telemetry: UsageRecord.%s has no json name", f.Name)
		}
		var typ string
		switch {
		case f.Type == timeType:
			typ = GlueString
		default:
			switch f.Type.Kind() {
			case reflect.String:
				typ = GlueString
			case reflect.Bool:
				typ = GlueBoolean
			case reflect.Int, reflect.Int32, reflect.Int16, reflect.Int8:
				typ = GlueInt
			case reflect.Int64:
				typ = GlueBigint
			case reflect.Float64, reflect.Float32:
				typ = GlueDouble
			default:
				return nil, fmt.Errorf("telemetry: UsageRecord.%s: no Glue type for Go type %s", f.Name, f.Type)
			}
		}
		cols = append(cols, Column{Name: name, Type: typ})
	}
	return cols, nil
}
